//! Leases held through a `Hold` stream (a lock, a semaphore's permits, leadership):
//! acquired once, renewed by the server while the stream is open, re-attached by
//! token after a cut (on any replica), released on `release()` or drop, and `lost`
//! fired only when the lease is really gone.
//!
//! The subtle part lives here once: a cut stream is not a lost lease. The lease runs on
//! in Redis until its end, so the keeper re-opens `Hold` with the lease's token until a
//! replica answers (same token, same fencing token: nothing fires) or the lease's end
//! passes (then `lost` fires).

use std::{
    future::{Future, IntoFuture},
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, SystemTime},
};

use tokio::{task::JoinHandle, time::Instant};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{
    error::{is_final, Error, Result},
    retry::{call, RETRY},
    Client,
};
use crate::pb::{
    self,
    hold_response::{Acquired, Event},
    semaphore_service_hold_response as semaphore_hold,
};

/// The longest wait one Hold asks for (the server's bound); longer waits ask again.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// What is held: a lock or a semaphore's permits. Both Hold streams carry the same
/// events.
#[derive(Clone, Debug)]
enum Kind {
    Lock,
    Semaphore { limit: u32, permits: u32 },
}

/// The settings of one acquisition.
#[derive(Clone, Debug)]
struct Spec {
    kind: Kind,
    name: String,
    owner: String,
    ttl: Duration,
}

/// The events of either Hold stream.
type Events = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;

/// A duration as the proto spells it (saturating: our durations are far below its
/// limits).
pub(super) fn proto_duration(value: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(value).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    })
}

/// A proto timestamp as a `SystemTime` (the epoch for none).
pub(super) fn system_time(at: Option<&prost_types::Timestamp>) -> SystemTime {
    at.and_then(|at| SystemTime::try_from(*at).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

impl Spec {
    /// Opens the Hold stream, re-attaching with `token` unless it is empty.
    async fn open(&self, client: &Client, token: &str, wait: Duration) -> Result<Events, Status> {
        let (ttl, wait) = (Some(proto_duration(self.ttl)), Some(proto_duration(wait)));
        Ok(match self.kind {
            Kind::Lock => {
                let request = pb::HoldRequest {
                    name: self.name.clone(),
                    owner: self.owner.clone(),
                    ttl,
                    wait,
                    token: token.to_owned(),
                };
                let stream = client.raw_locks().hold(request).await?.into_inner();
                Box::pin(stream.filter_map(|message| message.map(|m| m.event).transpose()))
            }
            Kind::Semaphore { limit, permits } => {
                let request = pb::SemaphoreServiceHoldRequest {
                    name: self.name.clone(),
                    owner: self.owner.clone(),
                    limit,
                    permits,
                    ttl,
                    wait,
                    token: token.to_owned(),
                };
                let stream = client.raw_semaphores().hold(request).await?.into_inner();
                Box::pin(stream.filter_map(|message| {
                    message.map(|m| m.event.map(semaphore_event)).transpose()
                }))
            }
        })
    }

    /// Release by token; true when this call freed it.
    async fn release(&self, client: &Client, token: &str) -> Result<bool> {
        let name = self.name.clone();
        Ok(match self.kind {
            Kind::Lock => {
                let request = pb::ReleaseRequest {
                    name,
                    token: token.to_owned(),
                };
                call!(None, client.raw_locks(), release, request)
                    .await?
                    .released
            }
            Kind::Semaphore { .. } => {
                let request = pb::SemaphoreServiceReleaseRequest {
                    name,
                    token: token.to_owned(),
                };
                call!(None, client.raw_semaphores(), release, request)
                    .await?
                    .released
            }
        })
    }

    /// Opens Hold streams until one acquires (its stream and `Acquired` event), `wait`
    /// runs out (NotAcquired; `None` waits without end), or a final error.
    async fn acquire(&self, client: &Client, wait: Option<Duration>) -> Result<(Events, Acquired)> {
        let end = wait.map(|wait| Instant::now() + wait);
        let over = || end.is_some_and(|end| Instant::now() >= end);
        let mut attempt = 0;
        loop {
            let left = end.map_or(MAX_WAIT, |end| {
                end.saturating_duration_since(Instant::now())
            });
            let first = match self.open(client, "", left.min(MAX_WAIT)).await {
                Ok(mut events) => first_event(&mut events).await.map(|first| (events, first)),
                Err(status) => Err(status),
            };
            match first {
                Ok((events, Some(Event::Acquired(acquired)))) => return Ok((events, acquired)),
                Ok((_, Some(Event::Lost(_)))) if over() => {
                    return Err(Error::NotAcquired {
                        name: self.name.clone(),
                    })
                }
                Err(status) if is_final(status.code()) || over() => return Err(status.into()),
                // Lost for another reason than the wait running out, a stream that
                // ended early (a replica going away) or a cut: ask again after a pause.
                _ => {}
            }
            attempt += 1;
            let mut pause = RETRY.delay(attempt);
            if let Some(end) = end {
                pause = pause.min(end.saturating_duration_since(Instant::now()));
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// A semaphore Hold event as the lock's (the same messages).
fn semaphore_event(event: semaphore_hold::Event) -> Event {
    match event {
        semaphore_hold::Event::Acquired(acquired) => Event::Acquired(acquired),
        semaphore_hold::Event::Renewed(renewed) => Event::Renewed(renewed),
        semaphore_hold::Event::Lost(lost) => Event::Lost(lost),
        semaphore_hold::Event::Heartbeat(beat) => Event::Heartbeat(beat),
    }
}

/// The stream's first `Acquired` or `Lost` event (heartbeats skipped); `None` when it
/// ended without either.
async fn first_event(events: &mut Events) -> Result<Option<Event>, Status> {
    while let Some(event) = events.next().await.transpose()? {
        if matches!(event, Event::Acquired(_) | Event::Lost(_)) {
            return Ok(Some(event));
        }
    }
    Ok(None)
}

/// `client.lock(name, ttl)`: set `.wait` and `.owner`, then `.await` the [`Lease`].
#[must_use = "a LockCall does nothing until awaited"]
pub struct LockCall {
    client: Client,
    spec: Spec,
    wait: Option<Duration>,
}

impl LockCall {
    pub(super) fn new(client: Client, name: String, ttl: Duration) -> Self {
        LockCall {
            client,
            spec: Spec {
                kind: Kind::Lock,
                name,
                owner: default_owner(),
                ttl,
            },
            wait: None,
        }
    }

    /// How long to wait for a held lock before [`Error::NotAcquired`] (zero: try once).
    /// Without it, waits until acquired.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Who holds it, as Describe shows (default: host:pid).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.spec.owner = owner.into();
        self
    }
}

impl IntoFuture for LockCall {
    type Output = Result<Lease>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(Lease::acquire(self.client, self.spec, self.wait))
    }
}

/// `client.semaphore(name, limit, ttl)`: set `.permits`, `.wait` and `.owner`, then
/// `.await` the [`Permit`].
#[must_use = "a SemaphoreCall does nothing until awaited"]
pub struct SemaphoreCall(LockCall);

impl SemaphoreCall {
    pub(super) fn new(client: Client, name: String, limit: u32, ttl: Duration) -> Self {
        let mut call = LockCall::new(client, name, ttl);
        call.spec.kind = Kind::Semaphore { limit, permits: 1 };
        SemaphoreCall(call)
    }

    /// How many permits to take (default 1).
    pub fn permits(mut self, count: u32) -> Self {
        if let Kind::Semaphore { permits, .. } = &mut self.0.spec.kind {
            *permits = count;
        }
        self
    }

    /// How long to wait in line before [`Error::NotAcquired`] (zero: try once).
    pub fn wait(self, wait: Duration) -> Self {
        SemaphoreCall(self.0.wait(wait))
    }

    /// Who holds the permits, as Describe shows (default: host:pid).
    pub fn owner(self, owner: impl Into<String>) -> Self {
        SemaphoreCall(self.0.owner(owner))
    }
}

impl IntoFuture for SemaphoreCall {
    type Output = Result<Permit>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Permit>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        self.0.into_future()
    }
}

/// Who holds a lease when no owner is given: host:pid.
pub fn default_owner() -> String {
    format!("{}:{}", hostname(), std::process::id())
}

pub use crate::token::hostname;

/// Held permits of a semaphore: a [`Lease`] on `SemaphoreService.Hold`.
pub type Permit = Lease;

/// A held lease. It is renewed while held; [`lost`](Self::lost) fires when it is gone
/// (expired while no replica could be reached, taken over after expiry, released by
/// `ReleaseAll`), never for a re-attach that kept it. Released by
/// [`release`](Self::release), or in the background when dropped.
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    /// Keeps the stream, renews nothing itself (the server renews while it is open),
    /// re-attaches after a cut; aborted on release.
    keeper: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    client: Client,
    spec: Spec,
    token: String,
    fencing_token: u64,
    /// Fired once the lease is gone.
    lost: CancellationToken,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The end of the lease as the server last said.
    expires_at: SystemTime,
    /// The same end on this process' monotonic clock (at most a ttl from the last
    /// word), past which a lease that could not be re-attached is lost.
    ends: Instant,
    lost_reason: Option<String>,
    released: bool,
}

impl Lease {
    async fn acquire(client: Client, spec: Spec, wait: Option<Duration>) -> Result<Lease> {
        let (events, acquired) = spec.acquire(&client, wait).await?;
        let shared = Arc::new(Shared {
            client,
            token: acquired.token.clone(),
            fencing_token: acquired.fencing_token,
            lost: CancellationToken::new(),
            state: Mutex::new(State {
                expires_at: SystemTime::UNIX_EPOCH,
                ends: Instant::now(),
                lost_reason: None,
                released: false,
            }),
            spec,
        });
        shared.renewed(acquired.expires_at.as_ref());
        let keeper = tokio::spawn(shared.clone().keep(events));
        Ok(Lease { shared, keeper })
    }

    /// The lock or semaphore.
    pub fn name(&self) -> &str {
        &self.shared.spec.name
    }

    /// Who holds it.
    pub fn owner(&self) -> &str {
        &self.shared.spec.owner
    }

    /// The owner token (what re-attaches and releases).
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The fencing token: larger than every earlier holder's.
    pub fn fencing_token(&self) -> u64 {
        self.shared.fencing_token
    }

    /// When the lease ends unless renewed, as the server last said.
    pub fn expires_at(&self) -> SystemTime {
        self.shared.state().expires_at
    }

    /// Fired when the lease is gone; `.cancelled().await` to wait for it, or hand a
    /// clone to the work it guards.
    pub fn lost(&self) -> CancellationToken {
        self.shared.lost.clone()
    }

    /// Why it was lost, once it is.
    pub fn lost_reason(&self) -> Option<String> {
        self.shared.state().lost_reason.clone()
    }

    /// [`Error::LeaseLost`] if the lease is gone.
    pub fn check(&self) -> Result<()> {
        match self.lost_reason() {
            Some(reason) => Err(Error::LeaseLost {
                name: self.name().to_owned(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// Frees the lease (only this holder's); true when this call freed it. Released
    /// before the stream closes: closing it frees the lease too, and a close that won
    /// the race would make the Release answer false.
    pub async fn release(&self) -> Result<bool> {
        let lost = {
            let mut state = self.shared.state();
            if state.released {
                return Ok(false);
            }
            state.released = true;
            state.lost_reason.is_some()
        };
        let freed = if lost {
            Ok(false)
        } else {
            self.shared
                .spec
                .release(&self.shared.client, &self.shared.token)
                .await
        };
        self.keeper.abort();
        freed
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let released = std::mem::replace(&mut self.shared.state().released, true);
        if !released && self.shared.state().lost_reason.is_none() {
            // Closing the stream frees it too, but the close may not reach the server
            // before a process exits; a Release on the runtime, if there is one.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let shared = self.shared.clone();
                runtime.spawn(async move {
                    let _ = shared.spec.release(&shared.client, &shared.token).await;
                });
            }
        }
        self.keeper.abort();
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it cannot leave the state half-changed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn renewed(&self, expires_at: Option<&prost_types::Timestamp>) {
        let expires_at = system_time(expires_at);
        let left = expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .min(self.spec.ttl);
        let mut state = self.state();
        state.expires_at = expires_at;
        state.ends = Instant::now() + left;
    }

    fn lose(&self, reason: String) {
        {
            let mut state = self.state();
            if state.released || state.lost_reason.is_some() {
                return;
            }
            tracing::warn!(lock = self.spec.name, reason, "lease lost");
            state.lost_reason = Some(reason);
        }
        self.lost.cancel();
    }

    /// Reads the stream until the lease is lost, re-attaching after each cut.
    async fn keep(self: Arc<Self>, mut events: Events) {
        loop {
            match events.next().await {
                Some(Ok(Event::Renewed(renewed))) => self.renewed(renewed.expires_at.as_ref()),
                Some(Ok(Event::Acquired(acquired))) => self.renewed(acquired.expires_at.as_ref()),
                Some(Ok(Event::Lost(lost))) => return self.lose(lost.reason),
                Some(Ok(Event::Heartbeat(_))) => {}
                Some(Err(status)) if is_final(status.code()) => {
                    return self.lose(Error::from(status).to_string())
                }
                // A cut (a replica's shutdown, a GOAWAY, the network) or a clean end:
                // the lease lasts until its end; take it over on a new stream.
                Some(Err(_)) | None => match self.reattach().await {
                    Some(again) => events = again,
                    None => return,
                },
            }
        }
    }

    /// A new stream holding the same lease, or `None` (lost) once its end passed.
    async fn reattach(&self) -> Option<Events> {
        let mut attempt = 0;
        loop {
            let left = self.state().ends.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.lose("the lease ran out while no replica answered".into());
                return None;
            }
            attempt += 1;
            let opened = match self
                .spec
                .open(&self.client, &self.token, Duration::ZERO)
                .await
            {
                Ok(mut events) => first_event(&mut events).await.map(|first| (events, first)),
                Err(status) => Err(status),
            };
            match opened {
                Ok((events, Some(Event::Acquired(acquired)))) => {
                    self.renewed(acquired.expires_at.as_ref());
                    tracing::info!(lock = self.spec.name, "hold re-attached");
                    return Some(events);
                }
                Ok((_, Some(Event::Lost(lost)))) => {
                    self.lose(lost.reason);
                    return None;
                }
                Err(status) if is_final(status.code()) => {
                    self.lose(Error::from(status).to_string());
                    return None;
                }
                _ => tokio::time::sleep(RETRY.delay(attempt).min(left)).await,
            }
        }
    }
}
