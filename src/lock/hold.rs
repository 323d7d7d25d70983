//! The `Hold` stream: acquire (with heartbeats while waiting), then renew the lease every
//! ttl/3 while the stream is open. The lock is released at once when the client goes
//! away or the server shuts down; a lease that cannot be kept ends the stream with
//! `Lost`. Domain events only: `api.rs` turns them into `HoldResponse`s.

use std::time::Duration;

use tokio::{sync::mpsc, time::Instant};

use super::{AcquireOutcome, AcquireSpec, Lease, LockStore, Stop};
use crate::{error::Error, time::until_ms};

/// One event of a Hold stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldEvent {
    /// The lock was taken.
    Acquired(Lease),
    /// The lease was renewed until this instant (Unix ms).
    Renewed(i64),
    /// Not (or no longer) held; the stream ends after it.
    Lost(&'static str),
    /// Nothing else was due within the heartbeat interval.
    Heartbeat,
}

/// Sends the events of one Hold stream.
pub type HoldSender = mpsc::Sender<Result<HoldEvent, Error>>;

/// Runs one Hold stream to its end. Spawn it on the shutdown tracker.
pub async fn run(
    store: LockStore,
    spec: AcquireSpec,
    deadline: Option<Instant>,
    heartbeat: Duration,
    tx: HoldSender,
) {
    let stop = Stop {
        deadline,
        cancel: store.shutdown().child_token(),
    };
    let outcome = {
        let acquire = store.acquire(&spec, &stop);
        tokio::pin!(acquire);
        let mut caller_gone = false;
        loop {
            tokio::select! {
                outcome = &mut acquire => break outcome,
                () = tx.closed(), if !caller_gone => {
                    caller_gone = true;
                    stop.cancel.cancel();
                }
                () = tokio::time::sleep(heartbeat), if !caller_gone => {
                    let _ = tx.send(Ok(HoldEvent::Heartbeat)).await;
                }
            }
        }
    };
    let lease = match outcome {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        Ok(AcquireOutcome::Held(_)) => {
            let _ = tx.send(Ok(HoldEvent::Lost("not acquired"))).await;
            return;
        }
        Err(err) => {
            let _ = tx.send(Err(err)).await;
            return;
        }
    };
    if tx
        .send(Ok(HoldEvent::Acquired(lease.clone())))
        .await
        .is_err()
    {
        store.give_back(&spec.name, &lease.token).await;
        return;
    }
    keep(&store, &spec, lease, heartbeat, &tx).await;
}

/// Renews until the stream ends, then releases (unless the lease was lost).
async fn keep(
    store: &LockStore,
    spec: &AcquireSpec,
    lease: Lease,
    heartbeat: Duration,
    tx: &HoldSender,
) {
    let renew_every = (spec.ttl / 3).max(Duration::from_millis(1));
    let mut expires_at_ms = lease.expires_at_ms;
    let mut next_renew = Instant::now() + renew_every;
    let mut last_sent = Instant::now();
    loop {
        tokio::select! {
            () = tx.closed() => break,
            () = store.shutdown().cancelled() => {
                store.give_back(&spec.name, &lease.token).await;
                let _ = tx.send(Err(Error::ShuttingDown)).await;
                return;
            }
            () = tokio::time::sleep_until(last_sent + heartbeat) => {
                if tx.send(Ok(HoldEvent::Heartbeat)).await.is_err() {
                    break;
                }
                last_sent = Instant::now();
            }
            () = tokio::time::sleep_until(next_renew) => {
                match store.extend(&spec.name, &lease.token, spec.ttl).await {
                    Ok(Some(until)) => {
                        expires_at_ms = until;
                        next_renew = Instant::now() + renew_every;
                        if tx.send(Ok(HoldEvent::Renewed(until))).await.is_err() {
                            break;
                        }
                        last_sent = Instant::now();
                    }
                    Ok(None) => {
                        let _ = tx.send(Ok(HoldEvent::Lost("lock taken or expired"))).await;
                        return;
                    }
                    Err(err) if until_ms(expires_at_ms).is_zero() => {
                        tracing::warn!(lock = spec.name, cause = %err, "hold lost its lease");
                        let _ = tx.send(Ok(HoldEvent::Lost("redis unavailable past the ttl"))).await;
                        return;
                    }
                    Err(err) => {
                        // Keep trying while the lease lasts: Redis may be back in time.
                        tracing::warn!(lock = spec.name, cause = %err, "hold renewal failed; retrying");
                        next_renew = Instant::now() + (renew_every / 4).clamp(Duration::from_millis(1), Duration::from_millis(100));
                    }
                }
            }
        }
    }
    store.give_back(&spec.name, &lease.token).await;
}
