//! `QueueStore`: task queues in Redis. Every state change is one Lua script on the
//! queue's own hash slot (`prelude.lua` is prepended to each, so shared helpers stay in
//! one file and each script is still one atomic EVALSHA).
//!
//! No proto type reaches this module: `api.rs` converts.

mod acks;
pub mod api;
pub mod scheduler;
pub mod subscribe;
pub mod watch;

use std::{sync::Arc, time::Duration};

use prost::bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    error::{Error, Result},
    lock::new_token,
    redis::{events::EventSink, keys::QueueKeys, Redis, Script},
    time::until_ms,
};
use watch::QueueWatch;

/// Most tasks in one `Enqueue`.
pub const MAX_BATCH: usize = 1000;
/// Most tasks in one `Lease` / `Peek`, and the most `max_in_flight`.
pub const MAX_TASKS: u32 = 1000;
/// Largest payload (inclusive).
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;
/// Default lease (`visibility`).
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);
/// Longest lease, delay, dedupe window or wait we accept (a sanity bound).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// Payload bytes per `Lease`/`Peek` reply: under gRPC's default 4 MiB receive limit
/// with room for the other fields.
pub const REPLY_BUDGET_BYTES: usize = 4 * 1024 * 1024 - 64 * 1024;

macro_rules! queue_script {
    ($file:literal) => {
        Script::new(
            $file,
            concat!(include_str!("prelude.lua"), include_str!($file)),
        )
    };
}

/// The queue scripts, loaded at boot.
#[derive(Debug)]
pub struct QueueScripts {
    enqueue: Script,
    lease: Script,
    ack: Script,
    nack: Script,
    extend_lease: Script,
    peek: Script,
    cancel: Script,
    redrive: Script,
    stats: Script,
    dispatch: Script,
    attach: Script,
    detach: Script,
}

impl QueueScripts {
    fn new() -> Self {
        Self {
            enqueue: queue_script!("enqueue.lua"),
            lease: queue_script!("lease.lua"),
            ack: queue_script!("ack.lua"),
            nack: queue_script!("nack.lua"),
            extend_lease: queue_script!("extend_lease.lua"),
            peek: queue_script!("peek.lua"),
            cancel: queue_script!("cancel.lua"),
            redrive: queue_script!("redrive.lua"),
            stats: queue_script!("stats.lua"),
            dispatch: queue_script!("dispatch.lua"),
            attach: queue_script!("attach.lua"),
            detach: queue_script!("detach.lua"),
        }
    }

    /// Every script, for `SCRIPT LOAD` at boot.
    pub fn all(&self) -> [&Script; 12] {
        [
            &self.enqueue,
            &self.lease,
            &self.ack,
            &self.nack,
            &self.extend_lease,
            &self.peek,
            &self.cancel,
            &self.redrive,
            &self.stats,
            &self.dispatch,
            &self.attach,
            &self.detach,
        ]
    }
}

/// A task's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Due later.
    Delayed,
    /// Due now.
    Ready,
    /// Leased to a worker.
    InFlight,
    /// Out of attempts.
    Dead,
}

impl TaskState {
    fn as_script_arg(self) -> &'static str {
        match self {
            TaskState::Delayed => "delayed",
            TaskState::Ready => "ready",
            TaskState::InFlight => "in_flight",
            TaskState::Dead => "dead",
        }
    }

    fn from_script(text: &[u8]) -> Result<Self> {
        Ok(match text {
            b"delayed" => TaskState::Delayed,
            b"ready" => TaskState::Ready,
            b"in_flight" => TaskState::InFlight,
            b"dead" => TaskState::Dead,
            other => {
                return Err(Error::Internal(format!(
                    "unknown task state {:?}",
                    String::from_utf8_lossy(other)
                )))
            }
        })
    }
}

/// When a new task falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Now.
    Now,
    /// This long from now (Redis clock).
    Delay(Duration),
    /// At this Unix ms (a past one is READY at once, ordered by that time).
    At(i64),
}

/// One task to enqueue (validated).
#[derive(Clone, Debug)]
pub struct NewTask {
    /// The id (the API fills in a random one when the client gave none).
    pub id: String,
    /// The bytes.
    pub payload: Bytes,
    /// When it falls due.
    pub schedule: Schedule,
    /// Replace a DELAYED, READY or DEAD task of the same id (else keep it).
    pub replace: bool,
    /// Deliveries before it goes DEAD.
    pub max_attempts: u32,
    /// How long the id stays reserved after ack or cancel.
    pub dedupe_window: Duration,
    /// The id is 128 random bits the server just made, so no task holds it: the
    /// script skips the duplicate lookup.
    pub fresh_id: bool,
}

/// What `Enqueue` did with one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The task id.
    pub id: String,
    /// A new task was stored.
    pub created: bool,
    /// An existing task was replaced.
    pub replaced: bool,
    /// When the stored task is due (Unix ms; 0 when nothing is stored under the id).
    pub due_at_ms: i64,
}

/// A task as the scripts report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The id.
    pub id: String,
    /// The bytes.
    pub payload: Bytes,
    /// Its state now.
    pub state: TaskState,
    /// When it is (or was) due, Unix ms.
    pub due_at_ms: i64,
    /// When it was enqueued, Unix ms.
    pub enqueued_at_ms: i64,
    /// The delivery number (0 before the first).
    pub attempt: u32,
    /// The effective maximum.
    pub max_attempts: u32,
    /// The receipt of this delivery ('' when not a delivery).
    pub receipt: String,
    /// When this delivery's lease ends, Unix ms (0 when not leased).
    pub lease_expires_at_ms: i64,
}

/// How a `Lease` call is to be served.
#[derive(Clone, Debug)]
pub struct LeaseSpec {
    /// At most this many tasks.
    pub max_tasks: u32,
    /// Lease length.
    pub visibility: Duration,
    /// Remove at once (at most once).
    pub auto_ack: bool,
}

/// What one `lease` script call returned.
#[derive(Clone, Debug)]
pub struct Leased {
    /// The tasks taken.
    pub tasks: Vec<Task>,
    /// The next instant (Unix ms) a task falls due or a lease ends, if any.
    pub next_due_ms: Option<i64>,
}

/// One Subscribe stream as the dispatch script sees it.
#[derive(Clone, Debug)]
pub struct StreamSlots {
    /// The tag its deliveries are indexed by (`w:<worker_id>` or `s:<session>`).
    pub tag: String,
    /// This stream's session: a newer stream of the same worker takes its tasks over.
    pub session: String,
    /// Most unacked deliveries.
    pub max_in_flight: u32,
    /// Lease length.
    pub visibility: Duration,
}

/// What one `dispatch` script call did.
#[derive(Clone, Debug)]
pub struct Dispatched {
    /// Redis' clock when it ran (Unix ms): timers count from here, not our clock.
    pub now_ms: i64,
    /// The earliest due time left in pending (may be <= now when slots ran out).
    pub next_pending_ms: Option<i64>,
    /// The earliest lease end.
    pub next_lease_end_ms: Option<i64>,
    /// Each stream's deliveries held after the call, in the order given.
    pub held: Vec<u32>,
    /// The deliveries: index of the stream (in the order given) and the task.
    pub tasks: Vec<(usize, Task)>,
}

/// How `Nack` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// Stale receipt: nothing changed.
    Stale,
    /// Due again.
    Requeued,
    /// Out of attempts: DEAD.
    Dead,
}

/// Queue depths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// READY tasks.
    pub ready: u64,
    /// DELAYED tasks.
    pub delayed: u64,
    /// IN_FLIGHT tasks.
    pub in_flight: u64,
    /// DEAD tasks.
    pub dead: u64,
    /// Due time of the oldest READY task.
    pub oldest_ready_at_ms: Option<i64>,
    /// Due time of the next DELAYED task.
    pub next_due_at_ms: Option<i64>,
}

/// Queues in Redis. Cheap to clone.
#[derive(Clone)]
pub struct QueueStore {
    redis: Redis,
    scripts: Arc<QueueScripts>,
    /// This replica's calls waiting on queues, woken by pub/sub.
    watch: Arc<QueueWatch>,
    /// Ack calls waiting to join the next `ack.lua` run of their queue.
    acks: Arc<acks::AckBatches>,
}

impl QueueStore {
    /// A store on `redis`; route [`QueueStore::event_route`] to it for wake-ups.
    pub fn new(redis: Redis) -> Self {
        Self {
            redis,
            scripts: Arc::new(QueueScripts::new()),
            watch: Arc::default(),
            acks: Arc::default(),
        }
    }

    /// The pub/sub channel this store listens on, and where its messages go.
    pub fn event_route(&self) -> (String, Arc<dyn EventSink>) {
        (self.redis.keys.queue_changed_channel(), self.watch.clone())
    }

    /// The wake-up of `queue`: notified when its tasks become due or are scheduled (or
    /// when messages may have been missed).
    pub fn changes(&self, queue: &str) -> Arc<tokio::sync::Notify> {
        self.watch.watch(self.keys(queue).pending())
    }

    /// The channel on which Ack/Nack announce a freed Subscribe slot (message: tag).
    pub fn slot_freed_channel(&self) -> String {
        self.redis.keys.slot_freed_channel()
    }

    /// Takes READY tasks, waiting up to `wait` for one (long-poll). Wakes on the
    /// queue's pub/sub message or at the next due time / lease end, never on a tick.
    pub async fn lease_waiting(
        &self,
        queue: &str,
        spec: &LeaseSpec,
        wait: Duration,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Result<Vec<Task>> {
        let until = Instant::now() + wait;
        let changed = self.changes(queue);
        loop {
            // Registered before the look, so a message sent during it is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let leased = self.lease(queue, spec).await?;
            if !leased.tasks.is_empty() || Instant::now() >= until {
                return Ok(leased.tasks);
            }
            let next = leased
                .next_due_ms
                .map(|ms| Instant::now() + until_ms(ms) + Duration::from_millis(1));
            tokio::select! {
                () = notified => {}
                () = crate::lock::sleep_until_some(next) => {}
                () = tokio::time::sleep_until(until) => {}
                () = crate::lock::sleep_until_some(deadline) => return Err(Error::DeadlineExceeded),
                () = cancel.cancelled() => return Err(Error::ShuttingDown),
            }
        }
    }

    /// The scripts, for loading at boot.
    pub fn scripts(&self) -> &QueueScripts {
        &self.scripts
    }

    fn keys(&self, queue: &str) -> QueueKeys {
        self.redis.keys.queue(queue)
    }

    fn call<'a>(script: &'a Script, keys: &QueueKeys) -> redis::ScriptInvocation<'a> {
        let mut call = script.key(&keys.all[0]);
        for key in &keys.all[1..] {
            call.key(key);
        }
        call
    }

    /// Adds a batch atomically; one result per task, in order.
    pub async fn enqueue(&self, queue: &str, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.enqueue, &keys);
        call.arg(self.redis.keys.queue_changed_channel())
            .arg(keys.pending());
        for task in tasks {
            let (kind, value) = match task.schedule {
                Schedule::Now => ("n", 0),
                Schedule::Delay(delay) => ("d", delay.as_millis() as i64),
                Schedule::At(ms) => ("a", ms),
            };
            call.arg(&task.id)
                .arg(task.payload.as_ref())
                .arg(kind)
                .arg(value)
                .arg(match (task.fresh_id, task.replace) {
                    (true, _) => "u",
                    (false, true) => "r",
                    (false, false) => "k",
                })
                .arg(task.max_attempts)
                .arg(task.dedupe_window.as_millis() as u64);
        }
        let reply: Vec<i64> = self.redis.invoke(&call).await?;
        if reply.len() != tasks.len() * 3 {
            return Err(Error::Internal(format!(
                "enqueue replied {} values for {} tasks",
                reply.len(),
                tasks.len()
            )));
        }
        Ok(tasks
            .iter()
            .zip(reply.chunks(3))
            .map(|(task, r)| Enqueued {
                id: task.id.clone(),
                created: r[0] == 1,
                replaced: r[1] == 1,
                due_at_ms: r[2],
            })
            .collect())
    }

    /// One attempt to take READY tasks (no waiting).
    pub async fn lease(&self, queue: &str, spec: &LeaseSpec) -> Result<Leased> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.lease, &keys);
        call.arg(spec.max_tasks)
            .arg(spec.visibility.as_millis() as u64)
            .arg(if spec.auto_ack { "1" } else { "0" })
            .arg(REPLY_BUDGET_BYTES)
            .arg(new_token());
        let reply: Vec<redis::Value> = self.redis.invoke(&call).await?;
        let next_due = int(reply.first())?;
        Ok(Leased {
            tasks: rows(&reply[1..])?,
            next_due_ms: (next_due >= 0).then_some(next_due),
        })
    }

    /// Leases READY tasks round-robin to Subscribe streams with free slots.
    pub async fn dispatch(&self, queue: &str, streams: &[StreamSlots]) -> Result<Dispatched> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.dispatch, &keys);
        call.arg(new_token()).arg(REPLY_BUDGET_BYTES);
        for stream in streams {
            call.arg(&stream.tag)
                .arg(&stream.session)
                .arg(stream.max_in_flight)
                .arg(stream.visibility.as_millis() as u64);
        }
        let reply: Vec<redis::Value> = self.redis.invoke(&call).await?;
        let head = 3 + streams.len();
        if reply.len() < head || !(reply.len() - head).is_multiple_of(10) {
            return Err(Error::Internal(format!(
                "dispatch replied {} values for {} streams",
                reply.len(),
                streams.len()
            )));
        }
        let optional = |value| int(Some(value)).map(|n| (n >= 0).then_some(n));
        let mut tasks = Vec::with_capacity((reply.len() - head) / 10);
        for chunk in reply[head..].chunks(10) {
            let stream = int(Some(&chunk[0]))? as usize;
            if stream == 0 || stream > streams.len() {
                return Err(Error::Internal(format!("dispatch named stream {stream}")));
            }
            tasks.push((stream - 1, task_row(&chunk[1..])?));
        }
        Ok(Dispatched {
            now_ms: int(reply.first())?,
            next_pending_ms: optional(&reply[1])?,
            next_lease_end_ms: optional(&reply[2])?,
            held: reply[3..head]
                .iter()
                .map(|v| int(Some(v)).map(|n| n as u32))
                .collect::<Result<_>>()?,
            tasks,
        })
    }

    /// A re-subscribed worker takes over its live deliveries (same receipts), leased
    /// to `stream` for its visibility from now.
    pub async fn attach(&self, queue: &str, stream: &StreamSlots) -> Result<Vec<Task>> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.attach, &keys);
        call.arg(&stream.tag)
            .arg(&stream.session)
            .arg(stream.visibility.as_millis() as u64);
        let reply: Vec<redis::Value> = self.redis.invoke(&call).await?;
        rows(&reply)
    }

    /// Ended streams' deliveries go back now (`grace` zero) or stay leased to their
    /// tag for `grace`; (given back, kept).
    pub async fn detach(
        &self,
        queue: &str,
        streams: &[(String, String)],
        grace: Duration,
    ) -> Result<(u64, u64)> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.detach, &keys);
        call.arg(self.redis.keys.queue_changed_channel())
            .arg(keys.pending())
            .arg(grace.as_millis() as u64);
        for (tag, session) in streams {
            call.arg(tag).arg(session);
        }
        self.redis.invoke(&call).await
    }

    /// One `ack.lua` run: finishes deliveries, one flag per receipt.
    async fn ack_script(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.ack, &keys);
        call.arg(self.redis.keys.slot_freed_channel());
        for receipt in receipts {
            call.arg(receipt);
        }
        let reply: Vec<i64> = self.redis.invoke(&call).await?;
        Ok(reply.into_iter().map(|n| n == 1).collect())
    }

    /// Gives a delivery back, due at now + `delay` (or DEAD on its last attempt).
    pub async fn nack(&self, queue: &str, receipt: &str, delay: Duration) -> Result<Nacked> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.nack, &keys);
        call.arg(receipt)
            .arg(delay.as_millis() as u64)
            .arg(self.redis.keys.queue_changed_channel())
            .arg(keys.pending())
            .arg(self.redis.keys.slot_freed_channel());
        let (requeued, dead): (i64, i64) = self.redis.invoke(&call).await?;
        Ok(match (requeued, dead) {
            (1, _) => Nacked::Requeued,
            (_, 1) => Nacked::Dead,
            _ => Nacked::Stale,
        })
    }

    /// Pushes a live delivery's lease end to now + `visibility`; the new end.
    pub async fn extend_lease(
        &self,
        queue: &str,
        receipt: &str,
        visibility: Duration,
    ) -> Result<Option<i64>> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.extend_lease, &keys);
        call.arg(receipt).arg(visibility.as_millis() as u64);
        let reply: Vec<i64> = self.redis.invoke(&call).await?;
        Ok((reply.first() == Some(&1)).then(|| reply.get(1).copied().unwrap_or(0)))
    }

    /// Tasks of one state, in delivery order, without receipts.
    pub async fn peek(&self, queue: &str, state: TaskState, limit: u32) -> Result<Vec<Task>> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.peek, &keys);
        call.arg(state.as_script_arg())
            .arg(limit)
            .arg(REPLY_BUDGET_BYTES);
        let reply: Vec<redis::Value> = self.redis.invoke(&call).await?;
        rows(&reply)
    }

    /// Removes tasks that are not in flight; the ids removed.
    pub async fn cancel(&self, queue: &str, ids: &[String]) -> Result<Vec<String>> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.cancel, &keys);
        for id in ids {
            call.arg(id);
        }
        self.redis.invoke(&call).await
    }

    /// Moves DEAD tasks (all when `ids` is empty) back to READY; how many.
    pub async fn redrive(&self, queue: &str, ids: &[String]) -> Result<u64> {
        let keys = self.keys(queue);
        let mut call = Self::call(&self.scripts.redrive, &keys);
        call.arg(self.redis.keys.queue_changed_channel())
            .arg(keys.pending());
        for id in ids {
            call.arg(id);
        }
        self.redis.invoke(&call).await
    }

    /// Queue depths.
    pub async fn stats(&self, queue: &str) -> Result<Stats> {
        let keys = self.keys(queue);
        let call = Self::call(&self.scripts.stats, &keys);
        let r: Vec<i64> = self.redis.invoke(&call).await?;
        if r.len() != 6 {
            return Err(Error::Internal(format!("stats replied {} values", r.len())));
        }
        Ok(Stats {
            ready: r[0] as u64,
            delayed: r[1] as u64,
            in_flight: r[2] as u64,
            dead: r[3] as u64,
            oldest_ready_at_ms: (r[4] >= 0).then_some(r[4]),
            next_due_at_ms: (r[5] >= 0).then_some(r[5]),
        })
    }
}

/// Decodes rows of 9 values each.
fn rows(values: &[redis::Value]) -> Result<Vec<Task>> {
    if !values.len().is_multiple_of(9) {
        return Err(Error::Internal(format!(
            "task rows of {} values",
            values.len()
        )));
    }
    values.chunks(9).map(task_row).collect()
}

/// Decodes one row: id, payload, state, due, enq, att, max, receipt, lease end (see
/// `push_row()` in prelude.lua).
fn task_row(r: &[redis::Value]) -> Result<Task> {
    Ok(Task {
        id: String::from_utf8_lossy(&bytes(&r[0])?).into_owned(),
        payload: Bytes::from(bytes(&r[1])?),
        state: TaskState::from_script(&bytes(&r[2])?)?,
        due_at_ms: int(Some(&r[3]))?,
        enqueued_at_ms: int(Some(&r[4]))?,
        attempt: int(Some(&r[5]))? as u32,
        max_attempts: int(Some(&r[6]))? as u32,
        receipt: String::from_utf8_lossy(&bytes(&r[7])?).into_owned(),
        lease_expires_at_ms: int(Some(&r[8]))?,
    })
}

fn bytes(value: &redis::Value) -> Result<Vec<u8>> {
    match value {
        redis::Value::BulkString(bytes) => Ok(bytes.clone()),
        redis::Value::Int(n) => Ok(n.to_string().into_bytes()),
        other => Err(Error::Internal(format!("expected a string, got {other:?}"))),
    }
}

fn int(value: Option<&redis::Value>) -> Result<i64> {
    match value {
        Some(redis::Value::Int(n)) => Ok(*n),
        Some(redis::Value::BulkString(text)) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Error::Internal("expected a number".into())),
        other => Err(Error::Internal(format!("expected a number, got {other:?}"))),
    }
}
