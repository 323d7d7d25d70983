//! The schedule RPCs' calls: each writes or reads the tenant's schedules
//! (`Keys::schedules`, one slot) and reads the last fire time from the queue's slot.

use super::{
    enqueue,
    model::{Schedule, ScheduleView, Spec},
    record,
    times::{self, FireTimes},
    ScheduleStore,
};
use crate::{
    error::{Error, Result},
    redis::keys::Event,
    time::now_ms,
};

/// One page of schedules and where the next starts.
#[derive(Clone, Debug)]
pub struct SchedulePage {
    /// The schedules, by name.
    pub schedules: Vec<ScheduleView>,
    /// The last name of this page when there are more.
    pub next_after: Option<String>,
}

/// The fire times of a stored (so already validated) schedule.
pub(super) fn fire_times(schedule: &Schedule) -> Result<FireTimes> {
    match &schedule.spec {
        Spec::Every(every) => Ok(FireTimes::Every(every.as_millis() as i64)),
        Spec::Cron { expr, zone } => FireTimes::cron(expr, zone).map_err(|(field, reason)| {
            Error::Internal(format!("schedule {:?}: {field}: {reason}", schedule.name))
        }),
    }
}

impl ScheduleStore {
    /// Creates or replaces `schedule`. A replaced one keeps the instant it fires from
    /// (fire times already enqueued stay recorded on the queue's slot, so none fires
    /// twice), unless it moves to another queue or is resumed: then it fires only
    /// after now (`lua/put_schedule.lua` decides, against what is stored).
    pub async fn put(&self, schedule: &Schedule) -> Result<ScheduleView> {
        let times = fire_times(schedule)?;
        let keys = self.redis.keys.schedules();
        self.redis
            .query::<()>(
                redis::cmd("SADD")
                    .arg(self.redis.keys.schedule_tenants())
                    .arg(self.tenant.as_str()),
            )
            .await?;
        let mut call = self.scripts.put_schedule.key(&keys[0]);
        call.key(&keys[1])
            .key(&keys[2])
            .arg(&schedule.name)
            .arg(record::encode(schedule))
            .arg(self.redis.keys.channel(Event::ScheduleChanged));
        let since: i64 = self.redis.invoke(&call).await?;
        self.view(schedule.clone(), &times, since).await
    }

    /// The schedule `name`, if there is one.
    pub async fn get(&self, name: &str) -> Result<Option<ScheduleView>> {
        match self.stored(name).await? {
            None => Ok(None),
            Some((schedule, since)) => {
                let times = fire_times(&schedule)?;
                Ok(Some(self.view(schedule, &times, since).await?))
            }
        }
    }

    /// Up to `size` schedules by name, after `after`.
    pub async fn list(&self, after: Option<&str>, size: usize) -> Result<SchedulePage> {
        let [defs, names, since] = self.redis.keys.schedules();
        let from = match after {
            Some(after) => {
                let mut from = b"(".to_vec();
                from.extend_from_slice(after.as_bytes());
                from
            }
            None => b"-".to_vec(),
        };
        let mut page: Vec<String> = self
            .redis
            .query(
                redis::cmd("ZRANGEBYLEX")
                    .arg(&names)
                    .arg(from)
                    .arg("+")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(size + 1),
            )
            .await?;
        let more = page.len() > size;
        page.truncate(size);
        let mut schedules = Vec::with_capacity(page.len());
        if !page.is_empty() {
            let jsons: Vec<Option<Vec<u8>>> = self
                .redis
                .query(redis::cmd("HMGET").arg(&defs).arg(&page))
                .await?;
            let sinces: Vec<Option<i64>> = self
                .redis
                .query(redis::cmd("HMGET").arg(&since).arg(&page))
                .await?;
            // Each schedule's last fire is on its queue's slot: the reads go out at
            // once (pipelined on the shared sockets), not one round trip after another.
            let mut views = tokio::task::JoinSet::new();
            for (at, ((name, json), since)) in page.iter().zip(jsons).zip(sinces).enumerate() {
                // Deleted between the two reads: not listed.
                let Some(json) = json else { continue };
                let schedule = record::decode(name, &json)?;
                let store = self.clone();
                views.spawn(async move {
                    let times = fire_times(&schedule)?;
                    let view = store.view(schedule, &times, since.unwrap_or(0)).await?;
                    Ok::<_, Error>((at, view))
                });
            }
            let mut found = Vec::with_capacity(views.len());
            while let Some(done) = views.join_next().await {
                found.push(done.map_err(|err| Error::Internal(format!("list task: {err}")))??);
            }
            found.sort_unstable_by_key(|(at, _)| *at);
            schedules.extend(found.into_iter().map(|(_, view)| view));
        }
        Ok(SchedulePage {
            next_after: more.then(|| page.last().cloned()).flatten(),
            schedules,
        })
    }

    /// Deletes `name`; whether there was one. Its tasks stay in their queue.
    pub async fn delete(&self, name: &str) -> Result<bool> {
        let keys = self.redis.keys.schedules();
        let mut call = self.scripts.delete_schedule.key(&keys[0]);
        call.key(&keys[1])
            .key(&keys[2])
            .arg(name)
            .arg(self.redis.keys.channel(Event::ScheduleChanged));
        let deleted: i64 = self.redis.invoke(&call).await?;
        Ok(deleted == 1)
    }

    /// Enqueues one task of `name` now, outside its fire times; its id, or `None` when
    /// there is no such schedule.
    pub async fn trigger(&self, name: &str) -> Result<Option<String>> {
        let Some((schedule, _)) = self.stored(name).await? else {
            return Ok(None);
        };
        let id = times::fire_id(name, now_ms());
        enqueue::enqueue_now(
            &self.queues,
            &self.tenant,
            &schedule.queue,
            id.clone(),
            &schedule.task,
        )
        .await?;
        Ok(Some(id))
    }

    /// The stored schedule `name` and the instant it fires from.
    async fn stored(&self, name: &str) -> Result<Option<(Schedule, i64)>> {
        let [defs, _, since] = self.redis.keys.schedules();
        let json: Option<Vec<u8>> = self
            .redis
            .query(redis::cmd("HGET").arg(&defs).arg(name))
            .await?;
        let Some(json) = json else { return Ok(None) };
        let since: Option<i64> = self
            .redis
            .query(redis::cmd("HGET").arg(&since).arg(name))
            .await?;
        Ok(Some((record::decode(name, &json)?, since.unwrap_or(0))))
    }

    /// `schedule` with its next fire time (none while paused) and its last one (read
    /// from the queue's slot).
    async fn view(
        &self,
        schedule: Schedule,
        times: &FireTimes,
        since: i64,
    ) -> Result<ScheduleView> {
        let last =
            enqueue::last_fire(&self.queues, &self.tenant, &schedule.queue, &schedule.name).await?;
        // The timer's own plan: after since and the last fire, and no older than the
        // catch-up window (a missed fire that is still to be caught up is next).
        let window = schedule.catch_up_window.as_millis() as i64;
        let next = (!schedule.paused)
            .then(|| times.next_after(since.max(last).max(now_ms() - window - 1)))
            .flatten();
        Ok(ScheduleView {
            schedule,
            next_fire_ms: next,
            last_fire_ms: (last > 0).then_some(last),
        })
    }
}
