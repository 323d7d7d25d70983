//! Wake-ups for calls waiting on a queue (`Lease` with `wait`): the scripts publish a
//! queue's key when tasks become due or are scheduled, and every waiting call of this
//! replica on that queue looks again. Between messages they sleep until the next due
//! time or lease end that the last look reported: no fixed polling interval.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use tokio::sync::Notify;

use crate::redis::events::EventSink;

/// The queues this replica's calls wait on, by pending key.
#[derive(Debug, Default)]
pub struct QueueWatch {
    queues: Mutex<HashMap<String, Weak<Notify>>>,
}

impl QueueWatch {
    /// The wake-up of `key`, shared by every caller waiting on it.
    pub fn watch(&self, key: &str) -> Arc<Notify> {
        let mut queues = self
            .queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(notify) = queues.get(key).and_then(Weak::upgrade) {
            return notify;
        }
        if queues.len() >= 1024 {
            queues.retain(|_, notify| notify.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        queues.insert(key.to_owned(), Arc::downgrade(&notify));
        notify
    }

    fn wake(&self, key: Option<&str>) {
        let queues = self
            .queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let live = |notify: &Weak<Notify>| notify.upgrade().map(|notify| notify.notify_waiters());
        match key {
            Some(key) => {
                queues.get(key).and_then(live);
            }
            None => queues.values().for_each(|notify| {
                live(notify);
            }),
        }
    }
}

impl EventSink for QueueWatch {
    fn on_message(&self, _channel: &str, payload: &[u8]) {
        if let Ok(key) = std::str::from_utf8(payload) {
            self.wake(Some(key));
        }
    }

    fn on_subscribed(&self) {
        self.wake(None);
    }
}
