//! `LockService.ListLocks` over real gRPC against a real Redis (contract:
//! "LockService.ListLocks"): the tenant's held locks by name, paged, with their holders;
//! released and expired leases are not listed; the index behind it follows the held
//! locks, not every name ever taken. Permission and tenants: `auth.rs`.

use crate::common;

use common::{eventually, ms, unix_ms, TestRedis, TestResult, TestServer, TestStore, WAIT};
use redis::AsyncCommands;
use tonic::transport::Channel;
use turnstile::pb::{
    lock_service_client::LockServiceClient, AcquireRequest, AcquireResponse, DescribeRequest,
    ListLocksRequest, LockSummary, ReleaseRequest,
};

type Locks = LockServiceClient<Channel>;

async fn take(locks: &mut Locks, name: &str, ttl_ms: i64) -> AcquireResponse {
    let won = locks
        .acquire(AcquireRequest {
            name: name.into(),
            owner: format!("owner-of-{name}"),
            ttl: ms(ttl_ms),
            wait: None,
            request_id: String::new(),
        })
        .await
        .expect("acquire")
        .into_inner();
    assert!(won.acquired, "{name}");
    won
}

/// Every page of `prefix`, `size` at a time: the locks and how many pages.
async fn list_all(locks: &mut Locks, prefix: &str, size: u32) -> (Vec<LockSummary>, usize) {
    let (mut all, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let page = locks
            .list_locks(ListLocksRequest {
                prefix: prefix.into(),
                page_size: size,
                page_token: token,
            })
            .await
            .expect("list")
            .into_inner();
        pages += 1;
        assert!(page.locks.len() <= size as usize);
        all.extend(page.locks);
        if page.next_page_token.is_empty() {
            return (all, pages);
        }
        token = page.next_page_token;
    }
}

/// Waits until `name`'s lease has ended (Describe says free).
async fn wait_free(locks: &Locks, name: &str) {
    eventually(&format!("{name} expired"), WAIT, || {
        let mut locks = locks.clone();
        async move {
            !locks
                .describe(DescribeRequest {
                    name: name.into(),
                    token: String::new(),
                })
                .await
                .expect("describe")
                .into_inner()
                .held
        }
    })
    .await;
}

on_each_store!(list_locks_pages_the_held_locks_by_name_without_released_or_expired_ones);
async fn list_locks_pages_the_held_locks_by_name_without_released_or_expired_ones(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut won = Vec::new();
    for n in 0..25 {
        won.push(take(&mut locks, &format!("job-{n:02}"), 60_000).await);
    }
    take(&mut locks, "other", 60_000).await;
    locks
        .release(ReleaseRequest {
            name: "job-03".into(),
            token: won[3].token.clone(),
        })
        .await?;
    take(&mut locks, "job-short", 200).await;
    wait_free(&locks, "job-short").await;

    let (listed, pages) = list_all(&mut locks, "job-", 10).await;
    let names: Vec<&str> = listed.iter().map(|lock| lock.name.as_str()).collect();
    let wanted: Vec<String> = (0..25)
        .filter(|n| *n != 3)
        .map(|n| format!("job-{n:02}"))
        .collect();
    assert_eq!(
        names, wanted,
        "by name, without the released and the expired"
    );
    assert_eq!(pages, 3);
    let first = &listed[0];
    assert_eq!(
        (
            first.owner.as_str(),
            first.fencing_token,
            unix_ms(&first.expires_at)
        ),
        (
            "owner-of-job-00",
            won[0].fencing_token,
            unix_ms(&won[0].expires_at)
        )
    );
    // Without a prefix, every held lock; a big page holds them all.
    let (everything, pages) = list_all(&mut locks, "", 1000).await;
    assert_eq!((everything.len(), pages), (25, 1));
    assert_eq!(everything.last().map(|l| l.name.as_str()), Some("other"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_follows_the_held_locks_not_every_name_ever_taken() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    // Fifty locks whose holders "crashed": never released, their leases run out.
    for n in 0..50 {
        take(&mut locks, &format!("gone-{n}"), 100).await;
    }
    for n in 0..50 {
        wait_free(&locks, &format!("gone-{n}")).await;
    }
    // One win in 16 drops up to 32 ended names: 400 wins drop the fifty (all but
    // certainly: fewer than two of 400 wins pruning has odds below 1e-9).
    let mut live = Vec::new();
    for n in 0..400 {
        live.push(take(&mut locks, &format!("live-{n:03}"), 60_000).await);
    }
    let mut conn = redis.conn().await;
    let index = "turnstile:locks:{default}";
    let size: u64 = conn.zcard(index).await?;
    assert_eq!(size, 400, "the ended names were not dropped");
    // A release takes its name out at once.
    for (n, won) in live.iter().enumerate().take(10) {
        locks
            .release(ReleaseRequest {
                name: format!("live-{n:03}"),
                token: won.token.clone(),
            })
            .await?;
    }
    let size: u64 = conn.zcard(index).await?;
    assert_eq!(size, 390);
    let (listed, _) = list_all(&mut locks, "", 1000).await;
    assert_eq!(listed.len(), 390);
    Ok(())
}
