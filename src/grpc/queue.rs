//! `QueueApi` implements the generated `QueueService`: each handler validates and
//! converts the request, calls `QueueStore` (the queue's one door, Subscribe included), and
//! converts the answer. Deadlines, spans, error logging and heartbeats are `rpc`'s.

use std::time::Duration;

use prost::bytes::Bytes;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use super::proto_time::{self, timestamp_from_ms, DurationRule};
use super::{
    flow::{self, Listing},
    pb::{self, queue_service_server::QueueService},
    rpc::{self, record, record_count, Bound, ResponseStream},
};
use crate::{
    error::{Error, Result},
    limits::MAX_WAIT,
    method::Method,
    queue::{
        subscribe::{Pushed, SubscribeSpec},
        Attempt, Failure, LeaseSpec, Nacked, NewTask, Outcome, QueueStore, Schedule, Task,
        TaskCursor, TaskState, DEFAULT_MAX_ATTEMPTS, DEFAULT_VISIBILITY, MAX_BATCH, MAX_DURATION,
        MAX_PAYLOAD_BYTES, MAX_PROGRESS_BYTES, MAX_RESULT_BYTES, MAX_TASKS,
    },
    redis::TenantScoped,
    time::now_ms,
    token::new_token,
    validate,
};

const VISIBILITY: DurationRule = DurationRule {
    default: DEFAULT_VISIBILITY,
    min: Duration::from_millis(1),
    max: MAX_DURATION,
};
const WAIT: DurationRule = DurationRule {
    default: Duration::ZERO,
    min: Duration::ZERO,
    max: MAX_WAIT,
};
const DELAY: DurationRule = DurationRule {
    default: Duration::ZERO,
    min: Duration::ZERO,
    max: MAX_DURATION,
};

/// The gRPC face of [`QueueStore`] (a store serving this replica's Subscribe streams).
#[derive(Clone)]
pub struct QueueApi {
    store: QueueStore,
    /// `--stream-heartbeat`.
    heartbeat: Duration,
}

impl QueueApi {
    /// The service over `store`, with heartbeats every `heartbeat`.
    pub fn new(store: QueueStore, heartbeat: Duration) -> Self {
        Self { store, heartbeat }
    }
}

/// The validated queue name, recorded on the span and as seen for the metrics.
fn queue_name<'a>(call: &rpc::Call, queue: &'a str) -> Result<&'a str> {
    let queue = validate::name("queue", queue)?;
    record("queue", queue);
    call.metrics.seen(&call.tenant, queue);
    Ok(queue)
}

fn task_id(field: &'static str, at: usize, id: &str) -> Result<String> {
    validate::owner(field, id)
        .map(str::to_owned)
        .map_err(|err| match err {
            Error::InvalidArgument { field, reason } => {
                Error::invalid(field, format!("item {at}: {reason}"))
            }
            other => other,
        })
}

/// Every id of a `Cancel` or `Redrive`, like a task id.
fn task_ids(ids: &[String]) -> Result<()> {
    for (at, id) in ids.iter().enumerate() {
        task_id("ids", at, id)?;
    }
    Ok(())
}

fn new_task(at: usize, spec: pb::TaskSpec) -> Result<NewTask> {
    let fresh_id = spec.id.is_empty();
    let id = if fresh_id {
        new_token()
    } else {
        task_id("id", at, &spec.id)?
    };
    if spec.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::invalid(
            "payload",
            format!(
                "item {at}: {} bytes is over the limit of {MAX_PAYLOAD_BYTES}",
                spec.payload.len()
            ),
        ));
    }
    let schedule = match &spec.schedule {
        None => Schedule::Now,
        Some(pb::task_spec::Schedule::Delay(delay)) => {
            Schedule::Delay(proto_time::duration("delay", Some(delay), DELAY)?)
        }
        Some(pb::task_spec::Schedule::DueAt(at)) => {
            // Before 1970 is as past as 1970 (READY at once).
            Schedule::At(proto_time::timestamp("due_at", at)?.max(0))
        }
    };
    let replace = match pb::DuplicatePolicy::try_from(spec.on_duplicate) {
        Ok(pb::DuplicatePolicy::Replace) => true,
        Ok(_) => false,
        Err(_) => {
            return Err(Error::invalid(
                "on_duplicate",
                format!("unknown value {}", spec.on_duplicate),
            ))
        }
    };
    Ok(NewTask {
        id,
        payload: spec.payload,
        schedule,
        replace,
        max_attempts: if spec.max_attempts == 0 {
            DEFAULT_MAX_ATTEMPTS
        } else {
            spec.max_attempts
        },
        dedupe_window: proto_time::duration("dedupe_window", spec.dedupe_window.as_ref(), DELAY)?,
        fresh_id,
        group: flow::group(&spec.group)?.to_owned(),
        priority: flow::priority(spec.priority)?,
    })
}

fn state_message(state: TaskState) -> pb::TaskState {
    match state {
        TaskState::Delayed => pb::TaskState::Delayed,
        TaskState::Ready => pb::TaskState::Ready,
        TaskState::InFlight => pb::TaskState::InFlight,
        TaskState::Dead => pb::TaskState::Dead,
        TaskState::Completed => pb::TaskState::Completed,
        TaskState::Cancelled => pb::TaskState::Cancelled,
    }
}

fn attempt_message(attempt: Attempt) -> pb::Attempt {
    let outcome = match attempt.outcome {
        Outcome::Acked => pb::AttemptOutcome::Acked,
        Outcome::Nacked => pb::AttemptOutcome::Nacked,
        Outcome::Expired => pb::AttemptOutcome::Expired,
        Outcome::GaveUp => pb::AttemptOutcome::GaveUp,
        Outcome::Cancelled => pb::AttemptOutcome::Cancelled,
    };
    pb::Attempt {
        number: attempt.number,
        worker_id: attempt.worker_id,
        leased_at: (attempt.leased_at_ms > 0).then(|| timestamp_from_ms(attempt.leased_at_ms)),
        ended_at: Some(timestamp_from_ms(attempt.ended_at_ms)),
        outcome: outcome as i32,
        error: attempt.error,
    }
}

/// A state asked for (UNSPECIFIED: READY).
fn state_filter(state: i32) -> Result<TaskState> {
    Ok(match pb::TaskState::try_from(state) {
        Ok(pb::TaskState::Unspecified | pb::TaskState::Ready) => TaskState::Ready,
        Ok(pb::TaskState::Delayed) => TaskState::Delayed,
        Ok(pb::TaskState::InFlight) => TaskState::InFlight,
        Ok(pb::TaskState::Dead) => TaskState::Dead,
        Ok(pb::TaskState::Completed) => TaskState::Completed,
        Ok(pb::TaskState::Cancelled) => TaskState::Cancelled,
        Err(_) => return Err(Error::invalid("state", format!("unknown value {state}"))),
    })
}

fn task_message(task: Task) -> pb::Task {
    let state = state_message(task.state);
    pb::Task {
        id: task.id,
        payload: task.payload,
        state: state as i32,
        due_at: Some(timestamp_from_ms(task.due_at_ms)),
        enqueued_at: Some(timestamp_from_ms(task.enqueued_at_ms)),
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        receipt: task.receipt,
        lease_expires_at: (task.lease_expires_at_ms > 0)
            .then(|| timestamp_from_ms(task.lease_expires_at_ms)),
        group: task.group,
        priority: task.priority,
        last_error: task.last_error,
        progress: task.progress.to_vec(),
        history: task.history.into_iter().map(attempt_message).collect(),
        result: task.result.to_vec(),
    }
}

/// The longest `Wait` (and `Enqueue.wait`).
const WAIT_TIMEOUT: DurationRule = DurationRule {
    default: Duration::ZERO,
    min: Duration::ZERO,
    max: MAX_WAIT,
};

#[tonic::async_trait]
impl QueueService for QueueApi {
    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        rpc::unary(
            Method::Enqueue,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                if r.tasks.is_empty() || r.tasks.len() > MAX_BATCH {
                    return Err(Error::invalid(
                        "tasks",
                        format!("must hold 1–{MAX_BATCH} tasks, got {}", r.tasks.len()),
                    ));
                }
                record_count(r.tasks.len());
                let wait = r
                    .wait
                    .as_ref()
                    .map(|wait| proto_time::duration("wait", Some(wait), WAIT_TIMEOUT))
                    .transpose()?;
                if wait.is_some() && r.tasks.len() != 1 {
                    return Err(Error::invalid(
                        "wait",
                        format!("needs exactly one task, got {}", r.tasks.len()),
                    ));
                }
                let tasks = r
                    .tasks
                    .into_iter()
                    .enumerate()
                    .map(|(at, spec)| new_task(at, spec))
                    .collect::<Result<Vec<_>>>()?;
                let store = self.store.tenant(&call.tenant);
                // A remote call: the wait is heard before the task exists, so an end
                // right after the enqueue is not missed.
                let waiting = match wait {
                    Some(wait) => Some(store.wait_before_enqueue(queue, &tasks[0].id, wait).await?),
                    None => None,
                };
                let results = store.enqueue(queue, tasks).await?;
                let mut results: Vec<pb::EnqueueResult> = results
                    .into_iter()
                    .map(|r| pb::EnqueueResult {
                        id: r.id,
                        created: r.created,
                        replaced: r.replaced,
                        due_at: (r.due_at_ms > 0).then(|| timestamp_from_ms(r.due_at_ms)),
                        done: false,
                        task: None,
                    })
                    .collect();
                if let (Some(waiting), Some(first)) = (waiting, results.first_mut()) {
                    let waited = waiting
                        .finish(
                            &store,
                            queue,
                            &first.id,
                            first.created || first.replaced,
                            call.deadline,
                        )
                        .await?;
                    first.done = waited.done;
                    first.task = waited.task.map(task_message);
                }
                Ok(pb::EnqueueResponse { results })
            },
        )
        .await
    }

    async fn lease(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        rpc::unary(Method::Lease, Bound::Own, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            let spec = LeaseSpec {
                max_tasks: validate::count("max_tasks", r.max_tasks, 1, MAX_TASKS)?,
                visibility: proto_time::duration("visibility", r.visibility.as_ref(), VISIBILITY)?,
                auto_ack: r.auto_ack,
            };
            let wait = proto_time::duration("wait", r.wait.as_ref(), WAIT)?;
            let tasks = self
                .store
                .tenant(&call.tenant)
                .lease(queue, spec, wait, call.deadline)
                .await?;
            record_count(tasks.len());
            call.metrics
                .delivered(&call.tenant, queue, tasks.iter().map(|t| t.attempt));
            Ok(pb::LeaseResponse {
                tasks: tasks.into_iter().map(task_message).collect(),
            })
        })
        .await
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        rpc::unary(Method::Ack, Bound::Race, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            if r.receipts.len() > MAX_BATCH {
                return Err(Error::invalid(
                    "receipts",
                    format!("at most {MAX_BATCH} per call"),
                ));
            }
            for receipt in &r.receipts {
                validate::token("receipts", receipt)?;
            }
            record_count(r.receipts.len());
            let store = self.store.tenant(&call.tenant);
            if r.results.is_empty() {
                let acked = store.ack(queue, &r.receipts).await?;
                return Ok(pb::AckResponse { acked });
            }
            let mut results = Vec::with_capacity(r.results.len());
            for (receipt, result) in r.results {
                if result.len() > MAX_RESULT_BYTES {
                    return Err(Error::invalid(
                        "results",
                        format!(
                            "the result for a receipt is {} bytes, over the limit of {MAX_RESULT_BYTES}",
                            result.len()
                        ),
                    ));
                }
                if !r.receipts.contains(&receipt) {
                    return Err(Error::invalid(
                        "results",
                        "names a receipt that is not in `receipts`",
                    ));
                }
                results.push((receipt, Bytes::from(result)));
            }
            let acked = store
                .ack_with_results(queue, &r.receipts, &results)
                .await?;
            Ok(pb::AckResponse { acked })
        })
        .await
    }

    async fn nack(
        &self,
        request: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
        rpc::unary(Method::Nack, Bound::Race, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            let receipt = validate::token("receipt", &r.receipt)?;
            let delay = proto_time::duration("delay", r.delay.as_ref(), DELAY)?;
            // Never refused for its length: cut (the contract).
            let failure = Failure::new(&r.error, r.give_up);
            let nacked = self
                .store
                .tenant(&call.tenant)
                .nack(queue, receipt, delay, &failure)
                .await?;
            Ok(pb::NackResponse {
                requeued: nacked == Nacked::Requeued,
                dead: nacked == Nacked::Dead,
            })
        })
        .await
    }

    async fn extend_lease(
        &self,
        request: Request<pb::ExtendLeaseRequest>,
    ) -> Result<Response<pb::ExtendLeaseResponse>, Status> {
        rpc::unary(
            Method::ExtendLease,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                let receipt = validate::token("receipt", &r.receipt)?;
                let visibility =
                    proto_time::duration("visibility", r.visibility.as_ref(), VISIBILITY)?;
                if r.progress
                    .as_ref()
                    .is_some_and(|p| p.len() > MAX_PROGRESS_BYTES)
                {
                    return Err(Error::invalid(
                        "progress",
                        format!("must be at most {MAX_PROGRESS_BYTES} bytes"),
                    ));
                }
                let until = self
                    .store
                    .tenant(&call.tenant)
                    .extend_lease(queue, receipt, visibility, r.progress.as_deref())
                    .await?;
                Ok(pb::ExtendLeaseResponse {
                    extended: until.is_some(),
                    lease_expires_at: until.map(|(until, _)| timestamp_from_ms(until)),
                    cancelled: until.is_some_and(|(_, cancelled)| cancelled),
                })
            },
        )
        .await
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        rpc::unary(
            Method::GetTask,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                let id = task_id("id", 0, &r.id)?;
                record("task_id", &id);
                match self.store.tenant(&call.tenant).task(queue, &id).await? {
                    Some(task) => Ok(task_message(task)),
                    None => Err(Error::NotFound(format!(
                        "no task {id:?} in queue {queue:?}"
                    ))),
                }
            },
        )
        .await
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        rpc::unary(
            Method::ListTasks,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                let state = state_filter(r.state)?;
                let size = validate::count("page_size", r.page_size, 100, MAX_TASKS)?;
                let group = r.group.as_deref().map(flow::group).transpose()?;
                let cursor = TaskCursor::from_token("page_token", state, &r.page_token)?;
                let (tasks, next) = self
                    .store
                    .tenant(&call.tenant)
                    .list_tasks(queue, state, group, size, cursor.as_ref())
                    .await?;
                record_count(tasks.len());
                Ok(pb::ListTasksResponse {
                    tasks: tasks.into_iter().map(task_message).collect(),
                    next_page_token: TaskCursor::token(state, next.as_ref()),
                })
            },
        )
        .await
    }

    async fn wait(
        &self,
        request: Request<pb::WaitRequest>,
    ) -> Result<Response<pb::WaitResponse>, Status> {
        rpc::unary(Method::Wait, Bound::Own, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            let id = task_id("id", 0, &r.id)?;
            record("task_id", &id);
            let timeout = proto_time::duration("timeout", r.timeout.as_ref(), WAIT_TIMEOUT)?;
            let waited = self
                .store
                .tenant(&call.tenant)
                .wait(queue, &id, timeout, call.deadline)
                .await?;
            Ok(pb::WaitResponse {
                done: waited.done,
                task: waited.task.map(task_message),
            })
        })
        .await
    }

    async fn peek(
        &self,
        request: Request<pb::PeekRequest>,
    ) -> Result<Response<pb::PeekResponse>, Status> {
        rpc::unary(Method::Peek, Bound::Race, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            let state = state_filter(r.state)?;
            let limit = validate::count("limit", r.limit, 10, MAX_TASKS)?;
            let group = r.group.as_deref().map(flow::group).transpose()?;
            if group.is_some() && state != TaskState::Ready {
                return Err(Error::invalid(
                    "group",
                    "applies to READY tasks only (a group's delivery order)",
                ));
            }
            let tasks = self
                .store
                .tenant(&call.tenant)
                .peek(queue, state, limit, group)
                .await?;
            record_count(tasks.len());
            Ok(pb::PeekResponse {
                tasks: tasks.into_iter().map(task_message).collect(),
            })
        })
        .await
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        rpc::unary(Method::Cancel, Bound::Race, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            if r.ids.is_empty() || r.ids.len() > MAX_BATCH {
                return Err(Error::invalid(
                    "ids",
                    format!("must hold 1–{MAX_BATCH} ids"),
                ));
            }
            task_ids(&r.ids)?;
            record_count(r.ids.len());
            let cancelled = self
                .store
                .tenant(&call.tenant)
                .cancel(queue, &r.ids, r.running)
                .await?;
            Ok(pb::CancelResponse { cancelled })
        })
        .await
    }

    async fn redrive(
        &self,
        request: Request<pb::RedriveRequest>,
    ) -> Result<Response<pb::RedriveResponse>, Status> {
        rpc::unary(
            Method::Redrive,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                if r.ids.len() > MAX_BATCH {
                    return Err(Error::invalid("ids", format!("at most {MAX_BATCH} ids")));
                }
                task_ids(&r.ids)?;
                let redriven = self
                    .store
                    .tenant(&call.tenant)
                    .redrive(queue, &r.ids)
                    .await?;
                Ok(pb::RedriveResponse { redriven })
            },
        )
        .await
    }

    async fn stats(
        &self,
        request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        rpc::unary(Method::Stats, Bound::Race, request, |call, r| async move {
            let queue = queue_name(&call, &r.queue)?;
            let stats = self.store.tenant(&call.tenant).stats(queue).await?;
            Ok(pb::StatsResponse {
                ready: stats.ready,
                delayed: stats.delayed,
                in_flight: stats.in_flight,
                dead: stats.dead,
                oldest_ready_at: stats.oldest_ready_at_ms.map(timestamp_from_ms),
                next_due_at: stats.next_due_at_ms.map(timestamp_from_ms),
                config: Some(flow::config_message(stats.config)),
            })
        })
        .await
    }

    async fn configure_queue(
        &self,
        request: Request<pb::ConfigureQueueRequest>,
    ) -> Result<Response<pb::ConfigureQueueResponse>, Status> {
        rpc::unary(
            Method::ConfigureQueue,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                let change = flow::queue_change(&r)?;
                let config = self
                    .store
                    .tenant(&call.tenant)
                    .configure_queue(queue, &change)
                    .await?;
                Ok(pb::ConfigureQueueResponse {
                    config: Some(flow::config_message(config)),
                })
            },
        )
        .await
    }

    async fn configure_group(
        &self,
        request: Request<pb::ConfigureGroupRequest>,
    ) -> Result<Response<pb::ConfigureGroupResponse>, Status> {
        rpc::unary(
            Method::ConfigureGroup,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                let group = flow::group(&r.group)?;
                let weight = flow::weight(r.weight)?;
                let config = self
                    .store
                    .tenant(&call.tenant)
                    .configure_group(queue, group, r.paused, weight)
                    .await?;
                Ok(pb::ConfigureGroupResponse {
                    config: Some(flow::group_config_message(config)),
                })
            },
        )
        .await
    }

    async fn list_queues(
        &self,
        request: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        rpc::unary(
            Method::ListQueues,
            Bound::Race,
            request,
            |call, r| async move {
                let prefix = validate::optional_name("prefix", &r.prefix)?;
                let size = flow::page_size(r.page_size)?;
                let after = flow::page_after(Listing::Queues, &r.page_token)?;
                let page = self
                    .store
                    .tenant(&call.tenant)
                    .list_queues(prefix, after.as_deref(), size)
                    .await?;
                record_count(page.items.len());
                Ok(pb::ListQueuesResponse {
                    queues: page
                        .items
                        .into_iter()
                        .map(|q| pb::QueueSummary {
                            queue: q.queue,
                            ready: q.stats.ready,
                            delayed: q.stats.delayed,
                            in_flight: q.stats.in_flight,
                            dead: q.stats.dead,
                            oldest_ready_at: q.stats.oldest_ready_at_ms.map(timestamp_from_ms),
                            next_due_at: q.stats.next_due_at_ms.map(timestamp_from_ms),
                            config: Some(flow::config_message(q.stats.config)),
                        })
                        .collect(),
                    next_page_token: flow::page_token(Listing::Queues, page.after),
                })
            },
        )
        .await
    }

    async fn list_groups(
        &self,
        request: Request<pb::ListGroupsRequest>,
    ) -> Result<Response<pb::ListGroupsResponse>, Status> {
        rpc::unary(
            Method::ListGroups,
            Bound::Race,
            request,
            |call, r| async move {
                let queue = queue_name(&call, &r.queue)?;
                let size = flow::page_size(r.page_size)?;
                let after = flow::page_after(Listing::Groups, &r.page_token)?;
                let page = self
                    .store
                    .tenant(&call.tenant)
                    .list_groups(queue, after.as_deref(), size)
                    .await?;
                record_count(page.items.len());
                Ok(pb::ListGroupsResponse {
                    groups: page
                        .items
                        .into_iter()
                        .map(|g| pb::GroupSummary {
                            group: g.group,
                            ready: g.ready,
                            delayed: g.delayed,
                            in_flight: g.in_flight,
                            dead: g.dead,
                            config: Some(flow::group_config_message(g.config)),
                        })
                        .collect(),
                    next_page_token: flow::page_token(Listing::Groups, page.after),
                })
            },
        )
        .await
    }

    type SubscribeStream = ResponseStream<pb::SubscribeResponse>;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        rpc::stream(Method::Subscribe, self.heartbeat, request, |call, r| {
            let queue = queue_name(&call, &r.queue)?;
            let worker_id = validate::optional_id("worker_id", &r.worker_id)?;
            let spec = SubscribeSpec {
                max_in_flight: validate::count("max_in_flight", r.max_in_flight, 1, MAX_TASKS)?,
                visibility: proto_time::duration("visibility", r.visibility.as_ref(), VISIBILITY)?,
                worker_id: (!worker_id.is_empty()).then(|| worker_id.to_owned()),
            };
            let deliveries = self.store.tenant(&call.tenant).subscribe(queue, spec)?;
            let (metrics, tenant, queue) = (call.metrics, call.tenant, queue.to_owned());
            Ok(deliveries.map(move |pushed| {
                pushed.map(|pushed| match pushed {
                    Pushed::Task(task) => {
                        metrics.delivered(&tenant, &queue, std::iter::once(task.attempt));
                        pb::SubscribeResponse {
                            event: Some(pb::subscribe_response::Event::Task(task_message(task))),
                        }
                    }
                    Pushed::Cancelled { id, receipt } => pb::SubscribeResponse {
                        event: Some(pb::subscribe_response::Event::Cancelled(
                            pb::TaskCancelled { id, receipt },
                        )),
                    },
                })
            }))
        })
    }
}

impl rpc::Heartbeat for pb::SubscribeResponse {
    fn heartbeat() -> Self {
        pb::SubscribeResponse {
            event: Some(pb::subscribe_response::Event::Heartbeat(pb::Heartbeat {
                sent_at: Some(timestamp_from_ms(now_ms())),
            })),
        }
    }
}
