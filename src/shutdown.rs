//! Graceful shutdown: one cancellation token that every loop and stream watches, and
//! one task tracker that every background task is spawned on, so that the server can
//! wait (bounded) for streams to release their locks before it stops Redis.

use std::{future::Future, time::Duration};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// How long shutdown waits for streams and background tasks to finish.
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// The server's shutdown signal and its tracked tasks. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    /// Cancelled once, when the server starts shutting down.
    token: CancellationToken,
    /// Every spawned task, so shutdown can wait for their cleanup.
    tracker: TaskTracker,
}

impl Shutdown {
    /// A fresh signal, not yet triggered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts shutting down: every `cancelled()` future completes.
    pub fn trigger(&self) {
        self.token.cancel();
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

    /// Waits for every tracked task, at most `grace`; true if all finished.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
    }
}
