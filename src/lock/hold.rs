//! The `Hold` stream's engine, for a lock or a semaphore's permits (anything
//! [`Holdable`]): acquire (or re-attach to a lease by its token), then
//! renew the lease every ttl/3 while the stream is open. The lock is released at once
//! when the client cancels; a stream that ends because the server shuts down or its
//! connection retires (`--max-connection-age`) keeps the lease until its TTL, so that
//! the client can re-attach by token on any replica. A lease that cannot be kept ends
//! the stream with `Lost`. Domain events only: heartbeats are added by `rpc::stream`,
//! and its adapter (`grpc/lock.rs`) converts.
//!
//! Each stream renews and releases at its lease's attach generation (see
//! `lua/include/lease.lua`): a re-attach moves the lease to the next one, so the stream it
//! replaced, whose cut connection the server may notice only later, can neither renew
//! nor release it.

use std::{future::Future, time::Duration};

use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use super::{AcquireSpec, Attempt, Lease, LockStore, Renewal, Stop, Won};
use crate::{
    error::{Error, Result},
    limits::Limits,
    shutdown::Shutdown,
    time::until_ms,
};

/// What a Hold stream can hold: a store whose leases are taken, renewed at an attach
/// generation and released the way locks' are (`lua/include/lease.lua`).
pub trait Holdable: Clone + Send + Sync + 'static {
    /// What a caller asks for (name, owner, ttl, wait, ...).
    type Spec: Send + Sync + 'static;
    /// The name held.
    fn name(spec: &Self::Spec) -> &str;
    /// The lease length.
    fn ttl(spec: &Self::Spec) -> Duration;
    /// The server's shutdown handle.
    fn shutdown(&self) -> &Shutdown;
    /// The configured limits (a stream holds one of `--max-streams`).
    fn limits(&self) -> &Limits;
    /// Waits as the unary Acquire does: a lease won, `None` if not granted in time.
    fn take(
        &self,
        spec: &Self::Spec,
        stop: &Stop,
    ) -> impl Future<Output = Result<Option<Won>>> + Send;
    /// A renewal by the stream at `generation`, or with `take_over` a re-attach.
    fn renew(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        generation: Option<u64>,
        take_over: bool,
    ) -> impl Future<Output = Result<Renewal>> + Send;
    /// Releases the lease `token` holds at `generation`.
    fn release_at(
        &self,
        name: &str,
        token: &str,
        generation: Option<u64>,
    ) -> impl Future<Output = Result<bool>> + Send;
}

impl Holdable for LockStore {
    type Spec = AcquireSpec;

    fn name(spec: &AcquireSpec) -> &str {
        &spec.name
    }

    fn ttl(spec: &AcquireSpec) -> Duration {
        spec.ttl
    }

    fn shutdown(&self) -> &Shutdown {
        LockStore::shutdown(self)
    }

    fn limits(&self) -> &Limits {
        LockStore::limits(self)
    }

    async fn take(&self, spec: &AcquireSpec, stop: &Stop) -> Result<Option<Won>> {
        Ok(match self.wait_for(spec, stop).await? {
            Attempt::Won(won) => Some(won),
            Attempt::Held(_) => None,
        })
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        generation: Option<u64>,
        take_over: bool,
    ) -> Result<Renewal> {
        LockStore::renew(self, name, token, ttl, generation, take_over).await
    }

    async fn release_at(&self, name: &str, token: &str, generation: Option<u64>) -> Result<bool> {
        LockStore::release_at(self, name, token, generation).await
    }
}

/// One event of a Hold stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldEvent {
    /// The lock was taken (or re-attached to).
    Acquired(Lease),
    /// The lease was renewed until this instant (Unix ms).
    Renewed(i64),
    /// Not (or no longer) held; the stream ends after it.
    Lost(&'static str),
}

/// Sends the events of one Hold stream.
pub type HoldSender = mpsc::Sender<Result<HoldEvent, Error>>;

/// What one Hold stream asks for.
#[derive(Clone, Debug)]
pub struct HoldSpec<S = AcquireSpec> {
    /// The name, owner, ttl and wait (a lock's `AcquireSpec`, or a semaphore's).
    pub acquire: S,
    /// Re-attach to the lease this token holds instead of acquiring.
    pub token: Option<String>,
    /// The caller's deadline, for the wait.
    pub deadline: Option<Instant>,
    /// When the stream's connection retires: a stream that ends after it keeps its lease.
    pub retires_at: Option<Instant>,
}

/// A lease this stream holds, at its attach generation.
struct Held {
    lease: Lease,
    generation: u64,
}

/// The events of one Hold stream, as a stream its caller reads.
pub type HoldStream = ReceiverStream<Result<HoldEvent, Error>>;

impl LockStore {
    /// Opens a Hold stream on a lock of this store's tenant ([`open`]).
    pub fn hold(&self, spec: HoldSpec) -> Result<HoldStream, Error> {
        open(self.clone(), spec)
    }
}

/// Opens a Hold stream: its engine runs on the shutdown tracker, holding one of
/// `--max-streams`, and ends when the returned stream is dropped (the caller left: the
/// lease is released) or the lease cannot be kept. The shape of Subscribe's
/// (`QueueStore::subscribe`).
pub fn open<S: Holdable>(store: S, spec: HoldSpec<S::Spec>) -> Result<HoldStream, Error> {
    if store.shutdown().is_triggered() {
        return Err(Error::ShuttingDown);
    }
    let permit = store.limits().open_stream()?;
    let (tx, rx) = mpsc::channel(4);
    let tracker = store.shutdown().clone();
    tracker.spawn(
        async move {
            let _permit = permit;
            run(store, spec, tx).await;
        }
        .in_current_span(),
    );
    Ok(ReceiverStream::new(rx))
}

/// Runs one Hold stream to its end.
async fn run<S: Holdable>(store: S, spec: HoldSpec<S::Spec>, tx: HoldSender) {
    let held = match &spec.token {
        Some(token) => reattach(&store, &spec.acquire, token, &tx).await,
        None => acquire(&store, &spec, &tx).await,
    };
    if let Some(held) = held {
        keep(&store, &spec, held, &tx).await;
    }
}

/// Waits for the lease as `Acquire` does; `Some` once the client was told it holds it.
async fn acquire<S: Holdable>(
    store: &S,
    spec: &HoldSpec<S::Spec>,
    tx: &HoldSender,
) -> Option<Held> {
    let stop = Stop {
        deadline: spec.deadline,
        cancel: store.shutdown().child_token(),
    };
    let attempt = {
        let waiting = store.take(&spec.acquire, &stop);
        tokio::pin!(waiting);
        tokio::select! {
            attempt = &mut waiting => attempt,
            // The client left while waiting: stop the wait, but let a script in flight
            // finish (wait_for gives back a lock won after the stop).
            () = tx.closed() => {
                stop.cancel.cancel();
                waiting.await
            }
        }
    };
    let won = match attempt {
        Ok(Some(won)) => won,
        Ok(None) => {
            let _ = tx.send(Ok(HoldEvent::Lost("not acquired"))).await;
            return None;
        }
        Err(err) => {
            let _ = tx.send(Err(err)).await;
            return None;
        }
    };
    if tx
        .send(Ok(HoldEvent::Acquired(won.get().clone())))
        .await
        .is_err()
    {
        won.undo().await;
        return None;
    }
    Some(Held {
        lease: won.claim(),
        generation: 0,
    })
}

/// Takes over the lease `token` holds (renewing it to a full ttl at once).
async fn reattach<S: Holdable>(
    store: &S,
    spec: &S::Spec,
    token: &str,
    tx: &HoldSender,
) -> Option<Held> {
    let held = match store
        .renew(S::name(spec), token, S::ttl(spec), None, true)
        .await
    {
        Ok(Renewal::Renewed { lease, generation }) => Held { lease, generation },
        Ok(Renewal::NotHeld | Renewal::TakenOver) => {
            let _ = tx
                .send(Ok(HoldEvent::Lost("the token no longer holds the lease")))
                .await;
            return None;
        }
        Err(err) => {
            let _ = tx.send(Err(err)).await;
            return None;
        }
    };
    // A client gone before it heard of the re-attach may re-attach again: the lease
    // stays until its ttl, as it would have without this stream.
    tx.send(Ok(HoldEvent::Acquired(held.lease.clone())))
        .await
        .ok()?;
    Some(held)
}

/// Renews until the stream ends, then releases unless the lease was lost or the end
/// was the server's (shutdown, connection retired).
async fn keep<S: Holdable>(store: &S, spec: &HoldSpec<S::Spec>, held: Held, tx: &HoldSender) {
    let (name, ttl) = (S::name(&spec.acquire), S::ttl(&spec.acquire));
    let Held { lease, generation } = held;
    let renew_every = (ttl / 3).max(Duration::from_millis(1));
    let mut expires_at_ms = lease.expires_at_ms;
    let mut next_renew = Instant::now() + renew_every;
    loop {
        tokio::select! {
            () = tx.closed() => {
                if spec.retires_at.is_some_and(|at| Instant::now() >= at) {
                    tracing::debug!(lock = name, "hold stream retired with its connection; the lease stays for a re-attach");
                    return;
                }
                break;
            }
            () = store.shutdown().cancelled() => {
                tracing::debug!(lock = name, "hold stream ended by shutdown; the lease stays for a re-attach");
                let _ = tx.send(Err(Error::ShuttingDown)).await;
                return;
            }
            () = tokio::time::sleep_until(next_renew) => {
                match store.renew(name, &lease.token, ttl, Some(generation), false).await {
                    Ok(Renewal::Renewed { lease: renewed, .. }) => {
                        expires_at_ms = renewed.expires_at_ms;
                        next_renew = Instant::now() + renew_every;
                        if tx.send(Ok(HoldEvent::Renewed(expires_at_ms))).await.is_err() {
                            continue;
                        }
                    }
                    Ok(Renewal::NotHeld) => {
                        let _ = tx.send(Ok(HoldEvent::Lost("lease taken or expired"))).await;
                        return;
                    }
                    Ok(Renewal::TakenOver) => {
                        let _ = tx.send(Ok(HoldEvent::Lost("re-attached by another stream"))).await;
                        return;
                    }
                    Err(err) if until_ms(expires_at_ms).is_zero() => {
                        tracing::warn!(lock = name, cause = %err, "hold lost its lease");
                        let _ = tx.send(Ok(HoldEvent::Lost("redis unavailable past the ttl"))).await;
                        return;
                    }
                    Err(err) => {
                        // Keep trying while the lease lasts: Redis may be back in time.
                        tracing::warn!(lock = name, cause = %err, "hold renewal failed; retrying");
                        next_renew = Instant::now() + (renew_every / 4).clamp(Duration::from_millis(1), Duration::from_millis(100));
                    }
                }
            }
        }
    }
    if let Err(err) = store.release_at(name, &lease.token, Some(generation)).await {
        tracing::warn!(lock = name, cause = %err, "could not release a held lock; it expires with its ttl");
    }
}
