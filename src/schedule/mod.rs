//! `ScheduleStore`: schedules that enqueue a task at every fire time, and the timer
//! that fires them.
//!
//! - `model.rs`: what the store takes and answers; `record.rs`: a schedule as Redis
//!   keeps it (JSON in the tenant's hash, `Keys::schedules`).
//! - `times.rs`: fire times (cron on a zone's wall clock with the DST rules, or every
//!   period since the epoch).
//! - `store.rs`: the RPCs' calls (put, get, list, delete, trigger); `lua/` their
//!   scripts.
//! - `timer.rs`: every schedule of every tenant in memory, one timer to the next fire
//!   time; each replica fires each fire time, and the queue's `fire.lua` lets exactly
//!   one of them enqueue it.
//!
//! - `enqueue.rs`: how a fire, a trigger and a last fire reach the queues.
//!
//! It sits one layer above `queue/`, as `semaphore/` sits above `lock/`: it enqueues
//! through `QueueStore` (`enqueue.rs`). The record of the fire times lives on the
//! queue's slot, written by the script that stores the task, so exactly once holds even
//! when the schedules and the queue are on different Redis Cluster slots: the
//! schedule's own slot only says what to fire.

mod counters;
mod enqueue;
mod model;
mod record;
mod scripts;
mod store;
mod timer;
pub mod times;

use std::{sync::Arc, time::Duration};

pub use model::{Overlap, Schedule, ScheduleView, Spec, TaskTemplate};
pub use scripts::ScheduleScripts;
pub use timer::Timer;

use crate::{
    queue::QueueStore,
    redis::{events::Route, keys::Event, Redis, TenantScoped},
    tenant::Tenant,
};

/// The shortest `every`.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// The default `catch_up_window`.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(60);
/// The longest `catch_up_window`.
pub const MAX_CATCH_UP: Duration = Duration::from_secs(7 * 24 * 3600);

/// Schedules in Redis. Cheap to clone.
#[derive(Clone)]
pub struct ScheduleStore {
    redis: Redis,
    scripts: Arc<ScheduleScripts>,
    /// The queues its fires and triggers enqueue into.
    queues: QueueStore,
    /// The tenant this store is scoped to.
    tenant: Tenant,
    /// This replica's fire timer (it reads what the store writes).
    timer: Arc<Timer>,
}

impl TenantScoped for ScheduleStore {
    fn redis_mut(&mut self) -> &mut Redis {
        &mut self.redis
    }

    fn tenant(&self, tenant: &Tenant) -> Self {
        let mut scoped = self.clone();
        scoped.redis.keys = self.redis.keys.tenant(tenant);
        scoped.tenant = tenant.clone();
        scoped
    }
}

impl ScheduleStore {
    /// A store on `redis` that enqueues into `queues`; its timer starts with
    /// [`Timer::run`] and hears of changes through [`ScheduleStore::event_route`].
    pub fn new(redis: Redis, queues: QueueStore) -> Self {
        let scripts = Arc::new(ScheduleScripts::new());
        Self {
            timer: Arc::new(Timer::new(redis.clone(), queues.clone())),
            redis,
            scripts,
            queues,
            tenant: Tenant::default(),
        }
    }

    /// The scripts, for loading at boot.
    pub fn scripts(&self) -> &ScheduleScripts {
        &self.scripts
    }

    /// The fire timer of this replica.
    pub fn timer(&self) -> &Arc<Timer> {
        &self.timer
    }

    /// Where schedule-changed messages go: the timer, which reloads that schedule.
    pub fn event_route(&self) -> Route {
        self.redis.route(Event::ScheduleChanged, self.timer.clone())
    }
}
