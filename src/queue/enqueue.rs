//! Enqueue as the server calls it. When some tasks are due now and this replica's feed
//! for the queue has been asleep for `feed::QUIET` with streams that may have a free
//! slot, the same script run leases them to those streams (`enqueue_and_dispatch.lua`):
//! the push skips the pub/sub hop and the dispatch's round trip. Any other enqueue is
//! left to the feeds, which its queue-changed message wakes, so a busy queue's pass
//! still leases many enqueues' tasks at once.

use super::{Enqueued, NewTask, QueueStore, Schedule};
use crate::error::Result;

impl QueueStore {
    /// Adds a batch atomically; one result per task, in order. A run that also leases
    /// goes on without the caller, so a caller who leaves strands no delivery until its
    /// lease ends.
    pub async fn enqueue(&self, queue: &str, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>> {
        let due_now = tasks.iter().any(|t| match t.schedule {
            Schedule::Now => true,
            Schedule::Delay(delay) => delay.is_zero(),
            Schedule::At(_) => false,
        });
        let keys = self.keys(queue);
        let feed = self
            .feeds
            .as_ref()
            .filter(|_| due_now)
            .and_then(|feeds| feeds.feed(keys.pending()));
        let Some((feed, (eligible, slots))) =
            feed.and_then(|feed| feed.idle_streams().map(|asked| (feed, asked)))
        else {
            return self.enqueue_keyed(queue, &keys, &tasks).await;
        };
        let (store, queue) = (self.clone(), queue.to_owned());
        self.shutdown
            .detached(move |_| async move {
                let (enqueued, dispatched) = store
                    .enqueue_and_dispatch(&queue, &keys, &tasks, &slots)
                    .await?;
                if let Some(dispatched) = dispatched {
                    store.pushed_in_enqueue(dispatched.tasks.len());
                    // The tasks are stored either way, so a failure to give back a
                    // left stream's tasks is not the enqueue's.
                    feed.hand_over(&store, &queue, &eligible, &slots, dispatched)
                        .await;
                }
                Ok(enqueued)
            })
            .await
    }
}
