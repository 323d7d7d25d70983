//! A queue's calls, typed: enqueue (ids filled before the first try, so a retry
//! through UNAVAILABLE never enqueues twice), a task's story (`get`, `wait`, `call`),
//! stats, peek, cancel, redrive, pause, resume, configure.

use std::time::{Duration, SystemTime};

use prost::bytes::Bytes;

use super::{
    error::{Error, Result},
    lease::{proto_duration, system_time},
    retry::call,
    Client,
};
use crate::{pb, token::new_token};

/// How much longer than a `Wait`'s own timeout its call may take: the server answers
/// `done: false` at the timeout, and the answer must not be cut by the call's deadline.
const WAIT_MARGIN: Duration = Duration::from_secs(5);

pub use crate::pb::TaskState;

/// One task to enqueue: its payload and settings. Build it with [`Enqueue::new`] (or
/// from bytes or text) and the setters.
#[derive(Clone, Debug, Default)]
pub struct Enqueue {
    spec: pb::TaskSpec,
}

impl Enqueue {
    /// A task carrying `payload`, due now, with a fresh id.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Enqueue {
            spec: pb::TaskSpec {
                payload: payload.into(),
                ..pb::TaskSpec::default()
            },
        }
    }

    /// A task carrying `value` as JSON.
    pub fn json(value: &impl serde::Serialize) -> Result<Self> {
        serde_json::to_vec(value)
            .map(Enqueue::new)
            .map_err(|err| super::Error::InvalidArgument(format!("payload: {err}")))
    }

    /// Its id (default: a random one, chosen before the first try).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.spec.id = id.into();
        self
    }

    /// Due this long from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.spec.schedule = Some(pb::task_spec::Schedule::Delay(proto_duration(delay)));
        self
    }

    /// Due at this instant (a past one: at once).
    pub fn at(mut self, at: SystemTime) -> Self {
        self.spec.schedule = Some(pb::task_spec::Schedule::DueAt(at.into()));
        self
    }

    /// Its group (fairness, per-group caps and order).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.spec.group = group.into();
        self
    }

    /// Its priority (higher first among due tasks).
    pub fn priority(mut self, priority: u32) -> Self {
        self.spec.priority = priority;
        self
    }

    /// Deliveries before it goes DEAD (default: the server's, 25).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.spec.max_attempts = attempts;
        self
    }

    /// How long its id stays reserved after it is acked or cancelled.
    pub fn dedupe_window(mut self, window: Duration) -> Self {
        self.spec.dedupe_window = Some(proto_duration(window));
        self
    }

    /// Replace a waiting task with the same id instead of keeping it.
    pub fn replace(mut self) -> Self {
        self.spec.on_duplicate = pb::DuplicatePolicy::Replace as i32;
        self
    }
}

impl From<Vec<u8>> for Enqueue {
    fn from(payload: Vec<u8>) -> Self {
        Enqueue::new(payload)
    }
}

impl From<&[u8]> for Enqueue {
    fn from(payload: &[u8]) -> Self {
        Enqueue::new(Bytes::copy_from_slice(payload))
    }
}

impl From<&str> for Enqueue {
    fn from(payload: &str) -> Self {
        Enqueue::new(Bytes::copy_from_slice(payload.as_bytes()))
    }
}

impl From<String> for Enqueue {
    fn from(payload: String) -> Self {
        Enqueue::new(payload)
    }
}

/// What an enqueue did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The task's id (the one given, or the one chosen).
    pub id: String,
    /// False when the id was already there (kept, or replaced: see `replaced`).
    pub created: bool,
    /// True when a waiting task with this id was replaced.
    pub replaced: bool,
    /// When it is due.
    pub due_at: SystemTime,
}

/// A queue of the client's tenant; cheap to clone.
#[derive(Clone, Debug)]
pub struct Queue {
    client: Client,
    name: String,
}

impl Queue {
    pub(super) fn new(client: Client, name: String) -> Self {
        Queue { client, name }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Enqueues one task: `queue.enqueue("text")`, or an [`Enqueue`] with settings.
    pub async fn enqueue(&self, task: impl Into<Enqueue>) -> Result<Enqueued> {
        let mut results = self.enqueue_many([task.into()]).await?;
        Ok(results.remove(0))
    }

    /// Enqueues tasks in one call (all or none), each answer in order.
    pub async fn enqueue_many(
        &self,
        tasks: impl IntoIterator<Item = Enqueue>,
    ) -> Result<Vec<Enqueued>> {
        let tasks: Vec<pb::TaskSpec> = tasks
            .into_iter()
            .map(|mut task| {
                if task.spec.id.is_empty() {
                    task.spec.id = new_token();
                }
                task.spec
            })
            .collect();
        let request = pb::EnqueueRequest {
            queue: self.name.clone(),
            tasks,
            wait: None,
        };
        let reply = call!(None, self.client.raw_queues(), enqueue, request).await?;
        Ok(reply
            .results
            .into_iter()
            .map(|result| Enqueued {
                due_at: system_time(result.due_at.as_ref()),
                id: result.id,
                created: result.created,
                replaced: result.replaced,
            })
            .collect())
    }

    /// The task `id` in whatever state, with its delivery history, last error,
    /// progress and (a kept COMPLETED task) result; `Error::NotFound` when the queue does
    /// not hold it.
    pub async fn get(&self, id: &str) -> Result<pb::Task> {
        let request = pb::GetTaskRequest {
            queue: self.name.clone(),
            id: id.to_owned(),
        };
        call!(None, self.client.raw_queues(), get_task, request).await
    }

    /// Waits up to `timeout` (at most 1 h) for task `id` to be done (COMPLETED, DEAD or
    /// CANCELLED): the task as it ended, with its result and history, or `None` when
    /// it was not done in time.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Option<pb::Task>> {
        let request = pb::WaitRequest {
            queue: self.name.clone(),
            id: id.to_owned(),
            timeout: Some(proto_duration(timeout)),
        };
        let reply = call!(
            Some(timeout + WAIT_MARGIN),
            self.client.raw_queues(),
            wait,
            request
        )
        .await?;
        Ok(reply.task.filter(|_| reply.done))
    }

    /// A remote call through the queue: enqueues `task` and waits up to `timeout` (at
    /// most 1 h) for a worker's result. Its id is filled before the first try, so a
    /// retried call joins the task its first try made. A task that went DEAD or was
    /// cancelled is [`Error::TaskFailed`] with its last error; one not done in time,
    /// [`Error::DeadlineExceeded`].
    pub async fn call(&self, task: impl Into<Enqueue>, timeout: Duration) -> Result<Bytes> {
        let mut task = task.into();
        if task.spec.id.is_empty() {
            task.spec.id = new_token();
        }
        let request = pb::EnqueueRequest {
            queue: self.name.clone(),
            tasks: vec![task.spec],
            wait: Some(proto_duration(timeout)),
        };
        let reply = call!(
            Some(timeout + WAIT_MARGIN),
            self.client.raw_queues(),
            enqueue,
            request
        )
        .await?;
        let result = reply.results.into_iter().next().unwrap_or_default();
        match result.task {
            Some(task) if result.done && task.state() == pb::TaskState::Completed => {
                Ok(Bytes::from(task.result))
            }
            Some(task) if result.done => Err(Error::TaskFailed {
                state: task
                    .state()
                    .as_str_name()
                    .trim_start_matches("TASK_STATE_")
                    .to_owned(),
                id: task.id,
                last_error: task.last_error,
            }),
            _ => Err(Error::DeadlineExceeded(format!(
                "task {} not done within {timeout:?}",
                result.id
            ))),
        }
    }

    /// How many tasks are in each state, and the oldest ready and next due.
    pub async fn stats(&self) -> Result<pb::StatsResponse> {
        let request = pb::StatsRequest {
            queue: self.name.clone(),
        };
        call!(None, self.client.raw_queues(), stats, request).await
    }

    /// Up to `limit` tasks in `state`, without leasing them.
    pub async fn peek(&self, state: TaskState, limit: u32) -> Result<Vec<pb::Task>> {
        let request = pb::PeekRequest {
            queue: self.name.clone(),
            state: state as i32,
            limit,
            group: None,
        };
        Ok(call!(None, self.client.raw_queues(), peek, request)
            .await?
            .tasks)
    }

    /// Cancels these tasks (not ones in flight); the ids that were cancelled.
    pub async fn cancel<S: Into<String>>(
        &self,
        ids: impl IntoIterator<Item = S>,
    ) -> Result<Vec<String>> {
        self.cancel_request(ids, false).await
    }

    /// Cancels these tasks, those in flight too: a running task's worker is told (its
    /// handler's cancellation fires), and its delivery ends it as CANCELLED; the ids
    /// cancelled or marked.
    pub async fn cancel_running<S: Into<String>>(
        &self,
        ids: impl IntoIterator<Item = S>,
    ) -> Result<Vec<String>> {
        self.cancel_request(ids, true).await
    }

    async fn cancel_request<S: Into<String>>(
        &self,
        ids: impl IntoIterator<Item = S>,
        running: bool,
    ) -> Result<Vec<String>> {
        let request = pb::CancelRequest {
            queue: self.name.clone(),
            ids: ids.into_iter().map(Into::into).collect(),
            running,
        };
        Ok(call!(None, self.client.raw_queues(), cancel, request)
            .await?
            .cancelled)
    }

    /// Makes DEAD tasks READY again: these ids, or every one when `ids` is empty; how
    /// many.
    pub async fn redrive<S: Into<String>>(&self, ids: impl IntoIterator<Item = S>) -> Result<u64> {
        let request = pb::RedriveRequest {
            queue: self.name.clone(),
            ids: ids.into_iter().map(Into::into).collect(),
        };
        Ok(call!(None, self.client.raw_queues(), redrive, request)
            .await?
            .redriven)
    }

    /// Pauses the queue (`None`) or one group of it.
    pub async fn pause(&self, group: Option<&str>) -> Result<()> {
        self.set_paused(group, true).await
    }

    /// Resumes the queue (`None`) or one group of it.
    pub async fn resume(&self, group: Option<&str>) -> Result<()> {
        self.set_paused(group, false).await
    }

    async fn set_paused(&self, group: Option<&str>, paused: bool) -> Result<()> {
        match group {
            None => {
                self.configure(pb::ConfigureQueueRequest {
                    paused: Some(paused),
                    ..Default::default()
                })
                .await?;
            }
            Some(group) => {
                let request = pb::ConfigureGroupRequest {
                    queue: self.name.clone(),
                    group: group.to_owned(),
                    paused: Some(paused),
                    weight: None,
                };
                call!(None, self.client.raw_queues(), configure_group, request).await?;
            }
        }
        Ok(())
    }

    /// Changes the fields of `change` that are set (its `queue` is this queue's); the
    /// config as now stored.
    pub async fn configure(&self, change: pb::ConfigureQueueRequest) -> Result<pb::QueueConfig> {
        let request = pb::ConfigureQueueRequest {
            queue: self.name.clone(),
            ..change
        };
        Ok(
            call!(None, self.client.raw_queues(), configure_queue, request)
                .await?
                .config
                .unwrap_or_default(),
        )
    }
}
