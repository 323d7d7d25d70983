//! Ack as the server calls it, by group commit (`redis::batch`): concurrent Ack calls on
//! one queue share one script run. A busy queue so pays the script's fixed cost (the
//! call, its keys, its PUBLISH) once per batch instead of once per call, and an idle one
//! adds no delay. Each run decides on its own whether it can also refill this replica's
//! streams: `ack_and_dispatch.lua` when the queue's feed holds streams whose slots the
//! batch may free, `ack.lua` alone otherwise.

use super::{QueueStore, StreamSlots};
use crate::error::Result;

impl QueueStore {
    /// Finishes deliveries of `queue`, one flag per receipt: joins the next run of the
    /// queue when one is in flight, else starts one, on its own task, so a caller who
    /// leaves does not stop a run. Runs are shared per queue key, which names the
    /// tenant: two tenants' queues of one name never share a run.
    pub async fn ack(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let (store, name) = (self.clone(), queue.to_owned());
        self.acks
            .submit(
                self.keys(queue).pending().to_owned(),
                receipts.to_vec(),
                move |_, receipts| {
                    let (store, name) = (store.clone(), name.clone());
                    async move { store.ack_run(&name, receipts).await }
                },
            )
            .await
    }

    /// One batch of [`QueueStore::ack`]. When this replica's feed for the queue holds
    /// the streams whose slots the batch frees, the same script run leases those
    /// streams their next tasks: a task waiting for a slot skips the pub/sub hop and
    /// the dispatch's round trip, and a busy queue's refills ride on its ack runs.
    async fn ack_run(&self, queue: &str, receipts: Vec<String>) -> Result<Vec<bool>> {
        let keys = self.keys(queue);
        let feed = self
            .feeds
            .as_ref()
            .and_then(|feeds| feeds.feed(keys.pending()));
        let Some((feed, (asked, slots))) =
            feed.and_then(|feed| feed.full_streams().map(|asked| (feed, asked)))
        else {
            return self.ack_script(&keys, &receipts).await;
        };
        let (acked, dispatched) = self.ack_and_dispatch(&keys, &receipts, &slots).await?;
        if let Some((chosen, dispatched)) = dispatched {
            self.pushed_in_ack(dispatched.tasks.len());
            let asked: Vec<(u64, u64)> = chosen.iter().map(|&at| asked[at]).collect();
            let slots: Vec<StreamSlots> = chosen.iter().map(|&at| slots[at].clone()).collect();
            // The receipts are acked either way: a failure to give back a left stream's
            // tasks is not the Ack's.
            feed.hand_over(self, queue, &asked, &slots, dispatched)
                .await;
        }
        Ok(acked)
    }
}
