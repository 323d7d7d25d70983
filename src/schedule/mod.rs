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
//! The schedule domain does not see the queue store: it enqueues through [`Queues`],
//! which the composition root (`server.rs`) implements with `QueueStore::fire`. The
//! record of the fire times lives on the queue's slot, written by the script that
//! stores the task, so exactly once holds even when the schedules and the queue are on
//! different Redis Cluster slots: the schedule's own slot only says what to fire.

mod model;
mod record;
mod scripts;
mod store;
mod timer;
pub mod times;

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

pub use model::{
    FireCall, FireOutcome, FireReply, Overlap, Schedule, ScheduleView, Spec, TaskTemplate,
};
pub use scripts::ScheduleScripts;
pub use timer::Timer;

use crate::{
    error::Result,
    redis::{events::Route, keys::Event, Redis, TenantScoped},
    tenant::Tenant,
};

/// The shortest `every`.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// The default `catch_up_window`.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(60);
/// The longest `catch_up_window`.
pub const MAX_CATCH_UP: Duration = Duration::from_secs(7 * 24 * 3600);

/// A boxed future, for the [`Queues`] port.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What schedules need of the queues: one fire, the last fire time, and a plain
/// enqueue (TriggerSchedule). Implemented by the composition root over `QueueStore`.
pub trait Queues: Send + Sync + 'static {
    /// Runs fires of schedules into `queue` of `tenant`, in one script run; one reply
    /// per call, in order.
    fn fire<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
        calls: Vec<FireCall<'a>>,
    ) -> BoxFuture<'a, Result<Vec<FireReply>>>;

    /// The last fire time of `schedule` that enqueued a task into `queue` (0: none).
    fn last_fire<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
        schedule: &'a str,
    ) -> BoxFuture<'a, Result<i64>>;

    /// Enqueues `task` as `id`, due now, kept if that id is in the queue.
    fn enqueue_now<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
        id: String,
        task: &'a TaskTemplate,
    ) -> BoxFuture<'a, Result<()>>;
}

/// Schedules in Redis. Cheap to clone.
#[derive(Clone)]
pub struct ScheduleStore {
    redis: Redis,
    scripts: Arc<ScheduleScripts>,
    queues: Arc<dyn Queues>,
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
        scoped.redis = scoped.redis.tenant(tenant);
        scoped.tenant = tenant.clone();
        scoped
    }
}

impl ScheduleStore {
    /// A store on `redis` that enqueues through `queues`; its timer starts with
    /// [`Timer::run`] and hears of changes through [`ScheduleStore::event_route`].
    pub fn new(redis: Redis, queues: Arc<dyn Queues>) -> Self {
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
