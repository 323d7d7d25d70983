//! The queue store's script calls: each method builds one script call (keys, then its
//! arguments in the order the script's header gives), runs it, and decodes the reply
//! through `replies`. No waiting and no batching here: `long_poll.rs` and `acks.rs`
//! build on these.

use std::time::Duration;

use bytes::Bytes;

use super::{
    model::{
        Dispatched, Enqueued, Failure, Fire, Fired, LeaseSpec, Leased, Nacked, NewTask, Schedule,
        Stats, StreamSlots, Task, TaskState,
    },
    replies,
    scripts::call,
    QueueStore, MAX_PAYLOAD_BYTES, PLAIN_RUN_DELIVERIES, REPLY_BUDGET_BYTES, RUN_DELIVERIES,
};
use crate::{
    error::{Error, Result},
    redis::{
        keys::{Event, QueueKeys},
        Invocation,
    },
    time::now_ms,
    token::new_token,
};

/// The most DEAD tasks one `redrive.lua` run moves (about 2 ms of Redis time).
pub const REDRIVE_PER_RUN: usize = 200;
/// The most ids one `cancel.lua` run takes: a Cancel of more runs again.
pub const CANCEL_PER_RUN: usize = 200;
/// The most deliveries of ended streams one `detach.lua` run looks at (1,000 in one
/// run held Redis 7.4 ms in `bench limits`, 200 of 100,000 groups' deliveries 4.9 ms).
const DETACH_PER_RUN: usize = 100;
/// The most receipts one `ack.lua` run finishes: an Ack of 1,000 held Redis 6.4–8.3 ms
/// in one run (`bench limits`). Each run is atomic, the whole Ack is not: a retry
/// after a failed run answers false for what the runs before it finished.
const ACK_PER_RUN: usize = 250;
/// The most tasks one `list_tasks.lua` or `peek.lua` run returns: a page or a Peek
/// of 1,000 held Redis 6.4–8.4 ms in one run (`bench limits`); more are several runs.
const TASKS_PER_LOOK: u32 = 250;

impl QueueStore {
    /// Runs a script that returns expired leases first. A run that met a full run's
    /// worth of them (`lua/include/reclaim.lua`) answers AGAIN having done nothing else,
    /// and runs again: each run stays short however many leases ran out at once, and
    /// the run that does the work never sees a lease that ran out as live.
    pub(super) async fn invoke_reclaiming<T: redis::FromRedisValue>(
        &self,
        call: &crate::redis::Invocation<'_>,
    ) -> Result<T> {
        loop {
            let reply: redis::Value = self.redis.invoke(call).await?;
            if !matches!(&reply, redis::Value::SimpleString(s) if s == "AGAIN") {
                return T::from_redis_value(reply)
                    .map_err(|err| redis::RedisError::from(err).into());
            }
        }
    }

    /// Adds a batch atomically with `enqueue.lua`; one result per task, in order (the
    /// plain run of [`QueueStore::enqueue`]).
    pub(super) async fn enqueue_keyed(
        &self,
        queue: &str,
        keys: &QueueKeys,
        tasks: &[NewTask],
    ) -> Result<Vec<Enqueued>> {
        self.name_queue(queue).await?;
        let mut call = call(&self.scripts.enqueue, keys);
        self.enqueue_head(&mut call, keys, tasks);
        task_args(&mut call, tasks);
        let reply: Vec<u8> = self.invoke_reclaiming(&call).await?;
        replies::enqueued(tasks, &reply)
    }

    /// [`QueueStore::enqueue`], then [`QueueStore::dispatch`] to `streams`, in one
    /// script run (`lua/enqueue_and_dispatch.lua`): the dispatch is None when it was
    /// left to the feeds (promotion had more to do than one run).
    pub(super) async fn enqueue_and_dispatch(
        &self,
        queue: &str,
        keys: &QueueKeys,
        tasks: &[NewTask],
        streams: &[StreamSlots],
    ) -> Result<(Vec<Enqueued>, Option<Dispatched>)> {
        self.name_queue(queue).await?;
        let mut call = call(&self.scripts.enqueue_and_dispatch, keys);
        self.enqueue_head(&mut call, keys, tasks);
        call.arg(new_token())
            .arg(REPLY_BUDGET_BYTES)
            .arg(streams.len());
        stream_args(&mut call, streams);
        task_args(&mut call, tasks);
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        let (enqueued, dispatched) = replies::enqueued_and_dispatched(&mut reply)?;
        Ok((
            replies::enqueued(tasks, enqueued)?,
            dispatched
                .map(|d| replies::dispatched(d, streams.len()))
                .transpose()?,
        ))
    }

    /// The arguments enqueue.lua and enqueue_and_dispatch.lua open with: the
    /// queue-changed channel and message, the values per task.
    fn enqueue_head(&self, call: &mut Invocation<'_>, keys: &QueueKeys, tasks: &[NewTask]) {
        call.arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending())
            .arg(if with_flow_fields(tasks) { 9 } else { 7 });
    }

    /// Fires of schedules into `queue`, in one script that stores each task and records
    /// its fire time, so each fire time is enqueued once (`lua/fire.lua`); one answer
    /// per fire, in order.
    pub async fn fire(&self, queue: &str, fires: &[Fire]) -> Result<Vec<Fired>> {
        self.name_queue(queue).await?;
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.fire, &keys);
        call.key(self.redis.keys.queue_fired(queue))
            .arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending())
            .arg(fires.len());
        for fire in fires {
            call.arg(&fire.schedule)
                .arg(fire.at_ms)
                .arg(if fire.skip_overlap { "s" } else { "a" });
        }
        for fire in fires {
            let task = &fire.task;
            call.arg(&task.id)
                .arg(task.payload.as_ref())
                .arg("a")
                .arg(fire.at_ms)
                .arg("k")
                .arg(task.max_attempts)
                .arg(0)
                .arg(task.priority)
                .arg(&task.group);
        }
        let reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        replies::fired(&reply, fires.len())
    }

    /// The last fire time of `schedule` that enqueued a task into `queue` (0: none).
    pub async fn last_fire(&self, queue: &str, schedule: &str) -> Result<i64> {
        let record: Option<String> = self
            .redis
            .query(
                redis::cmd("HGET")
                    .arg(self.redis.keys.queue_fired(queue))
                    .arg(schedule),
            )
            .await?;
        Ok(record
            .as_deref()
            .and_then(|r| r.split(' ').nth(1))
            .and_then(|e| e.parse().ok())
            .unwrap_or(0))
    }

    /// One attempt to take READY tasks (no waiting, no give-back: see `lease`).
    pub(super) async fn lease_once(&self, queue: &str, spec: &LeaseSpec) -> Result<Leased> {
        let keys = self.keys(queue);
        let mut leased = self
            .lease_run(&keys, spec, spec.max_tasks, REPLY_BUDGET_BYTES)
            .await?;
        // A run delivers at most RUN_DELIVERIES in flow mode (`pick.lua`) and
        // PLAIN_RUN_DELIVERIES otherwise (`within_budget.lua`): their cost bounds. More
        // runs fill the batch while the last one stopped at a bound with more due now
        // (its next look is now, not later: a plain run that stopped at 40 for want of
        // tasks answers a later time, and costs no run more) and the reply has room for
        // a task of any size. A later run's failure leaves the batch as it is: what is
        // leased is delivered.
        let more_due = |leased: &Leased| {
            // Redis' clock against ours, with a second's slack between the two.
            leased.next_due_ms.is_some_and(|ms| ms <= now_ms() + 1000)
        };
        let mut last = leased.tasks.len();
        let mut bytes: usize = leased.tasks.iter().map(|t| t.payload.len()).sum();
        while [RUN_DELIVERIES, PLAIN_RUN_DELIVERIES].contains(&last)
            && more_due(&leased)
            && leased.tasks.len() < spec.max_tasks as usize
            && bytes + MAX_PAYLOAD_BYTES <= REPLY_BUDGET_BYTES
        {
            let wanted = spec.max_tasks - leased.tasks.len() as u32;
            let more = match self
                .lease_run(&keys, spec, wanted, REPLY_BUDGET_BYTES - bytes)
                .await
            {
                Ok(more) => more,
                Err(err) => {
                    tracing::debug!(queue, cause = %err, "a lease's next run failed; answering what it has");
                    break;
                }
            };
            last = more.tasks.len();
            bytes += more.tasks.iter().map(|t| t.payload.len()).sum::<usize>();
            leased.tasks.extend(more.tasks);
            leased.next_due_ms = more.next_due_ms;
            for limit in more.held_back {
                if !leased.held_back.contains(&limit) {
                    leased.held_back.push(limit);
                }
            }
        }
        Ok(leased)
    }

    /// One run of `lease.lua`: up to `max_tasks` tasks whose payloads fit `budget`.
    async fn lease_run(
        &self,
        keys: &QueueKeys,
        spec: &LeaseSpec,
        max_tasks: u32,
        budget: usize,
    ) -> Result<Leased> {
        let mut call = call(&self.scripts.lease, keys);
        call.arg(max_tasks)
            .arg(spec.visibility.as_millis() as u64)
            .arg(if spec.auto_ack { "1" } else { "0" })
            .arg(budget)
            .arg(new_token());
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        replies::leased(&mut reply)
    }

    /// Leases READY tasks round-robin to Subscribe streams with free slots.
    pub async fn dispatch(&self, queue: &str, streams: &[StreamSlots]) -> Result<Dispatched> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.dispatch, &keys);
        call.arg(new_token()).arg(REPLY_BUDGET_BYTES);
        stream_args(&mut call, streams);
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        replies::dispatched(&mut reply, streams.len())
    }

    /// A re-subscribed worker takes over its live deliveries (same receipts), leased
    /// to `stream` for its visibility from now.
    pub async fn attach(&self, queue: &str, stream: &StreamSlots) -> Result<Vec<Task>> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.attach, &keys);
        call.arg(&stream.tag)
            .arg(&stream.session)
            .arg(stream.visibility.as_millis() as u64);
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        replies::task_rows(&mut reply)
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
        let (mut returned, mut kept) = (0, 0);
        // Runs of at most DETACH_PER_RUN deliveries, each going on where the last
        // stopped: every run finishes a stream or moves the cursor on.
        let (mut first, mut cursor) = (0, String::new());
        while first < streams.len() {
            let mut call = call(&self.scripts.detach, &keys);
            call.arg(self.redis.keys.channel(Event::QueueChanged))
                .arg(keys.pending())
                .arg(grace.as_millis() as u64)
                .arg(DETACH_PER_RUN)
                .arg(&cursor);
            for (tag, session) in &streams[first..] {
                call.arg(tag).arg(session);
            }
            let (given, held, finished, next): (u64, u64, usize, String) =
                self.redis.invoke(&call).await?;
            returned += given;
            kept += held;
            first += finished;
            cursor = next;
        }
        Ok((returned, kept))
    }

    /// Deliveries nobody received go back at their original due time, as a lease
    /// expiry would (or die on their last attempt); how many went back.
    pub(super) async fn give_back(&self, queue: &str, receipts: &[String]) -> Result<u64> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.give_back, &keys);
        call.arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending());
        for receipt in receipts {
            call.arg(receipt);
        }
        self.redis.invoke(&call).await
    }

    /// One `ack.lua` run on the queue with `keys`: finishes deliveries, one flag per
    /// receipt.
    pub(super) async fn ack_script(
        &self,
        keys: &QueueKeys,
        receipts: &[String],
    ) -> Result<Vec<bool>> {
        self.ack_script_run(keys, receipts, &[]).await
    }

    /// Finishes deliveries that returned results (`(receipt, result)` pairs), in one
    /// `ack.lua` run of their own (not batched: results are the rarer Ack); one flag
    /// per receipt.
    pub async fn ack_with_results(
        &self,
        queue: &str,
        receipts: &[String],
        results: &[(String, Bytes)],
    ) -> Result<Vec<bool>> {
        self.ack_script_run(&self.keys(queue), receipts, results)
            .await
    }

    async fn ack_script_run(
        &self,
        keys: &QueueKeys,
        receipts: &[String],
        results: &[(String, Bytes)],
    ) -> Result<Vec<bool>> {
        let mut acked = Vec::with_capacity(receipts.len());
        for chunk in receipts.chunks(ACK_PER_RUN) {
            let mut call = call(&self.scripts.ack, keys);
            self.ack_head(&mut call, keys);
            let returned: Vec<&(String, Bytes)> = results
                .iter()
                .filter(|(receipt, _)| chunk.contains(receipt))
                .collect();
            call.arg(returned.len());
            for (receipt, result) in returned {
                call.arg(receipt).arg(result.as_ref());
            }
            for receipt in chunk {
                call.arg(receipt);
            }
            let reply: Vec<u8> = self.redis.invoke(&call).await?;
            acked.extend(replies::acked(&reply));
        }
        Ok(acked)
    }

    /// One `ack_and_dispatch.lua` run: finishes deliveries (one flag per receipt) and
    /// leases to those of `streams` whose slots they freed. The dispatch, when there
    /// was one, comes with the indices in `streams` of the streams it asked.
    pub(super) async fn ack_and_dispatch(
        &self,
        keys: &QueueKeys,
        receipts: &[String],
        streams: &[StreamSlots],
    ) -> Result<(Vec<bool>, Option<(Vec<usize>, Dispatched)>)> {
        let mut call = call(&self.scripts.ack_and_dispatch, keys);
        self.ack_head(&mut call, keys);
        call.arg(new_token())
            .arg(REPLY_BUDGET_BYTES)
            .arg(streams.len());
        stream_args(&mut call, streams);
        for receipt in receipts {
            call.arg(receipt);
        }
        let mut reply: Vec<redis::Value> = self.redis.invoke(&call).await?;
        let (acked, dispatched) = replies::acked_and_dispatched(&mut reply)?;
        let dispatched = match dispatched {
            Some((chosen, reply)) => {
                if chosen.iter().any(|&at| at >= streams.len()) {
                    return Err(Error::Internal(
                        "ack_and_dispatch named a stream it was not given".into(),
                    ));
                }
                let dispatched = replies::dispatched(reply, chosen.len())?;
                Some((chosen, dispatched))
            }
            None => None,
        };
        Ok((acked, dispatched))
    }

    /// The arguments ack.lua and ack_and_dispatch.lua open with: the slot-freed
    /// channel, the queue-changed channel and its message.
    fn ack_head(&self, call: &mut Invocation<'_>, keys: &QueueKeys) {
        call.arg(self.redis.keys.channel(Event::SlotFreed))
            .arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending());
    }

    /// Gives a delivery back, due at now + `delay` (or DEAD on its last attempt, or
    /// when the failure gives up), keeping the failure's error as the task's last.
    pub async fn nack(
        &self,
        queue: &str,
        receipt: &str,
        delay: Duration,
        failure: &Failure,
    ) -> Result<Nacked> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.nack, &keys);
        call.arg(receipt)
            .arg(delay.as_millis() as u64)
            .arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending())
            .arg(self.redis.keys.channel(Event::SlotFreed))
            .arg(&failure.error)
            .arg(if failure.give_up { "1" } else { "0" });
        let (requeued, dead): (i64, i64) = self.redis.invoke(&call).await?;
        Ok(match (requeued, dead) {
            (1, _) => Nacked::Requeued,
            (_, 1) => Nacked::Dead,
            _ => Nacked::Stale,
        })
    }

    /// Pushes a live delivery's lease end to now + `visibility`; the new end, and
    /// whether the task was cancelled while it ran (`Cancel.running`).
    pub async fn extend_lease(
        &self,
        queue: &str,
        receipt: &str,
        visibility: Duration,
        progress: Option<&[u8]>,
    ) -> Result<Option<(i64, bool)>> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.extend_lease, &keys);
        call.arg(receipt).arg(visibility.as_millis() as u64);
        if let Some(progress) = progress {
            call.arg(progress);
        }
        let reply: Vec<i64> = self.redis.invoke(&call).await?;
        Ok((reply.first() == Some(&1))
            .then(|| (reply.get(1).copied().unwrap_or(0), reply.get(2) == Some(&1))))
    }

    /// Tasks of one state, in delivery order, without receipts; with a group, that
    /// group's READY tasks in its order.
    pub async fn peek(
        &self,
        queue: &str,
        state: TaskState,
        limit: u32,
        group: Option<&str>,
    ) -> Result<Vec<Task>> {
        if limit <= TASKS_PER_LOOK {
            return self
                .peek_run(queue, state.as_script_arg(), limit, group)
                .await;
        }
        // More than one run's worth: a state's first page, in the same order. A group's
        // READY tasks put the one it must deliver next first (peek.lua), then its
        // others in order.
        let Some(group) = group else {
            return Ok(self.list_tasks(queue, state, None, limit, None).await?.0);
        };
        let mut tasks = self.peek_run(queue, "ready", 1, Some(group)).await?;
        let Some(head) = tasks.first().map(|t| t.id.clone()) else {
            return Ok(tasks);
        };
        let (rest, _) = self
            .list_tasks(queue, state, Some(group), limit, None)
            .await?;
        tasks.extend(rest.into_iter().filter(|t| t.id != head));
        tasks.truncate(limit as usize);
        Ok(tasks)
    }

    /// Up to `limit` tasks of `state` (of `group` only, when given) after `cursor` (the
    /// score and member of the last entry a page looked at; none for the first page),
    /// and the cursor of the next page (none on the last).
    pub async fn list_tasks(
        &self,
        queue: &str,
        state: TaskState,
        group: Option<&str>,
        limit: u32,
        cursor: Option<&(String, String)>,
    ) -> Result<(Vec<Task>, Option<(String, String)>)> {
        // Runs of at most TASKS_PER_LOOK, each after the last one's cursor, while the
        // reply has room for a task of any size. A run's failure after the first ends
        // the page where the runs before it stopped (its cursor goes on from there).
        let (mut tasks, mut next, mut bytes) = (Vec::new(), cursor.cloned(), 0);
        for run in 0..limit.div_ceil(TASKS_PER_LOOK).max(1) {
            let wanted = limit - tasks.len() as u32;
            let room = bytes + MAX_PAYLOAD_BYTES <= REPLY_BUDGET_BYTES;
            if run > 0 && (wanted == 0 || next.is_none() || !room) {
                break;
            }
            let budget = REPLY_BUDGET_BYTES - bytes;
            let look = wanted.min(TASKS_PER_LOOK);
            let (more, after) = match self
                .list_run(queue, state, group, look, next.as_ref(), budget)
                .await
            {
                Ok(page) => page,
                Err(err) if run == 0 => return Err(err),
                Err(_) => break,
            };
            bytes += more.iter().map(|t| t.payload.len()).sum::<usize>();
            tasks.extend(more);
            next = after;
        }
        Ok((tasks, next))
    }

    /// One `list_tasks.lua` run.
    async fn list_run(
        &self,
        queue: &str,
        state: TaskState,
        group: Option<&str>,
        limit: u32,
        cursor: Option<&(String, String)>,
        budget: usize,
    ) -> Result<(Vec<Task>, Option<(String, String)>)> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.list_tasks, &keys);
        call.arg(state.as_script_arg())
            .arg(limit)
            .arg(budget)
            .arg(if group.is_some() { "1" } else { "0" })
            .arg(group.unwrap_or_default());
        match cursor {
            Some((score, member)) => call.arg(score).arg(member),
            None => call.arg("").arg(""),
        };
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        if reply.len() < 2 {
            return Err(Error::Internal(format!(
                "list_tasks replied {} values",
                reply.len()
            )));
        }
        let next = crate::redis::reply::string(&reply, 0)?;
        let member = crate::redis::reply::string(&reply, 1)?;
        let tasks = replies::task_rows(&mut reply[2..])?;
        Ok((tasks, (!member.is_empty()).then_some((next, member))))
    }

    /// The task `id`, in whatever state it is, with its history and result (none when
    /// the queue has no such task).
    pub async fn task(&self, queue: &str, id: &str) -> Result<Option<Task>> {
        // The script's ARGV[5] carries the id (as it carries a group for READY).
        let call = self.peek_call(queue, "task", 1, Some(id));
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        replies::task_with_story(&mut reply)
    }

    async fn peek_run(
        &self,
        queue: &str,
        state: &str,
        limit: u32,
        group: Option<&str>,
    ) -> Result<Vec<Task>> {
        let call = self.peek_call(queue, state, limit, group);
        let mut reply: Vec<redis::Value> = self.invoke_reclaiming(&call).await?;
        replies::task_rows(&mut reply)
    }

    fn peek_call(
        &self,
        queue: &str,
        state: &str,
        limit: u32,
        group: Option<&str>,
    ) -> Invocation<'_> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.peek, &keys);
        call.arg(state)
            .arg(limit)
            .arg(REPLY_BUDGET_BYTES)
            .arg(if group.is_some() { "1" } else { "0" })
            .arg(group.unwrap_or_default());
        call
    }

    /// Removes tasks that are not in flight, and with `running` marks those in flight
    /// cancelled (their streams hear of it); the ids removed or marked.
    pub async fn cancel(&self, queue: &str, ids: &[String], running: bool) -> Result<Vec<String>> {
        let keys = self.keys(queue);
        // At most CANCEL_PER_RUN ids a run, as Redrive does: 1,000 in one run held Redis
        // 11 ms (`bench limits`). Each run is atomic; the whole Cancel is not, and a
        // retry after a failed run is safe (an id already gone is not cancelled twice).
        let mut cancelled = Vec::new();
        for chunk in ids.chunks(CANCEL_PER_RUN) {
            let mut call = call(&self.scripts.cancel, &keys);
            call.arg(self.redis.keys.channel(Event::QueueChanged))
                .arg(keys.pending())
                .arg(if running { "1" } else { "0" })
                .arg(self.redis.keys.channel(Event::SlotFreed));
            for id in chunk {
                call.arg(id);
            }
            let done: Vec<String> = self.invoke_reclaiming(&call).await?;
            cancelled.extend(done);
        }
        Ok(cancelled)
    }

    /// Moves DEAD tasks (all when `ids` is empty) back to READY; how many. One script
    /// run handles at most [`REDRIVE_PER_RUN`] tasks, so a queue with a million dead
    /// tasks never blocks Redis for long: the runs repeat until none is left. Each run
    /// is atomic; the whole Redrive is not (another call may interleave).
    pub async fn redrive(&self, queue: &str, ids: &[String]) -> Result<u64> {
        let keys = self.keys(queue);
        let run = |ids: &[String]| {
            let mut call = call(&self.scripts.redrive, &keys);
            call.arg(self.redis.keys.channel(Event::QueueChanged))
                .arg(keys.pending())
                .arg(REDRIVE_PER_RUN);
            for id in ids {
                call.arg(id);
            }
            call
        };
        let mut moved = 0;
        if ids.is_empty() {
            loop {
                let (done, looked): (u64, usize) = self.invoke_reclaiming(&run(&[])).await?;
                moved += done;
                if looked < REDRIVE_PER_RUN {
                    return Ok(moved);
                }
            }
        }
        for chunk in ids.chunks(REDRIVE_PER_RUN) {
            let (done, _): (u64, usize) = self.invoke_reclaiming(&run(chunk)).await?;
            moved += done;
        }
        Ok(moved)
    }

    /// Queue depths.
    pub async fn stats(&self, queue: &str) -> Result<Stats> {
        let keys = self.keys(queue);
        let reply: Vec<redis::Value> = self
            .invoke_reclaiming(&call(&self.scripts.stats, &keys))
            .await?;
        replies::stats(&reply)
    }
}

/// Whether a batch's tasks go to the script with their group and priority (9 values
/// each): only when some task has one, else 7.
fn with_flow_fields(tasks: &[NewTask]) -> bool {
    tasks.iter().any(|t| !t.group.is_empty() || t.priority != 0)
}

/// A batch's tasks as enqueue.lua takes them (the count `enqueue_head` gave).
fn task_args(call: &mut Invocation<'_>, tasks: &[NewTask]) {
    let flow = with_flow_fields(tasks);
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
        if flow {
            call.arg(task.priority).arg(&task.group);
        }
    }
}

/// Streams as dispatch.lua takes them: tag, session, max_in_flight, visibility ms.
fn stream_args(call: &mut Invocation<'_>, streams: &[StreamSlots]) {
    for stream in streams {
        call.arg(&stream.tag)
            .arg(&stream.session)
            .arg(stream.max_in_flight)
            .arg(stream.visibility.as_millis() as u64);
    }
}
