//! What the fire timer counts and registers with the metrics: fires that enqueued a
//! task (by the replica whose fire did, so a sum over replicas counts each fire time
//! once), their lateness on Redis' clock, and the fire times skipped.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::metrics::{histogram::Histogram, Family, Kind, Metrics};

#[derive(Default)]
pub(super) struct FireCounters {
    fires: AtomicU64,
    lateness: Arc<Histogram>,
    /// Skipped fire times: [overlap, too_old].
    skipped: [AtomicU64; 2],
}

impl FireCounters {
    /// A fire enqueued its task `late` after the fire time (Redis' clock).
    pub(super) fn fired(&self, late: Duration) {
        self.fires.fetch_add(1, Ordering::Relaxed);
        self.lateness.observe(late.as_secs_f64());
    }

    /// `count` fire times were skipped: `overlap` (the last fire's task was still in
    /// the queue) or else too old to catch up.
    pub(super) fn skipped(&self, overlap: bool, count: u64) {
        self.skipped[usize::from(!overlap)].fetch_add(count, Ordering::Relaxed);
    }

    /// Registers the fire families with `metrics`.
    pub(super) fn register(self: &Arc<Self>, metrics: &Metrics) {
        let counters = self.clone();
        metrics.register(Family::single(
            "turnstile_schedule_fires_total",
            Kind::Counter,
            "Schedule fires that enqueued a task (counted by the replica whose fire did).",
            move || counters.fires.load(Ordering::Relaxed),
        ));
        metrics.register(Family::histogram(
            "turnstile_schedule_lateness_seconds",
            "Schedule fires: enqueue time minus fire time, on Redis' clock.",
            self.lateness.clone(),
        ));
        let counters = self.clone();
        metrics.register(Family::new(
            "turnstile_schedule_skipped_total",
            Kind::Counter,
            "Fire times skipped, by reason: overlap (the last fire's task was still in the queue) or too_old (older than catch_up_window on recovery).",
            Box::new(move || {
                ["overlap", "too_old"]
                    .into_iter()
                    .enumerate()
                    .map(|(at, reason)| {
                        let count = counters.skipped[at].load(Ordering::Relaxed);
                        (format!("reason=\"{reason}\""), count)
                    })
                    .collect()
            }),
        ));
    }
}
