//! Taking permits: once, or waiting in the line. As for locks, "a caller who gives up
//! never ends up holding permits": every lease won is a [`Won`] until the caller has
//! it. A waiting call holds a place in the line in Redis and one here ([`Place`]); it
//! wakes when a wake-up names its ticket, renews its entry every `LINE_RENEW`, and the
//! local head also wakes at the next holder's lease end. Whatever ends the wait, the
//! call leaves the line before it answers.

use tokio::time::Instant;

use super::{
    line::Place,
    model::{Grant, SemaphoreOutcome, SemaphoreSpec},
    store::Tried,
    SemaphoreStore, LINE_RENEW,
};
use crate::{
    error::{Error, Result},
    lock::{Lease, Stop, WaitTimer, Won},
    time::within,
    token::new_token,
};

/// How a waiting acquire ended, before its caller took the lease.
#[derive(Debug)]
pub(crate) enum SemaphoreAttempt {
    /// Won, not yet claimed; with the permits in use and the limit.
    Won(Won, u32, u32),
    /// Not granted in time.
    Busy { in_use: u32, limit: u32 },
}

impl SemaphoreStore {
    /// Takes permits for a caller who may go away at any moment, as
    /// `LockStore::acquire` does: a try-once call races `deadline` in the caller's
    /// task; a waiting one runs detached and gives back what it won for a caller who
    /// left.
    pub async fn acquire(
        &self,
        spec: SemaphoreSpec,
        deadline: Option<Instant>,
    ) -> Result<SemaphoreOutcome> {
        if spec.wait.is_zero() {
            return within(deadline, self.try_once(&spec)).await;
        }
        let store = self.clone();
        let attempt = self
            .shutdown
            .detached(move |cancel| async move {
                store.wait_for(&spec, &Stop { deadline, cancel }).await
            })
            .await?;
        Ok(match attempt {
            SemaphoreAttempt::Won(won, in_use, limit) => SemaphoreOutcome::Acquired(Grant {
                lease: won.claim(),
                in_use,
                limit,
            }),
            SemaphoreAttempt::Busy { in_use, limit } => SemaphoreOutcome::Busy { in_use, limit },
        })
    }

    /// One try in the caller's own task; permits won for a caller who left while the
    /// script was in flight are given back.
    async fn try_once(&self, spec: &SemaphoreSpec) -> Result<SemaphoreOutcome> {
        let (store, name) = (self.clone(), spec.name.clone());
        let token = self
            .shutdown
            .unclaimed(new_token(), move |token| async move {
                store.give_back(&name, &token).await
            });
        let tried = self.try_acquire(spec, token.get(), None).await;
        token.claim();
        Ok(match tried? {
            Tried::Acquired(grant) => SemaphoreOutcome::Acquired(grant),
            Tried::Busy { in_use, limit, .. } => SemaphoreOutcome::Busy { in_use, limit },
        })
    }

    /// A lease won for `name`: released unless claimed.
    fn unclaimed(&self, name: &str, lease: Lease) -> Won {
        let (store, name) = (self.clone(), name.to_owned());
        self.shutdown.unclaimed(lease, move |lease| async move {
            store.give_back(&name, &lease.token).await
        })
    }

    /// Takes permits, waiting in line up to `spec.wait` (trying once when it is zero).
    /// Not interrupted while a script is in flight; leaves the line before returning
    /// unless it won.
    pub(crate) async fn wait_for(
        &self,
        spec: &SemaphoreSpec,
        stop: &Stop,
    ) -> Result<SemaphoreAttempt> {
        let ticket = new_token();
        let will_wait = !spec.wait.is_zero();
        let mut place = None;
        let outcome = self.wait_in_line(spec, stop, &ticket, &mut place).await;
        let won = matches!(outcome, Ok(SemaphoreAttempt::Won(..)));
        if will_wait && !won {
            self.leave(&spec.name, &ticket, spec.permits).await;
        }
        outcome
    }

    async fn wait_in_line(
        &self,
        spec: &SemaphoreSpec,
        stop: &Stop,
        ticket: &str,
        place: &mut Option<Place>,
    ) -> Result<SemaphoreAttempt> {
        let token = new_token();
        let will_wait = !spec.wait.is_zero();
        let mut timer = WaitTimer::new(spec.wait);
        let mut permit = None;
        loop {
            // The first try waits its turn (`limits::FIRST_TRIES`), as a lock's does.
            let turn = stop
                .first_try(place.is_none() && will_wait, &self.limits, &self.shutdown)
                .await?;
            let tried = self
                .try_acquire(spec, &token, will_wait.then_some(ticket))
                .await;
            drop(turn);
            let now = Instant::now();
            let wait_over = !will_wait || timer.is_over(now);
            let next_ms = match tried {
                Ok(Tried::Acquired(grant)) => {
                    let won = self.unclaimed(&spec.name, grant.lease);
                    if stop.cancel.is_cancelled() || stop.deadline.is_some_and(|d| now >= d) {
                        won.undo().await;
                        return Err(stop.error(self.shutdown.is_triggered()));
                    }
                    return Ok(SemaphoreAttempt::Won(won, grant.in_use, grant.limit));
                }
                Ok(Tried::Busy { in_use, limit, .. }) if wait_over => {
                    return Ok(SemaphoreAttempt::Busy { in_use, limit })
                }
                Ok(Tried::Busy { next_ms, .. }) => Ok(next_ms),
                Err(err) if place.is_none() || wait_over => return Err(err),
                Err(Error::FailedPrecondition { field, reason }) => {
                    return Err(Error::FailedPrecondition { field, reason })
                }
                Err(err) => {
                    tracing::debug!(semaphore = spec.name, cause = %err, "semaphore attempt failed while waiting");
                    Err(())
                }
            };
            if permit.is_none() {
                permit = Some(self.limits.start_waiting()?);
            }
            let place = place.get_or_insert_with(|| {
                self.line
                    .join(self.redis.keys.semaphore(&spec.name).sem(), ticket)
            });
            // The entry in the line is renewed every LINE_RENEW whatever else happens.
            let look_at = match next_ms {
                Ok(Some(next_ms)) => timer.held(now, next_ms, next_ms, place.is_local_head()),
                Ok(None) => {
                    timer.answered();
                    None
                }
                Err(()) => Some(timer.failed(now)),
            };
            let renew_at = now + LINE_RENEW;
            let look_at = Some(look_at.map_or(renew_at, |at| at.min(renew_at)));
            timer
                .sleep(place.woken(), look_at, stop, &self.shutdown)
                .await?;
        }
    }
}
