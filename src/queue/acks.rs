//! Ack by group commit (`redis::batch`): concurrent Ack calls on one queue share one
//! `ack.lua` run. A busy queue so pays the script's fixed cost (the call, its keys, its
//! PUBLISH) once per batch instead of once per call, and an idle one adds no delay.

use std::future::Future;

use super::QueueStore;
use crate::error::Result;

impl QueueStore {
    /// Finishes deliveries; one flag per receipt. Joins the next `ack.lua` run of
    /// `queue` when one is in flight, else starts one. Runs are shared per queue key,
    /// which names the tenant: two tenants' queues of one name never share a run.
    pub async fn ack(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let store = self.clone();
        let name = queue.to_owned();
        self.ack_by(queue, receipts, move |receipts| {
            let (store, name) = (store.clone(), name.clone());
            async move { store.ack_script(&store.keys(&name), &receipts).await }
        })
        .await
    }

    /// [`QueueStore::ack`] with batches run by `run` (one flag per receipt it is
    /// given), on its own task: a caller who leaves does not stop a run. Every caller
    /// of one queue must pass the same kind of run (the first of a busy spell runs
    /// them all).
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
