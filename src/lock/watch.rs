//! `Watch`: a lock's state now, then each change of holder and each end of a lease.
//!
//! A stream marks the name watched (`lua/watch.lua`, a mark that lives while the stream
//! refreshes it) and the current lease: a win of a watched name publishes lock-changed
//! (`lua/acquire.lua`), and the end of a marked lease publishes lock-released
//! (`lua/include/free_lock.lua`). Both messages reach every replica over the one
//! pattern subscription each event has, and wake this replica's watchers of that lock
//! (`Watchers`); a lease that expires publishes nothing, so each stream also keeps a
//! timer at the end of the lease it last saw. Each wake-up is one read of the lock, and
//! a read is sent only when it shows a change: a holder with a higher fencing token
//! than any sent, or the end of the lease last sent. So a watcher never sees an older
//! fencing token after a newer one, skips intermediate holders under fast churn, and
//! always ends at the current state.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{
    sync::{mpsc, Notify},
    time::Instant,
};
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use super::{Holder, LockStore};
use crate::{
    error::{Error, Result},
    redis::reply,
    time::until_ms,
};

/// How long a watch mark lives; a stream refreshes it every third of that.
const MARK: Duration = Duration::from_secs(30);
/// How long a failed read waits before it is tried again.
const RETRY: Duration = Duration::from_millis(250);

/// One event of a Watch stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// The lock is held.
    Held(Holder),
    /// The lock is free; the fencing token of the lease that ended (0: none seen).
    Free(u64),
}

/// The events of one Watch stream, as a stream its caller reads.
pub type WatchStream = ReceiverStream<Result<WatchEvent, Error>>;

/// Lock key -> its watchers here (an id each, and what wakes it).
type ByKey = HashMap<String, Vec<(u64, Arc<Notify>)>>;

/// This replica's Watch streams, by lock key: each message about a key wakes them all.
#[derive(Debug, Default)]
pub struct Watchers {
    by_key: Mutex<ByKey>,
    next_id: AtomicU64,
}

/// A stream's place among the watchers of its lock; dropping it leaves.
#[derive(Debug)]
pub struct WatcherGuard {
    watchers: Arc<Watchers>,
    key: String,
    id: u64,
    wake: Arc<Notify>,
}

impl Watchers {
    /// Joins the watchers of `key`.
    pub fn join(self: &Arc<Self>, key: &str) -> WatcherGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        self.lock()
            .entry(key.to_owned())
            .or_default()
            .push((id, wake.clone()));
        WatcherGuard {
            watchers: self.clone(),
            key: key.to_owned(),
            id,
            wake,
        }
    }

    /// Something happened to `key`: every watcher of it looks again.
    pub fn wake(&self, key: &str) {
        if let Some(watchers) = self.lock().get(key) {
            for (_, wake) in watchers {
                wake.notify_one();
            }
        }
    }

    /// Every watcher looks again (messages may have been missed).
    pub fn wake_all(&self) {
        for watchers in self.lock().values() {
            for (_, wake) in watchers {
                wake.notify_one();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ByKey> {
        self.by_key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        let mut by_key = self.watchers.lock();
        if let Some(watchers) = by_key.get_mut(&self.key) {
            watchers.retain(|(id, _)| *id != self.id);
            if watchers.is_empty() {
                by_key.remove(&self.key);
            }
        }
    }
}

/// What a stream sent last, to send only changes, in fencing order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sent {
    /// The highest fencing token sent as held (0: none).
    fencing: u64,
    /// Whether the last event sent was `Held`; `None` before the first.
    held: Option<bool>,
}

impl Sent {
    /// The event to send for a read showing `now`, if it is a change.
    pub(super) fn next(&mut self, now: Option<&Holder>) -> Option<WatchEvent> {
        match now {
            Some(holder) if self.held.is_none() || holder.fencing_token > self.fencing => {
                self.fencing = holder.fencing_token;
                self.held = Some(true);
                Some(WatchEvent::Held(holder.clone()))
            }
            // The same lease (renewed or not), or an older one read late: nothing new.
            Some(_) => None,
            None if self.held != Some(false) => {
                self.held = Some(false);
                Some(WatchEvent::Free(self.fencing))
            }
            None => None,
        }
    }
}

impl LockStore {
    /// Opens a Watch stream on `name` (this store's tenant): its engine runs on the
    /// shutdown tracker, holding one of `--max-streams`, until the returned stream is
    /// dropped or the server shuts down.
    pub fn watch(&self, name: &str) -> Result<WatchStream> {
        if self.shutdown().is_triggered() {
            return Err(Error::ShuttingDown);
        }
        let permit = self.limits().open_stream()?;
        let (tx, rx) = mpsc::channel(4);
        let (store, name) = (self.clone(), name.to_owned());
        self.shutdown().spawn(
            async move {
                let _permit = permit;
                store.run_watch(&name, tx).await;
            }
            .in_current_span(),
        );
        Ok(ReceiverStream::new(rx))
    }

    /// One look: marks the name and its lease watched, and reads the holder.
    async fn look(&self, name: &str) -> Result<Option<Holder>> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.watch.key(&keys.lock);
        call.key(&keys.watched).arg(MARK.as_millis() as u64);
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(&keys.lock, &call).await?;
        if reply.is_empty() {
            return Ok(None);
        }
        Ok(Some(Holder {
            owner: reply::string(&reply, 0)?,
            fencing_token: reply::int(&reply, 1)? as u64,
            expires_at_ms: reply::int(&reply, 2)?,
        }))
    }

    async fn run_watch(&self, name: &str, tx: mpsc::Sender<Result<WatchEvent, Error>>) {
        let guard = self.watchers.join(&self.redis.keys.lock(name).lock);
        let shutdown = self.shutdown().clone();
        let mut sent = Sent::default();
        loop {
            let refresh = Instant::now() + MARK / 3;
            let wake_at = match self.look(name).await {
                Ok(holder) => {
                    if let Some(event) = sent.next(holder.as_ref()) {
                        if tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                    // A lease that ends by itself publishes nothing: look at its end.
                    match holder {
                        Some(holder) => {
                            refresh.min(Instant::now() + until_ms(holder.expires_at_ms + 1))
                        }
                        None => refresh,
                    }
                }
                Err(err) => {
                    tracing::debug!(lock = name, cause = %err, "watch look failed; trying again");
                    Instant::now() + RETRY
                }
            };
            tokio::select! {
                () = guard.wake.notified() => {}
                () = tokio::time::sleep_until(wake_at) => {}
                () = tx.closed() => return,
                () = shutdown.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(fencing_token: u64) -> Holder {
        Holder {
            owner: "o".into(),
            fencing_token,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn only_changes_are_sent_and_never_an_older_fencing_token() {
        let mut sent = Sent::default();
        // The state now comes first, whatever it is.
        assert_eq!(sent.next(None), Some(WatchEvent::Free(0)));
        assert_eq!(sent.next(None), None);
        assert_eq!(
            sent.next(Some(&holder(5))),
            Some(WatchEvent::Held(holder(5)))
        );
        // A renewal of the same lease is not a change.
        assert_eq!(sent.next(Some(&holder(5))), None);
        // A newer holder is; an older one read late is not.
        assert_eq!(
            sent.next(Some(&holder(7))),
            Some(WatchEvent::Held(holder(7)))
        );
        assert_eq!(sent.next(Some(&holder(6))), None);
        assert_eq!(sent.next(None), Some(WatchEvent::Free(7)));
        assert_eq!(sent.next(Some(&holder(7))), None);
        assert_eq!(
            sent.next(Some(&holder(8))),
            Some(WatchEvent::Held(holder(8)))
        );
    }
}
