//! Graceful shutdown: one cancellation token that every loop and stream watches, and
//! one task tracker that every background task is spawned on, so that the server can
//! wait (bounded) for streams to release their locks before it stops Redis.
//!
//! Also the two tools the stores use to stay cancel-safe when a caller leaves
//! mid-call: [`Shutdown::detached`] (run a state change on its own task, so dropping
//! the caller cannot stop it halfway) and [`Cleanup`] (undo what a caller who left
//! will never use, such as a lock won or tasks leased for it).

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::error::{Error, Result};

/// The server's shutdown signal and its tracked tasks. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    /// Cancelled once, when the server starts shutting down.
    token: CancellationToken,
    /// Every spawned task, so shutdown can wait for their cleanup.
    tracker: TaskTracker,
    /// When `trigger` was first called: the drain's grace counts from here.
    triggered_at: Arc<OnceLock<Instant>>,
}

impl Shutdown {
    /// A fresh signal, not yet triggered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts shutting down: every `cancelled()` future completes.
    pub fn trigger(&self) {
        self.triggered_at.get_or_init(Instant::now);
        self.token.cancel();
    }

    /// How long ago shutdown started (zero before it has).
    pub fn since_triggered(&self) -> Duration {
        self.triggered_at
            .get()
            .map_or(Duration::ZERO, Instant::elapsed)
    }

    /// Whether shutdown has started.
    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes when shutdown starts.
    pub fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// A token cancelled with shutdown, or earlier on its own (e.g. when a caller left).
    pub fn child_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// Spawns `task` on the tracker so that shutdown waits for it.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Runs `work` on its own tracked task, so that a caller who goes away (client
    /// cancel, tonic's own timeout) cannot leave a half-done state change behind:
    /// `work` is told through its token (cancelled too at shutdown). A result nobody
    /// reads is dropped on that task, so a value that must not be lost (a won lock,
    /// leased tasks) carries a [`Cleanup`] that undoes it when dropped.
    pub async fn detached<T, Work>(&self, work: impl FnOnce(CancellationToken) -> Work) -> Result<T>
    where
        T: Send + 'static,
        Work: Future<Output = Result<T>> + Send + 'static,
    {
        let cancel = self.child_token();
        // Dropping the caller's future drops this guard, which cancels the work.
        let caller_gone = cancel.clone().drop_guard();
        let (tx, rx) = oneshot::channel();
        let work = work(cancel);
        self.spawn(
            async move {
                // A failed send hands the value back, and it is dropped here.
                let _ = tx.send(work.await);
            }
            .in_current_span(),
        );
        let result = rx
            .await
            .map_err(|_| Error::Internal("detached call ended without an answer".into()))?;
        caller_gone.disarm();
        result
    }

    /// A [`Cleanup`] that runs `undo` on this tracker if it is dropped armed.
    pub fn cleanup(&self, undo: impl Future<Output = ()> + Send + 'static) -> Cleanup {
        Cleanup {
            undo: Some(Box::pin(undo.in_current_span())),
            shutdown: self.clone(),
        }
    }

    /// Waits for every tracked task, at most `grace`; true if all finished.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
    }
}

/// Undoes something a caller will never use (gives a won lock back, returns leased
/// tasks) unless it is disarmed: the one mechanism behind "a caller who left never
/// ends up holding anything". Dropped armed, it spawns the undo on the shutdown
/// tracker (a `Drop` cannot await); [`Cleanup::run`] undoes in place instead, so a
/// caller that is still there sees the undo done before it answers.
#[must_use = "dropping a Cleanup runs it; call disarm() once the value is handed over"]
pub struct Cleanup {
    /// The undo, until it runs or is disarmed.
    undo: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    shutdown: Shutdown,
}

impl Cleanup {
    /// The value reached its caller: nothing to undo.
    pub fn disarm(mut self) {
        self.undo = None;
    }

    /// Undoes now, before returning.
    pub async fn run(mut self) {
        if let Some(undo) = self.undo.take() {
            undo.await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            self.shutdown.spawn(undo);
        }
    }
}

impl std::fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cleanup")
            .field("armed", &self.undo.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };

    use super::*;

    fn counting(shutdown: &Shutdown, runs: &Arc<AtomicUsize>) -> Cleanup {
        let runs = runs.clone();
        shutdown.cleanup(async move {
            runs.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test]
    async fn a_cleanup_runs_once_when_dropped_or_run_and_never_when_disarmed() {
        let shutdown = Shutdown::new();
        let runs = Arc::new(AtomicUsize::new(0));
        counting(&shutdown, &runs).disarm();
        counting(&shutdown, &runs).run().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        drop(counting(&shutdown, &runs));
        assert!(shutdown.drain(Duration::from_secs(5)).await);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_detached_result_nobody_reads_is_dropped_and_cleaned_up() {
        let shutdown = Shutdown::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (started_tx, started) = oneshot::channel();
        let (finish, finish_rx) = oneshot::channel::<()>();
        let won = counting(&shutdown, &runs);
        let caller = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                shutdown
                    .detached(move |_cancel| async move {
                        let _ = started_tx.send(());
                        let _ = finish_rx.await;
                        Ok(won)
                    })
                    .await
            }
        });
        started.await.unwrap();
        // The caller leaves while the work is in flight; the work still finishes.
        caller.abort();
        let _ = caller.await;
        finish.send(()).unwrap();
        assert!(shutdown.drain(Duration::from_secs(5)).await);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the unread value was undone"
        );
    }

    #[tokio::test]
    async fn a_detached_result_that_is_read_reaches_its_caller() {
        let shutdown = Shutdown::new();
        let answer = shutdown
            .detached(|_cancel| async { Ok::<_, Error>(42) })
            .await;
        assert_eq!(answer, Ok(42));
    }
}
