//! Jittered exponential backoff, and unary calls retried through UNAVAILABLE (and a
//! connection closed under a call: CANCELLED) (100 ms
//! doubling to 5 s, ±20%) for at most the call's deadline: a replica restarting or a
//! mesh's GOAWAY is ridden out, and the ids the library fills make the retry harmless.

use std::{future::Future, time::Duration};

use tokio::time::Instant;
use tonic::{Code, Response, Status};

use super::error::{Error, Result};

/// How long a unary call keeps retrying through UNAVAILABLE when the caller set no
/// deadline of its own.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// Jittered exponential backoff: `initial`, times `factor` per attempt, at most `max`,
/// each delay moved by up to ±`jitter` of itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// What each further attempt multiplies it by.
    pub factor: f64,
    /// The longest delay.
    pub max: Duration,
    /// How far each delay may move, as a fraction of itself (0.2: ±20%).
    pub jitter: f64,
}

impl Default for Backoff {
    /// A failed task's: 1 s, doubling, at most 10 minutes, ±20%.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(600),
            jitter: 0.2,
        }
    }
}

/// The backoff of retries through UNAVAILABLE and of re-opened streams.
pub const RETRY: Backoff = Backoff {
    initial: Duration::from_millis(100),
    factor: 2.0,
    max: Duration::from_secs(5),
    jitter: 0.2,
};

impl Backoff {
    /// The delay before try `attempt` + 1 (attempts count from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let base =
            (self.initial.as_secs_f64() * self.factor.powi(exponent)).min(self.max.as_secs_f64());
        let moved = base * (1.0 + self.jitter * (2.0 * unit_random() - 1.0));
        Duration::from_secs_f64(moved.max(0.0))
    }
}

/// A number in [0, 1) from the OS random source (a jitter needs nothing better).
fn unit_random() -> f64 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

/// `stub.method(request)` through [`retrying`]: each try on a clone of the stub (the
/// generated methods borrow it) with a clone of the request.
macro_rules! call {
    ($deadline:expr, $stub:expr, $method:ident, $request:expr) => {{
        let (stub, request) = ($stub, $request);
        $crate::client::retry::retrying($deadline, move || {
            let (mut stub, request) = (stub.clone(), request.clone());
            async move { stub.$method(request).await }
        })
    }};
}
pub(crate) use call;

/// Whether a failed call is worth trying again: UNAVAILABLE (no replica reached, or
/// one going away), and CANCELLED, which is how tonic reports a request whose
/// connection closed under it (a replica's shutdown, seen in the restart scenario);
/// the server itself never answers CANCELLED (it owns its deadlines). Either way the
/// library's ids make the retry harmless.
fn retryable(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::Cancelled)
}

/// `call()`, retried through UNAVAILABLE until `deadline` (from now; the default when
/// `None`) would pass; each try is bounded by what is left of a deadline the caller
/// gave. Any other failure is its typed error.
pub async fn retrying<T, Call, Answer>(deadline: Option<Duration>, mut call: Call) -> Result<T>
where
    Call: FnMut() -> Answer,
    Answer: Future<Output = Result<Response<T>, Status>>,
{
    let end = Instant::now() + deadline.unwrap_or(DEFAULT_DEADLINE);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let answer = match deadline {
            Some(_) => match tokio::time::timeout_at(end, call()).await {
                Ok(answer) => answer,
                Err(_) => return Err(Error::DeadlineExceeded("the call's deadline passed".into())),
            },
            None => call().await,
        };
        match answer {
            Ok(reply) => return Ok(reply.into_inner()),
            Err(status) if retryable(status.code()) => {
                let pause = RETRY.delay(attempt);
                if Instant::now() + pause >= end {
                    return Err(status.into());
                }
                tracing::debug!(cause = %status, "call unavailable; retrying");
                tokio::time::sleep(pause).await;
            }
            Err(status) => return Err(status.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_doubles_up_to_its_cap_within_its_jitter() {
        for attempt in 1..=12 {
            let base = (0.1 * 2f64.powi(attempt as i32 - 1)).min(5.0);
            let delay = RETRY.delay(attempt).as_secs_f64();
            assert!(
                delay >= base * 0.8 - 1e-9 && delay <= base * 1.2 + 1e-9,
                "{attempt}: {delay}"
            );
        }
        let flat = Backoff {
            jitter: 0.0,
            ..Backoff::default()
        };
        let waits: Vec<u64> = (1..=11).map(|a| flat.delay(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600]);
        assert_eq!(flat.delay(u32::MAX), Duration::from_secs(600));
    }
}
