//! Instants and timers. Lease deadlines come from the Redis clock (`TIME` inside the
//! scripts) as Unix milliseconds; this module turns them into local sleeps (the
//! protobuf timestamps are the gRPC face's: `grpc/proto_time.rs`).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::time::Instant;

use crate::error::{Error, Result};

pub mod precise;

/// The local clock as Unix milliseconds: only for estimates (how long to sleep until a
/// Redis-clock instant), never for a decision that Redis makes.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as i64
}

/// How long from now until the Unix-millisecond instant `ms` (zero if it passed),
/// counted from the local clock to the µs: counted from whole ms, a timer set by it
/// would fire up to 1 ms late.
pub fn until_ms(ms: i64) -> Duration {
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_micros() as i64;
    until_ms_from(ms, now_us)
}

/// How long from the Unix-µs instant `now_us` until the Unix-ms instant `ms` (zero if
/// it passed): for an instant counted from a clock read elsewhere (Redis' `TIME`).
pub fn until_ms_from(ms: i64, now_us: i64) -> Duration {
    Duration::from_micros(ms.saturating_mul(1000).saturating_sub(now_us).max(0) as u64)
}

/// The earliest of `at` and the instants of `others` that are set: one timer for
/// several ends of a wait (a waiting call's memory is its future's size, and each
/// tokio `Sleep` in it is 112 bytes).
pub fn earliest(at: Instant, others: impl IntoIterator<Item = Option<Instant>>) -> Instant {
    others.into_iter().flatten().fold(at, Instant::min)
}

/// Sleeps until `at` on the precise timer (`precise.rs`), or forever when there is none
/// (a `select!` arm that is off): for the instants a client waits for (a due time, a
/// lease's end, a fire time), not for back-offs.
pub async fn precisely_until_some(at: Option<Instant>) {
    match at {
        Some(at) => precise::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Races a call that does not wait (Redis round trips only) against the caller's
/// deadline, so a slow Redis answers UNAVAILABLE before the caller gives up instead of a
/// bare CANCELLED. Dropping `call` at the deadline must be safe: whatever it may have
/// won is given back by its own guard.
pub fn within<T, F>(deadline: Option<Instant>, call: F) -> Within<F>
where
    F: Future<Output = Result<T>>,
{
    match deadline {
        Some(at) => Within::Bounded {
            call: tokio::time::timeout_at(at, call),
        },
        None => Within::Unbounded { call },
    }
}

pin_project_lite::pin_project! {
    /// The future of [`within`]. A struct rather than an `async fn`: an `async fn`
    /// keeps its argument and the future it awaits side by side, so every unary call's
    /// future held its handler twice (measured with `-Zprint-type-sizes`: the Acquire
    /// path's `within` was 2,168 bytes around a 1,016-byte handler).
    #[project = WithinProj]
    pub enum Within<F> {
        Bounded { #[pin] call: tokio::time::Timeout<F> },
        Unbounded { #[pin] call: F },
    }
}

impl<T, F: Future<Output = Result<T>>> Future for Within<F> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match self.project() {
            WithinProj::Bounded { call } => call.poll(cx).map(|answer| {
                answer.unwrap_or_else(|_| {
                    Err(Error::Unavailable(
                        "redis did not answer before the deadline".into(),
                    ))
                })
            }),
            WithinProj::Unbounded { call } => call.poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_takes_the_first_instant_that_is_set() {
        let now = Instant::now();
        let (soon, later) = (now + Duration::from_secs(1), now + Duration::from_secs(2));
        assert_eq!(earliest(later, [None, Some(soon)]), soon);
        assert_eq!(earliest(soon, [Some(later), None]), soon);
        assert_eq!(earliest(later, [None, None]), later);
    }

    #[test]
    fn until_ms_counts_the_part_of_a_ms_that_has_passed() {
        // 0.7 ms into ms 1,000: 4.3 ms to ms 1,005, not 5.
        assert_eq!(
            until_ms_from(1_005, 1_000_700),
            Duration::from_micros(4_300)
        );
        assert_eq!(until_ms_from(1_000, 1_000_700), Duration::ZERO);
        assert_eq!(until_ms_from(1_001, 1_001_000), Duration::ZERO);
    }
}
