//! This replica's waiters, queued per lock key in arrival order.
//!
//! Only the head of a queue acts: a release message wakes the head alone (one waiter
//! per free lock, not every waiter), and only the head keeps a timer at the current
//! lease's expiry. When the head leaves (it won, gave up, or was cancelled) the next
//! waiter becomes head and is woken to look at the lock and set its own timer.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use tokio::sync::Notify;

/// One lock's waiters by id: ids grow with arrival, so the first entry is the head,
/// and leaving costs O(log n) wherever a waiter stands. (A `VecDeque` scanned on each
/// leave made 10,000 waiters giving up at once O(n²): the server stalled for 2 s with
/// the map's mutex held, long enough for its Redis calls to time out, 2026-11-29.)
type Queue = BTreeMap<u64, Arc<Waiter>>;

/// Every waiting call of this server, by lock key.
#[derive(Debug, Default)]
pub struct Waiters {
    queues: Mutex<HashMap<String, Queue>>,
    next_id: AtomicU64,
}

/// One waiting call.
#[derive(Debug)]
struct Waiter {
    id: u64,
    /// Woken (a stored permit if it is busy) when it should try the lock again.
    wake: Notify,
}

/// A place in a lock's queue; dropping it leaves the queue and hands the head on.
#[derive(Debug)]
pub struct WaiterGuard {
    waiters: Arc<Waiters>,
    key: String,
    waiter: Arc<Waiter>,
}

impl Waiters {
    /// Joins the back of the queue of `key`.
    pub fn join(self: &Arc<Self>, key: &str) -> WaiterGuard {
        let waiter = Arc::new(Waiter {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            wake: Notify::new(),
        });
        self.lock()
            .entry(key.to_owned())
            .or_default()
            .insert(waiter.id, waiter.clone());
        WaiterGuard {
            waiters: self.clone(),
            key: key.to_owned(),
            waiter,
        }
    }

    /// A lease of `key` ended: wake the head waiter (and nobody else).
    pub fn wake_head(&self, key: &str) {
        if let Some((_, head)) = self.lock().get(key).and_then(Queue::first_key_value) {
            head.wake.notify_one();
        }
    }

    /// Wake every head: after a pub/sub reconnect, releases may have been missed.
    pub fn wake_all_heads(&self) {
        for queue in self.lock().values() {
            if let Some((_, head)) = queue.first_key_value() {
                head.wake.notify_one();
            }
        }
    }

    /// How many calls wait on `key` here.
    #[cfg(test)]
    fn len(&self, key: &str) -> usize {
        self.lock().get(key).map_or(0, Queue::len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        // A panic while holding this lock cannot leave the map half-changed.
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl WaiterGuard {
    /// Whether this waiter is first in its queue.
    pub fn is_head(&self) -> bool {
        let queues = self.waiters.lock();
        queues
            .get(&self.key)
            .and_then(Queue::first_key_value)
            .is_some_and(|(&head, _)| head == self.waiter.id)
    }

    /// Completes when this waiter is woken (at once if a wake-up is pending).
    pub async fn woken(&self) {
        self.waiter.wake.notified().await;
    }
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        let mut queues = self.waiters.lock();
        let Some(queue) = queues.get_mut(&self.key) else {
            return;
        };
        let was_head = queue
            .first_key_value()
            .is_some_and(|(&head, _)| head == self.waiter.id);
        queue.remove(&self.waiter.id);
        match queue.first_key_value() {
            // The new head must look at the lock and take over the expiry timer.
            Some((_, next)) if was_head => next.wake.notify_one(),
            Some(_) => {}
            None => {
                queues.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_release_wakes_only_the_head_and_leaving_hands_the_head_on() {
        let waiters = Arc::new(Waiters::default());
        let first = waiters.join("k");
        let second = waiters.join("k");
        assert!(first.is_head() && !second.is_head());
        waiters.wake_head("k");
        tokio::time::timeout(std::time::Duration::from_secs(1), first.woken())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), second.woken())
                .await
                .is_err()
        );
        drop(first);
        assert!(second.is_head());
        tokio::time::timeout(std::time::Duration::from_secs(1), second.woken())
            .await
            .unwrap();
        drop(second);
        assert_eq!(waiters.len("k"), 0);
    }
}
