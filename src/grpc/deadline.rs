//! The caller's deadline, read from the `grpc-timeout` header (the race of a call
//! against it is `time::within`).
//!
//! tonic answers an expired `grpc-timeout` with CANCELLED by dropping the handler, which
//! would leave a lock won in the last millisecond with nobody to release it. Waiting
//! calls therefore stop a little before the deadline, give back what they won, and
//! answer DEADLINE_EXCEEDED themselves.

use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::MetadataMap;

/// How long before the caller's deadline a waiting call stops: 10% of the time it has,
/// at least 5 ms and at most 50 ms, so that the answer still reaches the caller.
fn margin(total: Duration) -> Duration {
    (total / 10).clamp(Duration::from_millis(5), Duration::from_millis(50))
}

/// When a call must stop waiting so that its answer beats the caller's deadline.
pub fn from_metadata(metadata: &MetadataMap) -> Option<Instant> {
    let header = metadata.get("grpc-timeout")?.to_str().ok()?;
    let total = parse_grpc_timeout(header)?;
    Some(Instant::now() + total.saturating_sub(margin(total)))
}

/// `grpc-timeout` is at most 8 digits and a unit: H, M, S, m (ms), u (µs), n (ns).
fn parse_grpc_timeout(header: &str) -> Option<Duration> {
    if header.len() < 2 || header.len() > 9 {
        return None;
    }
    let (digits, unit) = header.split_at(header.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units_parse() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("123456789m"), None);
    }

    #[test]
    fn margin_is_bounded() {
        assert_eq!(margin(Duration::from_millis(20)), Duration::from_millis(5));
        assert_eq!(
            margin(Duration::from_millis(200)),
            Duration::from_millis(20)
        );
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_millis(50));
    }
}
