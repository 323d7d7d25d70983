//! `LockStore`: distributed locks in Redis. Each state change is one Lua script on the
//! lock's own hash slot; waiting is push-based (pub/sub on release, one timer at the
//! lease's expiry for the head waiter) and never polls on a fixed interval.
//!
//! The store owns "a caller who gives up never ends up holding the lock": every lease
//! it wins is a [`Won`] until the caller has it, and a `Won` dropped unclaimed (the
//! caller left, its deadline passed mid-script) gives the lock back.
//!
//! No proto type reaches this module: `api.rs` converts.

pub mod api;
pub mod hold;
mod owner_index;
pub mod waiters;

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    deadline::within,
    error::{Error, Result},
    limits::Limits,
    redis::{events::EventSink, reply, Redis, Script},
    shutdown::{Cleanup, Shutdown},
    time::{now_ms, sleep_until_some, until_ms},
    token::new_token,
};
use owner_index::OwnerIndex;
use waiters::Waiters;

/// Default lease (`ttl` unset).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// Shortest lease.
pub const MIN_TTL: Duration = Duration::from_millis(1);
/// Longest lease.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long past a lease's end (by this server's clock) its owner-index entry is kept:
/// covers clock skew between servers and Redis, so ReleaseAll never misses a live lock.
const INDEX_SLACK_MS: i64 = 60_000;

/// The lock scripts, loaded at boot.
#[derive(Debug)]
pub struct LockScripts {
    acquire: Script,
    release: Script,
    release_owner: Script,
    extend: Script,
    describe: Script,
}

/// A lock script: `prelude.lua` (the packed lease), then its own file.
fn script(name: &'static str, body: &str) -> Script {
    Script::with_prelude(name, include_str!("prelude.lua"), body)
}

impl LockScripts {
    fn new() -> Self {
        Self {
            acquire: script("acquire.lua", include_str!("acquire.lua")),
            release: script("release.lua", include_str!("release.lua")),
            release_owner: script("release_owner.lua", include_str!("release_owner.lua")),
            extend: script("extend.lua", include_str!("extend.lua")),
            describe: script("describe.lua", include_str!("describe.lua")),
        }
    }

    /// Every script, for `SCRIPT LOAD` at boot.
    pub fn all(&self) -> [&Script; 5] {
        [
            &self.acquire,
            &self.release,
            &self.release_owner,
            &self.extend,
            &self.describe,
        ]
    }
}

/// What a caller asks for when taking a lock.
#[derive(Clone, Debug)]
pub struct AcquireSpec {
    /// The lock name (validated).
    pub name: String,
    /// Who takes it (validated).
    pub owner: String,
    /// The lease length.
    pub ttl: Duration,
    /// How long to wait for a held lock (zero: try once).
    pub wait: Duration,
    /// Retry key: the same owner + request_id gets the same lease back ('' for none).
    pub request_id: String,
}

/// One lease of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The owner token: proves the holder in Release/Extend.
    pub token: String,
    /// Strictly increasing per name.
    pub fencing_token: u64,
    /// End of the lease, Unix ms (Redis clock).
    pub expires_at_ms: i64,
}

/// Who holds a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The owner that took it.
    pub owner: String,
    /// The fencing token of its lease.
    pub fencing_token: u64,
    /// End of its lease, Unix ms (Redis clock).
    pub expires_at_ms: i64,
}

/// How an acquire attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The caller holds the lock.
    Acquired(Lease),
    /// Someone else holds it (and the caller did not wait, or its `wait` ran out).
    Held(Holder),
}

/// A lease won for a caller that has not taken it yet. Dropped unclaimed (the caller
/// left, or gave up while the script was in flight), it gives the lock back.
#[derive(Debug)]
pub struct Won {
    lease: Lease,
    /// Releases the lease unless the caller claims it.
    give_back: Cleanup,
}

impl Won {
    /// The lease won.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The caller has the lease: it is theirs to release.
    pub fn claim(self) -> Lease {
        self.give_back.disarm();
        self.lease
    }

    /// Nobody will use the lease: release it now, before answering.
    pub async fn give_back(self) {
        self.give_back.run().await;
    }
}

/// How a waiting acquire ended, before its caller took the lease.
#[derive(Debug)]
pub enum Attempt {
    /// Won, not yet claimed.
    Won(Won),
    /// Someone else holds it (the call did not wait, or its `wait` ran out).
    Held(Holder),
}

/// What `Describe` saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// The holder, if the lock is held.
    pub holder: Option<Holder>,
    /// Whether the given token is the holder's.
    pub held_by_token: bool,
}

/// When a waiting acquire stops early.
#[derive(Clone, Debug)]
pub struct Stop {
    /// The caller's deadline, minus a margin (`DEADLINE_EXCEEDED` after it).
    pub deadline: Option<Instant>,
    /// Cancelled when the caller left or the server shuts down.
    pub cancel: CancellationToken,
}

/// Locks in Redis. Cheap to clone.
#[derive(Clone)]
pub struct LockStore {
    redis: Redis,
    scripts: Arc<LockScripts>,
    /// This replica's waiting calls, woken by pub/sub.
    waiters: Arc<Waiters>,
    /// Where won locks are recorded for `ReleaseAll`.
    index: Arc<OwnerIndex>,
    limits: Limits,
    shutdown: Shutdown,
}

impl LockStore {
    /// A store on `redis`; call [`LockStore::event_route`] to route wake-ups to it.
    pub fn new(redis: Redis, limits: Limits, shutdown: Shutdown) -> Self {
        Self {
            index: Arc::new(OwnerIndex::new(redis.clone())),
            redis,
            scripts: Arc::new(LockScripts::new()),
            waiters: Arc::default(),
            limits,
            shutdown,
        }
    }

    /// The scripts, for loading at boot.
    pub fn scripts(&self) -> &LockScripts {
        &self.scripts
    }

    /// The pub/sub channel this store listens on, and where its messages go.
    pub fn event_route(&self) -> (String, Arc<dyn EventSink>) {
        let sink = Arc::new(WakeSink {
            waiters: self.waiters.clone(),
        });
        (self.redis.keys.lock_released_channel(), sink)
    }

    /// The server's shutdown handle (streams watch it).
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// The configured limits (streams hold a permit).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// One attempt to take the lock with `token`.
    async fn try_acquire(
        &self,
        spec: &AcquireSpec,
        token: &str,
        will_wait: bool,
    ) -> Result<AcquireOutcome> {
        let keys = self.redis.keys.lock(&spec.name);
        let mut call = self.scripts.acquire.key(&keys.lock);
        call.key(&keys.fence)
            .arg(token)
            .arg(&spec.owner)
            .arg(ttl_ms(spec.ttl))
            .arg(&spec.request_id)
            .arg(if will_wait { "1" } else { "0" });
        // The owner index (for ReleaseAll): a try-once call writes it alongside the
        // script, not after, so a won lock costs one round trip; an entry for a try
        // that lost is harmless, as ReleaseAll checks the owner. A waiting call, whose
        // tries mostly lose, writes it only once it has won.
        let until = now_ms() + ttl_ms(spec.ttl) as i64 + INDEX_SLACK_MS;
        let (attempt, indexed) = if will_wait {
            (self.redis.invoke_keyed(&keys.lock, &call).await, None)
        } else {
            let (attempt, indexed) = tokio::join!(
                self.redis.invoke_keyed(&keys.lock, &call),
                self.index.record(&spec.owner, &spec.name, until)
            );
            (attempt, Some(indexed))
        };
        let (status, text, fencing_token, expires_at_ms): (i64, String, u64, i64) = attempt?;
        if status != 1 {
            return Ok(AcquireOutcome::Held(Holder {
                owner: text,
                fencing_token,
                expires_at_ms,
            }));
        }
        let indexed = match indexed {
            Some(indexed) => indexed,
            None if text == token => self.index.record(&spec.owner, &spec.name, until).await,
            None => Ok(()),
        };
        if let Err(err) = indexed {
            // Not answered as won, so not left held: ReleaseAll could not find it.
            self.give_back(&spec.name, &text).await;
            return Err(err);
        }
        let lease = Lease {
            token: text,
            fencing_token,
            expires_at_ms,
        };
        Ok(AcquireOutcome::Acquired(lease))
    }

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
            Attempt::Won(won) => AcquireOutcome::Acquired(won.claim()),
            Attempt::Held(holder) => AcquireOutcome::Held(holder),
        })
    }

    /// One try, in the caller's own task: it is one round trip, not worth a task of
    /// its own. If the caller goes away while the script is in flight, the lock is
    /// given back. The release goes on the lock's own socket, so Redis runs it after
    /// the acquire, whichever way the acquire went.
    async fn try_once(&self, spec: &AcquireSpec) -> Result<AcquireOutcome> {
        let token = new_token();
        let in_flight = self.give_back_later(&spec.name, &token);
        let outcome = self.try_acquire(spec, &token, false).await;
        in_flight.disarm();
        outcome
    }

    /// A cleanup that releases `token`'s lease of `name`.
    fn give_back_later(&self, name: &str, token: &str) -> Cleanup {
        let store = self.clone();
        let (name, token) = (name.to_owned(), token.to_owned());
        self.shutdown
            .cleanup(async move { store.give_back(&name, &token).await })
    }

    fn won(&self, name: &str, lease: Lease) -> Won {
        Won {
            give_back: self.give_back_later(name, &lease.token),
            lease,
        }
    }

    /// Takes the lock, waiting up to `spec.wait` for a held one (trying once when it is
    /// zero). Not interrupted while a script is in flight: a lock won after `stop`
    /// fired is given back before this returns; one won in time is a [`Won`] that the
    /// caller claims or drops.
    pub async fn wait_for(&self, spec: &AcquireSpec, stop: &Stop) -> Result<Attempt> {
        let token = new_token();
        let wait_until = Instant::now() + spec.wait;
        let will_wait = !spec.wait.is_zero();
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
            let attempt = self.try_acquire(spec, &token, will_wait).await;
            let now = Instant::now();
            let wait_over = !will_wait || now >= wait_until;
            let holder = match attempt {
                Ok(AcquireOutcome::Acquired(lease)) => {
                    let won = self.won(&spec.name, lease);
                    if stop.cancel.is_cancelled() || stop.deadline.is_some_and(|d| now >= d) {
                        won.give_back().await;
                        return Err(self.stop_error(stop));
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
            tokio::select! {
                () = place.woken() => {}
                () = sleep_until_some(retry_at) => {}
                // One last look: the lock may have been freed as the wait ran out.
                () = tokio::time::sleep_until(wait_until) => {}
                () = sleep_until_some(stop.deadline) => return Err(Error::DeadlineExceeded),
                () = stop.cancel.cancelled() => return Err(self.stop_error(stop)),
            }
        }
    }

    fn stop_error(&self, stop: &Stop) -> Error {
        if self.shutdown.is_triggered() {
            Error::ShuttingDown
        } else if stop.deadline.is_some_and(|d| Instant::now() >= d) {
            Error::DeadlineExceeded
        } else {
            // The caller left; nobody reads this.
            Error::Internal("caller went away".into())
        }
    }

    /// Releases a lease nobody will use; failures are logged (it expires anyway).
    async fn give_back(&self, name: &str, token: &str) {
        if let Err(err) = self.release(name, token).await {
            tracing::warn!(lock = name, cause = %err, "could not give back an unused lock; it expires with its ttl");
        }
    }

    /// Frees the lock if `token` holds it.
    pub async fn release(&self, name: &str, token: &str) -> Result<bool> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.release.key(&keys.lock);
        call.arg(token).arg(self.redis.keys.lock_released_channel());
        let released: i64 = self.redis.invoke_keyed(&keys.lock, &call).await?;
        Ok(released == 1)
    }

    /// Resets the lease to `ttl` from now if `token` holds it; the new end (Unix ms).
    pub async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Option<i64>> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.extend.key(&keys.lock);
        call.arg(token).arg(ttl_ms(ttl));
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(&keys.lock, &call).await?;
        if reply::int(&reply, 0)? != 1 {
            return Ok(None);
        }
        let expires_at_ms = reply::int(&reply, 1)?;
        let owner = reply::string(&reply, 2)?;
        self.index
            .record(&owner, name, expires_at_ms + INDEX_SLACK_MS)
            .await?;
        Ok(Some(expires_at_ms))
    }

    /// Who holds the lock, and whether `token` ('' for none) is the holder's.
    pub async fn describe(&self, name: &str, token: &str) -> Result<Description> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.describe.key(&keys.lock);
        call.arg(token);
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(&keys.lock, &call).await?;
        if reply::int(&reply, 0)? != 1 {
            return Ok(Description {
                holder: None,
                held_by_token: false,
            });
        }
        let holder = Holder {
            owner: reply::string(&reply, 1)?,
            fencing_token: reply::int(&reply, 2)? as u64,
            expires_at_ms: reply::int(&reply, 3)?,
        };
        Ok(Description {
            holder: Some(holder),
            held_by_token: reply::int(&reply, 4)? == 1,
        })
    }

    /// Frees every lock `owner` holds; the names freed.
    pub async fn release_all(&self, owner: &str) -> Result<Vec<String>> {
        let index = self.redis.keys.owner_locks(owner);
        let names: Vec<String> = self
            .redis
            .query(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let channel = self.redis.keys.lock_released_channel();
        let mut released = Vec::new();
        // Each name is its own slot, so each release is its own script.
        for name in names {
            let keys = self.redis.keys.lock(&name);
            let mut call = self.scripts.release_owner.key(&keys.lock);
            call.arg(owner).arg(&channel);
            let freed: i64 = self.redis.invoke_keyed(&keys.lock, &call).await?;
            if freed == 1 {
                released.push(name);
            }
        }
        Ok(released)
    }
}

/// Routes lock-released messages to the waiting calls of this replica.
struct WakeSink {
    waiters: Arc<Waiters>,
}

impl EventSink for WakeSink {
    fn on_message(&self, _channel: &str, payload: &[u8]) {
        if let Ok(key) = std::str::from_utf8(payload) {
            self.waiters.wake_head(key);
        }
    }

    fn on_subscribed(&self) {
        self.waiters.wake_all_heads();
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}
