//! `ScheduleApi` implements the generated `ScheduleService`: each handler validates and
//! converts the request, calls `ScheduleStore`, and converts the answer.

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::proto_time::{self, timestamp_from_ms, DurationRule};
use super::{
    flow::{self, Listing},
    pb::{self, schedule_service_server::ScheduleService},
    rpc::{self, record, record_count, Bound},
};
use crate::{
    error::{Error, Result},
    method::Method,
    queue::{DEFAULT_MAX_ATTEMPTS, MAX_PAYLOAD_BYTES},
    redis::TenantScoped,
    schedule::{
        times::FireTimes, Overlap, Schedule, ScheduleStore, ScheduleView, Spec, TaskTemplate,
        DEFAULT_CATCH_UP, MAX_CATCH_UP, MIN_EVERY,
    },
    validate,
};

const EVERY: DurationRule = DurationRule {
    default: Duration::ZERO,
    min: MIN_EVERY,
    max: Duration::from_secs(365 * 24 * 3600),
};
const CATCH_UP: DurationRule = DurationRule {
    default: DEFAULT_CATCH_UP,
    min: Duration::ZERO,
    max: MAX_CATCH_UP,
};

/// The gRPC face of [`ScheduleStore`].
#[derive(Clone)]
pub struct ScheduleApi {
    store: ScheduleStore,
}

impl ScheduleApi {
    /// The service over `store`.
    pub fn new(store: ScheduleStore) -> Self {
        Self { store }
    }
}

/// The validated schedule name, recorded on the span.
fn schedule_name(name: &str) -> Result<&str> {
    let name = validate::name("name", name)?;
    record("schedule", name);
    Ok(name)
}

/// A `Schedule` message into the domain's, every field checked; the error names the
/// field as the `.proto` spells it.
fn schedule_of(message: Option<pb::Schedule>) -> Result<Schedule> {
    let s = message.ok_or_else(|| Error::invalid("schedule", "must be set"))?;
    let name = schedule_name(&s.name)?.to_owned();
    let queue = validate::name("queue", &s.queue)?.to_owned();
    let spec = match s.spec {
        Some(pb::schedule::Spec::Cron(expr)) => {
            let zone = s.time_zone.trim();
            FireTimes::cron(&expr, zone)
                .map_err(|(field, reason)| Error::invalid(field, reason))?;
            Spec::Cron {
                expr,
                zone: zone.to_owned(),
            }
        }
        Some(pb::schedule::Spec::Every(every)) => {
            let every = proto_time::duration("every", Some(&every), EVERY)?;
            if every.subsec_nanos() % 1_000_000 != 0 {
                return Err(Error::invalid("every", "must be whole milliseconds"));
            }
            if !s.time_zone.is_empty() {
                return Err(Error::invalid(
                    "time_zone",
                    "belongs to `cron` alone: `every` counts from the Unix epoch",
                ));
            }
            Spec::Every(every)
        }
        None => return Err(Error::invalid("cron", "set `cron` or `every`")),
    };
    let task = s.task.unwrap_or_default();
    if task.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::invalid(
            "payload",
            format!("must be at most {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    let overlap = match pb::OverlapPolicy::try_from(s.overlap) {
        Ok(pb::OverlapPolicy::Unspecified | pb::OverlapPolicy::Allow) => Overlap::Allow,
        Ok(pb::OverlapPolicy::Skip) => Overlap::Skip,
        Err(_) => return Err(Error::invalid("overlap", "unknown overlap policy")),
    };
    Ok(Schedule {
        name,
        queue,
        spec,
        task: TaskTemplate {
            max_attempts: validate::count(
                "max_attempts",
                task.max_attempts,
                DEFAULT_MAX_ATTEMPTS,
                u32::MAX,
            )?,
            priority: flow::priority(task.priority)?,
            group: flow::group(&task.group)?.to_owned(),
            payload: task.payload,
        },
        paused: s.paused,
        overlap,
        catch_up_window: proto_time::duration(
            "catch_up_window",
            s.catch_up_window.as_ref(),
            CATCH_UP,
        )?,
    })
}

/// The message of a stored schedule.
fn schedule_message(view: ScheduleView) -> pb::Schedule {
    let ScheduleView {
        schedule: s,
        next_fire_ms,
        last_fire_ms,
    } = view;
    let (spec, time_zone) = match s.spec {
        Spec::Cron { expr, zone } => (pb::schedule::Spec::Cron(expr), zone),
        Spec::Every(every) => (
            pb::schedule::Spec::Every(prost_types::Duration {
                seconds: every.as_secs() as i64,
                nanos: every.subsec_nanos() as i32,
            }),
            String::new(),
        ),
    };
    pb::Schedule {
        name: s.name,
        queue: s.queue,
        spec: Some(spec),
        time_zone,
        task: Some(pb::ScheduledTask {
            payload: s.task.payload,
            max_attempts: s.task.max_attempts,
            priority: s.task.priority,
            group: s.task.group,
        }),
        paused: s.paused,
        overlap: match s.overlap {
            Overlap::Allow => pb::OverlapPolicy::Allow,
            Overlap::Skip => pb::OverlapPolicy::Skip,
        } as i32,
        catch_up_window: Some(prost_types::Duration {
            seconds: s.catch_up_window.as_secs() as i64,
            nanos: s.catch_up_window.subsec_nanos() as i32,
        }),
        next_fire_at: next_fire_ms.map(timestamp_from_ms),
        last_fire_at: last_fire_ms.map(timestamp_from_ms),
    }
}

fn not_found(name: &str) -> Error {
    Error::NotFound(format!("no schedule named {name:?}"))
}

#[tonic::async_trait]
impl ScheduleService for ScheduleApi {
    async fn put_schedule(
        &self,
        request: Request<pb::PutScheduleRequest>,
    ) -> Result<Response<pb::PutScheduleResponse>, Status> {
        rpc::unary(
            Method::PutSchedule,
            Bound::Race,
            request,
            |call, r| async move {
                let schedule = schedule_of(r.schedule)?;
                let view = self.store.tenant(&call.tenant).put(&schedule).await?;
                Ok(pb::PutScheduleResponse {
                    schedule: Some(schedule_message(view)),
                })
            },
        )
        .await
    }

    async fn get_schedule(
        &self,
        request: Request<pb::GetScheduleRequest>,
    ) -> Result<Response<pb::GetScheduleResponse>, Status> {
        rpc::unary(
            Method::GetSchedule,
            Bound::Race,
            request,
            |call, r| async move {
                let name = schedule_name(&r.name)?;
                let view = self.store.tenant(&call.tenant).get(name).await?;
                Ok(pb::GetScheduleResponse {
                    schedule: Some(schedule_message(view.ok_or_else(|| not_found(name))?)),
                })
            },
        )
        .await
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        rpc::unary(
            Method::ListSchedules,
            Bound::Race,
            request,
            |call, r| async move {
                let size = flow::page_size(r.page_size)?;
                let after = flow::page_after(Listing::Schedules, &r.page_token)?;
                let page = self
                    .store
                    .tenant(&call.tenant)
                    .list(after.as_deref(), size)
                    .await?;
                record_count(page.schedules.len());
                Ok(pb::ListSchedulesResponse {
                    schedules: page.schedules.into_iter().map(schedule_message).collect(),
                    next_page_token: flow::page_token(Listing::Schedules, page.next_after),
                })
            },
        )
        .await
    }

    async fn delete_schedule(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> Result<Response<pb::DeleteScheduleResponse>, Status> {
        rpc::unary(
            Method::DeleteSchedule,
            Bound::Race,
            request,
            |call, r| async move {
                let name = schedule_name(&r.name)?;
                let deleted = self.store.tenant(&call.tenant).delete(name).await?;
                Ok(pb::DeleteScheduleResponse { deleted })
            },
        )
        .await
    }

    async fn trigger_schedule(
        &self,
        request: Request<pb::TriggerScheduleRequest>,
    ) -> Result<Response<pb::TriggerScheduleResponse>, Status> {
        rpc::unary(
            Method::TriggerSchedule,
            Bound::Race,
            request,
            |call, r| async move {
                let name = schedule_name(&r.name)?;
                let id = self.store.tenant(&call.tenant).trigger(name).await?;
                Ok(pb::TriggerScheduleResponse {
                    id: id.ok_or_else(|| not_found(name))?,
                })
            },
        )
        .await
    }
}
