//! Values as a person reads them on a page: instants, ages, a queue's limits. Plain
//! text (the pages escape it as any other value); no markup here.

use crate::queue::{QueueConfig, RateLimit, TaskState};

/// The tabs: the four states every queue has, then the two a queue that keeps ended
/// tasks has (shown when it keeps them or holds some).
pub const STATES: [(&str, TaskState, &str); 6] = [
    ("ready", TaskState::Ready, "Ready"),
    ("delayed", TaskState::Delayed, "Delayed"),
    ("in_flight", TaskState::InFlight, "In flight"),
    ("dead", TaskState::Dead, "Dead"),
    ("completed", TaskState::Completed, "Completed"),
    ("cancelled", TaskState::Cancelled, "Cancelled"),
];

/// A state as its tab names it.
pub fn state_heading(state: TaskState) -> &'static str {
    STATES
        .iter()
        .find(|(_, tab, _)| *tab == state)
        .map_or("", |(_, _, heading)| heading)
}

/// A Unix-ms instant as RFC 3339 (UTC), or a dash.
pub fn instant(ms: Option<i64>) -> String {
    ms.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| "–".to_owned(), |at| at.to_string())
}

/// A queue's caps and rate limits in a few words ("–" for none).
pub fn limits(config: &QueueConfig) -> String {
    let mut parts = Vec::new();
    if config.max_in_flight > 0 {
        parts.push(format!("{} in flight", config.max_in_flight));
    }
    if let Some(rate) = &config.rate_limit {
        parts.push(rate_text(rate));
    }
    if config.group_max_in_flight > 0 {
        parts.push(format!("{} per group", config.group_max_in_flight));
    }
    if let Some(rate) = &config.group_rate_limit {
        parts.push(format!("{} per group", rate_text(rate)));
    }
    if parts.is_empty() {
        "–".to_owned()
    } else {
        parts.join(" · ")
    }
}

fn rate_text(rate: &RateLimit) -> String {
    format!("{}/{}", rate.limit, age(rate.period.as_millis() as i64))
}

/// A span of milliseconds the way a person reads it: `850ms`, `42s`, `7m`, `3h`, `2d`.
pub fn age(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{}s", ms / 1000),
        60_000..3_600_000 => format!("{}m", ms / 60_000),
        3_600_000..86_400_000 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_a_person_reads_them() {
        assert_eq!(age(-5), "0ms");
        assert_eq!(age(850), "850ms");
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(7 * 60_000), "7m");
        assert_eq!(age(3 * 3_600_000), "3h");
        assert_eq!(age(2 * 86_400_000), "2d");
    }
}
