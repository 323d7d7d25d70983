//! `ScheduleService`, typed: put, get, list (every page, by prefix), delete, pause,
//! resume, trigger. A schedule is the generated [`Schedule`] message itself: build it
//! with struct-update syntax from `Schedule::default()`.

use super::{error::Result, retry::call, Client};
use crate::pb;

pub use crate::pb::Schedule;

/// The tenant's schedules.
#[derive(Clone, Debug)]
pub struct Schedules {
    client: Client,
}

impl Schedules {
    pub(super) fn new(client: Client) -> Self {
        Schedules { client }
    }

    /// Creates or replaces the schedule (by name); it as stored, with its next fire
    /// time.
    pub async fn put(&self, schedule: Schedule) -> Result<Schedule> {
        let request = pb::PutScheduleRequest {
            schedule: Some(schedule),
        };
        Ok(
            call!(None, self.client.raw_schedules(), put_schedule, request)
                .await?
                .schedule
                .unwrap_or_default(),
        )
    }

    /// The schedule `name` (NOT_FOUND when there is none).
    pub async fn get(&self, name: impl Into<String>) -> Result<Schedule> {
        let request = pb::GetScheduleRequest { name: name.into() };
        Ok(
            call!(None, self.client.raw_schedules(), get_schedule, request)
                .await?
                .schedule
                .unwrap_or_default(),
        )
    }

    /// Every schedule whose name starts with `prefix` (all pages), by name.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Schedule>> {
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = pb::ListSchedulesRequest {
                page_size: 500,
                page_token: page_token.clone(),
            };
            let page = call!(None, self.client.raw_schedules(), list_schedules, request).await?;
            all.extend(
                page.schedules
                    .into_iter()
                    .filter(|schedule| schedule.name.starts_with(prefix)),
            );
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }

    /// Deletes it; false when there was none. Tasks it enqueued stay.
    pub async fn delete(&self, name: impl Into<String>) -> Result<bool> {
        let request = pb::DeleteScheduleRequest { name: name.into() };
        Ok(
            call!(None, self.client.raw_schedules(), delete_schedule, request)
                .await?
                .deleted,
        )
    }

    /// Stops its fires (the fire times passed while paused are not made up).
    pub async fn pause(&self, name: impl Into<String>) -> Result<Schedule> {
        self.set_paused(name.into(), true).await
    }

    /// Starts its fires again, from the next fire time after now.
    pub async fn resume(&self, name: impl Into<String>) -> Result<Schedule> {
        self.set_paused(name.into(), false).await
    }

    async fn set_paused(&self, name: String, paused: bool) -> Result<Schedule> {
        let schedule = self.get(name).await?;
        self.put(Schedule { paused, ..schedule }).await
    }

    /// Enqueues one task now, outside the fire times; its id.
    pub async fn trigger(&self, name: impl Into<String>) -> Result<String> {
        let request = pb::TriggerScheduleRequest { name: name.into() };
        Ok(
            call!(None, self.client.raw_schedules(), trigger_schedule, request)
                .await?
                .id,
        )
    }
}
