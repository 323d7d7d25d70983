//! The Rust client library (`../shared/design/SDK.md`): the generated stubs of
//! `proto/turnstile/v1` wrapped so that the subtle parts of the protocol live here once
//! — Hold re-attach by token, retry-safe ids, lease renewal, loss signalling, the
//! worker's acks, extensions and drain. `turnstile lock`, `semaphore`, `work` and
//! `watch` are its first users. It never imports the server's modules (only the
//! foundations `pb`, `method`, `token`, `time`), so it could move to a crate of its own.
//!
//! ```no_run
//! # async fn demo() -> turnstile::client::Result<()> {
//! use std::time::Duration;
//! let client = turnstile::client::Client::from_env()?;
//! let lease = client.lock("reports", Duration::from_secs(15)).await?;
//! // … work while `lease.lost()` has not fired …
//! lease.release().await?;
//! # Ok(()) }
//! ```

mod connect;
mod election;
mod error;
mod lease;
mod queue;

mod retry;
mod schedules;
mod worker;

use std::time::Duration;

pub use connect::{Authed, Options, DEFAULT_SERVER};
pub use election::{Leadership, LockState};
pub use error::{Error, Result};
pub use lease::{default_owner, hostname, Lease, LockCall, Permit, SemaphoreCall};
pub use queue::{Enqueue, Enqueued, Queue, TaskState};
pub use retry::{Backoff, DEFAULT_DEADLINE};
pub use schedules::{Schedule, Schedules};
pub use worker::{
    default_worker_id, Handled, Handler, Hooks, Json, Task, TaskError, TaskResult, Worker,
    ACK_BATCH, MAX_RESULT_BYTES,
};

use crate::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient,
    schedule_service_client::ScheduleServiceClient,
    semaphore_service_client::SemaphoreServiceClient,
};

/// One channel to the server (or to several replicas), shared by every call; cheap to
/// clone. Dropping the last clone closes it.
#[derive(Clone, Debug)]
pub struct Client {
    locks: LockServiceClient<Authed>,
    queues: QueueServiceClient<Authed>,
    schedules: ScheduleServiceClient<Authed>,
    semaphores: SemaphoreServiceClient<Authed>,
}

impl Client {
    /// A client configured by `TURNSTILE_SERVER` (default `http://127.0.0.1:50051`),
    /// `TURNSTILE_TOKEN` and `TURNSTILE_CA_CERT`. The connection is made on the first
    /// call (and again after it breaks).
    pub fn from_env() -> Result<Self> {
        Self::new(Options::from_env())
    }

    /// A client with these settings (see [`Options`]).
    pub fn new(options: Options) -> Result<Self> {
        let (channel, bearer) = options.channel()?;
        Ok(Client {
            locks: LockServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            queues: QueueServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            schedules: ScheduleServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            semaphores: SemaphoreServiceClient::with_interceptor(channel, bearer),
        })
    }

    /// The raw `LockService` stub on this client's channel and token.
    pub fn raw_locks(&self) -> LockServiceClient<Authed> {
        self.locks.clone()
    }

    /// The raw `QueueService` stub.
    pub fn raw_queues(&self) -> QueueServiceClient<Authed> {
        self.queues.clone()
    }

    /// The raw `ScheduleService` stub.
    pub fn raw_schedules(&self) -> ScheduleServiceClient<Authed> {
        self.schedules.clone()
    }

    /// The raw `SemaphoreService` stub.
    pub fn raw_semaphores(&self) -> SemaphoreServiceClient<Authed> {
        self.semaphores.clone()
    }

    /// Takes the lock `name` and holds it (a `Hold` stream) until the [`Lease`] is
    /// released or dropped; `.wait(d)` to wait for a held one (else
    /// [`Error::NotAcquired`] at once), `.owner(o)` to name the holder.
    pub fn lock(&self, name: impl Into<String>, ttl: Duration) -> LockCall {
        LockCall::new(self.clone(), name.into(), ttl)
    }

    /// One attempt at the lock: the lease, or `None` when it is held.
    pub async fn try_lock(&self, name: impl Into<String>, ttl: Duration) -> Result<Option<Lease>> {
        match self.lock(name, ttl).await {
            Ok(lease) => Ok(Some(lease)),
            Err(Error::NotAcquired { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Takes `permits` of the semaphore `name` (at most `limit` held at once) and holds
    /// them until the [`Permit`] is released or dropped; `.permits(n)`, `.wait(d)`,
    /// `.owner(o)` as for [`lock`](Self::lock).
    pub fn semaphore(&self, name: impl Into<String>, limit: u32, ttl: Duration) -> SemaphoreCall {
        SemaphoreCall::new(self.clone(), name.into(), limit, ttl)
    }

    /// The queue `name`.
    pub fn queue(&self, name: impl Into<String>) -> Queue {
        Queue::new(self.clone(), name.into())
    }

    /// The schedules.
    pub fn schedules(&self) -> Schedules {
        Schedules::new(self.clone())
    }

    /// A worker running `handler` on the tasks of `queue` (see [`Worker`]).
    pub fn worker(&self, queue: impl Into<String>, handler: impl Handler) -> Worker {
        Worker::new(self.clone(), queue.into(), handler)
    }
}
