//! This replica's waiters in semaphore lines, by ticket and by semaphore.
//!
//! The line itself lives in Redis (`lua/include/line.lua`); this is how a wake-up
//! message, which names the tickets that may go now, reaches their calls. Per
//! semaphore, the first local waiter (the local head) also keeps the timer at the next
//! lease end, so a lease that expires lets the line move without every waiter waking.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::sync::Notify;

/// Every waiting semaphore call of this server.
#[derive(Debug, Default)]
pub struct LocalLine {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each waiter's wake-up, by ticket.
    by_ticket: HashMap<String, Arc<Notify>>,
    /// The tickets waiting here on each semaphore (by its key), by arrival number: the
    /// first entry is the local head, and leaving costs O(log n) (a scanned queue made a
    /// burst of giving-up waiters O(n²), as `lock/waiters.rs` says).
    by_name: HashMap<String, BTreeMap<u64, String>>,
    /// The next arrival number.
    next: u64,
}

/// A waiter's place here; dropping it leaves and hands the local head on.
#[derive(Debug)]
pub struct Place {
    line: Arc<LocalLine>,
    key: String,
    ticket: String,
    /// Its arrival number, its key in `by_name`.
    arrival: u64,
    wake: Arc<Notify>,
}

impl LocalLine {
    /// Joins the waiters of the semaphore `key` with `ticket`.
    pub fn join(self: &Arc<Self>, key: &str, ticket: &str) -> Place {
        let wake = Arc::new(Notify::new());
        let mut inner = self.lock();
        inner.by_ticket.insert(ticket.to_owned(), wake.clone());
        let arrival = inner.next;
        inner.next += 1;
        inner
            .by_name
            .entry(key.to_owned())
            .or_default()
            .insert(arrival, ticket.to_owned());
        Place {
            line: self.clone(),
            key: key.to_owned(),
            ticket: ticket.to_owned(),
            arrival,
            wake,
        }
    }

    /// Wakes the waiters of these tickets that wait here (a wake-up message).
    pub fn wake(&self, tickets: &str) {
        let inner = self.lock();
        for ticket in tickets.split(' ') {
            if let Some(wake) = inner.by_ticket.get(ticket) {
                wake.notify_one();
            }
        }
    }

    /// Wakes every waiter: after a pub/sub reconnect, wake-ups may have been missed.
    pub fn wake_all(&self) {
        for wake in self.lock().by_ticket.values() {
            wake.notify_one();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps half-changed.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Place {
    /// Whether this is the first waiter here on its semaphore.
    pub fn is_local_head(&self) -> bool {
        let inner = self.line.lock();
        inner
            .by_name
            .get(&self.key)
            .and_then(BTreeMap::first_key_value)
            .is_some_and(|(&head, _)| head == self.arrival)
    }

    /// Completes when woken (at once if a wake-up is pending).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut inner = self.line.lock();
        inner.by_ticket.remove(&self.ticket);
        let Some(queue) = inner.by_name.get_mut(&self.key) else {
            return;
        };
        let was_head = queue
            .first_key_value()
            .is_some_and(|(&head, _)| head == self.arrival);
        queue.remove(&self.arrival);
        match queue.first_key_value().map(|(_, ticket)| ticket.clone()) {
            // The new local head takes over the timer.
            Some(next) if was_head => {
                if let Some(wake) = inner.by_ticket.get(&next) {
                    wake.notify_one();
                }
            }
            Some(_) => {}
            None => {
                inner.by_name.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_wake_up_reaches_the_named_tickets_and_leaving_hands_the_head_on() {
        let line = Arc::new(LocalLine::default());
        let first = line.join("s", "a");
        let second = line.join("s", "b");
        assert!(first.is_local_head() && !second.is_local_head());
        line.wake("b x");
        tokio::time::timeout(Duration::from_secs(1), second.woken())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(20), first.woken())
                .await
                .is_err()
        );
        drop(first);
        assert!(second.is_local_head());
        tokio::time::timeout(Duration::from_secs(1), second.woken())
            .await
            .unwrap();
        drop(second);
        assert!(line.lock().by_name.is_empty() && line.lock().by_ticket.is_empty());
    }
}
