//! The fire timer: every schedule of every tenant in memory, and one task that sleeps
//! until the next fire time and fires what is due. Nothing is read from Redis between
//! fires: a schedule's definition is read when it changes (a `schedule-changed`
//! message from the script that changed it) or when the event subscription is made
//! again (messages may have been missed), and the last fire time comes back in each
//! fire's reply.
//!
//! Every replica fires every fire time; the queue's `fire.lua` records it in the script
//! that enqueues it, so exactly one replica enqueues it and the others hear `done`.
//! The replica whose fire enqueued (or skipped) it is the one that counts it, so the
//! metrics summed over replicas count each fire time once. Times are Redis' clock: a
//! fire's reply carries Redis' now, and the timer keeps the local clock's offset from
//! it (against the middle of the round trip with the shortest lately); a fire that
//! reaches Redis early answers `early` and is tried again at its time.
//!
//! Catch-up: after an outage (no replica ran, or Redis was down) a schedule fires its
//! missed fire times that are at most `catch_up_window` old, oldest first, each its
//! own task; older ones are skipped, and counted by the replica that fires the first
//! one after them.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::Notify, task::JoinSet};

use super::{
    counters::FireCounters,
    enqueue,
    model::{FireCall, FireOutcome, FireReply, Overlap, Schedule},
    record,
    store::fire_times,
    times::{fire_id, FireTimes},
};
use crate::{
    error::Result,
    metrics::Metrics,
    queue::QueueStore,
    redis::{events::EventSink, keys::Keys, Redis},
    shutdown::Shutdown,
    tenant::Tenant,
    time::{now_ms, until_ms},
};

/// Fire runs in flight at once.
const MAX_FIRING: usize = 64;
/// The most fires in one run (one script call into one queue), and their most
/// payload bytes: the fires due at one instant into one queue go together, so 10,000
/// schedules firing each second into a few queues cost a few dozen script runs a
/// second. 25, not more: 100 in one run held Redis 8.4 ms in `bench limits` (200:
/// 7.2–9.8 ms, 50: 4.9–5.8 ms).
const MAX_BATCH: usize = 25;
const MAX_BATCH_BYTES: usize = 2 * 1024 * 1024;
/// The most due schedules taken from the queue at once.
const MAX_TAKE: usize = 5_000;
/// The most skipped fire times counted one by one for a cron schedule after an
/// outage (an `every` schedule's are counted by arithmetic).
const MAX_COUNTED: u32 = 10_000;
/// Schedules read again in one `HMGET`.
const RELOAD_RUN: usize = 1_000;
/// How long a failed fire or load waits before it is tried again.
const RETRY: Duration = Duration::from_millis(250);

/// A schedule's identity: its tenant's name and its own.
type Id = (String, String);

/// One schedule as the timer keeps it.
struct Entry {
    tenant: Tenant,
    schedule: Arc<Schedule>,
    times: Arc<FireTimes>,
    /// Fire times at or before this instant are never fired (`put_schedule.lua`).
    since: i64,
    /// The last fire time known to be handled (0: not known yet).
    handled: i64,
    /// The fire time it tries next, and when (in `State::queue` unless `busy`).
    next: Option<(i64, i64)>,
    /// The attempt time it is queued under in `State::queue`, if it is.
    queued: Option<i64>,
    /// A fire of it is in flight.
    busy: bool,
    /// Bumped when its definition changes, so a fire of the old one is recognised.
    generation: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<Id, Entry>,
    /// (attempt at, tenant, name) of every entry with a fire time and no fire in flight.
    queue: BTreeSet<(i64, String, String)>,
    /// Schedules to read again, and whether to read them all.
    reload: Vec<Id>,
    reload_all: bool,
    /// Redis' clock minus the local clock, from the fire reply with the shortest
    /// round trip lately ([`Clock`]).
    offset: i64,
    clock: Clock,
    /// A fire run failed and none has succeeded since (for logging once per outage).
    failing: bool,
}

/// The estimate of Redis' clock: a reply's Redis time against the middle of its round
/// trip, NTP's way. Taking the reply's time against the moment it was read instead made
/// every fire late by the reply's own delay (28 ms at p50 under load): the offset then
/// carries the queueing of the last reply into the next sleep.
#[derive(Default)]
struct Clock {
    /// The round trip (ms) of the sample in use, and when it was taken (local ms).
    rtt: i64,
    taken: i64,
}

/// How long a sample with a short round trip is kept against longer ones.
const CLOCK_SAMPLE_TTL_MS: i64 = 30_000;

/// One fire to run.
struct Item {
    id: Id,
    schedule: Arc<Schedule>,
    at: i64,
    generation: u64,
}

/// A fire run that ended: its job, the replies, and the local instants it was sent and
/// answered.
type Finished = (Job, Result<Vec<FireReply>>, (i64, i64));

/// The fires due together into one queue: one script run.
struct Job {
    tenant: Tenant,
    queue: String,
    items: Vec<Item>,
}

/// The fire timer of this replica; an [`EventSink`] for `schedule-changed`.
pub struct Timer {
    redis: Redis,
    /// The queues its fires enqueue into.
    queues: QueueStore,
    state: Mutex<State>,
    /// Kicked when there is something to reload.
    wake: Notify,
    /// Fires, their lateness and skipped fire times (registered with the metrics).
    counters: Arc<FireCounters>,
}

impl Timer {
    pub(super) fn new(redis: Redis, queues: QueueStore) -> Self {
        Self {
            redis,
            queues,
            state: Mutex::new(State {
                reload_all: true,
                ..State::default()
            }),
            wake: Notify::new(),
            counters: Arc::default(),
        }
    }

    /// Counts fires, their lateness and skipped fire times into `metrics`.
    pub fn register_metrics(&self, metrics: &Metrics) {
        self.counters.register(metrics);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs until shutdown: loads the schedules, then fires each at its times.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let mut firing: JoinSet<Finished> = JoinSet::new();
        let mut retry_load_at: Option<tokio::time::Instant> = None;
        loop {
            if retry_load_at.is_none_or(|at| at <= tokio::time::Instant::now()) {
                let failing = retry_load_at.take().is_some();
                match self.reload().await {
                    // Said once per outage, not at every retry.
                    Err(err) if !failing => {
                        tracing::warn!(cause = %err, "schedules not loaded; trying again");
                        retry_load_at = Some(tokio::time::Instant::now() + RETRY);
                    }
                    Err(_) => retry_load_at = Some(tokio::time::Instant::now() + RETRY),
                    Ok(()) if failing => tracing::info!("schedules loaded"),
                    Ok(()) => {}
                }
            }
            let next = {
                let mut state = self.lock();
                let now = now_ms() + state.offset;
                while firing.len() < MAX_FIRING {
                    let jobs = state.take_due(now);
                    if jobs.is_empty() {
                        break;
                    }
                    for job in jobs {
                        let timer = self.clone();
                        firing.spawn(async move {
                            let sent = now_ms();
                            let reply = timer.fire(&job).await;
                            (job, reply, (sent, now_ms()))
                        });
                    }
                }
                let offset = state.offset;
                let first = state.queue.first().map(|(at, _, _)| *at);
                first.map(|at| until_ms(at - offset))
            };
            let sleep = match (next, retry_load_at) {
                _ if firing.len() >= MAX_FIRING => None,
                (Some(wait), _) => Some(wait),
                (None, Some(at)) => Some(at.saturating_duration_since(tokio::time::Instant::now())),
                (None, None) => None,
            };
            let sleep = sleep.map(|d| tokio::time::Instant::now() + d);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
                () = crate::time::precisely_until_some(sleep) => {}
                Some(done) = firing.join_next(), if !firing.is_empty() => {
                    if let Ok((job, reply, trip)) = done {
                        self.finish(job, reply, trip);
                    }
                }
            }
        }
    }

    /// The fires of `job`, one script run through the queue domain.
    async fn fire(&self, job: &Job) -> Result<Vec<FireReply>> {
        let calls = job
            .items
            .iter()
            .map(|item| FireCall {
                schedule: &item.schedule.name,
                at_ms: item.at,
                id: fire_id(&item.schedule.name, item.at),
                skip_overlap: item.schedule.overlap == Overlap::Skip,
                task: &item.schedule.task,
            })
            .collect();
        enqueue::fire(&self.queues, &job.tenant, &job.queue, calls).await
    }

    /// Records what the fires of `job` did (sent and answered at the local instants
    /// `trip`) and plans each schedule's next one.
    fn finish(&self, job: Job, replies: Result<Vec<FireReply>>, trip: (i64, i64)) {
        let mut state = self.lock();
        let replies = match replies {
            Ok(replies) => replies,
            Err(err) => {
                // Said once per outage, not for every run of every retry.
                if !std::mem::replace(&mut state.failing, true) {
                    tracing::warn!(queue = %job.queue, fires = job.items.len(), cause = %err, "fires failed; trying again");
                }
                let retry = now_ms() + state.offset + RETRY.as_millis() as i64;
                for item in &job.items {
                    if let Some(entry) = state.entries.get_mut(&item.id) {
                        entry.busy = false;
                        if entry.generation == item.generation {
                            entry.next = Some((item.at, retry));
                        }
                    }
                    state.requeue(&item.id);
                }
                return;
            }
        };
        if let Some(reply) = replies.first() {
            state.sample_clock(reply.now_ms, trip);
        }
        if std::mem::take(&mut state.failing) {
            tracing::info!("fires succeed again");
        }
        for (item, reply) in job.items.iter().zip(replies) {
            self.finish_one(&mut state, item, reply);
            state.requeue(&item.id);
        }
    }

    /// What one fire did: the schedule's record, the metrics, its next fire.
    fn finish_one(&self, state: &mut State, item: &Item, reply: FireReply) {
        let Some(entry) = state.entries.get_mut(&item.id) else {
            return;
        };
        entry.busy = false;
        match reply.outcome {
            FireOutcome::Early => {
                if entry.generation == item.generation {
                    entry.next = Some((item.at, item.at));
                }
                return;
            }
            FireOutcome::Done => entry.handled = entry.handled.max(reply.handled_ms).max(item.at),
            FireOutcome::Fired | FireOutcome::Overlap => {
                entry.handled = entry.handled.max(item.at);
                if reply.outcome == FireOutcome::Fired {
                    self.counters
                        .fired(Duration::from_millis((reply.now_ms - item.at).max(0) as u64));
                } else {
                    self.counters.skipped(true, 1);
                }
                let from = reply.handled_ms.max(entry.since);
                let missed = count_between(&entry.times, from, item.at);
                if missed > 0 {
                    self.counters.skipped(false, missed);
                }
            }
        }
        entry.plan(reply.now_ms);
    }

    /// Reads again the schedules that changed (all of them after a new subscription).
    async fn reload(&self) -> Result<()> {
        let (all, some) = {
            let mut state = self.lock();
            (
                std::mem::take(&mut state.reload_all),
                std::mem::take(&mut state.reload),
            )
        };
        let outcome = if all {
            self.reload_all().await
        } else {
            self.reload_some(&some).await
        };
        if outcome.is_err() {
            let mut state = self.lock();
            state.reload_all |= all;
            state.reload.extend(some);
        }
        outcome
    }

    async fn reload_all(&self) -> Result<()> {
        let tenants: Vec<String> = self
            .redis
            .query(redis::cmd("SMEMBERS").arg(self.redis.keys.schedule_tenants()))
            .await?;
        let mut found = Vec::new();
        for name in tenants {
            let Ok(tenant) = Tenant::new("tenant", &name) else {
                continue;
            };
            let redis = self.redis.tenant(&tenant);
            let [defs, _, since] = redis.keys.schedules();
            // HSCAN, a bounded run per command: one HGETALL of 100,000 schedules
            // would hold Redis for tens of milliseconds.
            let mut cursor = 0u64;
            loop {
                let (next, flat): (u64, Vec<Vec<u8>>) = redis
                    .query(
                        redis::cmd("HSCAN")
                            .arg(&defs)
                            .arg(cursor)
                            .arg("COUNT")
                            .arg(RELOAD_RUN),
                    )
                    .await?;
                let pairs: Vec<(String, Vec<u8>)> = flat
                    .chunks(2)
                    .filter_map(|pair| match pair {
                        [name, json] => Some((String::from_utf8(name.clone()).ok()?, json.clone())),
                        _ => None,
                    })
                    .collect();
                if !pairs.is_empty() {
                    let names: Vec<&str> = pairs.iter().map(|(name, _)| name.as_str()).collect();
                    let sinces: Vec<Option<i64>> = redis
                        .query(redis::cmd("HMGET").arg(&since).arg(&names))
                        .await?;
                    for ((schedule, json), since) in pairs.into_iter().zip(sinces) {
                        found.push((tenant.clone(), schedule, json, since.unwrap_or(0)));
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        let now = now_ms();
        let mut state = self.lock();
        let now = now + state.offset;
        let keep: std::collections::HashSet<Id> = found
            .iter()
            .map(|(tenant, name, _, _)| (tenant.as_str().to_owned(), name.clone()))
            .collect();
        let gone: Vec<Id> = state
            .entries
            .keys()
            .filter(|id| !keep.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            state.remove(&id);
        }
        for (tenant, name, json, since) in found {
            state.upsert(tenant, &name, &json, since, now);
        }
        Ok(())
    }

    /// Reads the schedules `ids` again: per tenant, a run of names at a time in two
    /// `HMGET`s (10,000 schedules put at once are 20 reads, not 20,000).
    async fn reload_some(&self, ids: &[Id]) -> Result<()> {
        let mut by_tenant: HashMap<&str, BTreeSet<&str>> = HashMap::new();
        for (tenant, name) in ids {
            by_tenant.entry(tenant).or_default().insert(name);
        }
        for (tenant, names) in by_tenant {
            let names: Vec<&str> = names.into_iter().collect();
            let Ok(tenant) = Tenant::new("tenant", tenant) else {
                continue;
            };
            let redis = self.redis.tenant(&tenant);
            let [defs, _, since] = redis.keys.schedules();
            for run in names.chunks(RELOAD_RUN) {
                let jsons: Vec<Option<Vec<u8>>> =
                    redis.query(redis::cmd("HMGET").arg(&defs).arg(run)).await?;
                let sinces: Vec<Option<i64>> = redis
                    .query(redis::cmd("HMGET").arg(&since).arg(run))
                    .await?;
                let mut state = self.lock();
                let now = now_ms() + state.offset;
                for ((name, json), since) in run.iter().zip(jsons).zip(sinces) {
                    let id = (tenant.as_str().to_owned(), (*name).to_owned());
                    match json {
                        None => state.remove(&id),
                        Some(json) => {
                            state.upsert(tenant.clone(), name, &json, since.unwrap_or(0), now)
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl State {
    /// Takes Redis' time `redis_now` of a reply sent and read at the local instants
    /// `(sent, read)` into the offset, when its round trip is the shortest lately.
    fn sample_clock(&mut self, redis_now: i64, (sent, read): (i64, i64)) {
        let rtt = (read - sent).max(0);
        let stale = read - self.clock.taken > CLOCK_SAMPLE_TTL_MS;
        if self.clock.taken == 0 || stale || rtt <= self.clock.rtt {
            self.offset = redis_now - (sent + read) / 2;
            self.clock = Clock { rtt, taken: read };
        }
    }

    /// The entries whose attempt is due at `now` (at most [`MAX_TAKE`]), marked busy,
    /// as runs of fires into one queue each.
    fn take_due(&mut self, now: i64) -> Vec<Job> {
        let mut jobs: Vec<Job> = Vec::new();
        let mut open: HashMap<(String, String), (usize, usize)> = HashMap::new();
        for _ in 0..MAX_TAKE {
            match self.queue.first() {
                Some(first) if first.0 <= now => {}
                _ => break,
            }
            let Some((_, tenant, name)) = self.queue.pop_first() else {
                break;
            };
            let id = (tenant, name);
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            entry.queued = None;
            let Some((at, _)) = entry.next else {
                continue;
            };
            entry.busy = true;
            let bytes = entry.schedule.task.payload.len();
            let key = (id.0.clone(), entry.schedule.queue.clone());
            let at_job = match open.get(&key) {
                Some(&(job, size))
                    if jobs[job].items.len() < MAX_BATCH && size + bytes <= MAX_BATCH_BYTES =>
                {
                    job
                }
                _ => {
                    jobs.push(Job {
                        tenant: entry.tenant.clone(),
                        queue: entry.schedule.queue.clone(),
                        items: Vec::new(),
                    });
                    open.insert(key.clone(), (jobs.len() - 1, 0));
                    jobs.len() - 1
                }
            };
            if let Some(open) = open.get_mut(&key) {
                open.1 += bytes;
            }
            jobs[at_job].items.push(Item {
                schedule: entry.schedule.clone(),
                at,
                generation: entry.generation,
                id,
            });
        }
        jobs
    }

    /// Puts `id` in the queue at its next attempt, where it was before or not (unless
    /// a fire of it is in flight).
    fn requeue(&mut self, id: &Id) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if let Some(at) = entry.queued.take() {
            self.queue.remove(&(at, id.0.clone(), id.1.clone()));
        }
        if let (false, Some((_, attempt))) = (entry.busy, entry.next) {
            entry.queued = Some(attempt);
            self.queue.insert((attempt, id.0.clone(), id.1.clone()));
        }
    }

    fn remove(&mut self, id: &Id) {
        if let Some(at) = self.entries.remove(id).and_then(|entry| entry.queued) {
            self.queue.remove(&(at, id.0.clone(), id.1.clone()));
        }
    }

    /// Takes in the stored definition of `name` (JSON and since), planning its next
    /// fire when it is new or changed.
    fn upsert(&mut self, tenant: Tenant, name: &str, json: &[u8], since: i64, now: i64) {
        let Ok(schedule) = record::decode(name, json) else {
            tracing::warn!(schedule = %name, "unreadable schedule left out");
            return;
        };
        let Ok(times) = fire_times(&schedule) else {
            tracing::warn!(schedule = %name, "schedule with bad fire times left out");
            return;
        };
        let id = (tenant.as_str().to_owned(), name.to_owned());
        if let Some(entry) = self.entries.get(&id) {
            if *entry.schedule == schedule && entry.since == since {
                return;
            }
        }
        let old = self.entries.remove(&id);
        if let Some(at) = old.as_ref().and_then(|o| o.queued) {
            self.queue.remove(&(at, id.0.clone(), id.1.clone()));
        }
        let same_queue = old
            .as_ref()
            .is_some_and(|o| o.schedule.queue == schedule.queue);
        let mut entry = Entry {
            tenant,
            times: Arc::new(times),
            since,
            handled: if same_queue {
                old.as_ref().map_or(0, |o| o.handled)
            } else {
                0
            },
            next: None,
            queued: None,
            busy: old.as_ref().is_some_and(|o| o.busy),
            generation: old.as_ref().map_or(0, |o| o.generation + 1),
            schedule: Arc::new(schedule),
        };
        entry.plan(now);
        self.entries.insert(id.clone(), entry);
        self.requeue(&id);
    }
}

impl Entry {
    /// Its next fire time after what it handled and since, not older than its
    /// catch-up window at `now` (Redis' clock); none while paused.
    fn plan(&mut self, now: i64) {
        if self.schedule.paused {
            self.next = None;
            return;
        }
        let window = self.schedule.catch_up_window.as_millis() as i64;
        let from = self.since.max(self.handled).max(now - window - 1);
        self.next = self.times.next_after(from).map(|at| (at, at));
    }
}

/// How many fire times lie strictly between `from` and `to` (capped for cron).
fn count_between(times: &FireTimes, from: i64, to: i64) -> u64 {
    if to <= from {
        return 0;
    }
    match times {
        FireTimes::Every(period) => {
            let below = (to - 1).div_euclid(*period) - from.div_euclid(*period);
            below.max(0) as u64
        }
        FireTimes::Cron { .. } => {
            let mut count = 0;
            let mut at = from;
            while count < MAX_COUNTED {
                match times.next_after(at) {
                    Some(next) if next < to => {
                        count += 1;
                        at = next;
                    }
                    _ => break,
                }
            }
            u64::from(count)
        }
    }
}

impl EventSink for Timer {
    fn on_message(&self, channel: &str, payload: &[u8]) {
        let (Some(tenant), Ok(name)) = (
            Keys::tenant_of_channel(channel),
            std::str::from_utf8(payload),
        ) else {
            return;
        };
        self.lock().reload.push((tenant, name.to_owned()));
        self.wake.notify_one();
    }

    fn on_subscribed(&self) {
        self.lock().reload_all = true;
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_keeps_the_sample_with_the_shortest_round_trip() {
        let mut state = State::default();
        // Sent at 1,000,000, read 4 ms later, Redis said 1,000,010: 8 ms ahead.
        state.sample_clock(1_000_010, (1_000_000, 1_000_004));
        assert_eq!(state.offset, 8);
        // A reply read 100 ms after it was sent says little: kept out.
        state.sample_clock(1_000_100, (1_000_050, 1_000_150));
        assert_eq!(state.offset, 8);
        // Once the short sample is old, a new one replaces it.
        state.sample_clock(1_040_012, (1_040_000, 1_040_010));
        assert_eq!(state.offset, 7);
    }

    #[test]
    fn missed_fire_times_are_counted_strictly_between() {
        let every = FireTimes::Every(1000);
        assert_eq!(count_between(&every, 1000, 5000), 3);
        assert_eq!(count_between(&every, 1500, 5000), 3);
        assert_eq!(count_between(&every, 1000, 2000), 0);
        assert_eq!(count_between(&every, 5000, 1000), 0);
        let cron = FireTimes::cron("* * * * * *", "").unwrap();
        assert_eq!(count_between(&cron, 1000, 5000), 3);
    }
}
