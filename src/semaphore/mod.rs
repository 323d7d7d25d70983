//! `SemaphoreStore`: leased counting semaphores in Redis. Each state change is one Lua
//! script on the semaphore's own hash slot. The line of waiters lives in Redis too
//! (`lua/include/line.lua`), so waiters are served first come, first served over every
//! replica; a release publishes the tickets of the waiters that may go now, and only
//! those wake. Built on the locks' model: leases with owner tokens, fencing tokens by
//! the same rule, and the same Hold engine (`lock::hold`).
//!
//! No proto type reaches this module: its adapter, `grpc/semaphore.rs`, converts.

mod acquire;
mod hold;
mod line;
mod model;
mod scripts;
mod store;

use std::{sync::Arc, time::Duration};

use crate::{
    limits::Limits,
    redis::{
        events::{EventSink, Route},
        keys::Event,
        Redis, TenantScoped,
    },
    shutdown::Shutdown,
};
use line::LocalLine;
pub use model::{SemaphoreOutcome, SemaphoreSpec};
pub use scripts::SemaphoreScripts;

/// The largest `limit`.
pub const MAX_LIMIT: u32 = 1_000_000;
/// The most holders `Describe` lists.
pub const MAX_LISTED: u32 = 1000;
/// How long a line entry lasts unless its waiter renews it: a waiter whose server died
/// leaves the line within this (plus one renewal period of another waiter, which
/// prunes it).
pub const LINE_TTL: Duration = Duration::from_secs(3);
/// How often a waiter renews its line entry (and looks again, should a wake-up have
/// been lost).
const LINE_RENEW: Duration = Duration::from_secs(1);

/// Semaphores in Redis. Cheap to clone.
#[derive(Clone)]
pub struct SemaphoreStore {
    redis: Redis,
    scripts: Arc<SemaphoreScripts>,
    /// This replica's waiting calls, woken by pub/sub.
    line: Arc<LocalLine>,
    limits: Limits,
    shutdown: Shutdown,
}

impl TenantScoped for SemaphoreStore {
    fn redis_mut(&mut self) -> &mut Redis {
        &mut self.redis
    }
}

impl SemaphoreStore {
    /// A store on `redis`; call [`SemaphoreStore::event_route`] to route wake-ups to it.
    pub fn new(redis: Redis, limits: Limits, shutdown: Shutdown) -> Self {
        Self {
            redis,
            scripts: Arc::new(SemaphoreScripts::new()),
            line: Arc::default(),
            limits,
            shutdown,
        }
    }

    /// The scripts, for loading at boot.
    pub fn scripts(&self) -> &SemaphoreScripts {
        &self.scripts
    }

    /// Where semaphore-wake messages go: this replica's waiters they name.
    pub fn event_route(&self) -> Route {
        let sink = Arc::new(WakeSink {
            line: self.line.clone(),
        });
        self.redis.route(Event::SemaphoreWake, sink)
    }
}

/// Routes semaphore-wake messages to the waiting calls of this replica.
struct WakeSink {
    line: Arc<LocalLine>,
}

impl EventSink for WakeSink {
    fn on_message(&self, _channel: &str, payload: &[u8]) {
        if let Ok(tickets) = std::str::from_utf8(payload) {
            self.line.wake(tickets);
        }
    }

    fn on_subscribed(&self) {
        self.line.wake_all();
    }
}
