//! The one path every RPC takes, unary or streaming: a span named for the method,
//! the caller's deadline read once, the handler (validate, call the store, convert),
//! its error logged once and converted once, and for streams the heartbeat. A concern
//! that every RPC shares (auth, metrics, tracing) is added here and nowhere else.
//!
//! The handlers in `grpc/lock.rs` and `grpc/queue.rs` are closures given to [`unary`] or
//! [`stream`]; they never see a `Status` or a deadline race.

use std::{future::Future, pin::Pin, time::Duration};

use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use tracing::{field::Empty, Instrument};

use super::{
    connections, deadline,
    heartbeat::{Beat, Heartbeats},
    revocable::Revocable,
    traceparent,
};
use crate::{
    auth::Caller,
    error::{Error, Result},
    method::Method,
    metrics::{Metrics, StreamGuard, StreamKind},
    tenant::Tenant,
};

/// What a handler knows about its call besides the request message.
#[derive(Clone, Debug)]
pub struct Call {
    /// When the call must answer: the caller's `grpc-timeout` less a margin.
    pub deadline: Option<Instant>,
    /// The caller's tenant: every store call of the handler is scoped to it.
    pub tenant: Tenant,
    /// When the call's connection ages out (`--max-connection-age` + grace): a stream
    /// ends then with UNAVAILABLE, as if the server shut down.
    pub retires_at: Option<Instant>,
    /// This replica's metrics ([`Metered`] put them in the request).
    pub metrics: Metrics,
}

impl Call {
    /// The call's deadline and the caller the auth guard let in. A request without
    /// one was not guarded, and is refused rather than served as anyone.
    fn of<Req>(request: &Request<Req>) -> Result<(Self, Caller)> {
        let caller = request
            .extensions()
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| Error::Internal("the call did not pass the auth guard".into()))?;
        let metrics = request
            .extensions()
            .get::<Metrics>()
            .cloned()
            .ok_or_else(|| Error::Internal("the call was not metered".into()))?;
        let call = Call {
            metrics,
            deadline: deadline::from_metadata(request.metadata()),
            tenant: caller.tenant.clone(),
            retires_at: connections::retires_at(request.extensions()),
        };
        Ok((call, caller))
    }
}

/// How a unary RPC meets its caller's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Redis round trips only: [`unary`] races the handler against the deadline and
    /// answers UNAVAILABLE when Redis is too slow to beat it.
    Race,
    /// The call may wait (for a lock, for tasks): the store stops at
    /// [`Call::deadline`], gives back what it won and answers DEADLINE_EXCEEDED.
    Own,
}

/// A server stream as tonic wants it.
pub type ResponseStream<M> = Pin<Box<dyn Stream<Item = Result<M, Status>> + Send>>;

/// A stream message that can stand for "nothing else was due" (`Heartbeat`).
pub trait Heartbeat {
    /// The heartbeat message, stamped now.
    fn heartbeat() -> Self;
}

/// The RPC's span; a caller's W3C `traceparent` joins it as `trace_id`/`parent_id`.
fn span(method: Method, metadata: &tonic::metadata::MetadataMap) -> tracing::Span {
    let span = tracing::debug_span!(
        "rpc",
        method = method.label(),
        lock = Empty,
        queue = Empty,
        schedule = Empty,
        semaphore = Empty,
        owner = Empty,
        count = Empty,
        trace_id = Empty,
        parent_id = Empty
    );
    if let Some(parent) = traceparent::from_metadata(metadata) {
        span.record("trace_id", parent.trace_id);
        span.record("parent_id", parent.parent_id);
    }
    span
}

/// Serves one unary RPC: `handle` validates, calls the store and converts.
///
/// Not an `async fn`: one would hold `request` twice (its argument and the block's),
/// and a waiting Acquire's memory is this future's size.
pub fn unary<Req, Resp, Fut>(
    method: Method,
    bound: Bound,
    request: Request<Req>,
    handle: impl FnOnce(Call, Req) -> Fut,
) -> impl Future<Output = Result<Response<Resp>, Status>>
where
    Fut: Future<Output = Result<Resp>>,
{
    let span = span(method, request.metadata());
    async move {
        let started = Instant::now();
        let call = match Call::of(&request) {
            Ok((call, _)) => call,
            Err(err) => return Err(status(err)),
        };
        let metrics = call.metrics.clone();
        let (deadline, retires_at) = (call.deadline, call.retires_at);
        let work = handle(call, request.into_inner());
        let result = match bound {
            Bound::Race => crate::time::within(deadline, work).await,
            // A waiting call on a connection that ages out ends with it, as a stream
            // does (dropped: what it won is given back).
            Bound::Own => match retires_at {
                Some(at) => tokio::select! {
                    result = work => result,
                    () = tokio::time::sleep_until(at) => Err(Error::ConnectionRetired),
                },
                None => work.await,
            },
        };
        let result = result.map(Response::new).map_err(status);
        let code = result
            .as_ref()
            .map_or_else(Status::code, |_| tonic::Code::Ok);
        metrics.request(method, code as i32);
        metrics.duration(method, started.elapsed());
        result
    }
    .instrument(span)
}

/// Serves one server-streaming RPC: `handle` validates and starts the stream of
/// messages; this adds a heartbeat after every `heartbeat` of silence, and logs and
/// converts the error that ends the stream, like a unary one.
pub fn stream<Req, Resp, S>(
    method: Method,
    heartbeat: Duration,
    request: Request<Req>,
    handle: impl FnOnce(Call, Req) -> Result<S>,
) -> Result<Response<ResponseStream<Resp>>, Status>
where
    Resp: Heartbeat + Send + 'static,
    S: Stream<Item = Result<Resp>> + Send + 'static,
{
    let span = span(method, request.metadata());
    let started = span.in_scope(|| {
        let (call, caller) = Call::of(&request)?;
        let retires_at = call.retires_at;
        let counted = Counted::new(&call.metrics, method);
        let messages = handle(call, request.into_inner())?;
        // A revoked token ends the stream (and drops it, as a client's cancel would);
        // so does the connection's retirement, with UNAVAILABLE (the handler sees
        // `Call::retires_at` too, to tell that end from a cancel).
        let retired = async move {
            match retires_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
            Error::ConnectionRetired
        };
        Ok((
            Revocable::until(Revocable::new(messages, caller), retired),
            counted,
        ))
    });
    let (messages, mut counted) = started.map_err(|err| span.in_scope(|| status(err)))?;
    let stream = Heartbeats::new(Box::pin(messages), heartbeat).map(move |item| match item {
        Ok(Beat::Event(message)) => Ok(message),
        Ok(Beat::Heartbeat) => Ok(Resp::heartbeat()),
        Err(err) => {
            let status = span.in_scope(|| status(err));
            counted.end(status.code());
            Err(status)
        }
    });
    Ok(Response::new(Box::pin(stream)))
}

/// Counts one stream: open (for Hold and Subscribe) until dropped, then one request
/// with the code it ended with; a stream dropped without an error status ended OK or
/// was cancelled by its client, and is counted as OK.
struct Counted {
    metrics: Metrics,
    method: Method,
    code: tonic::Code,
    _open: Option<StreamGuard>,
}

impl Counted {
    fn new(metrics: &Metrics, method: Method) -> Self {
        let kind = match method {
            Method::Hold | Method::SemaphoreHold => Some(StreamKind::Hold),
            Method::Subscribe => Some(StreamKind::Subscribe),
            Method::Watch => Some(StreamKind::Watch),
            _ => None,
        };
        Self {
            metrics: metrics.clone(),
            method,
            code: tonic::Code::Ok,
            _open: kind.map(|kind| metrics.stream_opened(kind)),
        }
    }

    fn end(&mut self, code: tonic::Code) {
        self.code = code;
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.metrics.request(self.method, self.code as i32);
    }
}

/// Logs an error once, where the RPC (or its stream) ends, and converts it.
fn status(err: Error) -> Status {
    match &err {
        Error::Unavailable(_) => tracing::warn!(cause = %err, "rpc failed"),
        Error::Internal(_) => tracing::error!(cause = %err, "rpc failed"),
        Error::Unauthenticated(_) | Error::PermissionDenied(_) => {
            tracing::info!(cause = %err, "rpc refused")
        }
        _ => tracing::debug!(cause = %err, "rpc refused"),
    }
    err.into()
}

/// Records a validated request field (`lock`, `queue`, `owner`) on the RPC's span.
pub fn record(field: &'static str, value: &str) {
    tracing::Span::current().record(field, value);
}

/// Records how many items (tasks, receipts) the call carries on the RPC's span.
pub fn record_count(count: usize) {
    tracing::Span::current().record("count", count);
}
