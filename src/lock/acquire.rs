//! Taking a lock: once, or waiting for it. The store owns "a caller who gives up never
//! ends up holding the lock": a try-once call guards its script in flight, a waiting
//! one runs detached from its caller, and every lease won is a [`Won`] until the
//! caller has it. Waiting is push-based: a release message wakes the head waiter of
//! this replica, and only the head keeps a timer at the lease's end (`waiting.rs`).

use tokio::time::Instant;

use super::{
    model::{AcquireOutcome, AcquireSpec, Attempt, Stop},
    waiting::WaitTimer,
    LockStore,
};
use crate::{error::Result, shutdown::Unclaimed, time::within, token::new_token};

impl LockStore {
    /// Takes the lock for a caller who may go away at any moment: a try-once call
    /// (`spec.wait` zero) races `deadline` in the caller's own task; a waiting one runs
    /// detached from the caller, stops at `deadline` (DEADLINE_EXCEEDED) and is told
    /// when the caller leaves. Either way a lock won for a caller who is gone is given
    /// back, so a caller that gave up never holds it.
    pub async fn acquire(
        &self,
        spec: AcquireSpec,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        if spec.wait.is_zero() {
            // Boxed: inline, the script call's state would sit in every waiting
            // call's future too (a waiting Acquire's memory is this future's size).
            return within(deadline, Box::pin(self.try_once(&spec))).await;
        }
        let store = self.clone();
        let attempt = self
            .shutdown
            .detached(move |cancel| async move {
                store.wait_for(&spec, &Stop { deadline, cancel }).await
            })
            .await?;
        Ok(match attempt {
            Attempt::Won(won) => AcquireOutcome::Acquired(won.claim()),
            Attempt::Held(holder) => AcquireOutcome::Held(holder),
        })
    }

    /// One try, in the caller's own task: it is one round trip, not worth a task of
    /// its own. If the caller goes away while the script is in flight, the lock is
    /// given back. The release goes on the lock's own socket, so Redis runs it after
    /// the acquire, whichever way the acquire went.
    async fn try_once(&self, spec: &AcquireSpec) -> Result<AcquireOutcome> {
        // The token may win a lease before the caller hears of it.
        let token = self.unclaimed(&spec.name, new_token(), String::as_str);
        let outcome = self.try_acquire(spec, token.get(), false, &mut false).await;
        token.claim();
        outcome
    }

    /// `value`, which holds a token of `name` (`token_of`): released unless claimed.
    fn unclaimed<T: Send + 'static>(
        &self,
        name: &str,
        value: T,
        token_of: fn(&T) -> &str,
    ) -> Unclaimed<T> {
        let (store, name) = (self.clone(), name.to_owned());
        self.shutdown.unclaimed(value, move |value| async move {
            store.give_back(&name, token_of(&value)).await
        })
    }

    /// Takes the lock, waiting up to `spec.wait` for a held one (trying once when it is
    /// zero). Not interrupted while a script is in flight: a lock won after `stop`
    /// fired is given back before this returns; one won in time is a [`Won`] that the
    /// caller claims or drops.
    pub async fn wait_for(&self, spec: &AcquireSpec, stop: &Stop) -> Result<Attempt> {
        let token = new_token();
        let will_wait = !spec.wait.is_zero();
        let mut timer = WaitTimer::new(spec.wait);
        // Whether this call's owner index entry is written (on its first try).
        let mut indexed = false;
        let mut place = None;
        let mut permit = None;
        loop {
            // The first try waits its turn (`limits::FIRST_TRIES`): a burst of waiting
            // calls must not have all their tries in flight at once.
            let turn = stop
                .first_try(place.is_none() && will_wait, &self.limits, &self.shutdown)
                .await?;
            // Boxed for the time of the call: inline, its state would stay in the
            // waiting task for the whole wait (measured in `bench idle`).
            let attempt = Box::pin(self.try_acquire(spec, &token, will_wait, &mut indexed)).await;
            drop(turn);
            let now = Instant::now();
            let wait_over = !will_wait || timer.is_over(now);
            let holder = match attempt {
                Ok(AcquireOutcome::Acquired(lease)) => {
                    let won = self.unclaimed(&spec.name, lease, |lease| &lease.token);
                    if stop.cancel.is_cancelled() || stop.deadline.is_some_and(|d| now >= d) {
                        Box::pin(won.undo()).await;
                        return Err(stop.error(self.shutdown.is_triggered()));
                    }
                    return Ok(Attempt::Won(won));
                }
                Ok(AcquireOutcome::Held(holder)) if wait_over => return Ok(Attempt::Held(holder)),
                Ok(AcquireOutcome::Held(holder)) => Some(holder),
                Err(err) if place.is_none() || wait_over => return Err(err),
                Err(err) => {
                    tracing::debug!(lock = spec.name, cause = %err, "acquire attempt failed while waiting");
                    None
                }
            };
            if permit.is_none() {
                permit = Some(self.limits.start_waiting()?);
            }
            let place = place
                .get_or_insert_with(|| self.waiters.join(&self.redis.keys.lock(&spec.name).lock));
            let look_at = match holder {
                None => Some(timer.failed(now)),
                Some(holder) => {
                    let end_ms = holder.expires_at_ms;
                    timer.held(now, holder, end_ms, place.is_head())
                }
            };
            timer
                .sleep(place.woken(), look_at, stop, &self.shutdown)
                .await?;
        }
    }
}
