//! `QueueApi` implements the generated `QueueService`: validate and convert the request,
//! call `QueueStore` (or the `Scheduler`, for Subscribe), convert the answer.

use std::{pin::Pin, sync::Arc, time::Duration};

use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::{
    scheduler::Scheduler,
    subscribe::{SubscribeEvent, SubscribeSpec},
    LeaseSpec, Nacked, NewTask, QueueStore, Schedule, Task, TaskState, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_VISIBILITY, MAX_BATCH, MAX_DURATION, MAX_PAYLOAD_BYTES, MAX_TASKS,
};
use crate::{
    deadline,
    error::{Error, Result},
    lock::{new_token, MAX_WAIT},
    pb::{self, queue_service_server::QueueService},
    rpc::{self, record, reply, within},
    shutdown::Shutdown,
    time::{ms_from_timestamp, timestamp_from_ms},
    validate::{self, DurationRule},
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

/// The gRPC face of [`QueueStore`].
#[derive(Clone)]
pub struct QueueApi {
    store: QueueStore,
    /// Feeds the Subscribe streams.
    scheduler: Arc<Scheduler>,
    shutdown: Shutdown,
}

impl QueueApi {
    /// The service over `store`, with Subscribe streams fed by `scheduler`.
    pub fn new(store: QueueStore, scheduler: Arc<Scheduler>, shutdown: Shutdown) -> Self {
        Self {
            store,
            scheduler,
            shutdown,
        }
    }

    /// Runs the (maybe waiting) lease detached from the caller: deliveries that the
    /// caller is no longer there to receive are given back at once (they count as
    /// attempts, like any delivery that ends without an ack).
    async fn lease_detached(
        &self,
        queue: String,
        spec: LeaseSpec,
        wait: Duration,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<Task>> {
        let store = self.store.clone();
        let giver = self.store.clone();
        let name = queue.clone();
        rpc::detached(
            &self.shutdown,
            move |cancel| async move { store.lease_waiting(&queue, &spec, wait, deadline, &cancel).await },
            move |tasks: Vec<Task>| async move {
                for task in tasks.iter().filter(|task| !task.receipt.is_empty()) {
                    if let Err(err) = giver.nack(&name, &task.receipt, Duration::ZERO).await {
                        tracing::warn!(queue = name, cause = %err, "could not give back an unread delivery");
                    }
                }
            },
        )
        .await
    }
}

fn queue_name(queue: &str) -> Result<&str> {
    let queue = validate::name("queue", queue)?;
    record("queue", queue);
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
            Schedule::Delay(validate::duration("delay", Some(delay), DELAY)?)
        }
        Some(pb::task_spec::Schedule::DueAt(at)) => {
            if !(0..1_000_000_000).contains(&at.nanos) {
                return Err(Error::invalid(
                    "due_at",
                    "nanos must be from 0 to 999999999",
                ));
            }
            Schedule::At(ms_from_timestamp(at).max(0))
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
        dedupe_window: validate::duration("dedupe_window", spec.dedupe_window.as_ref(), DELAY)?,
        fresh_id,
    })
}

fn task_message(task: Task) -> pb::Task {
    let state = match task.state {
        TaskState::Delayed => pb::TaskState::Delayed,
        TaskState::Ready => pb::TaskState::Ready,
        TaskState::InFlight => pb::TaskState::InFlight,
        TaskState::Dead => pb::TaskState::Dead,
    };
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
    }
}

type SubscribeStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl QueueService for QueueApi {
    #[tracing::instrument(level = "debug", name = "Enqueue", skip_all, fields(queue, count))]
    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                if request.tasks.is_empty() || request.tasks.len() > MAX_BATCH {
                    return Err(Error::invalid(
                        "tasks",
                        format!("must hold 1–{MAX_BATCH} tasks, got {}", request.tasks.len()),
                    ));
                }
                tracing::Span::current().record("count", request.tasks.len());
                let tasks = request
                    .tasks
                    .into_iter()
                    .enumerate()
                    .map(|(at, spec)| new_task(at, spec))
                    .collect::<Result<Vec<_>>>()?;
                let results = within(deadline, self.store.enqueue(queue, &tasks)).await?;
                Ok(pb::EnqueueResponse {
                    results: results
                        .into_iter()
                        .map(|r| pb::EnqueueResult {
                            id: r.id,
                            created: r.created,
                            replaced: r.replaced,
                            due_at: (r.due_at_ms > 0).then(|| timestamp_from_ms(r.due_at_ms)),
                        })
                        .collect(),
                })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Lease", skip_all, fields(queue, count))]
    async fn lease(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?.to_owned();
                let spec = LeaseSpec {
                    max_tasks: validate::count("max_tasks", request.max_tasks, 1, MAX_TASKS)?,
                    visibility: validate::duration(
                        "visibility",
                        request.visibility.as_ref(),
                        VISIBILITY,
                    )?,
                    auto_ack: request.auto_ack,
                };
                let wait = validate::duration("wait", request.wait.as_ref(), WAIT)?;
                let tasks = self.lease_detached(queue, spec, wait, deadline).await?;
                tracing::Span::current().record("count", tasks.len());
                Ok(pb::LeaseResponse {
                    tasks: tasks.into_iter().map(task_message).collect(),
                })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Ack", skip_all, fields(queue, count))]
    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                if request.receipts.len() > MAX_BATCH {
                    return Err(Error::invalid(
                        "receipts",
                        format!("at most {MAX_BATCH} per call"),
                    ));
                }
                for receipt in &request.receipts {
                    validate::token("receipts", receipt)?;
                }
                tracing::Span::current().record("count", request.receipts.len());
                if request.receipts.is_empty() {
                    return Ok(pb::AckResponse { acked: Vec::new() });
                }
                let acked = within(deadline, self.store.ack(queue, &request.receipts)).await?;
                Ok(pb::AckResponse { acked })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Nack", skip_all, fields(queue))]
    async fn nack(
        &self,
        request: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                let receipt = validate::token("receipt", &request.receipt)?;
                let delay = validate::duration("delay", request.delay.as_ref(), DELAY)?;
                let nacked = within(deadline, self.store.nack(queue, receipt, delay)).await?;
                Ok(pb::NackResponse {
                    requeued: nacked == Nacked::Requeued,
                    dead: nacked == Nacked::Dead,
                })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "ExtendLease", skip_all, fields(queue))]
    async fn extend_lease(
        &self,
        request: Request<pb::ExtendLeaseRequest>,
    ) -> Result<Response<pb::ExtendLeaseResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                let receipt = validate::token("receipt", &request.receipt)?;
                let visibility =
                    validate::duration("visibility", request.visibility.as_ref(), VISIBILITY)?;
                let until = within(
                    deadline,
                    self.store.extend_lease(queue, receipt, visibility),
                )
                .await?;
                Ok(pb::ExtendLeaseResponse {
                    extended: until.is_some(),
                    lease_expires_at: until.map(timestamp_from_ms),
                })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Peek", skip_all, fields(queue, count))]
    async fn peek(
        &self,
        request: Request<pb::PeekRequest>,
    ) -> Result<Response<pb::PeekResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                let state = match pb::TaskState::try_from(request.state) {
                    Ok(pb::TaskState::Unspecified | pb::TaskState::Ready) => TaskState::Ready,
                    Ok(pb::TaskState::Delayed) => TaskState::Delayed,
                    Ok(pb::TaskState::InFlight) => TaskState::InFlight,
                    Ok(pb::TaskState::Dead) => TaskState::Dead,
                    Err(_) => {
                        return Err(Error::invalid(
                            "state",
                            format!("unknown value {}", request.state),
                        ))
                    }
                };
                let limit = validate::count("limit", request.limit, 10, MAX_TASKS)?;
                let tasks = within(deadline, self.store.peek(queue, state, limit)).await?;
                Ok(pb::PeekResponse {
                    tasks: tasks.into_iter().map(task_message).collect(),
                })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Cancel", skip_all, fields(queue, count))]
    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                if request.ids.is_empty() || request.ids.len() > MAX_BATCH {
                    return Err(Error::invalid(
                        "ids",
                        format!("must hold 1–{MAX_BATCH} ids"),
                    ));
                }
                for (at, id) in request.ids.iter().enumerate() {
                    task_id("ids", at, id)?;
                }
                let cancelled = within(deadline, self.store.cancel(queue, &request.ids)).await?;
                Ok(pb::CancelResponse { cancelled })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Redrive", skip_all, fields(queue))]
    async fn redrive(
        &self,
        request: Request<pb::RedriveRequest>,
    ) -> Result<Response<pb::RedriveResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                if request.ids.len() > MAX_BATCH {
                    return Err(Error::invalid("ids", format!("at most {MAX_BATCH} ids")));
                }
                for (at, id) in request.ids.iter().enumerate() {
                    task_id("ids", at, id)?;
                }
                let redriven = within(deadline, self.store.redrive(queue, &request.ids)).await?;
                Ok(pb::RedriveResponse { redriven })
            }
            .await,
        )
    }

    #[tracing::instrument(level = "debug", name = "Stats", skip_all, fields(queue))]
    async fn stats(
        &self,
        request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let queue = queue_name(&request.queue)?;
                let stats = within(deadline, self.store.stats(queue)).await?;
                Ok(pb::StatsResponse {
                    ready: stats.ready,
                    delayed: stats.delayed,
                    in_flight: stats.in_flight,
                    dead: stats.dead,
                    oldest_ready_at: stats.oldest_ready_at_ms.map(timestamp_from_ms),
                    next_due_at: stats.next_due_at_ms.map(timestamp_from_ms),
                })
            }
            .await,
        )
    }

    type SubscribeStream = SubscribeStream;

    #[tracing::instrument(level = "debug", name = "Subscribe", skip_all, fields(queue))]
    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let request = request.into_inner();
        let subscription = reply((|| {
            let queue = queue_name(&request.queue)?;
            let worker_id = validate::optional_id("worker_id", &request.worker_id)?;
            let spec = SubscribeSpec {
                max_in_flight: validate::count(
                    "max_in_flight",
                    request.max_in_flight,
                    1,
                    MAX_TASKS,
                )?,
                visibility: validate::duration(
                    "visibility",
                    request.visibility.as_ref(),
                    VISIBILITY,
                )?,
                worker_id: (!worker_id.is_empty()).then(|| worker_id.to_owned()),
            };
            self.scheduler.subscribe(queue, spec)
        })())?;
        let stream = subscription.into_inner().map(|event| {
            let event = match event.map_err(Status::from)? {
                SubscribeEvent::Task(task) => {
                    pb::subscribe_response::Event::Task(task_message(task))
                }
                SubscribeEvent::Heartbeat => {
                    pb::subscribe_response::Event::Heartbeat(pb::Heartbeat {
                        sent_at: Some(timestamp_from_ms(crate::time::now_ms())),
                    })
                }
            };
            Ok(pb::SubscribeResponse { event: Some(event) })
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
