//! Leader election and lock watching: `campaign` (a lease that waits without end),
//! `watch` (the lock's state now, then each change, re-opened after a cut and never
//! going back to an older fencing token) and `check_fence`.

use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream, StreamExt};

use super::{
    error::{is_final, Error, Result},
    lease::{system_time, Lease},
    retry::{call, RETRY},
    Client,
};
use crate::pb::{self, watch_response::Event};

/// Leadership: a [`Lease`] won by [`Client::campaign`]; `lost` fires only after having
/// led.
pub type Leadership = Lease;

/// One state of a watched lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockState {
    /// Whether it is held.
    pub held: bool,
    /// The holder's owner (empty when free).
    pub owner: String,
    /// The holder's fencing token; when free, the last one handed out.
    pub fencing_token: u64,
    /// When the holder's lease ends unless renewed (`None` when free).
    pub expires_at: Option<SystemTime>,
}

impl LockState {
    fn from_event(event: Event) -> Option<Self> {
        match event {
            Event::Held(info) => Some(LockState {
                held: true,
                owner: info.owner,
                fencing_token: info.fencing_token,
                expires_at: Some(system_time(info.expires_at.as_ref())),
            }),
            Event::Free(free) => Some(LockState {
                held: false,
                owner: String::new(),
                fencing_token: free.fencing_token,
                expires_at: None,
            }),
            Event::Heartbeat(_) => None,
        }
    }
}

impl Client {
    /// Waits until `owner` leads `name` (a lock held through `Hold`, renewed while the
    /// process lives), then returns the [`Leadership`]: the leader-election loop in one
    /// call.
    pub async fn campaign(
        &self,
        name: impl Into<String>,
        owner: impl Into<String>,
        ttl: Duration,
    ) -> Result<Leadership> {
        self.lock(name, ttl).owner(owner).await
    }

    /// The lock's state now, then each change: a stream that re-opens `Watch` after a
    /// cut (on whichever replica answers) and ends only with a final error (an
    /// invalid name, a refused token) or when dropped. Under fast churn intermediate
    /// holders may be skipped, never shown out of order.
    pub fn watch(&self, name: impl Into<String>) -> impl Stream<Item = Result<LockState>> {
        let (tx, rx) = mpsc::channel(16);
        let (locks, name) = (self.raw_locks(), name.into());
        tokio::spawn(async move {
            tokio::select! {
                () = follow(locks, name, &tx) => {}
                () = tx.closed() => {}
            }
        });
        ReceiverStream::new(rx)
    }

    /// Whether `name` is held now under exactly this fencing token (`CheckFence`).
    pub async fn check_fence(&self, name: impl Into<String>, fencing_token: u64) -> Result<bool> {
        let request = pb::CheckFenceRequest {
            name: name.into(),
            fencing_token,
        };
        Ok(call!(None, self.raw_locks(), check_fence, request)
            .await?
            .current)
    }
}

/// Sends the states of `name` to `tx` until a final error (sent too) or `tx` closes.
async fn follow(
    mut locks: pb::lock_service_client::LockServiceClient<super::connect::Authed>,
    name: String,
    tx: &mpsc::Sender<Result<LockState>>,
) {
    let mut last: Option<LockState> = None;
    let mut attempt = 0;
    loop {
        let opened = locks.watch(pb::WatchRequest { name: name.clone() }).await;
        let mut stream = match opened {
            Ok(stream) => stream.into_inner(),
            Err(status) if is_final(status.code()) => {
                let _ = tx.send(Err(Error::from(status))).await;
                return;
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(RETRY.delay(attempt)).await;
                continue;
            }
        };
        loop {
            match stream.next().await {
                Some(Ok(message)) => {
                    attempt = 0;
                    let Some(state) = message.event.and_then(LockState::from_event) else {
                        continue;
                    };
                    // A re-opened stream's first state may be older than one already
                    // seen (a replica behind on its events): never go back.
                    let newest = last.as_ref().map_or(0, |last| last.fencing_token);
                    if state.fencing_token < newest || last.as_ref() == Some(&state) {
                        continue;
                    }
                    last = Some(state.clone());
                    if tx.send(Ok(state)).await.is_err() {
                        return;
                    }
                }
                Some(Err(status)) if is_final(status.code()) => {
                    let _ = tx.send(Err(Error::from(status))).await;
                    return;
                }
                // The server went away (shutdown, connection age, a clean end on
                // shutdown): watch again.
                Some(Err(_)) | None => break,
            }
        }
        attempt += 1;
        tokio::time::sleep(RETRY.delay(attempt)).await;
    }
}
