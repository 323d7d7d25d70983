//! Ack by group commit (`redis::batch`): concurrent Ack calls on one queue share one
//! `ack.lua` run. A busy queue so pays the script's fixed cost (the call, its keys, its
//! PUBLISH) once per batch instead of once per call, and an idle one adds no delay.

use super::QueueStore;
use crate::error::Result;

impl QueueStore {
    /// Finishes deliveries; one flag per receipt. Joins the next `ack.lua` run of
    /// `queue` when one is in flight, else starts one.
    pub async fn ack(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let store = self.clone();
        self.acks
            .submit(
                queue.to_owned(),
                receipts.to_vec(),
                move |queue, receipts| {
                    let store = store.clone();
                    let queue = queue.clone();
                    async move { store.ack_script(&queue, &receipts).await }
                },
            )
            .await
    }
}
