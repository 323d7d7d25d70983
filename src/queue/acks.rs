//! Ack by group commit (`redis::batch`): concurrent Ack calls on one queue share one
//! `ack.lua` run. A busy queue so pays the script's fixed cost (the call, its keys, its
//! PUBLISH) once per batch instead of once per call, and an idle one adds no delay.

use super::QueueStore;
use crate::error::Result;

impl QueueStore {
    /// Finishes deliveries; one flag per receipt. Joins the next `ack.lua` run of
    /// `queue` when one is in flight, else starts one. Runs are shared per queue key,
    /// which names the tenant: two tenants' queues of one name never share a run.
    pub async fn ack(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let store = self.clone();
        let name = queue.to_owned();
        self.acks
            .submit(
                self.keys(queue).pending().to_owned(),
                receipts.to_vec(),
                move |_, receipts| {
                    let (store, name) = (store.clone(), name.clone());
                    async move { store.ack_script(&name, &receipts).await }
                },
            )
            .await
    }
}
