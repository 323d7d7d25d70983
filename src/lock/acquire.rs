//! Taking a lock: once, or waiting for it. The store owns "a caller who gives up never
//! ends up holding the lock": a try-once call guards its script in flight, a waiting
//! one runs detached from its caller, and every lease won is a [`Won`] until the
//! caller has it. Waiting is push-based: a release message wakes the head waiter of
//! this replica, and only the head keeps a timer at the lease's end.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    model::{AcquireOutcome, AcquireSpec, Attempt, Holder, Stop},
    LockStore,
};
use crate::{
    error::{Error, Result},
    shutdown::Unclaimed,
    time::{earliest, until_ms, within},
    token::new_token,
};

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
        let wait_until = Instant::now() + spec.wait;
        let will_wait = !spec.wait.is_zero();
        // Whether this call's owner index entry is written (on its first try).
        let mut indexed = false;
        let mut place = None;
        let mut permit = None;
        // The lease the head's timer was last set for, and how long to back off when
        // the local clock runs ahead of Redis' and the timer fires before the expiry.
        let mut timed_for: Option<Holder> = None;
        let mut early_backoff = Duration::from_millis(1);
        // Redis trouble while already waiting is retried (bounded by the wait and the
        // deadline) instead of failing a call that may still win.
        let mut retry_backoff = Duration::from_millis(50);
        loop {
            // Boxed for the time of the call: inline, its state would stay in the
            // waiting task for the whole wait (measured in `bench idle`).
            let attempt = Box::pin(self.try_acquire(spec, &token, will_wait, &mut indexed)).await;
            let now = Instant::now();
            let wait_over = !will_wait || now >= wait_until;
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
            // Only the head keeps a timer at the lease's end; the others sleep until woken.
            let retry_at = match holder {
                None => {
                    let at = now + retry_backoff;
                    retry_backoff = (retry_backoff * 2).min(Duration::from_secs(1));
                    Some(at)
                }
                Some(holder) if place.is_head() => {
                    retry_backoff = Duration::from_millis(50);
                    let mut sleep = until_ms(holder.expires_at_ms);
                    if timed_for.as_ref() == Some(&holder) {
                        sleep = sleep.max(early_backoff);
                        early_backoff = (early_backoff * 2).min(Duration::from_millis(100));
                    } else {
                        early_backoff = Duration::from_millis(1);
                    }
                    timed_for = Some(holder);
                    Some(now + sleep)
                }
                Some(_) => {
                    retry_backoff = Duration::from_millis(50);
                    timed_for = None;
                    None
                }
            };
            // One timer for the earliest of the retry, the wait's end (then one last
            // look: the lock may have been freed as the wait ran out) and the caller's
            // deadline. One, not three: the waiting task's size is a waiter's memory.
            let wake_at = earliest(wait_until, [retry_at, stop.deadline]);
            tokio::select! {
                () = place.woken() => {}
                () = tokio::time::sleep_until(wake_at) => {
                    if stop.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        return Err(Error::DeadlineExceeded);
                    }
                }
                () = stop.cancel.cancelled() => return Err(stop.error(self.shutdown.is_triggered())),
            }
        }
    }
}
