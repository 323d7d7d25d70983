//! Waiting on what a test can observe (a gauge, a count, Redis' clock), never on a
//! fixed sleep, and retrying as a client does.

use std::time::Duration;

/// How long a test waits for something it can observe before it fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// Redis' clock (`TIME`) in Unix ms: the clock the scripts use.
pub async fn redis_now_ms(conn: &mut impl redis::aio::ConnectionLike) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(conn)
        .await
        .expect("redis TIME");
    secs * 1000 + micros / 1000
}

/// Waits (through [`eventually`]) until Redis' clock reads at least `at` (Unix ms): how
/// a test knows that a lease ran out or a task fell due, as the scripts see it.
pub async fn wait_redis_time(conn: &(impl redis::aio::ConnectionLike + Clone), at: i64) {
    eventually(&format!("redis time {at}"), WAIT, || {
        let mut conn = conn.clone();
        async move { redis_now_ms(&mut conn).await >= at }
    })
    .await;
}

/// Checks `done` every 10 ms until it holds, failing after `within`: how tests wait
/// for something observable (a gauge, a count, a state), never a fixed sleep standing
/// in for "it has happened by now".
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_explained(what, within, || {
        let done = done();
        async move { done.await.then_some(()).ok_or_else(String::new) }
    })
    .await;
}

/// [`eventually`] for a check that says what it saw when it does not hold yet: the
/// last such answer is in the failure, so a timeout on a loaded machine can be told
/// from a real fault (a cluster that never formed, not one that was slow to).
pub async fn eventually_explained<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = std::time::Instant::now();
    while let Err(seen) = check().await {
        let seen = if seen.is_empty() {
            seen
        } else {
            format!("; last seen: {seen}")
        };
        assert!(
            started.elapsed() < within,
            "{what}: not within {within:?}{seen}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`eventually`] for tests that watch processes from a plain thread.
pub fn eventually_blocking(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client's pause after a failed call before it tries again, so that a retry loop
/// does not spin while Redis or a server is down.
pub async fn backoff() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// Calls `call` until it answers, as a client retries UNAVAILABLE (right after a
/// Redis restart each of the server's pooled sockets fails its first call before it
/// is replaced); any other error, or no answer within [`WAIT`], fails the test.
pub async fn retry_unavailable<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let started = std::time::Instant::now();
    loop {
        match call().await {
            Ok(answer) => return answer,
            Err(status) => {
                assert_eq!(
                    status.code(),
                    tonic::Code::Unavailable,
                    "{what}: {status:?}"
                );
                assert!(started.elapsed() < WAIT, "{what}: {status:?}");
            }
        }
    }
}
