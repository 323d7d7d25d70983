//! A Prometheus histogram with fixed buckets and atomic counts: recording is a few
//! relaxed atomic adds, no lock, so every RPC can record its duration.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bucket upper bounds in seconds: 0.5 ms to 10 s, what an RPC or a push can take.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Counts per bucket (not cumulative), the total and the sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// The sum in microseconds, so it can be an integer atomic.
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation of `seconds` (negative counts as 0).
    pub fn observe(&self, seconds: f64) {
        let seconds = seconds.max(0.0);
        if let Some(at) = BUCKETS.iter().position(|le| seconds <= *le) {
            self.buckets[at].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines of `name` with `labels` (`k="v"`
    /// pairs joined by commas, or empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        use std::fmt::Write;
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (at, le) in BUCKETS.iter().enumerate() {
            cumulative += self.buckets[at].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inf_counts_everything() {
        let histogram = Histogram::default();
        for seconds in [0.0001, 0.003, 0.003, 20.0] {
            histogram.observe(seconds);
        }
        let mut out = String::new();
        histogram.render(&mut out, "x", "m=\"a\"");
        assert!(out.contains("x_bucket{m=\"a\",le=\"0.0005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{m=\"a\",le=\"0.005\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{m=\"a\",le=\"10\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{m=\"a\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_count{m=\"a\"} 4\n"), "{out}");
    }
}
