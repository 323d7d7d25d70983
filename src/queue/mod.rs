//! `QueueStore`: task queues in Redis. Every state change is one Lua script on the
//! queue's own hash slot.
//!
//! - `model.rs`: what the store takes and answers (plain data).
//! - `scripts.rs`: the scripts (`lua/`, assembled with the helpers of `lua/include/`)
//!   and their `KEYS`.
//! - `store.rs`: one method per script call; `replies.rs` decodes what they answer.
//! - `enqueue.rs` and `acks.rs`: Enqueue, and Ack by group commit, as the server calls
//!   them, each run deciding whether it also leases to this replica's streams.
//! - `long_poll.rs`: `Lease` with `wait`, and giving back what a gone caller leased.
//! - `config.rs`: flow control's queue and group settings (`lua/include/group_state.lua` and the helpers beside it);
//!   `listing.rs`: the tenant's queues and a queue's groups, a page at a time.
//! - `history.rs`: a queue's last hour by the minute (the dashboard's charts).
//! - `watch.rs`: wake-ups of waiting `Lease` calls; `feeds.rs`: the Subscribe feeds of
//!   this replica; `feed.rs`: one queue's feed and its pass; `subscribe.rs`: a
//!   Subscribe stream (its settings and the stream a caller reads).
//!
//! `QueueStore` is the domain's one door: the gRPC adapter, the dashboard, the schedules
//! and the composition root call it and nothing else here. No proto type reaches it:
//! its adapter, `grpc/queue.rs`, converts.

mod acks;
mod config;
mod counters;
mod enqueue;
mod feed;
mod feeds;
mod history;
mod listing;
mod long_poll;
mod model;
mod replies;
mod scripts;
mod store;
pub(crate) mod subscribe;
mod waits;
pub(crate) mod watch;
mod workers;

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use feeds::Feeds;

use crate::{
    error::{Error, Result},
    limits::Limits,
    metrics::{DepthSource, Metrics, QueueDepths},
    redis::{
        batch::GroupCommit,
        events::Route,
        keys::{Event, QueueKeys},
        Redis, TenantScoped,
    },
    shutdown::Shutdown,
    tenant::Tenant,
};
pub use config::{
    GroupConfig, Limit, QueueConfig, QueueConfigChange, RateLimit, Retention, MAX_KEEP_COUNT,
    MAX_RATE_LIMIT, MAX_WEIGHT, RATE_PERIODS,
};
pub use history::Minute;
pub use listing::{QueueSummary, TaskCursor};
pub use model::{
    Attempt, Dispatched, Enqueued, Failure, Fire, FireOutcome, LeaseSpec, Nacked, NewTask, Outcome,
    Schedule, StreamSlots, Task, TaskState, MAX_PROGRESS_BYTES, MAX_RESULT_BYTES,
};
pub use scripts::QueueScripts;
use watch::QueueWatch;
pub use workers::STREAMS_SHOWN;

/// Most tasks in one `Enqueue`, and most receipts or ids in one `Ack`, `Cancel` or
/// `Redrive`.
pub const MAX_BATCH: usize = 1000;
/// Most tasks in one `Lease` / `Peek`, and the most `max_in_flight`.
pub const MAX_TASKS: u32 = 1000;
/// Largest payload (inclusive).
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;
/// Default lease (`visibility`).
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);
/// Longest lease, delay or dedupe window we accept (a sanity bound).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The most deliveries one script run of a flow-mode queue makes (`RUN_DELIVERIES`
/// in `lua/include/pick.lua`, its cost bound); a `Lease` runs again to fill its batch.
pub(crate) const RUN_DELIVERIES: usize = 40;
/// The most plain deliveries (no flow mode) one script run makes
/// (`PLAIN_RUN_DELIVERIES` in `lua/include/within_budget.lua`).
pub(crate) const PLAIN_RUN_DELIVERIES: usize = 200;
/// Payload bytes per `Lease`/`Peek` reply: under gRPC's default 4 MiB receive limit
/// with room for the other fields.
pub const REPLY_BUDGET_BYTES: usize = 4 * 1024 * 1024 - 64 * 1024;

/// Queues in Redis. Cheap to clone.
#[derive(Clone)]
pub struct QueueStore {
    redis: Redis,
    scripts: Arc<QueueScripts>,
    /// This replica's calls waiting on queues, woken by pub/sub.
    watch: Arc<QueueWatch>,
    /// This replica's calls waiting for tasks to be done, answered by pub/sub.
    waits: Arc<waits::TaskWaits>,
    /// Ack calls waiting to join the next `ack.lua` run of their queue.
    acks: Arc<GroupCommit<String, String, bool>>,
    /// Long polls run on its tracker, and give back what their callers left behind.
    shutdown: Shutdown,
    /// The queues this server named in their tenants' registries lately.
    listed: Arc<listing::Listed>,
    /// The tenant this store is scoped to (for the metrics it records).
    tenant: Tenant,
    /// Where it counts the limits that held tasks back, once registered.
    metrics: Arc<std::sync::OnceLock<Metrics>>,
    /// What its Subscribe pushes count (registered with the metrics).
    pushes: Arc<counters::PushCounters>,
    /// This replica's Subscribe feeds, when the store serves streams
    /// ([`QueueStore::serving_streams`]); a feed's own store has none, so no feed
    /// holds the feeds that hold it.
    feeds: Option<Arc<Feeds>>,
}

impl TenantScoped for QueueStore {
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

impl QueueStore {
    /// A store on `redis`; route [`QueueStore::event_route`] to it for wake-ups.
    pub fn new(redis: Redis, shutdown: Shutdown) -> Self {
        Self {
            redis,
            scripts: Arc::new(QueueScripts::new()),
            watch: Arc::default(),
            waits: Arc::default(),
            acks: GroupCommit::new(MAX_BATCH),
            shutdown,
            listed: Arc::default(),
            tenant: Tenant::default(),
            metrics: Arc::default(),
            pushes: Arc::default(),
            feeds: None,
        }
    }

    /// This store, also serving Subscribe streams on this replica (named `replica` on
    /// the Workers page, its liveness kept fresh in Redis); route
    /// [`QueueStore::slot_freed_route`] to it.
    pub fn serving_streams(
        self,
        limits: Limits,
        reattach_grace: Duration,
        replica: String,
    ) -> Self {
        self.keep_replica_alive(replica.clone(), &self.shutdown);
        let feeds = Feeds::new(limits, self.shutdown.clone(), reattach_grace, replica);
        Self {
            feeds: Some(feeds),
            ..self
        }
    }

    /// Opens a Subscribe stream on `queue`: RESOURCE_EXHAUSTED past `--max-streams`,
    /// UNAVAILABLE while shutting down.
    pub fn subscribe(
        &self,
        queue: &str,
        spec: subscribe::SubscribeSpec,
    ) -> Result<subscribe::Subscription> {
        let feeds = self
            .feeds
            .as_ref()
            .ok_or_else(|| Error::Internal("this queue store serves no streams".into()))?;
        let mut store = self.clone();
        store.feeds = None;
        feeds.subscribe(store, queue, spec)
    }

    /// The scripts, for loading at boot.
    pub fn scripts(&self) -> &QueueScripts {
        &self.scripts
    }

    /// Where queue-changed messages (pending keys) go: the waiting long polls.
    pub fn event_route(&self) -> Route {
        self.redis.route(Event::QueueChanged, self.watch.clone())
    }

    /// The wake-up of `queue`: notified when its tasks become due or are scheduled (or
    /// when messages may have been missed).
    pub fn changes(&self, queue: &str) -> Arc<tokio::sync::Notify> {
        self.watch.watch(self.keys(queue).pending())
    }

    /// This tenant's channel on which Ack/Nack announce a freed Subscribe slot
    /// (message: tag).
    pub fn slot_freed_channel(&self) -> String {
        self.redis.keys.channel(Event::SlotFreed)
    }

    /// Where slot-freed messages (Subscribe tags, and cancels of running tasks) go:
    /// this replica's feeds, when it serves streams.
    pub fn slot_freed_route(&self) -> Option<Route> {
        let feeds = self.feeds.clone()?;
        Some(self.redis.route(Event::SlotFreed, feeds))
    }

    /// The keys of `queue` in this store's tenant.
    pub fn keys(&self, queue: &str) -> Arc<QueueKeys> {
        self.redis.keys.queue(queue)
    }

    /// Lets scrapes read the depths of the queues RPCs named.
    pub fn register_metrics(&self, metrics: &Metrics) {
        metrics.register_depths(Arc::new(self.clone()));
        self.pushes.register(metrics);
        let _ = self.metrics.set(metrics.clone());
    }

    /// Counts `count` deliveries that went out in the Enqueue that stored them.
    pub(super) fn pushed_in_enqueue(&self, count: usize) {
        self.pushes.in_enqueue(count);
    }

    /// Counts `count` deliveries that went out in the Ack run that freed their slots.
    pub(super) fn pushed_in_ack(&self, count: usize) {
        self.pushes.in_ack(count);
    }

    /// Counts the limits that held back a deliverable task of `queue`.
    pub(super) fn held_back(&self, queue: &str, limits: &[Limit]) {
        if let Some(metrics) = self.metrics.get() {
            for limit in limits {
                metrics.held_back(&self.tenant, queue, limit.as_str());
            }
        }
    }
}

impl DepthSource for QueueStore {
    fn depths<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
    ) -> Pin<Box<dyn Future<Output = std::result::Result<QueueDepths, String>> + Send + 'a>> {
        Box::pin(async move {
            let stats = self
                .tenant(tenant)
                .stats(queue)
                .await
                .map_err(|err| err.to_string())?;
            Ok(QueueDepths {
                ready: stats.ready,
                delayed: stats.delayed,
                in_flight: stats.in_flight,
                dead: stats.dead,
                dead_letters: stats.dead_letters,
                paused: stats.config.paused,
                outcomes: std::array::from_fn(|n| (Outcome::ALL[n].name(), stats.outcomes[n])),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_run_bound_is_the_same_in_rust_and_in_lua() {
        let pick = include_str!("lua/include/pick.lua");
        let line = format!("local RUN_DELIVERIES = {}\n", super::RUN_DELIVERIES);
        assert!(pick.contains(&line), "pick.lua lacks {line:?}");
        let plain = include_str!("lua/include/within_budget.lua");
        let line = format!(
            "local PLAIN_RUN_DELIVERIES = {}\n",
            super::PLAIN_RUN_DELIVERIES
        );
        assert!(plain.contains(&line), "within_budget.lua lacks {line:?}");
    }
}
