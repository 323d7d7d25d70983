//! LockService over real gRPC against a real redis-server: one test per guarantee of
//! the contract (docs/api.md, "turnstile.v1.LockService").

use crate::common;

use std::{
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{
    ms, unix_ms, wait_redis_time, with_timeout, TestRedis, TestResult, TestServer, TestStore,
};
use redis::AsyncCommands;
use tokio_stream::StreamExt;
use tonic::Code;
use turnstile::pb::{
    hold_response::Event, lock_service_client::LockServiceClient, AcquireRequest,
    CheckFenceRequest, DescribeRequest, ExtendRequest, HoldRequest, ReleaseAllRequest,
    ReleaseRequest,
};

fn acquire(name: &str, owner: &str, ttl_ms: i64, wait_ms: i64) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        owner: owner.into(),
        ttl: ms(ttl_ms),
        wait: ms(wait_ms),
        request_id: String::new(),
    }
}

fn release(name: &str, token: &str) -> ReleaseRequest {
    ReleaseRequest {
        name: name.into(),
        token: token.into(),
    }
}

fn describe(name: &str, token: &str) -> DescribeRequest {
    DescribeRequest {
        name: name.into(),
        token: token.into(),
    }
}

/// Whether `name` is held (by anyone).
async fn is_held(
    locks: &mut LockServiceClient<tonic::transport::Channel>,
    name: &str,
) -> Result<bool, tonic::Status> {
    Ok(locks.describe(describe(name, "")).await?.into_inner().held)
}

/// Whether `request` won the lock.
async fn wins(
    locks: &mut LockServiceClient<tonic::transport::Channel>,
    request: AcquireRequest,
) -> Result<bool, tonic::Status> {
    Ok(locks.acquire(request).await?.into_inner().acquired)
}

/// The names ReleaseAll freed for `owner`, sorted.
async fn release_all(
    locks: &mut LockServiceClient<tonic::transport::Channel>,
    owner: &str,
) -> Result<Vec<String>, tonic::Status> {
    let mut released = locks
        .release_all(ReleaseAllRequest {
            owner: owner.into(),
        })
        .await?
        .into_inner()
        .released;
    released.sort();
    Ok(released)
}

on_each_store!(acquire_then_release_frees_the_lock);
async fn acquire_then_release_frees_the_lock(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("room", "alice", 10_000, 0))
        .await?
        .into_inner();
    assert!(won.acquired);
    assert!(won.fencing_token > 0);
    assert!(unix_ms(&won.expires_at) > turnstile::time::now_ms());
    assert!(
        locks
            .release(release("room", &won.token))
            .await?
            .into_inner()
            .released
    );
    let again = locks
        .acquire(acquire("room", "bob", 10_000, 0))
        .await?
        .into_inner();
    assert!(again.acquired);
    Ok(())
}

on_each_store!(a_held_lock_refuses_everyone_including_its_own_owner);
async fn a_held_lock_refuses_everyone_including_its_own_owner(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("LockRoom:{42}", "alice", 10_000, 0))
        .await?
        .into_inner();
    assert!(won.acquired);
    for owner in ["bob", "alice"] {
        let refused = locks
            .acquire(acquire("LockRoom:{42}", owner, 10_000, 0))
            .await?
            .into_inner();
        assert!(!refused.acquired, "{owner} must not get a held lock");
        assert!(refused.token.is_empty());
        let holder = refused.holder.expect("holder info");
        assert_eq!(holder.owner, "alice");
        assert_eq!(holder.fencing_token, won.fencing_token);
        assert_eq!(unix_ms(&holder.expires_at), unix_ms(&won.expires_at));
    }
    Ok(())
}

on_each_store!(release_never_frees_another_holders_lock);
async fn release_never_frees_another_holders_lock(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let first = locks
        .acquire(acquire("job", "alice", 200, 0))
        .await?
        .into_inner();
    // alice's lease expires and bob takes the lock: alice's late release must not free it.
    let second = locks
        .acquire(acquire("job", "bob", 10_000, 2_000))
        .await?
        .into_inner();
    assert!(second.acquired);
    assert!(
        !locks
            .release(release("job", &first.token))
            .await?
            .into_inner()
            .released
    );
    assert!(
        !locks
            .release(release("job", "not-a-token"))
            .await?
            .into_inner()
            .released
    );
    let seen = locks
        .describe(describe("job", &second.token))
        .await?
        .into_inner();
    assert!(seen.held && seen.held_by_token);
    assert_eq!(seen.info.unwrap().owner, "bob");
    Ok(())
}

on_each_store!(a_retried_request_id_gets_the_same_lease_back);
async fn a_retried_request_id_gets_the_same_lease_back(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut request = acquire("retry", "alice", 10_000, 0);
    request.request_id = "req-1".into();
    let first = locks.acquire(request.clone()).await?.into_inner();
    let retried = locks.acquire(request.clone()).await?.into_inner();
    assert!(first.acquired && retried.acquired);
    assert_eq!(first.token, retried.token);
    assert_eq!(first.fencing_token, retried.fencing_token);
    assert_eq!(first.expires_at, retried.expires_at);
    // Another request id of the same owner is a new call: not reentrant.
    request.request_id = "req-2".into();
    assert!(!locks.acquire(request.clone()).await?.into_inner().acquired);
    // The same request id from another owner does not get alice's lease.
    let mut other = request.clone();
    other.owner = "mallory".into();
    other.request_id = "req-1".into();
    assert!(!locks.acquire(other).await?.into_inner().acquired);
    Ok(())
}

on_each_store!(tokens_are_long_random_and_unique_per_acquisition);
async fn tokens_are_long_random_and_unique_per_acquisition(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut seen = std::collections::HashSet::new();
    let mut bits = 0u32;
    let mut digits = vec![std::collections::HashSet::new(); 32];
    for _ in 0..50 {
        let won = locks
            .acquire(acquire("tok", "alice", 10_000, 0))
            .await?
            .into_inner();
        // 32 hex digits: 128 random bits (the contract asks for at least 122).
        assert_eq!(won.token.len(), 32);
        assert!(won.token.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(seen.insert(won.token.clone()), "token reused");
        bits += won
            .token
            .chars()
            .map(|c| c.to_digit(16).unwrap().count_ones())
            .sum::<u32>();
        for (at, c) in won.token.chars().enumerate() {
            digits[at].insert(c);
        }
        assert!(
            locks
                .release(release("tok", &won.token))
                .await?
                .into_inner()
                .released
        );
    }
    // Random bits, not a counter or a clock: about half of the 6,400 bits are set
    // (a binomial's 6 sigma is ±240), and every position takes many values.
    assert!((2_960..=3_440).contains(&bits), "{bits} of 6400 bits set");
    assert!(
        digits.iter().all(|seen| seen.len() >= 6),
        "a token position barely changes"
    );
    Ok(())
}

on_each_store!(fencing_tokens_strictly_increase_across_release_and_expiry);
async fn fencing_tokens_strictly_increase_across_release_and_expiry(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut last = 0;
    for round in 0..30 {
        let won = locks
            .acquire(acquire(
                "fence",
                "alice",
                if round % 3 == 0 { 5 } else { 10_000 },
                1_000,
            ))
            .await?
            .into_inner();
        assert!(won.acquired);
        assert!(
            won.fencing_token > last,
            "round {round}: {} after {last}",
            won.fencing_token
        );
        last = won.fencing_token;
        if round % 3 != 0 {
            locks.release(release("fence", &won.token)).await?;
        }
    }
    Ok(())
}

on_each_store!(fencing_tokens_never_repeat_after_redis_loses_its_writes);
async fn fencing_tokens_never_repeat_after_redis_loses_its_writes(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut highest = 0;
    for _ in 0..20 {
        let won = locks
            .acquire(acquire("crash", "alice", 10_000, 0))
            .await?
            .into_inner();
        highest = highest.max(won.fencing_token);
        locks.release(release("crash", &won.token)).await?;
    }
    // The worst crash: every write is gone (a lost second of AOF loses a subset of this).
    redis.lose_every_write().await;
    let won = locks
        .acquire(acquire("crash", "alice", 10_000, 0))
        .await?
        .into_inner();
    assert!(
        won.fencing_token > highest,
        "{} reused after {highest}",
        won.fencing_token
    );
    Ok(())
}

on_each_store!(extend_resets_the_lease_only_for_the_holder);
async fn extend_resets_the_lease_only_for_the_holder(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("ext", "alice", 1_000, 0))
        .await?
        .into_inner();
    let stranger = locks
        .extend(ExtendRequest {
            name: "ext".into(),
            token: "nope".into(),
            ttl: ms(60_000),
        })
        .await?
        .into_inner();
    assert!(!stranger.extended && stranger.expires_at.is_none());
    let extended = locks
        .extend(ExtendRequest {
            name: "ext".into(),
            token: won.token.clone(),
            ttl: ms(60_000),
        })
        .await?
        .into_inner();
    assert!(extended.extended);
    assert!(unix_ms(&extended.expires_at) >= unix_ms(&won.expires_at) + 50_000);
    // Past the first lease's end, by Redis' clock.
    wait_redis_time(&redis.conn().await, unix_ms(&won.expires_at) + 1).await;
    let seen = locks
        .describe(describe("ext", &won.token))
        .await?
        .into_inner();
    assert!(
        seen.held && seen.held_by_token,
        "the extended lease outlived its first ttl"
    );
    assert_eq!(
        unix_ms(&seen.info.unwrap().expires_at),
        unix_ms(&extended.expires_at)
    );
    Ok(())
}

on_each_store!(an_extended_lease_stays_in_the_owner_index_until_its_new_end);
async fn an_extended_lease_stays_in_the_owner_index_until_its_new_end(
    redis: TestStore,
) -> TestResult {
    // ReleaseAll finds locks through the owner's index, whose entries are trimmed once
    // their score (lease end + slack) passes; an Extend must move the entry, or a lease
    // extended past its first end + slack would become invisible to ReleaseAll.
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("long", "alice", 1_000, 0))
        .await?
        .into_inner();
    let extended = locks
        .extend(ExtendRequest {
            name: "long".into(),
            token: won.token,
            ttl: ms(600_000),
        })
        .await?
        .into_inner();
    assert!(extended.extended);
    let until: f64 = redis
        .conn()
        .await
        .zscore(redis.key("owner:{alice}"), "long")
        .await?;
    assert!(
        until as i64 >= unix_ms(&extended.expires_at),
        "index entry ends at {until}, the lease at {}",
        unix_ms(&extended.expires_at)
    );
    assert_eq!(release_all(&mut locks, "alice").await?, ["long"]);
    Ok(())
}

on_each_store!(describe_tells_who_holds_it_and_whether_a_token_is_the_holders);
async fn describe_tells_who_holds_it_and_whether_a_token_is_the_holders(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let free = locks.describe(describe("desc", "")).await?.into_inner();
    assert!(!free.held && free.info.is_none() && !free.held_by_token);
    let won = locks
        .acquire(acquire("desc", "alice", 10_000, 0))
        .await?
        .into_inner();
    let seen = locks.describe(describe("desc", "")).await?.into_inner();
    assert!(seen.held && !seen.held_by_token);
    let info = seen.info.unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        ("alice", won.fencing_token)
    );
    assert!(
        locks
            .describe(describe("desc", &won.token))
            .await?
            .into_inner()
            .held_by_token
    );
    assert!(
        !locks
            .describe(describe("desc", "other"))
            .await?
            .into_inner()
            .held_by_token
    );
    Ok(())
}

on_each_store!(check_fence_is_current_only_for_the_holders_own_fencing_token);
async fn check_fence_is_current_only_for_the_holders_own_fencing_token(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let check = |fencing_token| CheckFenceRequest {
        name: "fence".into(),
        fencing_token,
    };
    // Free: no token is current, and there is no holder.
    let free = locks.check_fence(check(1)).await?.into_inner();
    assert!(!free.current && free.holder.is_none(), "{free:?}");
    let first = locks
        .acquire(acquire("fence", "alice", 10_000, 0))
        .await?
        .into_inner();
    let seen = locks
        .check_fence(check(first.fencing_token))
        .await?
        .into_inner();
    assert!(seen.current, "{seen:?}");
    let holder = seen.holder.expect("the holder");
    assert_eq!(
        (holder.owner.as_str(), holder.fencing_token),
        ("alice", first.fencing_token)
    );
    // Another token, a neighbour of the holder's, is not current.
    for other in [first.fencing_token - 1, first.fencing_token + 1] {
        assert!(!locks.check_fence(check(other)).await?.into_inner().current);
    }
    // After the release and a new holder, the old token is stale and the new current.
    locks.release(release("fence", &first.token)).await?;
    assert!(
        !locks
            .check_fence(check(first.fencing_token))
            .await?
            .into_inner()
            .current
    );
    let second = locks
        .acquire(acquire("fence", "bob", 10_000, 0))
        .await?
        .into_inner();
    let stale = locks
        .check_fence(check(first.fencing_token))
        .await?
        .into_inner();
    assert!(!stale.current);
    assert_eq!(stale.holder.map(|h| h.owner), Some("bob".to_owned()));
    assert!(
        locks
            .check_fence(check(second.fencing_token))
            .await?
            .into_inner()
            .current
    );
    Ok(())
}

on_each_store!(release_all_frees_every_lock_of_the_owner_and_no_other);
async fn release_all_frees_every_lock_of_the_owner_and_no_other(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    for name in ["a", "b{1}", "c"] {
        assert!(wins(&mut locks, acquire(name, "alice", 10_000, 0)).await?);
    }
    assert!(wins(&mut locks, acquire("d", "bob", 10_000, 0)).await?);
    let released = release_all(&mut locks, "alice").await?;
    assert_eq!(released, ["a", "b{1}", "c"]);
    for name in ["a", "b{1}", "c"] {
        assert!(!is_held(&mut locks, name).await?, "{name} still held");
    }
    assert!(is_held(&mut locks, "d").await?, "bob's lock was freed");
    assert!(release_all(&mut locks, "alice").await?.is_empty());
    Ok(())
}

on_each_store!(release_all_sees_every_lock_won_by_concurrent_acquires);
async fn release_all_sees_every_lock_won_by_concurrent_acquires(redis: TestStore) -> TestResult {
    // Concurrent acquires share owner-index writes; each must be recorded before its
    // Acquire answers, under its own owner.
    let server = TestServer::start(&redis).await;
    let locks = server.locks().await;
    let owners = ["alice", "bob", "carol", "dave"];
    let mut calls = Vec::new();
    for i in 0..100 {
        let mut locks = locks.clone();
        let owner = owners[i % owners.len()];
        calls.push(tokio::spawn(async move {
            wins(&mut locks, acquire(&format!("n{i:03}"), owner, 10_000, 0)).await
        }));
    }
    for call in calls {
        assert!(call.await??);
    }
    let mut locks = locks;
    for (k, owner) in owners.iter().enumerate() {
        let expected: Vec<String> = (0..100)
            .filter(|i| i % owners.len() == k)
            .map(|i| format!("n{i:03}"))
            .collect();
        assert_eq!(release_all(&mut locks, owner).await?, expected, "{owner}");
    }
    Ok(())
}

on_each_store!(release_all_frees_locks_won_by_waiting_and_never_ones_only_tried);
async fn release_all_frees_locks_won_by_waiting_and_never_ones_only_tried(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    // A try that lost leaves alice an index entry for bob's lock: harmless.
    assert!(wins(&mut locks, acquire("bobs", "bob", 10_000, 0)).await?);
    assert!(
        !locks
            .acquire(acquire("bobs", "alice", 10_000, 0))
            .await?
            .into_inner()
            .acquired
    );
    // A lock alice wins by waiting is indexed once won.
    let carol = locks
        .acquire(acquire("shared", "carol", 10_000, 0))
        .await?
        .into_inner();
    let mut waiter = server.locks().await;
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(acquire("shared", "alice", 10_000, 5_000))
            .await
    });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    assert!(
        locks
            .release(release("shared", &carol.token))
            .await?
            .into_inner()
            .released
    );
    assert!(waiting.await??.into_inner().acquired);

    let released = release_all(&mut locks, "alice").await?;
    assert_eq!(released, ["shared"]);
    assert!(is_held(&mut locks, "bobs").await?);
    Ok(())
}

on_each_store!(a_crashed_client_never_leaves_a_lock_longer_than_its_ttl);
async fn a_crashed_client_never_leaves_a_lock_longer_than_its_ttl(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("crashy", "alice", 1_000, 0))
        .await?
        .into_inner();
    assert!(won.acquired);
    // alice never releases. Redis' own expiry frees the key (PEXPIRE in the same script).
    let ttl: i64 = redis.conn().await.pttl(redis.key("lock:{crashy}")).await?;
    assert!(ttl > 0 && ttl <= 1_000, "lease pttl {ttl}");
    wait_redis_time(&redis.conn().await, unix_ms(&won.expires_at) + 1).await;
    assert!(!is_held(&mut locks, "crashy").await?);
    assert!(wins(&mut locks, acquire("crashy", "bob", 300, 0)).await?);
    Ok(())
}

on_each_store!(a_waiting_acquire_is_in_the_owner_index_before_it_can_win);
async fn a_waiting_acquire_is_in_the_owner_index_before_it_can_win(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("idx", "alice", 60_000, 0)).await?;
    let mut waiter = server.locks().await;
    let started = turnstile::time::now_ms();
    let waiting =
        tokio::spawn(async move { waiter.acquire(acquire("idx", "bob", 10_000, 30_000)).await });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    // Written with its first try and covering any win within the wait plus the lease,
    // so a server killed between a win and an index write cannot hide the lock.
    let score: Option<i64> = redis
        .conn()
        .await
        .zscore(redis.key("owner:{bob}"), "idx")
        .await?;
    let score = score.expect("no owner index entry while waiting");
    assert!(score >= started + 30_000 + 10_000, "entry ends at {score}");
    waiting.abort();
    Ok(())
}

on_each_store!(a_waiter_is_woken_at_once_by_a_release);
async fn a_waiter_is_woken_at_once_by_a_release(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let held = locks
        .acquire(acquire("wake", "alice", 30_000, 0))
        .await?
        .into_inner();
    let mut waiter = server.locks().await;
    let waiting = tokio::spawn(async move {
        let reply = waiter.acquire(acquire("wake", "bob", 10_000, 10_000)).await;
        (reply, Instant::now())
    });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    let released_at = Instant::now();
    assert!(
        locks
            .release(release("wake", &held.token))
            .await?
            .into_inner()
            .released
    );
    let (reply, won_at) = waiting.await?;
    assert!(reply?.into_inner().acquired);
    let late = won_at - released_at;
    // Woken by the release, not by the lease ending in 30 s (milliseconds when idle;
    // a generous bound for shared machines: the bench measures the real handoff).
    assert!(
        late < Duration::from_secs(1),
        "woken {late:?} after the release"
    );
    Ok(())
}

on_each_store!(a_waiter_is_woken_promptly_when_the_lease_expires);
async fn a_waiter_is_woken_promptly_when_the_lease_expires(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let held = locks
        .acquire(acquire("expiry", "alice", 500, 0))
        .await?
        .into_inner();
    let reply = locks
        .acquire(acquire("expiry", "bob", 10_000, 5_000))
        .await?
        .into_inner();
    let won_at = turnstile::time::now_ms();
    assert!(reply.acquired);
    let late = won_at - unix_ms(&held.expires_at);
    assert!((0..100).contains(&late), "woken {late} ms after the expiry");
    Ok(())
}

on_each_store!(a_release_wakes_one_waiter_not_every_waiter, own cluster);
async fn a_release_wakes_one_waiter_not_every_waiter(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let held = locks
        .acquire(acquire("herd", "alice", 60_000, 0))
        .await?
        .into_inner();
    let winners = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let mut client = server.locks().await;
        let winners = winners.clone();
        tasks.push(tokio::spawn(async move {
            let reply = client
                .acquire(acquire("herd", &format!("w{i}"), 60_000, 3_000))
                .await
                .unwrap()
                .into_inner();
            if reply.acquired {
                winners.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    server.wait_metric("turnstile_lock_waiters", 20.0).await;
    let before = redis.command_calls("evalsha").await;
    locks.release(release("herd", &held.token)).await?;
    server.wait_metric("turnstile_lock_waiters", 19.0).await;
    // A window for a herd to show itself: the one thing here that cannot be awaited,
    // since what is checked is that nothing more happens.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let scripts = redis.command_calls("evalsha").await - before;
    assert_eq!(winners.load(Ordering::SeqCst), 1);
    // release + the woken waiter's acquire + its owner index + the next head's look:
    // a handful, where a thundering herd would be 20 or more.
    assert!(scripts <= 6, "{scripts} scripts ran after one release");
    for task in tasks {
        task.await?;
    }
    Ok(())
}

on_each_store!(waiting_does_not_poll_redis, own cluster);
async fn waiting_does_not_poll_redis(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("idle", "alice", 60_000, 0)).await?;
    let mut waiters = Vec::new();
    for i in 0..10 {
        let mut client = server.locks().await;
        waiters.push(tokio::spawn(async move {
            client
                .acquire(acquire("idle", &format!("w{i}"), 1_000, 2_500))
                .await
        }));
    }
    server.wait_metric("turnstile_lock_waiters", 10.0).await;
    let before = redis.total_commands().await;
    // The measured window (the waits run out at 2.5 s): nothing to await in it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Only each replica's readiness probe (one PING a second) and our own INFO calls.
    let spent = redis.total_commands().await - before;
    // Polling waiters would send hundreds (10 waiters, even at 10 Hz, is 200).
    let budget = 10 * server.replicas() as u64;
    assert!(
        spent <= budget,
        "{spent} commands while 10 calls waited for 2 s"
    );
    for waiter in waiters {
        assert!(!waiter.await??.into_inner().acquired);
    }
    Ok(())
}

on_each_store!(a_wait_that_runs_out_answers_not_acquired_with_the_holder);
async fn a_wait_that_runs_out_answers_not_acquired_with_the_holder(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("busy", "alice", 60_000, 0)).await?;
    let started = Instant::now();
    let reply = locks
        .acquire(acquire("busy", "bob", 10_000, 300))
        .await?
        .into_inner();
    let waited = started.elapsed();
    assert!(!reply.acquired);
    assert_eq!(reply.holder.unwrap().owner, "alice");
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(2),
        "waited {waited:?}"
    );
    Ok(())
}

on_each_store!(a_caller_whose_deadline_passes_gets_deadline_exceeded_and_never_the_lock);
async fn a_caller_whose_deadline_passes_gets_deadline_exceeded_and_never_the_lock(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let held = locks
        .acquire(acquire("dl", "alice", 60_000, 0))
        .await?
        .into_inner();
    let started = Instant::now();
    let status = locks
        .acquire(with_timeout(
            acquire("dl", "bob", 10_000, 30_000),
            Duration::from_millis(300),
        ))
        .await
        .unwrap_err();
    common::assert_server_deadline(&status, started);
    // Bob's wait is over on the server too, so nobody can win the lock after this.
    server.wait_metric("turnstile_lock_waiters", 0.0).await;
    locks.release(release("dl", &held.token)).await?;
    assert!(!is_held(&mut locks, "dl").await?, "bob won after giving up");
    Ok(())
}

on_each_store!(a_try_once_whose_deadline_passes_in_flight_never_leaves_the_lock_held, own cluster);
async fn a_try_once_whose_deadline_passes_in_flight_never_leaves_the_lock_held(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    // Redis holds every script for 400 ms, so the acquire waits in its queue past the
    // caller's deadline and runs only after the caller has gone.
    redis.pause_writes(Duration::from_millis(400)).await;
    let gave_up = locks
        .acquire(with_timeout(
            acquire("late", "alice", 60_000, 0),
            Duration::from_millis(200),
        ))
        .await;
    assert!(
        gave_up.is_err(),
        "answered while Redis was busy: {gave_up:?}"
    );
    // The give-back runs on the lock's own socket after the acquire, and so does this.
    assert!(
        !is_held(&mut locks, "late").await?,
        "the caller gave up, yet the lock is held"
    );
    Ok(())
}

on_each_store!(a_waiting_call_whose_deadline_passes_before_its_first_try_gets_deadline_exceeded, own cluster);
async fn a_waiting_call_whose_deadline_passes_before_its_first_try_gets_deadline_exceeded(
    redis: TestStore,
) -> TestResult {
    // Redis holds the first tries of 64 waiting calls for as long as the test needs
    // (no Redis timeout ends them), so every first-try turn stays taken.
    let server =
        TestServer::start_with(&redis, |c| c.redis_timeout = Duration::from_secs(120)).await;
    // One replica takes every call: the turns are each replica's own.
    let channel = server.try_channel(None).await?;
    let in_flight = || async {
        server
            .metric_values("turnstile_first_tries_in_flight")
            .await[0]
    };
    redis.pause_writes(Duration::from_secs(120)).await;
    let mut tries = tokio::task::JoinSet::new();
    for n in 0..turnstile::testing::FIRST_TRIES {
        let mut locks = LockServiceClient::new(channel.clone());
        tries.spawn(async move {
            locks
                .acquire(acquire(&format!("turn-{n}"), "alice", 60_000, 30_000))
                .await
        });
    }
    common::eventually("every first-try turn taken", common::WAIT, || async {
        in_flight().await == turnstile::testing::FIRST_TRIES as f64
    })
    .await;
    // The next waiting call waits for a turn, and its deadline passes there.
    let mut locks = LockServiceClient::new(channel.clone());
    let started = Instant::now();
    let late = locks.acquire(with_timeout(
        acquire("turn-late", "bob", 60_000, 30_000),
        Duration::from_millis(300),
    ));
    let status = tokio::time::timeout(Duration::from_secs(20), late)
        .await
        .expect("no answer while the first tries held every turn")
        .unwrap_err();
    common::assert_server_deadline(&status, started);
    assert_eq!(
        in_flight().await,
        turnstile::testing::FIRST_TRIES as f64,
        "a first try ended before the late call was answered"
    );
    redis.resume_writes().await;
    while let Some(won) = tries.join_next().await {
        assert!(won??.into_inner().acquired);
    }
    assert!(!is_held(&mut locks, "turn-late").await?);
    Ok(())
}

on_each_store!(a_caller_that_cancels_never_ends_up_holding_the_lock);
async fn a_caller_that_cancels_never_ends_up_holding_the_lock(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let held = locks
        .acquire(acquire("cancel", "alice", 60_000, 0))
        .await?
        .into_inner();
    let mut waiter = server.locks().await;
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(acquire("cancel", "bob", 10_000, 30_000))
            .await
    });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    waiting.abort();
    let _ = waiting.await;
    // The cancelled call stops waiting on the server, so nobody can win after this.
    server.wait_metric("turnstile_lock_waiters", 0.0).await;
    locks.release(release("cancel", &held.token)).await?;
    assert!(
        !is_held(&mut locks, "cancel").await?,
        "a cancelled call took the lock"
    );
    Ok(())
}

on_each_store!(forty_clients_doing_read_modify_write_under_the_lock_lose_no_update);
async fn forty_clients_doing_read_modify_write_under_the_lock_lose_no_update(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let counter = redis.key("counter");
    let shared_conn = redis.conn().await;
    let mut tasks = Vec::new();
    for client_no in 0..40 {
        let mut locks = server.locks().await;
        let mut conn = shared_conn.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let won = locks
                    .acquire(acquire("counter", &format!("c{client_no}"), 10_000, 60_000))
                    .await
                    .unwrap()
                    .into_inner();
                assert!(won.acquired);
                // A deliberately racy read-modify-write: only the lock keeps it correct.
                let value: i64 = conn
                    .get::<_, Option<i64>>(&counter)
                    .await
                    .unwrap()
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                let _: () = conn.set(&counter, value + 1).await.unwrap();
                assert!(
                    locks
                        .release(release("counter", &won.token))
                        .await
                        .unwrap()
                        .into_inner()
                        .released
                );
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let total: i64 = redis.conn().await.get(&counter).await?;
    assert_eq!(total, 1000);
    Ok(())
}

on_each_store!(a_flash_sale_of_ten_phones_to_two_hundred_buyers_sells_exactly_ten);
async fn a_flash_sale_of_ten_phones_to_two_hundred_buyers_sells_exactly_ten(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let stock_key = redis.key("stock");
    let shared_conn = redis.conn().await;
    let _: () = shared_conn.clone().set(&stock_key, 10).await?;
    let sales = Arc::new(AtomicI64::new(0));
    // Who is inside the critical section, and the fencing tokens in the order holders
    // entered it: with mutual exclusion, never two inside, tokens strictly increasing.
    let inside = Arc::new(AtomicI64::new(0));
    let entered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut buyers = Vec::new();
    for buyer in 0..200 {
        let mut locks = server.locks().await;
        let mut conn = shared_conn.clone();
        let stock_key = stock_key.clone();
        let (sales, inside, entered) = (sales.clone(), inside.clone(), entered.clone());
        buyers.push(tokio::spawn(async move {
            let won = locks
                .acquire(acquire(
                    "phone-sale",
                    &format!("buyer{buyer}"),
                    10_000,
                    60_000,
                ))
                .await
                .unwrap()
                .into_inner();
            assert!(won.acquired);
            assert_eq!(
                inside.fetch_add(1, Ordering::SeqCst),
                0,
                "two holders at once"
            );
            entered.lock().unwrap().push(won.fencing_token);
            // Read, yield, write: a second holder inside would oversell.
            let stock: i64 = conn.get(&stock_key).await.unwrap();
            tokio::task::yield_now().await;
            if stock > 0 {
                let _: () = conn.set(&stock_key, stock - 1).await.unwrap();
                sales.fetch_add(1, Ordering::SeqCst);
            }
            inside.fetch_sub(1, Ordering::SeqCst);
            locks
                .release(release("phone-sale", &won.token))
                .await
                .unwrap();
        }));
    }
    for buyer in buyers {
        buyer.await?;
    }
    let stock: i64 = redis.conn().await.get(&stock_key).await?;
    assert_eq!(sales.load(Ordering::SeqCst), 10);
    assert_eq!(stock, 0);
    let entered = entered.lock().unwrap();
    assert_eq!(entered.len(), 200);
    assert!(
        entered.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens out of order: holders overlapped"
    );
    Ok(())
}

fn hold(name: &str, owner: &str, ttl_ms: i64, wait_ms: i64) -> HoldRequest {
    HoldRequest {
        name: name.into(),
        owner: owner.into(),
        ttl: ms(ttl_ms),
        wait: ms(wait_ms),
        token: String::new(),
    }
}

async fn next_event(stream: &mut tonic::Streaming<turnstile::pb::HoldResponse>) -> Option<Event> {
    let message = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event within 5 s")?;
    message.expect("stream ok").event
}

on_each_store!(hold_renews_the_lease_and_releases_at_once_when_cancelled);
async fn hold_renews_the_lease_and_releases_at_once_when_cancelled(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut stream = locks
        .hold(hold("held", "alice", 1_500, 0))
        .await?
        .into_inner();
    let Some(Event::Acquired(acquired)) = next_event(&mut stream).await else {
        panic!("no Acquired")
    };
    let first = unix_ms(&acquired.expires_at);
    let mut last = first;
    for _ in 0..3 {
        match next_event(&mut stream).await {
            Some(Event::Renewed(renewed)) => {
                let until = unix_ms(&renewed.expires_at);
                // Renewed while the lease still ran (each renewal ends it later).
                assert!(until > last);
                assert!(
                    turnstile::time::now_ms() < last,
                    "renewed after the lease ended"
                );
                last = until;
            }
            other => panic!("expected Renewed, got {other:?}"),
        }
    }
    // Every ttl/3 (500 ms), each renewal moving the end by that much: ttl/2 would be
    // 750 ms. The average of three allows a late renewal on a loaded machine.
    let every = (last - first) / 3;
    assert!((480..=700).contains(&every), "renewed every {every} ms");
    // Three renewals of a 1.5 s lease: it lived past its first ttl.
    let seen = locks
        .describe(describe("held", &acquired.token))
        .await?
        .into_inner();
    assert!(seen.held_by_token);
    drop(stream);
    common::eventually("free once the stream closed", common::WAIT, || {
        let mut locks = locks.clone();
        async move { is_held(&mut locks, "held").await.ok() == Some(false) }
    })
    .await;
    // Released, not expired: free before the last renewed lease's end, which was
    // about a second after the close.
    let now = common::redis_now_ms(&mut redis.conn().await).await;
    assert!(
        now < last,
        "free only {} ms after the lease's end: it expired, the close did not release it",
        now - last
    );
    Ok(())
}

on_each_store!(hold_sends_heartbeats_while_waiting_and_while_holding);
async fn hold_sends_heartbeats_while_waiting_and_while_holding(redis: TestStore) -> TestResult {
    let server =
        TestServer::start_with(&redis, |c| c.stream_heartbeat = Duration::from_millis(100)).await;
    let mut locks = server.locks().await;
    let held = locks
        .acquire(acquire("hb", "alice", 400, 0))
        .await?
        .into_inner();
    let mut stream = locks
        .hold(hold("hb", "bob", 60_000, 5_000))
        .await?
        .into_inner();
    assert!(
        matches!(next_event(&mut stream).await, Some(Event::Heartbeat(_))),
        "no heartbeat while waiting"
    );
    let acquired = loop {
        match next_event(&mut stream).await {
            Some(Event::Heartbeat(_)) => continue,
            Some(Event::Acquired(acquired)) => break acquired,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(acquired.fencing_token > held.fencing_token);
    // A 60 s lease renews every 20 s: in between, heartbeats keep the stream alive.
    for _ in 0..3 {
        assert!(
            matches!(next_event(&mut stream).await, Some(Event::Heartbeat(_))),
            "no heartbeat while holding"
        );
    }
    Ok(())
}

on_each_store!(hold_whose_wait_runs_out_sends_lost_and_ends_ok);
async fn hold_whose_wait_runs_out_sends_lost_and_ends_ok(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("taken", "alice", 60_000, 0)).await?;
    let mut stream = locks
        .hold(hold("taken", "bob", 10_000, 200))
        .await?
        .into_inner();
    match next_event(&mut stream).await {
        Some(Event::Lost(lost)) => assert_eq!(lost.reason, "not acquired"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_secs(2), stream.next())
            .await?
            .is_none(),
        "stream did not end OK"
    );
    Ok(())
}

on_each_store!(hold_sends_lost_when_the_lock_is_taken_from_it);
async fn hold_sends_lost_when_the_lock_is_taken_from_it(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut stream = locks
        .hold(hold("stolen", "alice", 300, 0))
        .await?
        .into_inner();
    assert!(matches!(
        next_event(&mut stream).await,
        Some(Event::Acquired(_))
    ));
    // An operator deletes the lease and someone else takes the lock.
    let _: () = redis.conn().await.del(redis.key("lock:{stolen}")).await?;
    assert!(wins(&mut locks, acquire("stolen", "bob", 10_000, 0)).await?);
    loop {
        match next_event(&mut stream).await {
            Some(Event::Renewed(_)) | Some(Event::Heartbeat(_)) => continue,
            Some(Event::Lost(_)) => break,
            other => panic!("expected Lost, got {other:?}"),
        }
    }
    Ok(())
}

/// A Hold request that re-attaches to the lease `token` holds.
fn reattach(name: &str, token: &str, ttl_ms: i64) -> HoldRequest {
    HoldRequest {
        token: token.into(),
        ..hold(name, "alice", ttl_ms, 0)
    }
}

/// The stream's next message until it ends with an error status.
async fn end_status(stream: &mut tonic::Streaming<turnstile::pb::HoldResponse>) -> tonic::Status {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the stream ends within 10 s")
        {
            Some(Ok(_)) => continue,
            Some(Err(status)) => return status,
            None => panic!("the stream ended OK, not with a status"),
        }
    }
}

/// Re-attaches with `token` and checks the lease continues: the same token and
/// fencing token, then a renewal.
async fn reattaches(
    locks: &mut LockServiceClient<tonic::transport::Channel>,
    name: &str,
    acquired: &turnstile::pb::hold_response::Acquired,
    ttl_ms: i64,
) -> Result<tonic::Streaming<turnstile::pb::HoldResponse>, tonic::Status> {
    let mut stream = locks
        .hold(reattach(name, &acquired.token, ttl_ms))
        .await?
        .into_inner();
    match next_event(&mut stream).await {
        Some(Event::Acquired(again)) => {
            assert_eq!(again.token, acquired.token);
            assert_eq!(again.fencing_token, acquired.fencing_token);
        }
        other => panic!("expected Acquired on re-attach, got {other:?}"),
    }
    loop {
        match next_event(&mut stream).await {
            Some(Event::Heartbeat(_)) => continue,
            Some(Event::Renewed(_)) => return Ok(stream),
            other => panic!("expected Renewed after re-attach, got {other:?}"),
        }
    }
}

on_each_store!(shutdown_ends_hold_streams_with_unavailable_and_keeps_their_lease_for_a_reattach);
async fn shutdown_ends_hold_streams_with_unavailable_and_keeps_their_lease_for_a_reattach(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let other = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut stream = locks
        .hold(hold("drain", "alice", 3_000, 0))
        .await?
        .into_inner();
    let Some(Event::Acquired(acquired)) = next_event(&mut stream).await else {
        panic!("no Acquired")
    };
    let shutting = tokio::spawn(server.shutdown());
    assert_eq!(end_status(&mut stream).await.code(), Code::Unavailable);
    shutting.await??;
    // The other replica finds the lease still held by the token, and the client
    // continues it there: same token, same fencing token, renewed past its first ttl.
    let mut survivor = other.locks().await;
    let seen = survivor
        .describe(describe("drain", &acquired.token))
        .await?
        .into_inner();
    assert!(seen.held_by_token, "the lock was released by the shutdown");
    let continued = reattaches(&mut survivor, "drain", &acquired, 3_000).await?;
    // Closing the re-attached stream releases at once.
    drop(continued);
    eventually_free(&survivor, "drain").await?;
    Ok(())
}

/// Waits (bounded) until `name` is free: a release, not an expiry, when the lease
/// had seconds left.
async fn eventually_free(
    locks: &LockServiceClient<tonic::transport::Channel>,
    name: &str,
) -> TestResult {
    common::eventually(
        "released when the stream closed",
        Duration::from_secs(2),
        || {
            let mut locks = locks.clone();
            async move { !is_held(&mut locks, name).await.unwrap() }
        },
    )
    .await;
    Ok(())
}

on_each_store!(a_hold_cut_by_connection_age_keeps_its_lease_and_reattaches_by_token);
async fn a_hold_cut_by_connection_age_keeps_its_lease_and_reattaches_by_token(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start_with(&redis, |c| {
        c.max_connection_age = Duration::from_millis(1_000);
        c.max_connection_age_grace = Duration::from_millis(500);
    })
    .await;
    let mut locks = server.locks().await;
    let mut stream = locks
        .hold(hold("aged", "alice", 10_000, 0))
        .await?
        .into_inner();
    let Some(Event::Acquired(acquired)) = next_event(&mut stream).await else {
        panic!("no Acquired")
    };
    let status = end_status(&mut stream).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("--max-connection-age"),
        "{status:?}"
    );
    // A fresh connection (the old one was told GOAWAY) re-attaches within the ttl,
    // with a ttl that renews before this connection ages out in turn.
    let mut again = server.locks().await;
    let continued = reattaches(&mut again, "aged", &acquired, 900).await?;
    drop(continued);
    eventually_free(&again, "aged").await?;
    Ok(())
}

on_each_store!(an_aged_out_connection_is_closed_after_its_grace_even_with_a_call_waiting);
async fn an_aged_out_connection_is_closed_after_its_grace_even_with_a_call_waiting(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start_with(&redis, |c| {
        c.max_connection_age = Duration::from_millis(200);
        c.max_connection_age_grace = Duration::from_millis(200);
    })
    .await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("busy", "alice", 60_000, 0)).await?;
    let mut waiter = server.locks().await;
    let started = Instant::now();
    let waited = waiter
        .acquire(acquire("busy", "bob", 10_000, 30_000))
        .await
        .expect_err("a wait cut by the connection's end");
    assert_eq!(waited.code(), Code::Unavailable, "{waited:?}");
    assert!(
        waited.message().contains("--max-connection-age"),
        "{waited:?}"
    );
    // Age + grace: well before the wait would have ended.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The caller that gave up holds nothing: alice still does.
    let seen = locks.describe(describe("busy", "")).await?.into_inner();
    assert_eq!(seen.info.map(|i| i.owner).as_deref(), Some("alice"));
    Ok(())
}

on_each_store!(a_replaced_hold_stream_can_neither_renew_nor_release_its_successors_lease);
async fn a_replaced_hold_stream_can_neither_renew_nor_release_its_successors_lease(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    // The first stream's connection "was cut" but the server has not noticed: it is
    // still open when the client re-attaches on another connection.
    let mut first_client = server.locks().await;
    let mut first = first_client
        .hold(hold("moved", "alice", 900, 0))
        .await?
        .into_inner();
    let Some(Event::Acquired(acquired)) = next_event(&mut first).await else {
        panic!("no Acquired")
    };
    let mut second_client = server.locks().await;
    let mut second = second_client
        .hold(reattach("moved", &acquired.token, 900))
        .await?
        .into_inner();
    assert!(matches!(
        next_event(&mut second).await,
        Some(Event::Acquired(again)) if again.fencing_token == acquired.fencing_token
    ));
    // The old stream ends: its release must not free the lease it no longer owns.
    drop(first);
    server
        .wait_metric("turnstile_streams_open{kind=\"hold\"}", 1.0)
        .await;
    let mut locks = server.locks().await;
    let seen = locks
        .describe(describe("moved", &acquired.token))
        .await?
        .into_inner();
    assert!(seen.held_by_token, "the replaced stream released the lock");
    // The successor keeps renewing past the 900 ms ttl.
    for _ in 0..4 {
        match next_event(&mut second).await {
            Some(Event::Renewed(_)) | Some(Event::Heartbeat(_)) => {}
            other => panic!("expected Renewed, got {other:?}"),
        }
    }
    assert!(is_held(&mut locks, "moved").await?);
    drop(second);
    eventually_free(&locks, "moved").await?;
    Ok(())
}

on_each_store!(a_hold_that_was_reattached_elsewhere_is_told_lost_on_its_next_renewal);
async fn a_hold_that_was_reattached_elsewhere_is_told_lost_on_its_next_renewal(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let mut first = locks
        .hold(hold("taken-over", "alice", 600, 0))
        .await?
        .into_inner();
    let Some(Event::Acquired(acquired)) = next_event(&mut first).await else {
        panic!("no Acquired")
    };
    let mut other = server.locks().await;
    let _second = reattaches(&mut other, "taken-over", &acquired, 600).await?;
    // Its next renewal (every 200 ms) is refused: a few messages at most.
    for _ in 0..10 {
        match next_event(&mut first).await {
            Some(Event::Renewed(_)) | Some(Event::Heartbeat(_)) => continue,
            Some(Event::Lost(lost)) => {
                assert_eq!(lost.reason, "re-attached by another stream");
                return Ok(());
            }
            other => panic!("expected Lost, got {other:?}"),
        }
    }
    panic!("the replaced stream kept renewing")
}

on_each_store!(reattach_with_a_token_that_no_longer_holds_sends_lost_and_ends_ok);
async fn reattach_with_a_token_that_no_longer_holds_sends_lost_and_ends_ok(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("gone", "alice", 60_000, 0))
        .await?
        .into_inner();
    locks.release(release("gone", &won.token)).await?;
    // Someone else holds it now: the old token must not take their lease over.
    let bob = locks
        .acquire(acquire("gone", "bob", 60_000, 0))
        .await?
        .into_inner();
    let mut stream = locks
        .hold(reattach("gone", &won.token, 5_000))
        .await?
        .into_inner();
    match next_event(&mut stream).await {
        Some(Event::Lost(lost)) => assert_eq!(lost.reason, "the token no longer holds the lease"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(stream.next().await.is_none(), "the stream did not end OK");
    let seen = locks
        .describe(describe("gone", &bob.token))
        .await?
        .into_inner();
    assert!(seen.held_by_token, "bob's lease was touched");
    assert_eq!(
        seen.info.map(|i| i.expires_at),
        Some(bob.expires_at),
        "bob's lease was extended by another token"
    );
    Ok(())
}

on_each_store!(waiting_calls_answer_unavailable_when_the_server_shuts_down, own cluster);
async fn waiting_calls_answer_unavailable_when_the_server_shuts_down(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("busy", "alice", 60_000, 0)).await?;
    let mut waiter = server.locks().await;
    let acquiring =
        tokio::spawn(async move { waiter.acquire(acquire("busy", "bob", 10_000, 30_000)).await });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    // A long-poll Lease on an empty queue: waiting once its first look (one script) ran.
    let looks = redis.command_calls("evalsha").await;
    let mut queues = server.queues().await;
    let leasing = tokio::spawn(async move {
        queues
            .lease(turnstile::pb::LeaseRequest {
                queue: "idle".into(),
                wait: ms(30_000),
                ..Default::default()
            })
            .await
    });
    redis.wait_command_calls_above("evalsha", looks).await;
    server.shutdown().await?;
    let acquired = acquiring
        .await?
        .expect_err("a waiting Acquire during shutdown");
    assert_eq!(acquired.code(), Code::Unavailable, "{acquired:?}");
    let leased = leasing.await?.expect_err("a waiting Lease during shutdown");
    assert_eq!(leased.code(), Code::Unavailable, "{leased:?}");
    Ok(())
}

on_each_store!(bad_input_is_invalid_argument_naming_the_field);
async fn bad_input_is_invalid_argument_naming_the_field(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let long_name = "x".repeat(513);
    let long_owner = "o".repeat(257);
    let cases: Vec<(AcquireRequest, &str)> = vec![
        (acquire("", "alice", 1_000, 0), "name"),
        (acquire(&long_name, "alice", 1_000, 0), "name"),
        (acquire("bad\nname", "alice", 1_000, 0), "name"),
        (acquire("n", "", 1_000, 0), "owner"),
        (acquire("n", &long_owner, 1_000, 0), "owner"),
        (acquire("n", "al\u{7}ice", 1_000, 0), "owner"),
        (acquire("n", "alice", 0, 0), "ttl"),
        (acquire("n", "alice", -5, 0), "ttl"),
        (acquire("n", "alice", 24 * 3600 * 1000 + 1, 0), "ttl"),
        (acquire("n", "alice", 1_000, -1), "wait"),
        (acquire("n", "alice", 1_000, 3600 * 1000 + 1), "wait"),
        (
            AcquireRequest {
                request_id: "r\n".into(),
                ..acquire("n", "alice", 1_000, 0)
            },
            "request_id",
        ),
    ];
    for (request, field) in cases {
        let status = locks.acquire(request.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{request:?}");
        assert!(
            status.message().starts_with(&format!("{field}:")),
            "{request:?} → {}",
            status.message()
        );
    }
    // The limits are inclusive.
    assert!(
        locks
            .acquire(acquire(
                &"x".repeat(512),
                &"o".repeat(256),
                24 * 3600 * 1000,
                0
            ))
            .await?
            .into_inner()
            .acquired
    );
    let status = locks.release(release("n", "")).await.unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("token:"));
    let status = locks
        .extend(ExtendRequest {
            name: "n".into(),
            token: "t".into(),
            ttl: ms(0),
        })
        .await
        .unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("ttl:"));
    let status = locks.describe(describe("", "")).await.unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("name:"));
    let status = locks
        .release_all(ReleaseAllRequest {
            owner: String::new(),
        })
        .await
        .unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("owner:"));
    let status = locks.hold(hold("n", "alice", 0, 0)).await.unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("ttl:"));
    Ok(())
}

on_each_store!(too_many_waiters_or_streams_is_resource_exhausted);
async fn too_many_waiters_or_streams_is_resource_exhausted(redis: TestStore) -> TestResult {
    let server = TestServer::start_with(&redis, |c| {
        c.max_waiters = 1;
        c.max_streams = 1;
    })
    .await;
    let mut locks = server.locks().await;
    locks.acquire(acquire("full", "alice", 60_000, 0)).await?;
    // The limits are per server: the waiter and the refused call go to the same one.
    let mut first = locks.clone();
    let waiting =
        tokio::spawn(async move { first.acquire(acquire("full", "bob", 1_000, 1_000)).await });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    let status = locks
        .acquire(acquire("full", "carol", 1_000, 1_000))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(!waiting.await??.into_inner().acquired);
    let _open = locks
        .hold(hold("other", "alice", 60_000, 0))
        .await?
        .into_inner();
    let status = locks
        .hold(hold("third", "alice", 60_000, 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_unavailable_within_the_callers_deadline() -> TestResult {
    let mut redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    redis.kill().await;
    for timeout in [Duration::from_millis(500), Duration::from_secs(5)] {
        let started = Instant::now();
        let status = locks
            .acquire(with_timeout(acquire("down", "alice", 1_000, 0), timeout))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            started.elapsed() < timeout.min(Duration::from_secs(3)),
            "took {:?}",
            started.elapsed()
        );
        let status = locks
            .release(with_timeout(release("down", "t"), timeout))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    }
    // Redis comes back: the same server serves again, without a restart.
    redis.restart().await;
    let started = Instant::now();
    loop {
        match locks.acquire(acquire("down", "alice", 1_000, 0)).await {
            Ok(reply) => {
                assert!(reply.into_inner().acquired);
                break;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable);
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "never recovered"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_still_wakes_after_redis_restarts() -> TestResult {
    let mut redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    // A lease far longer than the test: only the pub/sub reconnect (every waiter looks
    // again, as messages may have been lost) can wake the waiter, not its expiry timer.
    locks
        .acquire(acquire("restart", "alice", 60_000, 0))
        .await?;
    let mut waiter = server.locks().await;
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(acquire("restart", "bob", 10_000, 30_000))
            .await
    });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    redis.restart().await; // the lease is gone with the data; pub/sub reconnects
    let reply = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await???
        .into_inner();
    assert!(reply.acquired);
    Ok(())
}

on_each_store!(scripts_run_by_sha_and_reload_after_redis_forgets_them, own cluster);
async fn scripts_run_by_sha_and_reload_after_redis_forgets_them(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(acquire("sha", "alice", 10_000, 0))
        .await?
        .into_inner();
    assert!(redis.command_calls("evalsha").await >= 1);
    assert_eq!(
        redis.command_calls("eval").await,
        0,
        "scripts are sent by SHA, not as source"
    );
    // A restarted Redis has an empty script cache: NOSCRIPT, then load and run again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut redis.conn().await)
        .await?;
    assert!(
        locks
            .release(release("sha", &won.token))
            .await?
            .into_inner()
            .released
    );
    // A try-once acquire sends the owner-index commands alongside its script: after
    // NOSCRIPT the script is loaded and run again, and the lock is still indexed.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut redis.conn().await)
        .await?;
    assert!(wins(&mut locks, acquire("sha", "alice", 10_000, 0)).await?);
    let released = release_all(&mut locks, "alice").await?;
    assert_eq!(released, ["sha"]);
    Ok(())
}

on_each_store!(unset_durations_mean_the_defaults_and_maximums_are_inclusive);
async fn unset_durations_mean_the_defaults_and_maximums_are_inclusive(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    // ttl unset: 15 s, for Acquire and for Extend.
    let before = turnstile::time::now_ms();
    let won = locks
        .acquire(AcquireRequest {
            name: "d".into(),
            owner: "o".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let lease = unix_ms(&won.expires_at) - before;
    assert!((14_000..=16_000).contains(&lease), "a lease of {lease} ms");
    let before = turnstile::time::now_ms();
    let extended = locks
        .extend(ExtendRequest {
            name: "d".into(),
            token: won.token.clone(),
            ttl: None,
        })
        .await?
        .into_inner();
    let lease = unix_ms(&extended.expires_at) - before;
    assert!((14_000..=16_000).contains(&lease), "extended by {lease} ms");
    // ttl of exactly 24 h and wait of exactly 1 h are accepted.
    assert!(wins(&mut locks, acquire("max", "o", 24 * 3_600_000, 3_600_000)).await?);
    Ok(())
}

/// A TCP proxy to `target` that can go silent, as a cut network does: frozen, it stops
/// forwarding both ways but keeps the sockets open, so neither side sees a close.
struct FreezingProxy {
    addr: std::net::SocketAddr,
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl FreezingProxy {
    async fn start(target: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = frozen.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let outbound = tokio::net::TcpStream::connect(target)
                    .await
                    .expect("connect");
                let (from_client, to_client) = inbound.into_split();
                let (from_server, to_server) = outbound.into_split();
                tokio::spawn(forward(from_client, to_server, flag.clone()));
                tokio::spawn(forward(from_server, to_client, flag.clone()));
            }
        });
        Self { addr, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes; once `frozen`, holds both and copies
/// nothing more.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if frozen.load(Ordering::SeqCst) {
            let _held = (from, to);
            return std::future::pending().await;
        }
        let read = tokio::time::timeout(Duration::from_millis(50), from.read(&mut buffer)).await;
        let Ok(read) = read else {
            continue; // look at the flag again
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) if !frozen.load(Ordering::SeqCst) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
        }
    }
}

on_each_store!(a_hold_whose_client_vanished_without_closing_is_released_by_keepalive);
async fn a_hold_whose_client_vanished_without_closing_is_released_by_keepalive(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start_with(&redis, |c| {
        c.keepalive_interval = Duration::from_millis(200);
        c.keepalive_timeout = Duration::from_millis(200);
    })
    .await;
    let proxy = FreezingProxy::start(server.addr).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", proxy.addr))?
        .connect()
        .await?;
    let mut far = LockServiceClient::new(channel);
    let mut stream = far
        .hold(hold("vanished", "alice", 30_000, 0))
        .await?
        .into_inner();
    assert!(matches!(
        next_event(&mut stream).await,
        Some(Event::Acquired(_))
    ));
    // The network goes silent: no close, no reset. The server's renewals would keep
    // the 30 s lease forever; its unanswered ping closes the connection instead, and
    // the Hold is released.
    proxy.freeze();
    let mut locks = server.locks().await;
    common::eventually("the vanished client's lock released", common::WAIT, || {
        let mut locks = locks.clone();
        async move { !is_held(&mut locks, "vanished").await.unwrap_or(true) }
    })
    .await;
    assert!(!is_held(&mut locks, "vanished").await?);
    Ok(())
}
