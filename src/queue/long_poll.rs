//! `Lease`, long-polled and cancel-safe. The store owns "tasks leased for a caller who
//! left go back": the wait runs detached from the caller, and the tasks it takes are
//! [`Unclaimed`] until the caller has them; dropped unread (the caller went away, its
//! deadline passed as they were taken), they are given back at once, at their original
//! due time, as a lease expiry would (the deliveries count as attempts). The wait wakes
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
    shutdown::Unclaimed,
    time::{earliest, precisely_until_some, until_ms},
};

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
    ) -> Result<Unclaimed<Vec<Task>>> {
        let until = Instant::now() + wait;
        let changed = self.changes(queue);
        // Redis trouble once the call is waiting is retried (bounded by the wait and the
        // deadline), as a waiting Acquire does: after a Redis restart the first look,
        // woken by the new subscription, may meet a pooled socket to the old process
        // (a loaded run saw `broken pipe` fail a long poll that would have won).
        let mut retry_backoff = Duration::from_millis(50);
        let mut waited = false;
        loop {
            // Registered before the look, so a message sent during it is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (next, retry_at) = match self.lease_once(queue, spec).await {
                Ok(leased) => {
                    self.held_back(queue, &leased.held_back);
                    if !leased.tasks.is_empty() || Instant::now() >= until {
                        return Ok(self.taken(queue, leased.tasks));
                    }
                    retry_backoff = Duration::from_millis(50);
                    let next = leased
                        .next_due_ms
                        .map(|ms| Instant::now() + until_ms(ms) + Duration::from_millis(1));
                    (next, None)
                }
                Err(err) if !waited || Instant::now() >= until => return Err(err),
                Err(err) => {
                    tracing::debug!(queue, cause = %err, "long poll look failed while waiting; retrying");
                    let at = Instant::now() + retry_backoff;
                    retry_backoff = (retry_backoff * 2).min(Duration::from_secs(1));
                    (None, Some(at))
                }
            };
            waited = true;
            // The back-off, the wait's end and the deadline share one timer (a waiting
            // call's memory is its future's size); a due time has the precise one.
            let wake_at = earliest(until, [retry_at, deadline]);
            tokio::select! {
                () = notified => {}
                () = precisely_until_some(next) => {}
                () = tokio::time::sleep_until(wake_at) => {
                    if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        return Err(Error::DeadlineExceeded);
                    }
                }
                () = cancel.cancelled() => return Err(Error::ShuttingDown),
            }
        }
    }

    /// `tasks`, whose deliveries go back if nobody claims them (`auto_ack` ones have
    /// no receipt: nothing to give back).
    fn taken(&self, queue: &str, tasks: Vec<Task>) -> Unclaimed<Vec<Task>> {
        let (store, queue) = (self.clone(), queue.to_owned());
        self.shutdown.unclaimed(tasks, move |tasks| async move {
            let receipts: Vec<String> = tasks
                .into_iter()
                .map(|task| task.receipt)
                .filter(|receipt| !receipt.is_empty())
                .collect();
            if receipts.is_empty() {
                return;
            }
            if let Err(err) = store.give_back(&queue, &receipts).await {
                tracing::warn!(queue, cause = %err, "could not give back unread deliveries; they return when their leases end");
            }
        })
    }
}
