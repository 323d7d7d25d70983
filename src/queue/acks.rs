//! Group commit for Ack: concurrent Ack calls on one queue share one `ack.lua` run.
//! While a run is in flight, the receipts that arrive wait and go together in the next
//! one. A busy queue so pays the script's fixed cost (the call, its keys, its PUBLISH)
//! once per batch instead of once per call, and an idle one adds no delay: a lone Ack
//! runs at once. Only receipts waiting for a run live here, never queue state.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use tokio::sync::oneshot;

use super::{QueueStore, MAX_BATCH};
use crate::error::{Error, Result};

/// The Acks waiting per queue. A queue has an entry while a run for it is in flight.
#[derive(Default)]
pub(crate) struct AckBatches {
    queues: Mutex<HashMap<String, Waiting>>,
}

/// Calls waiting for the next run of one queue.
#[derive(Default)]
struct Waiting {
    receipts: Vec<String>,
    /// Each caller's receipt count (its slice of the reply, in order) and where its
    /// answer goes.
    callers: Vec<(usize, oneshot::Sender<Result<Vec<bool>>>)>,
}

impl Waiting {
    fn push(&mut self, receipts: &[String], tx: oneshot::Sender<Result<Vec<bool>>>) {
        self.receipts.extend_from_slice(receipts);
        self.callers.push((receipts.len(), tx));
    }

    /// Takes the callers whose receipts fit in one run (at least one caller).
    fn take_run(&mut self) -> Waiting {
        let mut fit = 0;
        let mut count = 0;
        for (n, _) in &self.callers {
            if fit > 0 && count + n > MAX_BATCH {
                break;
            }
            fit += 1;
            count += n;
        }
        Waiting {
            receipts: self.receipts.drain(..count).collect(),
            callers: self.callers.drain(..fit).collect(),
        }
    }

    /// Hands each caller its slice of one run's reply (or the run's error).
    fn answer(self, reply: Result<Vec<bool>>) {
        match reply {
            Ok(acked) if acked.len() == self.receipts.len() => {
                let mut acked = acked.into_iter();
                for (n, tx) in self.callers {
                    let _ = tx.send(Ok(acked.by_ref().take(n).collect()));
                }
            }
            Ok(acked) => {
                let err = Error::Internal(format!(
                    "ack replied {} flags for {} receipts",
                    acked.len(),
                    self.receipts.len()
                ));
                for (_, tx) in self.callers {
                    let _ = tx.send(Err(err.clone()));
                }
            }
            Err(err) => {
                for (_, tx) in self.callers {
                    let _ = tx.send(Err(err.clone()));
                }
            }
        }
    }
}

impl QueueStore {
    /// Finishes deliveries; one flag per receipt. Joins the next run of `queue`'s
    /// Ack batch when one is in flight, else starts one.
    pub async fn ack(&self, queue: &str, receipts: &[String]) -> Result<Vec<bool>> {
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut queues = self
                .acks
                .queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match queues.get_mut(queue) {
                Some(waiting) => {
                    waiting.push(receipts, tx);
                    None
                }
                None => {
                    queues.insert(queue.to_owned(), Waiting::default());
                    let mut first = Waiting::default();
                    first.push(receipts, tx);
                    Some(first)
                }
            }
        };
        if let Some(first) = first {
            // Its own task, so a caller that goes away (deadline, cancel) cannot strand
            // the callers that joined its batch.
            tokio::spawn(self.clone().run_acks(queue.to_owned(), first));
        }
        rx.await
            .unwrap_or_else(|_| Err(Error::Internal("ack batch dropped".into())))
    }

    /// Runs `batch`, then whatever joined meanwhile, until none is waiting.
    async fn run_acks(self, queue: String, mut batch: Waiting) {
        loop {
            let reply = self.ack_script(&queue, &batch.receipts).await;
            batch.answer(reply);
            let mut queues = self
                .acks
                .queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(waiting) = queues.get_mut(&queue) else {
                return;
            };
            if waiting.callers.is_empty() {
                queues.remove(&queue);
                return;
            }
            batch = waiting.take_run();
        }
    }
}
