//! What every RPC adapter shares: answering before the caller's deadline, running a
//! call detached from its caller, and logging an error once where the RPC ends.

use std::future::Future;

use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::{Response, Status};
use tracing::Instrument;

use crate::{
    error::{Error, Result},
    shutdown::Shutdown,
};

/// Races a non-waiting call against the caller's deadline, so a slow Redis answers
/// UNAVAILABLE before the caller gives up instead of a bare CANCELLED.
pub async fn within<T>(
    deadline: Option<Instant>,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, call).await.unwrap_or_else(|_| {
            Err(Error::Unavailable(
                "redis did not answer before the deadline".into(),
            ))
        }),
        None => call.await,
    }
}

/// Runs `work` on its own tracked task, so that a caller who goes away (client cancel,
/// tonic's own timeout) cannot leave a half-done state change behind: `work` is told
/// through its token, and a result nobody reads goes to `unread` (to release a lock or
/// give deliveries back).
pub async fn detached<T, Work, Unread>(
    shutdown: &Shutdown,
    work: impl FnOnce(CancellationToken) -> Work,
    unread: impl FnOnce(T) -> Unread + Send + 'static,
) -> Result<T>
where
    T: Send + 'static,
    Work: Future<Output = Result<T>> + Send + 'static,
    Unread: Future<Output = ()> + Send,
{
    let cancel = shutdown.child_token();
    // Dropping the handler future drops this guard, which cancels the work.
    let caller_gone = cancel.clone().drop_guard();
    let (tx, rx) = oneshot::channel();
    let work = work(cancel);
    shutdown.spawn(
        async move {
            if let Err(Ok(value)) = tx.send(work.await) {
                unread(value).await;
            }
        }
        .in_current_span(),
    );
    let result = rx
        .await
        .map_err(|_| Error::Internal("detached call ended without an answer".into()))?;
    caller_gone.disarm();
    result
}

/// Logs the error once, where the RPC ends, and converts it.
pub fn reply<T>(result: Result<T>) -> Result<Response<T>, Status> {
    match result {
        Ok(message) => Ok(Response::new(message)),
        Err(err) => {
            match &err {
                Error::Unavailable(_) => tracing::warn!(cause = %err, "rpc failed"),
                Error::Internal(_) => tracing::error!(cause = %err, "rpc failed"),
                _ => tracing::debug!(cause = %err, "rpc refused"),
            }
            Err(err.into())
        }
    }
}

/// Records a validated request field on the current RPC span.
pub fn record(field: &'static str, value: &str) {
    tracing::Span::current().record(field, value);
}
