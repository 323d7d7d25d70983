//! The timing of a waiting acquire, a lock's or a semaphore's (`semaphore/acquire.rs`
//! uses it too): when to look again after a look that did not win. Only this replica's
//! head waiter keeps a timer at the lease's end (the others sleep until a release
//! wakes them); a timer that fires before Redis' clock reached the end (the local clock
//! runs ahead) backs off instead of spinning; Redis trouble while waiting is retried
//! with a doubling pause; and every wait is one timer for the earliest of these, the
//! wait's end (then one last look: the lease may have ended just as the wait ran out)
//! and the caller's deadline. One timer, not three: a waiting task's size is a
//! waiter's memory.

use std::{future::Future, time::Duration};

use tokio::time::Instant;

use super::Stop;
use crate::{
    error::{Error, Result},
    shutdown::Shutdown,
    time::{earliest, until_ms},
};

/// The first pause after Redis trouble; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// The first back-off of a timer that fired early; it doubles up to [`EARLY_MAX`].
const EARLY_FIRST: Duration = Duration::from_millis(1);
const EARLY_MAX: Duration = Duration::from_millis(100);

/// One waiting acquire's clock. `T` names the lease end a timer was set for (a lock's
/// holder, a semaphore's next end), so that a second timer for the same end is known
/// to have fired early.
pub(crate) struct WaitTimer<T> {
    wait_until: Instant,
    timed_for: Option<T>,
    early_backoff: Duration,
    retry_backoff: Duration,
}

impl<T: PartialEq> WaitTimer<T> {
    /// The clock of a wait of `wait` from now.
    pub(crate) fn new(wait: Duration) -> Self {
        Self {
            wait_until: Instant::now() + wait,
            timed_for: None,
            early_backoff: EARLY_FIRST,
            retry_backoff: RETRY_FIRST,
        }
    }

    /// Whether the wait has run out at `now` (the look just made was the last).
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        now >= self.wait_until
    }

    /// A look answered that the lease `seen` still runs, to `end_ms` on Redis' clock.
    /// The head waiter looks again then (later, when the last timer for that same end
    /// fired early); any other waiter has no timer of its own.
    pub(crate) fn held(
        &mut self,
        now: Instant,
        seen: T,
        end_ms: i64,
        head: bool,
    ) -> Option<Instant> {
        self.retry_backoff = RETRY_FIRST;
        if !head {
            self.timed_for = None;
            return None;
        }
        let mut sleep = until_ms(end_ms);
        if self.timed_for.as_ref() == Some(&seen) {
            sleep = sleep.max(self.early_backoff);
            self.early_backoff = (self.early_backoff * 2).min(EARLY_MAX);
        } else {
            self.early_backoff = EARLY_FIRST;
        }
        self.timed_for = Some(seen);
        Some(now + sleep)
    }

    /// A look answered with nothing to time (no lease end known).
    pub(crate) fn answered(&mut self) {
        self.retry_backoff = RETRY_FIRST;
    }

    /// A look failed (Redis trouble): look again after a pause that doubles.
    pub(crate) fn failed(&mut self, now: Instant) -> Instant {
        let at = now + self.retry_backoff;
        self.retry_backoff = (self.retry_backoff * 2).min(RETRY_MAX);
        at
    }

    /// Sleeps until `woken`, the earliest of `at`, the wait's end and the deadline, or
    /// the caller's leaving: Ok to look again, DEADLINE_EXCEEDED once the deadline has
    /// passed, and the stop's error when the caller left or the server shuts down.
    pub(crate) async fn sleep(
        &self,
        woken: impl Future<Output = ()>,
        at: Option<Instant>,
        stop: &Stop,
        shutdown: &Shutdown,
    ) -> Result<()> {
        let wake_at = earliest(self.wait_until, [at, stop.deadline]);
        tokio::select! {
            () = woken => Ok(()),
            () = tokio::time::sleep_until(wake_at) => {
                if stop.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return Err(Error::DeadlineExceeded);
                }
                Ok(())
            }
            () = stop.cancel.cancelled() => Err(stop.error(shutdown.is_triggered())),
        }
    }
}
