//! Bookkeeping for randomised runs: what clients were told (a `Ledger`), and a seeded
//! generator that replays a run.

use std::time::Duration;

use tonic::transport::Channel;
use turnstile::pb::queue_service_client::QueueServiceClient;

use super::{eventually, with_timeout};

/// What clients were told about the tasks of one queue, to check afterwards that
/// nothing confirmed was lost (used by the fault and chaos runs).
#[derive(Default)]
pub struct Ledger {
    /// Ids whose Enqueue answered.
    enqueued: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Ids delivered at least once.
    delivered: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Ids whose Ack answered true. An Ack whose answer was lost (Redis or the server
    /// died after running it) may have finished its tasks too, so this is reported,
    /// not required: the queue is checked empty instead.
    acked: std::sync::Mutex<std::collections::HashSet<String>>,
    deliveries: std::sync::atomic::AtomicUsize,
    /// Deliveries of an id after its Ack was confirmed: must stay 0.
    after_ack: std::sync::atomic::AtomicUsize,
}

impl Ledger {
    /// An Enqueue answered for these ids.
    pub fn enqueued(&self, ids: impl IntoIterator<Item = String>) {
        self.enqueued.lock().unwrap().extend(ids);
    }

    /// These tasks were delivered.
    pub fn delivered(&self, tasks: &[turnstile::pb::Task]) {
        use std::sync::atomic::Ordering;
        self.deliveries.fetch_add(tasks.len(), Ordering::SeqCst);
        let acked = self.acked.lock().unwrap();
        let mut delivered = self.delivered.lock().unwrap();
        for task in tasks {
            if acked.contains(&task.id) {
                self.after_ack.fetch_add(1, Ordering::SeqCst);
            }
            delivered.insert(task.id.clone());
        }
    }

    /// An Ack of `tasks` answered `flags`.
    pub fn acked(&self, tasks: &[turnstile::pb::Task], flags: &[bool]) {
        let mut acked = self.acked.lock().unwrap();
        for (task, &done) in tasks.iter().zip(flags) {
            if done {
                acked.insert(task.id.clone());
            }
        }
    }

    /// How many ids an Enqueue confirmed.
    pub fn confirmed(&self) -> usize {
        self.enqueued.lock().unwrap().len()
    }

    /// Confirmed ids not delivered yet (about: ids delivered without a confirmed
    /// enqueue count too), cheap enough for a producer to pace itself by.
    pub fn backlog(&self) -> usize {
        let delivered = self.delivered.lock().unwrap().len();
        self.confirmed().saturating_sub(delivered)
    }

    /// Confirmed ids never delivered.
    pub fn undelivered(&self) -> usize {
        let delivered = self.delivered.lock().unwrap();
        self.enqueued.lock().unwrap().difference(&delivered).count()
    }

    /// Deliveries so far, redeliveries included.
    pub fn deliveries(&self) -> usize {
        self.deliveries.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Deliveries of an id after its Ack was confirmed.
    pub fn deliveries_after_ack(&self) -> usize {
        self.after_ack.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until every confirmed task was delivered and `queue` holds nothing in any
    /// state (deliveries whose Ack failed come back at their lease end and are acked
    /// then). A call may meet a socket a Redis restart broke: it is simply tried again.
    pub async fn wait_drained(
        &self,
        queues: &mut QueueServiceClient<Channel>,
        queue: &str,
        within: Duration,
    ) {
        let request = || {
            with_timeout(
                turnstile::pb::StatsRequest {
                    queue: queue.into(),
                },
                Duration::from_secs(2),
            )
        };
        eventually(
            "every confirmed task delivered and the queue drained",
            within,
            || {
                let mut queues = queues.clone();
                async move {
                    let Ok(stats) = queues.stats(request()).await else {
                        return false;
                    };
                    let stats = stats.into_inner();
                    self.undelivered() == 0
                        && stats.ready + stats.delayed + stats.in_flight + stats.dead == 0
                }
            },
        )
        .await;
    }

    /// The figures, for the test's output.
    pub fn summary(&self) -> String {
        let confirmed = self.confirmed();
        let deliveries = self.deliveries.load(std::sync::atomic::Ordering::SeqCst);
        format!(
            "tasks confirmed {confirmed}, deliveries {deliveries} ({} duplicates), acks \
             answered {}, deliveries after a confirmed ack {}",
            deliveries.saturating_sub(confirmed),
            self.acked.lock().unwrap().len(),
            self.deliveries_after_ack()
        )
    }
}

/// splitmix64: a small seeded generator, so a randomised run (chaos, model) replays
/// from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed for a randomised run: `var` from the environment (to replay a failure),
/// or the clock.
pub fn seed_from(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| turnstile::time::now_ms() as u64)
}
