//! `SemaphoreService` over real gRPC against a real Redis (contract: "Beyond the mutex:
//! semaphores"): the live holders' permits never exceed the limit, a crashed holder's
//! permits come back at its TTL, first come first served over replicas (a big request
//! ahead is not starved by later small ones), a waiter that gives up or whose server
//! died leaves the line, the stated limit, fencing, retries, Hold and its re-attach.

use crate::common;

use std::{
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};

use common::{
    eventually, ms, process::ServerProcess, unix_ms, with_timeout, TestResult, TestServer,
    TestStore, WAIT,
};
use tokio_stream::StreamExt;
use tonic::{transport::Channel, Code};
use turnstile::pb::{
    hold_response, semaphore_service_client::SemaphoreServiceClient,
    semaphore_service_hold_response::Event, SemaphoreServiceAcquireRequest,
    SemaphoreServiceAcquireResponse, SemaphoreServiceDescribeRequest,
    SemaphoreServiceDescribeResponse, SemaphoreServiceExtendRequest, SemaphoreServiceHoldRequest,
    SemaphoreServiceReleaseRequest,
};

type Semaphores = SemaphoreServiceClient<Channel>;

fn ask(name: &str, owner: &str, limit: u32, permits: u32) -> SemaphoreServiceAcquireRequest {
    SemaphoreServiceAcquireRequest {
        name: name.into(),
        owner: owner.into(),
        limit,
        permits,
        ttl: ms(60_000),
        wait: None,
        request_id: String::new(),
    }
}

fn waiting(mut request: SemaphoreServiceAcquireRequest) -> SemaphoreServiceAcquireRequest {
    request.wait = ms(30_000);
    request
}

async fn acquire(
    semaphores: &mut Semaphores,
    request: SemaphoreServiceAcquireRequest,
) -> SemaphoreServiceAcquireResponse {
    semaphores
        .acquire(request)
        .await
        .expect("acquire")
        .into_inner()
}

async fn describe(semaphores: &mut Semaphores, name: &str) -> SemaphoreServiceDescribeResponse {
    semaphores
        .describe(SemaphoreServiceDescribeRequest { name: name.into() })
        .await
        .expect("describe")
        .into_inner()
}

async fn release(semaphores: &mut Semaphores, name: &str, token: &str) -> bool {
    semaphores
        .release(SemaphoreServiceReleaseRequest {
            name: name.into(),
            token: token.into(),
        })
        .await
        .expect("release")
        .into_inner()
        .released
}

/// Waits until the semaphore's line (over every replica) is `count` long.
async fn wait_line(server: &TestServer, name: &str, count: u32) {
    let mut semaphores = server.semaphores().await;
    eventually(&format!("{count} waiting on {name}"), WAIT, || {
        let mut semaphores = semaphores.clone();
        async move { describe(&mut semaphores, name).await.waiting == count }
    })
    .await;
    let _ = &mut semaphores;
}

on_each_store!(the_holders_permits_never_exceed_the_limit_under_thirty_clients);
async fn the_holders_permits_never_exceed_the_limit_under_thirty_clients(
    redis: TestStore,
) -> TestResult {
    const LIMIT: u32 = 7;
    let server = TestServer::start(&redis).await;
    // The permits the clients themselves believe they hold: added after a grant,
    // taken away before the release, so it never counts more than is really held.
    let held = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..30u32 {
        let (mut semaphores, held, most) = (server.semaphores().await, held.clone(), most.clone());
        clients.spawn(async move {
            let permits = 1 + client % 4;
            for round in 0..4 {
                let mut request = waiting(ask("checkout", &format!("c{client}"), LIMIT, permits));
                request.ttl = ms(10_000);
                let won = acquire(&mut semaphores, request).await;
                assert!(won.acquired, "c{client} round {round} not granted in 30 s");
                assert!(won.in_use <= LIMIT, "granted with {} in use", won.in_use);
                let now = held.fetch_add(i64::from(permits), Ordering::SeqCst) + i64::from(permits);
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                held.fetch_sub(i64::from(permits), Ordering::SeqCst);
                assert!(release(&mut semaphores, "checkout", &won.token).await);
            }
        });
    }
    // Describe, sampled while the clients churn.
    let mut sampler = server.semaphores().await;
    let mut samples = 0;
    while !clients.is_empty() {
        let seen = describe(&mut sampler, "checkout").await;
        let listed: u32 = seen.holders.iter().map(|h| h.permits).sum();
        assert!(seen.in_use <= LIMIT && listed <= LIMIT, "{seen:?}");
        assert_eq!(listed, seen.in_use, "{seen:?}");
        samples += 1;
        if let Ok(Some(done)) =
            tokio::time::timeout(Duration::from_millis(5), clients.join_next()).await
        {
            done?;
        }
    }
    assert!(samples > 0);
    assert!(most.load(Ordering::SeqCst) <= i64::from(LIMIT));
    assert!(
        most.load(Ordering::SeqCst) > 1,
        "the clients never overlapped"
    );
    let seen = describe(&mut sampler, "checkout").await;
    assert_eq!((seen.in_use, seen.waiting, seen.holders.len()), (0, 0, 0));
    Ok(())
}

on_each_store!(a_crashed_holders_permits_come_back_at_its_ttl);
async fn a_crashed_holders_permits_come_back_at_its_ttl(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut semaphores = server.semaphores().await;
    let mut request = ask("provider", "crashed", 3, 3);
    request.ttl = ms(300);
    let first = acquire(&mut semaphores, request).await;
    assert!(first.acquired);
    // Never released: the holder "crashed".
    let busy = acquire(&mut semaphores, ask("provider", "next", 3, 1)).await;
    assert!(!busy.acquired);
    assert_eq!((busy.in_use, busy.limit), (3, 3));
    let mut request = waiting(ask("provider", "next", 3, 1));
    request.ttl = ms(5_000);
    let next = acquire(&mut semaphores, request).await;
    assert!(next.acquired);
    assert_eq!(
        next.in_use, 1,
        "the crashed holder's permits are not counted"
    );
    assert!(
        unix_ms(&next.expires_at) - 5_000 >= unix_ms(&first.expires_at),
        "granted before the crashed holder's lease ended"
    );
    assert!(next.fencing_token > first.fencing_token);
    Ok(())
}

on_each_store!(a_big_request_ahead_is_never_starved_by_later_small_ones);
async fn a_big_request_ahead_is_never_starved_by_later_small_ones(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    // On a cluster the holder and each waiter talk to different replicas.
    let mut holder = server.semaphores().await;
    let first = acquire(&mut holder, ask("pool", "holder", 4, 2)).await;
    assert!(first.acquired);
    let mut big_client = server.semaphores().await;
    let big =
        tokio::spawn(
            async move { acquire(&mut big_client, waiting(ask("pool", "big", 4, 4))).await },
        );
    wait_line(&server, "pool", 1).await;
    // One permit would fit beside the holder's two, but the big request came first.
    let mut small_client = server.semaphores().await;
    let small = tokio::spawn(async move {
        acquire(&mut small_client, waiting(ask("pool", "small", 4, 1))).await
    });
    wait_line(&server, "pool", 2).await;
    let newcomer = acquire(&mut holder, ask("pool", "newcomer", 4, 1)).await;
    assert!(!newcomer.acquired, "a try-once call went ahead of the line");
    assert!(!big.is_finished() && !small.is_finished());
    assert!(release(&mut holder, "pool", &first.token).await);
    let big = tokio::time::timeout(WAIT, big).await??;
    assert!(big.acquired);
    assert_eq!(big.in_use, 4);
    assert_eq!(describe(&mut holder, "pool").await.waiting, 1);
    assert!(
        !small.is_finished(),
        "the small one went in beside a full semaphore"
    );
    assert!(release(&mut holder, "pool", &big.token).await);
    let small = tokio::time::timeout(WAIT, small).await??;
    assert!(small.acquired);
    assert!(small.fencing_token > big.fencing_token);
    Ok(())
}

on_each_store!(a_waiter_that_gives_up_leaves_the_line_and_lets_the_next_one_in);
async fn a_waiter_that_gives_up_leaves_the_line_and_lets_the_next_one_in(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut holder = server.semaphores().await;
    assert!(
        acquire(&mut holder, ask("gate", "holder", 2, 1))
            .await
            .acquired
    );
    // Two permits do not fit beside the holder's one; it gives up at its deadline.
    let mut quitter = server.semaphores().await;
    let gives_up = tokio::spawn(async move {
        quitter
            .acquire(with_timeout(
                waiting(ask("gate", "quitter", 2, 2)),
                Duration::from_millis(1500),
            ))
            .await
    });
    wait_line(&server, "gate", 1).await;
    let mut next_client = server.semaphores().await;
    let next =
        tokio::spawn(
            async move { acquire(&mut next_client, waiting(ask("gate", "next", 2, 1))).await },
        );
    wait_line(&server, "gate", 2).await;
    let status = gives_up.await?.expect_err("the quitter was granted");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // It left before it answered, not when its entry's lease ran out.
    assert!(describe(&mut holder, "gate").await.waiting <= 1);
    // Nobody released: the quitter's leaving alone lets the one behind it in.
    let next = tokio::time::timeout(WAIT, next).await??;
    assert!(next.acquired);
    assert_eq!(next.in_use, 2);
    assert_eq!(describe(&mut holder, "gate").await.waiting, 0);
    Ok(())
}

on_each_store!(a_waiter_whose_server_died_leaves_the_line_within_seconds);
async fn a_waiter_whose_server_died_leaves_the_line_within_seconds(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut dying = ServerProcess::start_on(&redis);
    let mut holder = server.semaphores().await;
    assert!(
        acquire(&mut holder, ask("door", "holder", 2, 1))
            .await
            .acquired
    );
    let mut doomed = SemaphoreServiceClient::connect(format!("http://{}", dying.addr)).await?;
    let doomed =
        tokio::spawn(async move { doomed.acquire(waiting(ask("door", "doomed", 2, 2))).await });
    wait_line(&server, "door", 1).await;
    let mut next_client = server.semaphores().await;
    let next =
        tokio::spawn(
            async move { acquire(&mut next_client, waiting(ask("door", "next", 2, 1))).await },
        );
    wait_line(&server, "door", 2).await;
    // SIGKILL: the doomed waiter's server cannot say it leaves.
    dying.kill();
    let _ = doomed.await;
    let next = tokio::time::timeout(WAIT, next).await??;
    assert!(
        next.acquired,
        "the dead waiter's entry still blocks the line"
    );
    Ok(())
}

on_each_store!(every_caller_states_the_limit_and_a_mismatch_while_held_is_refused);
async fn every_caller_states_the_limit_and_a_mismatch_while_held_is_refused(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut semaphores = server.semaphores().await;
    let first = acquire(&mut semaphores, ask("db", "a", 5, 2)).await;
    assert!(first.acquired);
    for request in [ask("db", "b", 6, 1), waiting(ask("db", "b", 4, 1))] {
        let status = semaphores.acquire(request).await.expect_err("mismatch");
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert!(
            status.message().starts_with("limit:"),
            "{}",
            status.message()
        );
    }
    assert_eq!(describe(&mut semaphores, "db").await.waiting, 0);
    assert!(release(&mut semaphores, "db", &first.token).await);
    // With no holders, the new limit applies.
    let second = acquire(&mut semaphores, ask("db", "b", 1, 1)).await;
    assert!(second.acquired);
    assert_eq!((second.in_use, second.limit), (1, 1));
    assert_eq!(describe(&mut semaphores, "db").await.limit, 1);
    Ok(())
}

on_each_store!(only_the_holders_token_releases_or_extends_and_a_retry_gets_the_same_lease);
async fn only_the_holders_token_releases_or_extends_and_a_retry_gets_the_same_lease(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut semaphores = server.semaphores().await;
    let mut request = ask("api", "ada", 3, 2);
    request.request_id = "req-1".into();
    let won = acquire(&mut semaphores, request.clone()).await;
    assert!(won.acquired);
    let again = acquire(&mut semaphores, request).await;
    assert_eq!(
        (
            again.acquired,
            &again.token,
            again.fencing_token,
            unix_ms(&again.expires_at)
        ),
        (
            true,
            &won.token,
            won.fencing_token,
            unix_ms(&won.expires_at)
        ),
        "a retry is the same lease"
    );
    assert_eq!(
        describe(&mut semaphores, "api").await.in_use,
        2,
        "counted once"
    );
    let other = "0".repeat(32);
    assert!(!release(&mut semaphores, "api", &other).await);
    let extended = semaphores
        .extend(SemaphoreServiceExtendRequest {
            name: "api".into(),
            token: won.token.clone(),
            ttl: ms(120_000),
        })
        .await?
        .into_inner();
    assert!(extended.extended);
    assert!(unix_ms(&extended.expires_at) > unix_ms(&won.expires_at));
    let seen = describe(&mut semaphores, "api").await;
    assert_eq!(seen.holders.len(), 1);
    let holder = &seen.holders[0];
    assert_eq!(
        (holder.owner.as_str(), holder.permits, holder.fencing_token),
        ("ada", 2, won.fencing_token)
    );
    assert_eq!(unix_ms(&holder.expires_at), unix_ms(&extended.expires_at));
    let not_held = semaphores
        .extend(SemaphoreServiceExtendRequest {
            name: "api".into(),
            token: other,
            ttl: None,
        })
        .await?
        .into_inner();
    assert!(!not_held.extended);
    assert!(release(&mut semaphores, "api", &won.token).await);
    assert!(!release(&mut semaphores, "api", &won.token).await);
    let next = acquire(&mut semaphores, ask("api", "bob", 3, 3)).await;
    assert!(next.acquired);
    assert!(next.fencing_token > won.fencing_token);
    Ok(())
}

/// The next event of a semaphore Hold stream that is not a heartbeat.
async fn next_event(
    stream: &mut tonic::Streaming<turnstile::pb::SemaphoreServiceHoldResponse>,
) -> Event {
    loop {
        let message = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .expect("not an error");
        match message.event.expect("an event") {
            Event::Heartbeat(_) => continue,
            event => return event,
        }
    }
}

fn hold_request(name: &str, token: &str, ttl_ms: i64) -> SemaphoreServiceHoldRequest {
    SemaphoreServiceHoldRequest {
        name: name.into(),
        owner: "ada".into(),
        limit: 2,
        permits: 2,
        ttl: ms(ttl_ms),
        wait: ms(10_000),
        token: token.into(),
    }
}

on_each_store!(hold_keeps_permits_renewed_reattaches_by_token_and_releases_on_close);
async fn hold_keeps_permits_renewed_reattaches_by_token_and_releases_on_close(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut semaphores = server.semaphores().await;
    let mut first = semaphores
        .hold(hold_request("leaders", "", 600))
        .await?
        .into_inner();
    let Event::Acquired(acquired) = next_event(&mut first).await else {
        panic!("not acquired first");
    };
    // Renewed past its 600 ms ttl.
    for _ in 0..3 {
        assert!(matches!(next_event(&mut first).await, Event::Renewed(_)));
    }
    assert_eq!(describe(&mut semaphores, "leaders").await.in_use, 2);
    // A second stream re-attaches by token: the same lease, renewed to its own (long)
    // ttl at once.
    let mut second = server
        .semaphores()
        .await
        .hold(hold_request("leaders", &acquired.token, 60_000))
        .await?
        .into_inner();
    let Event::Acquired(again) = next_event(&mut second).await else {
        panic!("not re-attached");
    };
    assert_eq!(
        (&again.token, again.fencing_token),
        (&acquired.token, acquired.fencing_token)
    );
    match next_event(&mut first).await {
        Event::Lost(hold_response::Lost { reason }) => {
            assert_eq!(reason, "re-attached by another stream")
        }
        other => panic!("the replaced stream went on: {other:?}"),
    }
    assert_eq!(describe(&mut semaphores, "leaders").await.in_use, 2);
    // Closing the stream gives the permits back at once, not at the ttl.
    drop(second);
    let waiter = acquire(&mut semaphores, waiting(ask("leaders", "bob", 2, 2))).await;
    assert!(waiter.acquired);
    assert!(
        unix_ms(&waiter.expires_at) - 60_000 < unix_ms(&again.expires_at),
        "granted only when the re-attached lease ran out"
    );
    assert!(waiter.fencing_token > acquired.fencing_token);
    Ok(())
}
