//! Graceful shutdown: one cancellation token that every loop and stream watches, and
//! one task tracker that every background task is spawned on, so that the server can
//! wait (bounded) for streams to release their locks before it stops Redis.
//!
//! Also the two tools the stores use to stay cancel-safe when a caller leaves
//! mid-call: [`Shutdown::detached`] (run a state change on its own task, so dropping
//! the caller cannot stop it halfway) and [`Unclaimed`] (a value won for a caller, such
//! as a lease or leased tasks, that is undone unless the caller takes it).

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::error::{Error, Result};

pin_project_lite::pin_project! {
    /// A detached call's task: runs `work` and sends its result to the caller.
    /// Not an `async` block: one would hold `work` twice (the block's copy and the
    /// one it awaits), and a waiting call's task is this future (measured with
    /// `-Zprint-type-sizes`: 2,600 bytes around a waiting Acquire's 1,288).
    struct Answering<Work, T> {
        #[pin]
        work: Work,
        answer: Option<oneshot::Sender<T>>,
    }
}

impl<Work: Future> Future for Answering<Work, Work::Output> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let result = std::task::ready!(this.work.poll(cx));
        if let Some(answer) = this.answer.take() {
            // A failed send hands the value back, and it is dropped here.
            let _ = answer.send(result);
        }
        Poll::Ready(())
    }
}

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
    /// reads is dropped on that task, so a value that must not be left behind (a won
    /// lock, leased tasks) travels as an [`Unclaimed`], undone when dropped.
    pub async fn detached<T, Work>(&self, work: impl FnOnce(CancellationToken) -> Work) -> Result<T>
    where
        T: Send + 'static,
        Work: Future<Output = Result<T>> + Send + 'static,
    {
        let cancel = self.child_token();
        // Dropping the caller's future drops this guard, which cancels the work.
        let caller_gone = cancel.clone().drop_guard();
        let (tx, rx) = oneshot::channel();
        self.spawn(
            Answering {
                work: work(cancel),
                answer: Some(tx),
            }
            .in_current_span(),
        );
        let result = rx
            .await
            .map_err(|_| Error::Internal("detached call ended without an answer".into()))?;
        caller_gone.disarm();
        result
    }

    /// `value`, won for a caller who may be gone: unless claimed, `undo` gets it
    /// back (on this tracker if it is dropped).
    pub fn unclaimed<T, Fut>(
        &self,
        value: T,
        undo: impl FnOnce(T) -> Fut + Send + 'static,
    ) -> Unclaimed<T>
    where
        T: Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Unclaimed {
            value: Some(value),
            undo: Some(Box::new(move |value| {
                Box::pin(undo(value).in_current_span())
            })),
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

/// How an [`Unclaimed`] value is undone.
type Undo<T> = Box<dyn FnOnce(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A value won for a caller who may have left (a lock's lease, leased tasks): the
/// one mechanism behind "a caller who left never ends up holding anything". The
/// caller [`claim`](Unclaimed::claim)s it; dropped unclaimed, its undo gets the value
/// itself (nothing is copied up front), takes its first step before the drop returns
/// (so its first Redis command is queued ahead of the caller's next one) and finishes
/// on the shutdown tracker (a `Drop` cannot await); [`undo`](Unclaimed::undo) runs it
/// in place instead, so a caller still there sees it done before it answers.
#[must_use = "dropping an Unclaimed undoes it; claim() it once the caller has it"]
pub struct Unclaimed<T: Send + 'static> {
    /// The value, until claimed or undone.
    value: Option<T>,
    undo: Option<Undo<T>>,
    shutdown: Shutdown,
}

impl<T: Send + 'static> Unclaimed<T> {
    /// The value, still unclaimed.
    pub fn get(&self) -> &T {
        self.value
            .as_ref()
            .expect("an Unclaimed holds its value until it ends")
    }

    /// The caller has it: nothing to undo.
    pub fn claim(mut self) -> T {
        self.undo = None;
        self.value
            .take()
            .expect("an Unclaimed holds its value until it ends")
    }

    /// Nobody will use it: undo now, before returning.
    pub async fn undo(mut self) {
        if let (Some(value), Some(undo)) = (self.value.take(), self.undo.take()) {
            undo(value).await;
        }
    }
}

impl<T: Send + 'static> Drop for Unclaimed<T> {
    /// Starts the undo here, up to its first wait, and lets the tracker finish it. The
    /// undo's first command is so queued on its socket before the drop returns, that
    /// is before the caller is answered: Redis runs it before anything the caller
    /// sends next. Spawned without that first step, the task could start after the
    /// caller's next call reached the same socket (seen under load: a try-once Acquire
    /// answered UNAVAILABLE, then the caller's Describe, queued behind the acquire but
    /// before the give-back, found the lock held, 1 run in 53).
    fn drop(&mut self) {
        if let (Some(value), Some(undo)) = (self.value.take(), self.undo.take()) {
            let mut undo = undo(value);
            // The tracker's task polls it again with a real waker, which replaces
            // this one wherever the first step left a waker.
            let first = undo
                .as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()));
            if first.is_pending() {
                self.shutdown.spawn(undo);
            }
        }
    }
}

impl<T: Send + std::fmt::Debug + 'static> std::fmt::Debug for Unclaimed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unclaimed")
            .field("value", &self.value)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An unclaimed 7 whose undo adds the value it gets back to `undone`.
    fn counting(shutdown: &Shutdown, undone: &Arc<AtomicUsize>) -> Unclaimed<usize> {
        let undone = undone.clone();
        shutdown.unclaimed(7, move |value| async move {
            undone.fetch_add(value, Ordering::SeqCst);
        })
    }

    #[tokio::test]
    async fn an_unclaimed_value_is_undone_once_when_dropped_or_undone_and_never_when_claimed() {
        let shutdown = Shutdown::new();
        let undone = Arc::new(AtomicUsize::new(0));
        assert_eq!(counting(&shutdown, &undone).claim(), 7);
        counting(&shutdown, &undone).undo().await;
        assert_eq!(
            undone.load(Ordering::SeqCst),
            7,
            "undone with its own value"
        );
        drop(counting(&shutdown, &undone));
        assert!(shutdown.drain(Duration::from_secs(5)).await);
        assert_eq!(undone.load(Ordering::SeqCst), 14);
    }

    #[tokio::test]
    async fn a_dropped_value_starts_its_undo_before_the_drop_returns() {
        let shutdown = Shutdown::new();
        let steps = Arc::new(AtomicUsize::new(0));
        let (go_on, wait) = oneshot::channel::<()>();
        let won = shutdown.unclaimed((), {
            let steps = steps.clone();
            move |()| async move {
                // The first step: where a give-back queues its Redis command.
                steps.fetch_add(1, Ordering::SeqCst);
                let _ = wait.await;
                steps.fetch_add(10, Ordering::SeqCst);
            }
        });
        drop(won);
        // No await between the drop and this read: the first step ran in the drop.
        assert_eq!(steps.load(Ordering::SeqCst), 1, "the undo's first step");
        let _ = go_on.send(());
        assert!(shutdown.drain(Duration::from_secs(5)).await);
        assert_eq!(steps.load(Ordering::SeqCst), 11, "the rest on the tracker");
    }

    #[tokio::test]
    async fn a_detached_result_nobody_reads_is_dropped_and_undone() {
        let shutdown = Shutdown::new();
        let undone = Arc::new(AtomicUsize::new(0));
        let (started_tx, started) = oneshot::channel();
        let (finish, finish_rx) = oneshot::channel::<()>();
        let won = counting(&shutdown, &undone);
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
            undone.load(Ordering::SeqCst),
            7,
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
