//! What the queue layer counts of its Subscribe pushes and registers with the metrics:
//! the deliveries its short cuts leased (in the Enqueue that stored them, in the Ack
//! run that freed their slots) and how late each push went out after its task's due
//! time.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::metrics::{histogram::Histogram, Family, Kind, Metrics};

/// The push counters of one replica (shared by every clone and tenant of its store).
#[derive(Default)]
pub(super) struct PushCounters {
    /// Subscribe deliveries leased by the Enqueue that stored them.
    in_enqueue: AtomicU64,
    /// Subscribe deliveries leased by the Ack run that freed their slots.
    in_ack: AtomicU64,
    /// Push time minus due time, of every pushed task.
    lateness: Arc<Histogram>,
}

impl PushCounters {
    pub(super) fn in_enqueue(&self, count: usize) {
        self.in_enqueue.fetch_add(count as u64, Ordering::Relaxed);
    }

    pub(super) fn in_ack(&self, count: usize) {
        self.in_ack.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// A task went out on a Subscribe stream `late` after its due time.
    pub(super) fn pushed(&self, late: Duration) {
        self.lateness.observe(late.as_secs_f64());
    }

    /// Registers the push families with `metrics`.
    pub(super) fn register(self: &Arc<Self>, metrics: &Metrics) {
        metrics.register(Family::histogram(
            "turnstile_delivery_lateness_seconds",
            "Subscribe pushes: push time minus the task's due time.",
            self.lateness.clone(),
        ));
        let counters = self.clone();
        metrics.register(Family::single(
            "turnstile_enqueue_pushes_total",
            Kind::Counter,
            "Subscribe deliveries leased by the Enqueue that stored them, to this replica's idle streams (one pub/sub hop and one round trip shorter than a feed's dispatch).",
            move || counters.in_enqueue.load(Ordering::Relaxed),
        ));
        let counters = self.clone();
        metrics.register(Family::single(
            "turnstile_ack_pushes_total",
            Kind::Counter,
            "Subscribe deliveries leased by the Ack run that freed their slots, to this replica's streams (one pub/sub hop and one round trip shorter than a feed's dispatch).",
            move || counters.in_ack.load(Ordering::Relaxed),
        ));
    }
}
