//! The `Hold` stream's engine: acquire, then renew the lease every ttl/3 while the
//! stream is open. The lock is released at once when the client goes away or the
//! server shuts down; a lease that cannot be kept ends the stream with `Lost`. Domain
//! events only: heartbeats are added by `rpc::stream`, and `api.rs` converts.

use std::time::Duration;

use tokio::{sync::mpsc, time::Instant};

use super::{AcquireSpec, Attempt, Lease, LockStore, Stop};
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
}

/// Sends the events of one Hold stream.
pub type HoldSender = mpsc::Sender<Result<HoldEvent, Error>>;

/// Runs one Hold stream to its end. Spawn it on the shutdown tracker.
pub async fn run(store: LockStore, spec: AcquireSpec, deadline: Option<Instant>, tx: HoldSender) {
    let stop = Stop {
        deadline,
        cancel: store.shutdown().child_token(),
    };
    let attempt = {
        let waiting = store.wait_for(&spec, &stop);
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
        Ok(Attempt::Won(won)) => won,
        Ok(Attempt::Held(_)) => {
            let _ = tx.send(Ok(HoldEvent::Lost("not acquired"))).await;
            return;
        }
        Err(err) => {
            let _ = tx.send(Err(err)).await;
            return;
        }
    };
    if tx
        .send(Ok(HoldEvent::Acquired(won.get().clone())))
        .await
        .is_err()
    {
        won.undo().await;
        return;
    }
    keep(&store, &spec, won.claim(), &tx).await;
}

/// Renews until the stream ends, then releases (unless the lease was lost).
async fn keep(store: &LockStore, spec: &AcquireSpec, lease: Lease, tx: &HoldSender) {
    let renew_every = (spec.ttl / 3).max(Duration::from_millis(1));
    let mut expires_at_ms = lease.expires_at_ms;
    let mut next_renew = Instant::now() + renew_every;
    loop {
        tokio::select! {
            () = tx.closed() => break,
            () = store.shutdown().cancelled() => {
                store.give_back(&spec.name, &lease.token).await;
                let _ = tx.send(Err(Error::ShuttingDown)).await;
                return;
            }
            () = tokio::time::sleep_until(next_renew) => {
                match store.extend(&spec.name, &lease.token, spec.ttl).await {
                    Ok(Some(until)) => {
                        expires_at_ms = until;
                        next_renew = Instant::now() + renew_every;
                        if tx.send(Ok(HoldEvent::Renewed(until))).await.is_err() {
                            break;
                        }
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
