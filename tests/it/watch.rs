//! `LockService.Watch` over real gRPC against a real Redis (contract: "LockService.Watch"):
//! the state now first, then each new holder and each end of a lease (released or
//! expired), across replicas, never an older fencing token after a newer one, no
//! renewals, heartbeats, and the end at the current state under churn.

use crate::common;

use std::time::Duration;

use common::{ms, unix_ms, TestResult, TestServer, TestStore};
use tokio_stream::StreamExt;
use tonic::{transport::Channel, Streaming};
use turnstile::pb::{
    lock_service_client::LockServiceClient, watch_response::Event, AcquireRequest, ExtendRequest,
    LockInfo, ReleaseRequest, WatchRequest, WatchResponse,
};

type Locks = LockServiceClient<Channel>;

/// How soon a change must arrive: generous for a loaded machine (the contract says a
/// few milliseconds), far below the 10 s in which a stream refreshes its mark and would
/// find a change it was never told of.
const PROMPT: Duration = Duration::from_secs(3);

async fn watch(locks: &mut Locks, name: &str) -> Result<Streaming<WatchResponse>, tonic::Status> {
    Ok(locks
        .watch(WatchRequest { name: name.into() })
        .await?
        .into_inner())
}

/// The next event that is not a heartbeat, within `within`.
async fn next(stream: &mut Streaming<WatchResponse>, within: Duration) -> Option<Event> {
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(Ok(WatchResponse {
                event: Some(Event::Heartbeat(_)),
            }))) => continue,
            Ok(Some(Ok(WatchResponse { event: Some(event) }))) => return Some(event),
            Ok(other) => panic!("stream ended: {other:?}"),
            Err(_) => return None,
        }
    }
}

async fn held(stream: &mut Streaming<WatchResponse>) -> LockInfo {
    match next(stream, PROMPT).await {
        Some(Event::Held(info)) => info,
        other => panic!("wanted held, got {other:?}"),
    }
}

async fn free(stream: &mut Streaming<WatchResponse>) -> u64 {
    match next(stream, PROMPT).await {
        Some(Event::Free(free)) => free.fencing_token,
        other => panic!("wanted free, got {other:?}"),
    }
}

/// Acquires `name` for `owner`: (token, fencing token).
async fn take(locks: &mut Locks, name: &str, owner: &str, ttl_ms: i64) -> (String, u64) {
    let won = locks
        .acquire(AcquireRequest {
            name: name.into(),
            owner: owner.into(),
            ttl: ms(ttl_ms),
            wait: None,
            request_id: String::new(),
        })
        .await
        .expect("acquire")
        .into_inner();
    assert!(won.acquired, "{owner} did not get {name}");
    (won.token, won.fencing_token)
}

on_each_store!(a_watcher_sees_the_state_now_then_each_holder_and_each_end);
async fn a_watcher_sees_the_state_now_then_each_holder_and_each_end(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    // On a cluster the watcher and the holders talk to different replicas.
    let mut watcher = server.locks().await;
    let mut locks = server.locks().await;
    let mut stream = watch(&mut watcher, "leader").await?;
    assert_eq!(free(&mut stream).await, 0, "free from the start");
    let (token, first) = take(&mut locks, "leader", "ada", 60_000).await;
    let info = held(&mut stream).await;
    assert_eq!((info.owner.as_str(), info.fencing_token), ("ada", first));
    // A renewal is not sent.
    locks
        .extend(ExtendRequest {
            name: "leader".into(),
            token: token.clone(),
            ttl: ms(60_000),
        })
        .await?;
    locks
        .release(ReleaseRequest {
            name: "leader".into(),
            token,
        })
        .await?;
    assert_eq!(free(&mut stream).await, first, "released");
    let (_, second) = take(&mut locks, "leader", "bob", 300).await;
    let info = held(&mut stream).await;
    assert_eq!((info.owner.as_str(), info.fencing_token), ("bob", second));
    assert!(second > first);
    // A lease that runs out publishes nothing: the watcher's timer sees it end.
    let ended = free(&mut stream).await;
    assert_eq!(ended, second, "expired");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    assert!(
        now >= unix_ms(&info.expires_at),
        "free sent before the lease's end"
    );
    Ok(())
}

on_each_store!(a_watcher_joining_a_held_lock_sees_its_holder_and_its_release);
async fn a_watcher_joining_a_held_lock_sees_its_holder_and_its_release(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let (token, fencing) = take(&mut locks, "held", "ada", 60_000).await;
    let mut stream = watch(&mut server.locks().await, "held").await?;
    assert_eq!(held(&mut stream).await.fencing_token, fencing);
    // The lease was won before anyone watched: its release must still be heard.
    locks
        .release(ReleaseRequest {
            name: "held".into(),
            token,
        })
        .await?;
    assert_eq!(free(&mut stream).await, fencing);
    Ok(())
}

on_each_store!(under_churn_fencing_tokens_only_grow_and_the_last_state_arrives);
async fn under_churn_fencing_tokens_only_grow_and_the_last_state_arrives(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut stream = watch(&mut server.locks().await, "churn").await?;
    assert_eq!(free(&mut stream).await, 0);
    let mut locks = server.locks().await;
    let mut last = 0;
    for n in 0..50 {
        let (token, fencing) = take(&mut locks, "churn", &format!("o{n}"), 60_000).await;
        last = fencing;
        if n < 49 {
            locks
                .release(ReleaseRequest {
                    name: "churn".into(),
                    token,
                })
                .await?;
        }
    }
    // Events arrive in fencing order, intermediate holders may be skipped, and the
    // stream settles on the last holder.
    let mut seen = 0;
    loop {
        match next(&mut stream, PROMPT).await {
            Some(Event::Held(info)) => {
                assert!(
                    info.fencing_token > seen,
                    "{} after {seen}",
                    info.fencing_token
                );
                seen = info.fencing_token;
                if seen == last {
                    break;
                }
            }
            Some(Event::Free(free)) => assert_eq!(free.fencing_token, seen),
            other => panic!("the stream stopped before the last holder: {other:?}"),
        }
    }
    assert!(next(&mut stream, Duration::from_millis(300))
        .await
        .is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_watch_carries_heartbeats() -> TestResult {
    let redis = common::TestRedis::start().await;
    let server = TestServer::start_with(&redis, |c| {
        c.stream_heartbeat = Duration::from_millis(100);
    })
    .await;
    let mut stream = watch(&mut server.locks().await, "quiet").await?;
    let mut heartbeats = 0;
    while heartbeats < 3 {
        match tokio::time::timeout(common::WAIT, stream.next()).await {
            Ok(Some(Ok(WatchResponse {
                event: Some(Event::Heartbeat(_)),
            }))) => heartbeats += 1,
            Ok(Some(Ok(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    server
        .wait_metric("turnstile_streams_open{kind=\"watch\"}", 1.0)
        .await;
    drop(stream);
    server
        .wait_metric("turnstile_streams_open{kind=\"watch\"}", 0.0)
        .await;
    Ok(())
}

/// Redis restarts under a watcher (its pub/sub connection is made again, and messages
/// sent meanwhile are lost): the watcher still ends at the current state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_ends_at_the_current_state_across_a_redis_restart() -> TestResult {
    let mut redis = common::TestRedis::start_durable().await;
    let server = TestServer::start(&redis).await;
    let mut stream = watch(&mut server.locks().await, "restart").await?;
    assert_eq!(free(&mut stream).await, 0);
    let mut locks = server.locks().await;
    let (token, fencing) = take(&mut locks, "restart", "ada", 60_000).await;
    assert_eq!(held(&mut stream).await.fencing_token, fencing);
    redis.restart().await;
    // The lease survived (append-only file); its release, once Redis answers again,
    // reaches the watcher by its message or by the look every stream takes when the
    // subscription is made again.
    common::eventually("the release after the restart", common::WAIT, || async {
        server
            .locks()
            .await
            .release(ReleaseRequest {
                name: "restart".into(),
                token: token.clone(),
            })
            .await
            .is_ok_and(|r| r.into_inner().released)
    })
    .await;
    assert_eq!(free(&mut stream).await, fencing);
    Ok(())
}
