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
//! it; a fire that reaches Redis early answers `early` and is tried again at its time.
//!
//! Catch-up: after an outage (no replica ran, or Redis was down) a schedule fires its
//! missed fire times that are at most `catch_up_window` old, oldest first, each its
//! own task; older ones are skipped, and counted by the replica that fires the first
//! one after them.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use tokio::{sync::Notify, task::JoinSet};

use super::{
    model::{FireCall, FireOutcome, FireReply, Overlap, Schedule},
    record,
    store::fire_times,
    times::{fire_id, FireTimes},
    Queues,
};
use crate::{
    error::Result,
    metrics::Metrics,
    redis::{events::EventSink, keys::Keys, Redis},
    shutdown::Shutdown,
    tenant::Tenant,
    time::now_ms,
};

/// Fires in flight at once (a second when 10,000 schedules fire together).
const MAX_FIRING: usize = 256;
/// The most skipped fire times counted one by one for a cron schedule after an
/// outage (an `every` schedule's are counted by arithmetic).
const MAX_COUNTED: u32 = 10_000;
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
    /// Redis' clock minus the local clock, learnt from each fire's reply.
    offset: i64,
}

/// One fire to run.
struct Job {
    id: Id,
    tenant: Tenant,
    schedule: Arc<Schedule>,
    at: i64,
    generation: u64,
}

/// The fire timer of this replica; an [`EventSink`] for `schedule-changed`.
pub struct Timer {
    redis: Redis,
    queues: Arc<dyn Queues>,
    state: Mutex<State>,
    /// Kicked when there is something to reload.
    wake: Notify,
    metrics: OnceLock<Metrics>,
}

impl Timer {
    pub(super) fn new(redis: Redis, queues: Arc<dyn Queues>) -> Self {
        Self {
            redis,
            queues,
            state: Mutex::new(State {
                reload_all: true,
                ..State::default()
            }),
            wake: Notify::new(),
            metrics: OnceLock::new(),
        }
    }

    /// Counts fires, their lateness and skipped fire times into `metrics`.
    pub fn register_metrics(&self, metrics: &Metrics) {
        let _ = self.metrics.set(metrics.clone());
    }

    /// How many schedules this replica times (for tests and the bench).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether it times none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs until shutdown: loads the schedules, then fires each at its times.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let mut firing: JoinSet<(Job, Result<FireReply>)> = JoinSet::new();
        let mut retry_load_at: Option<tokio::time::Instant> = None;
        loop {
            if retry_load_at.is_none_or(|at| at <= tokio::time::Instant::now()) {
                retry_load_at = None;
                if let Err(err) = self.reload().await {
                    tracing::warn!(cause = %err, "schedules not loaded; trying again");
                    retry_load_at = Some(tokio::time::Instant::now() + RETRY);
                }
            }
            let next = {
                let mut state = self.lock();
                let now = now_ms() + state.offset;
                while firing.len() < MAX_FIRING {
                    let Some(job) = state.take_due(now) else {
                        break;
                    };
                    let timer = self.clone();
                    firing.spawn(async move {
                        let reply = timer.fire(&job).await;
                        (job, reply)
                    });
                }
                let offset = state.offset;
                let first = state.queue.first().map(|(at, _, _)| *at);
                first.map(|at| (at - offset - now_ms()).max(0) as u64)
            };
            let sleep = match (next, retry_load_at) {
                _ if firing.len() >= MAX_FIRING => None,
                (Some(ms), _) => Some(Duration::from_millis(ms)),
                (None, Some(at)) => Some(at.saturating_duration_since(tokio::time::Instant::now())),
                (None, None) => None,
            };
            let sleep = sleep.map(|d| tokio::time::Instant::now() + d);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
                () = crate::time::sleep_until_some(sleep) => {}
                Some(done) = firing.join_next(), if !firing.is_empty() => {
                    if let Ok((job, reply)) = done {
                        self.finish(job, reply);
                    }
                }
            }
        }
    }

    /// One fire of `job` through the queue domain.
    async fn fire(&self, job: &Job) -> Result<FireReply> {
        let call = FireCall {
            schedule: &job.schedule.name,
            at_ms: job.at,
            id: fire_id(&job.schedule.name, job.at),
            skip_overlap: job.schedule.overlap == Overlap::Skip,
            task: &job.schedule.task,
        };
        self.queues
            .fire(&job.tenant, &job.schedule.queue, call)
            .await
    }

    /// Records what a fire did and plans the schedule's next one.
    fn finish(&self, job: Job, reply: Result<FireReply>) {
        let mut state = self.lock();
        let reply = match reply {
            Ok(reply) => reply,
            Err(err) => {
                tracing::warn!(schedule = %job.schedule.name, cause = %err, "fire failed; trying again");
                let retry = now_ms() + state.offset + RETRY.as_millis() as i64;
                if let Some(entry) = state.entries.get_mut(&job.id) {
                    entry.busy = false;
                    if entry.generation == job.generation {
                        entry.next = Some((job.at, retry));
                    }
                }
                state.requeue(&job.id);
                return;
            }
        };
        state.offset = reply.now_ms - now_ms();
        let Some(entry) = state.entries.get_mut(&job.id) else {
            return;
        };
        entry.busy = false;
        match reply.outcome {
            FireOutcome::Early => {
                if entry.generation == job.generation {
                    entry.next = Some((job.at, job.at));
                }
                state.requeue(&job.id);
                return;
            }
            FireOutcome::Done => entry.handled = entry.handled.max(reply.handled_ms).max(job.at),
            FireOutcome::Fired | FireOutcome::Overlap => {
                entry.handled = entry.handled.max(job.at);
                if let Some(metrics) = self.metrics.get() {
                    if reply.outcome == FireOutcome::Fired {
                        metrics.fired(Duration::from_millis((reply.now_ms - job.at).max(0) as u64));
                    } else {
                        metrics.fires_skipped(true, 1);
                    }
                    let from = reply.handled_ms.max(entry.since);
                    let missed = count_between(&entry.times, from, job.at);
                    if missed > 0 {
                        metrics.fires_skipped(false, missed);
                    }
                }
            }
        }
        entry.plan(reply.now_ms);
        state.requeue(&job.id);
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
            let jsons: HashMap<String, Vec<u8>> =
                redis.query(redis::cmd("HGETALL").arg(&defs)).await?;
            let sinces: HashMap<String, i64> =
                redis.query(redis::cmd("HGETALL").arg(&since)).await?;
            for (schedule, json) in jsons {
                let since = sinces.get(&schedule).copied().unwrap_or(0);
                found.push((tenant.clone(), schedule, json, since));
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

    async fn reload_some(&self, ids: &[Id]) -> Result<()> {
        for id in ids {
            let Ok(tenant) = Tenant::new("tenant", &id.0) else {
                continue;
            };
            let redis = self.redis.tenant(&tenant);
            let [defs, _, since] = redis.keys.schedules();
            let json: Option<Vec<u8>> = redis
                .query(redis::cmd("HGET").arg(&defs).arg(&id.1))
                .await?;
            let since: Option<i64> = redis
                .query(redis::cmd("HGET").arg(&since).arg(&id.1))
                .await?;
            let mut state = self.lock();
            let now = now_ms() + state.offset;
            match json {
                None => state.remove(id),
                Some(json) => state.upsert(tenant, &id.1, &json, since.unwrap_or(0), now),
            }
        }
        Ok(())
    }
}

impl State {
    /// The first entry whose attempt is due at `now`, marked busy.
    fn take_due(&mut self, now: i64) -> Option<Job> {
        let first = self.queue.first()?;
        if first.0 > now {
            return None;
        }
        let (_, tenant, name) = self.queue.pop_first()?;
        let id = (tenant, name);
        let entry = self.entries.get_mut(&id)?;
        let (at, _) = entry.next?;
        entry.busy = true;
        Some(Job {
            tenant: entry.tenant.clone(),
            schedule: entry.schedule.clone(),
            at,
            generation: entry.generation,
            id,
        })
    }

    /// Puts `id` back in the queue at its next attempt (unless a fire is in flight).
    fn requeue(&mut self, id: &Id) {
        let Some(entry) = self.entries.get(id) else {
            return;
        };
        self.queue.retain(|(_, t, n)| !(t == &id.0 && n == &id.1));
        if let (false, Some((_, attempt))) = (entry.busy, entry.next) {
            self.queue.insert((attempt, id.0.clone(), id.1.clone()));
        }
    }

    fn remove(&mut self, id: &Id) {
        if let Some(entry) = self.entries.remove(id) {
            if let Some((_, attempt)) = entry.next {
                self.queue.remove(&(attempt, id.0.clone(), id.1.clone()));
            }
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
        if let Some((_, attempt)) = old.as_ref().and_then(|o| o.next) {
            self.queue.remove(&(attempt, id.0.clone(), id.1.clone()));
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
