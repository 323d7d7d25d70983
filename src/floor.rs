//! The Redis floors: the server's own lock and queue scripts run straight on a Redis
//! through its stores, with no gRPC in between. What they reach is the most any server
//! could reach with these scripts on that Redis; `turnstile-bench` measures each
//! scenario against it. This is the benchmark's one entry into the server's internals,
//! and it only runs scripts: it never changes how the server runs them.

use std::time::Duration;

use bytes::Bytes;

use crate::{
    limits::Limits,
    lock::{AcquireOutcome, AcquireSpec, LockStore},
    queue::{NewTask, QueueStore, Schedule, StreamSlots, DEFAULT_MAX_ATTEMPTS},
    redis::{connection_info, Keys, Redis},
    shutdown::Shutdown,
    token::new_token,
};

/// How long a floor's call waits for Redis before it fails (the server's default).
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// A lease long enough to outlive any floor's cycle.
const LEASE: Duration = Duration::from_secs(30);

/// The server's accept loop (`TCP_NODELAY`, keepalive, …), so that the benchmark's
/// no-op transport floor accepts connections exactly as the server does.
pub use crate::grpc::connections::incoming;

/// Every script the server runs, as `(SHA1, "area/file.lua")`: how a reader of Redis'
/// `SLOWLOG` (whose entries name a script by its SHA1) names what held Redis.
pub fn script_names() -> Vec<(String, String)> {
    let (locks, queues, schedules, semaphores) = (
        crate::lock::LockScripts::new(),
        crate::queue::QueueScripts::new(),
        crate::schedule::ScheduleScripts::new(),
        crate::semaphore::SemaphoreScripts::new(),
    );
    let named = |area: &str, scripts: &[&crate::redis::Script]| -> Vec<(String, String)> {
        scripts
            .iter()
            .map(|script| {
                let name = format!("{area}/{}", script.source.name);
                (script.inner.get_hash().to_owned(), name)
            })
            .collect()
    };
    [
        named("lock", &locks.all()),
        named("queue", &queues.all()),
        named("schedule", &schedules.all()),
        named("semaphore", &semaphores.all()),
    ]
    .concat()
}

/// The stores on one Redis (or Cluster), under the server's default key prefix.
#[derive(Clone)]
pub struct Floor {
    locks: LockStore,
    queues: QueueStore,
}

impl Floor {
    /// The stores on the Redis at `url`; a comma-separated list names a Cluster's seed
    /// nodes (as `--redis-url` does with `--redis-cluster`).
    pub fn connect(url: &str) -> Result<Self, String> {
        let keys = Keys::new("turnstile");
        let redis = if url.contains(',') {
            let seeds = url
                .split(',')
                .map(|seed| connection_info(seed, None))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| err.to_string())?;
            Redis::cluster(seeds, None, REDIS_TIMEOUT, keys)
        } else {
            Redis::new(url, REDIS_TIMEOUT, keys)
        }
        .map_err(|err| err.to_string())?;
        let shutdown = Shutdown::new();
        Ok(Self {
            locks: LockStore::new(
                redis.clone(),
                Limits::new(1 << 20, 1 << 20),
                shutdown.clone(),
            ),
            queues: QueueStore::new(redis, shutdown),
        })
    }

    /// One lock cycle: acquire `name` for `owner` without waiting, then release it. An
    /// error when the name was not free.
    pub async fn lock_cycle(&self, name: &str, owner: &str) -> Result<(), String> {
        let spec = AcquireSpec {
            name: name.to_owned(),
            owner: owner.to_owned(),
            ttl: LEASE,
            wait: Duration::ZERO,
            request_id: String::new(),
        };
        let outcome = self
            .locks
            .acquire(spec, None)
            .await
            .map_err(|err| err.to_string())?;
        let AcquireOutcome::Acquired(lease) = outcome else {
            return Err(format!("{name} was not free"));
        };
        self.locks
            .release(name, &lease.token)
            .await
            .map_err(|err| err.to_string())?;
        Ok(())
    }

    /// Enqueues `count` new tasks (8 zero bytes each, due now) on `queue` in one call.
    pub async fn enqueue(&self, queue: &str, count: usize) -> Result<(), String> {
        let tasks: Vec<NewTask> = (0..count)
            .map(|_| NewTask {
                id: new_token(),
                payload: Bytes::from_static(&[0; 8]),
                schedule: Schedule::Now,
                replace: false,
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                dedupe_window: Duration::ZERO,
                fresh_id: true,
                group: String::new(),
                priority: 0,
            })
            .collect();
        self.queues
            .enqueue(queue, tasks)
            .await
            .map(drop)
            .map_err(|err| err.to_string())
    }

    /// Dispatches up to `max` of `queue`'s due tasks to one stream named by `session`
    /// (the dispatch script of a Subscribe feed) and acks them all in one call: how
    /// many were acked.
    pub async fn take_and_ack(&self, queue: &str, session: &str, max: u32) -> Result<u64, String> {
        let slots = [StreamSlots {
            tag: format!("s:{session}"),
            session: session.to_owned(),
            max_in_flight: max,
            visibility: LEASE,
        }];
        let dispatched = self
            .queues
            .dispatch(queue, &slots)
            .await
            .map_err(|err| err.to_string())?;
        if dispatched.tasks.is_empty() {
            return Ok(0);
        }
        let receipts: Vec<String> = dispatched
            .tasks
            .into_iter()
            .map(|(_, task)| task.receipt)
            .collect();
        let acked = self
            .queues
            .ack(queue, &receipts)
            .await
            .map_err(|err| err.to_string())?;
        Ok(acked.iter().filter(|done| **done).count() as u64)
    }
}
