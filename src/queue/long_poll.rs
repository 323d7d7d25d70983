//! `Lease`, long-polled and cancel-safe. The store owns "tasks leased for a caller who
//! left go back": the wait runs detached from the caller, and the tasks it takes are a
//! [`Taken`] until the caller has them; dropped unread (the caller went away, its
//! deadline passed as they were taken), they are given back at once. The wait wakes
//! on the queue's pub/sub message or at the next due time or lease end the last look
//! reported, never on a fixed tick.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    model::{LeaseSpec, Task},
    QueueStore,
};
use crate::{
    error::{Error, Result},
    shutdown::Cleanup,
    time::{sleep_until_some, until_ms},
};

/// Tasks leased for a caller that has not received them yet. Dropped unclaimed, their
/// deliveries go back at their original due time, as a lease expiry would (they count
/// as attempts, like any delivery that ends without an ack).
struct Taken {
    tasks: Vec<Task>,
    /// Gives the deliveries back unless the caller claims them (none for `auto_ack`).
    give_back: Option<Cleanup>,
}

impl Taken {
    fn claim(self) -> Vec<Task> {
        if let Some(give_back) = self.give_back {
            give_back.disarm();
        }
        self.tasks
    }
}

impl QueueStore {
    /// Takes up to `spec.max_tasks` READY tasks, waiting up to `wait` for one, for a
    /// caller who may go away at any moment: stops at `deadline` (DEADLINE_EXCEEDED) or
    /// shutdown (UNAVAILABLE), and deliveries the caller never received go back.
    pub async fn lease(
        &self,
        queue: &str,
        spec: LeaseSpec,
        wait: Duration,
        deadline: Option<Instant>,
    ) -> Result<Vec<Task>> {
        let store = self.clone();
        let queue = queue.to_owned();
        let taken = self
            .shutdown
            .detached(move |cancel| async move {
                store
                    .wait_for_tasks(&queue, &spec, wait, deadline, &cancel)
                    .await
            })
            .await?;
        Ok(taken.claim())
    }

    async fn wait_for_tasks(
        &self,
        queue: &str,
        spec: &LeaseSpec,
        wait: Duration,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Result<Taken> {
        let until = Instant::now() + wait;
        let changed = self.changes(queue);
        loop {
            // Registered before the look, so a message sent during it is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let leased = self.lease_once(queue, spec).await?;
            if !leased.tasks.is_empty() || Instant::now() >= until {
                return Ok(self.taken(queue, leased.tasks));
            }
            let next = leased
                .next_due_ms
                .map(|ms| Instant::now() + until_ms(ms) + Duration::from_millis(1));
            tokio::select! {
                () = notified => {}
                () = sleep_until_some(next) => {}
                () = tokio::time::sleep_until(until) => {}
                () = sleep_until_some(deadline) => return Err(Error::DeadlineExceeded),
                () = cancel.cancelled() => return Err(Error::ShuttingDown),
            }
        }
    }

    /// `tasks`, with a cleanup that gives their deliveries back if nobody claims them.
    fn taken(&self, queue: &str, tasks: Vec<Task>) -> Taken {
        let receipts: Vec<String> = tasks
            .iter()
            .filter(|task| !task.receipt.is_empty())
            .map(|task| task.receipt.clone())
            .collect();
        let give_back = (!receipts.is_empty()).then(|| {
            let store = self.clone();
            let queue = queue.to_owned();
            self.shutdown.cleanup(async move {
                if let Err(err) = store.give_back(&queue, &receipts).await {
                    tracing::warn!(queue, cause = %err, "could not give back unread deliveries; they return when their leases end");
                }
            })
        });
        Taken { tasks, give_back }
    }
}
