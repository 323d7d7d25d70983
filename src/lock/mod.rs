//! `LockStore`: distributed locks in Redis. Each state change is one Lua script on the
//! lock's own hash slot; waiting is push-based (pub/sub on release, one timer at the
//! lease's expiry for the head waiter) and never polls on a fixed interval.
//!
//! The store owns "a caller who gives up never ends up holding the lock": every lease
//! it wins is a [`Won`] until the caller has it, and a `Won` dropped unclaimed (the
//! caller left, its deadline passed mid-script) gives the lock back.
//!
//! No proto type reaches this module: its adapter, `grpc/lock.rs`, converts.

mod acquire;
mod held_index;
pub(crate) mod hold;
mod model;
mod owner_index;
mod scripts;
mod store;
pub(crate) mod waiters;
mod waiting;
pub(crate) mod watch;

use std::{sync::Arc, time::Duration};

use crate::{
    limits::Limits,
    metrics::{Family, Kind, Metrics},
    redis::{
        events::{EventSink, Route},
        keys::Event,
        Redis, TenantScoped,
    },
    shutdown::Shutdown,
};
use held_index::SlotRegistry;
pub use model::{
    generation_arg, AcquireOutcome, AcquireSpec, Attempt, Holder, Lease, Renewal, Stop, Won,
};
use owner_index::OwnerIndex;
pub use scripts::LockScripts;
use waiters::Waiters;
pub(crate) use waiting::WaitTimer;
use watch::Watchers;

/// Default lease (`ttl` unset).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// Shortest lease.
pub const MIN_TTL: Duration = Duration::from_millis(1);
/// Longest lease.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long past a lease's end (by this server's clock) its owner-index entry is kept:
/// covers clock skew between servers and Redis, so ReleaseAll never misses a live lock.
const INDEX_SLACK_MS: i64 = 60_000;

/// Locks in Redis. Cheap to clone.
#[derive(Clone)]
pub struct LockStore {
    redis: Redis,
    scripts: Arc<LockScripts>,
    /// This replica's waiting calls, woken by pub/sub.
    waiters: Arc<Waiters>,
    /// This replica's Watch streams, woken by pub/sub.
    watchers: Arc<Watchers>,
    /// Where won locks are recorded for `ReleaseAll`.
    index: Arc<OwnerIndex>,
    /// On a cluster, the slots of the index of held locks this replica registered.
    slots: Arc<SlotRegistry>,
    limits: Limits,
    shutdown: Shutdown,
}

impl TenantScoped for LockStore {
    fn redis_mut(&mut self) -> &mut Redis {
        &mut self.redis
    }
}

impl LockStore {
    /// A store on `redis`; call [`LockStore::event_route`] to route wake-ups to it.
    pub fn new(redis: Redis, limits: Limits, shutdown: Shutdown) -> Self {
        Self {
            index: Arc::new(OwnerIndex::new(redis.clone())),
            slots: Arc::default(),
            redis,
            scripts: Arc::new(LockScripts::new()),
            waiters: Arc::default(),
            watchers: Arc::default(),
            limits,
            shutdown,
        }
    }

    /// The scripts, for loading at boot.
    pub fn scripts(&self) -> &LockScripts {
        &self.scripts
    }

    /// Where lock-released messages go: the sink waking this replica's waiters (the
    /// head of the lock's line) and watchers.
    pub fn event_route(&self) -> Route {
        let sink = Arc::new(WakeSink {
            waiters: self.waiters.clone(),
            watchers: self.watchers.clone(),
        });
        self.redis.route(Event::LockReleased, sink)
    }

    /// Where lock-changed messages (a watched name won) go: this replica's watchers.
    pub fn changed_route(&self) -> Route {
        let sink = Arc::new(ChangeSink {
            watchers: self.watchers.clone(),
        });
        self.redis.route(Event::LockChanged, sink)
    }

    /// The server's shutdown handle (streams watch it).
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// The configured limits (streams hold a permit).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Reports the calls waiting on held locks, and the waiting calls' first tries in
    /// flight (the semaphore's share the same turns).
    pub fn register_metrics(&self, metrics: &Metrics) {
        let limits = self.limits.clone();
        metrics.register(Family::single(
            "turnstile_lock_waiters",
            Kind::Gauge,
            "Acquire and Hold calls waiting on a held lock.",
            move || limits.waiting() as u64,
        ));
        let limits = self.limits.clone();
        metrics.register(Family::single(
            "turnstile_first_tries_in_flight",
            Kind::Gauge,
            "First tries of waiting calls (locks and semaphores) in flight; at 64, later calls wait their turn.",
            move || limits.first_tries_in_flight() as u64,
        ));
    }
}

/// Routes lock-released messages to the waiting calls and watchers of this replica.
struct WakeSink {
    waiters: Arc<Waiters>,
    watchers: Arc<Watchers>,
}

impl EventSink for WakeSink {
    fn on_message(&self, _channel: &str, payload: &[u8]) {
        if let Ok(key) = std::str::from_utf8(payload) {
            self.waiters.wake_head(key);
            self.watchers.wake(key);
        }
    }

    fn on_subscribed(&self) {
        self.waiters.wake_all_heads();
        self.watchers.wake_all();
    }
}

/// Routes lock-changed messages to the watchers of this replica.
struct ChangeSink {
    watchers: Arc<Watchers>,
}

impl EventSink for ChangeSink {
    fn on_message(&self, _channel: &str, payload: &[u8]) {
        if let Ok(key) = std::str::from_utf8(payload) {
            self.watchers.wake(key);
        }
    }

    fn on_subscribed(&self) {
        self.watchers.wake_all();
    }
}
