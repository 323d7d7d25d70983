//! Ack by group commit (`redis::batch`): concurrent Ack calls on one queue share one
//! script run. A busy queue so pays the script's fixed cost (the call, its keys, its
//! PUBLISH) once per batch instead of once per call, and an idle one adds no delay.
//! The run itself (`ack.lua`, or `ack_and_dispatch.lua` when it can refill this
//! replica's streams) is `Scheduler::ack`'s.

use std::future::Future;

use super::QueueStore;
use crate::error::Result;

impl QueueStore {
    /// Finishes deliveries with `ack.lua` alone, batched as [`QueueStore::ack_by`]
    /// batches: what the bench's Redis floor runs. A server's Acks go through
    /// `Scheduler::ack`, which may also refill its streams.
    pub async fn ack(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let store = self.clone();
        let name = queue.to_owned();
        self.ack_by(queue, receipts, move |receipts| {
            let (store, name) = (store.clone(), name.clone());
            async move { store.ack_script(&store.keys(&name), &receipts).await }
        })
        .await
    }

    /// Finishes deliveries, one flag per receipt: joins the next run of `queue` when
    /// one is in flight, else starts one, run by `run` (one flag per receipt it is
    /// given) on its own task, so a caller who leaves does not stop a run. Runs are
    /// shared per queue key, which names the tenant: two tenants' queues of one name
    /// never share a run. The first run of a busy spell runs all of its batches, so a
    /// queue's callers pass the same kind of run (a server's all go through
    /// `Scheduler::ack`).
    pub(super) async fn ack_by<Run, Fut>(
        &self,
        queue: &str,
        receipts: &[String],
        run: Run,
    ) -> Result<Vec<bool>>
    where
        Run: Fn(Vec<String>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<bool>>> + Send + 'static,
    {
        self.acks
            .submit(
                self.keys(queue).pending().to_owned(),
                receipts.to_vec(),
                move |_, receipts| run(receipts),
            )
            .await
    }
}
