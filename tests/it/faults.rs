//! Faults with real processes: Redis SIGKILLed and restarted while clients enqueue,
//! work and take locks. What a client was told is stored must still be there after.

use crate::common;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use common::{
    backoff, eventually, ms, retry_unavailable, with_timeout, Ledger, TestRedis, TestResult,
    TestServer, WAIT,
};
use turnstile::pb::{
    AckRequest, AcquireRequest, EnqueueRequest, LeaseRequest, ReleaseRequest, StatsRequest,
    TaskSpec,
};

/// Clients never wait longer than this on a call while Redis is down.
const CALL: Duration = Duration::from_secs(2);

/// The lock side of the run: fencing tokens of the won locks, in the order won.
#[derive(Default)]
struct Locks {
    fencing: Mutex<Vec<u64>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_confirmed_is_lost_when_redis_is_sigkilled_with_fsync_always() -> TestResult {
    let mut redis = TestRedis::start_durable().await;
    let server = TestServer::start(&redis).await;
    let ledger = Arc::new(Ledger::default());
    let locks = Arc::new(Locks::default());
    // Producer and locker stop on `stop`; the consumer once the queue is drained.
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicBool::new(false));

    let producer = tokio::spawn({
        let (ledger, stop, mut queues) = (ledger.clone(), stop.clone(), server.queues().await);
        async move {
            let mut batch = 0;
            while !stop.load(Ordering::SeqCst) {
                batch += 1;
                let tasks = (0..5)
                    .map(|k| TaskSpec {
                        id: format!("t{batch}-{k}"),
                        payload: b"x".to_vec().into(),
                        ..Default::default()
                    })
                    .collect();
                let request = EnqueueRequest {
                    queue: "q".into(),
                    tasks,
                    ..Default::default()
                };
                match queues.enqueue(with_timeout(request, CALL)).await {
                    Ok(reply) => {
                        let results = reply.into_inner().results;
                        assert!(results.iter().all(|result| result.created));
                        ledger.enqueued(results.into_iter().map(|result| result.id));
                    }
                    // Not confirmed: it may or may not be stored, and counts for nothing.
                    Err(_) => backoff().await,
                }
            }
        }
    });
    let consumer = tokio::spawn({
        let (ledger, drained, mut queues) =
            (ledger.clone(), drained.clone(), server.queues().await);
        async move {
            while !drained.load(Ordering::SeqCst) {
                let request = LeaseRequest {
                    queue: "q".into(),
                    max_tasks: 10,
                    visibility: ms(1_000),
                    wait: ms(200),
                    auto_ack: false,
                };
                let tasks = match queues.lease(with_timeout(request, CALL)).await {
                    Ok(reply) => reply.into_inner().tasks,
                    Err(_) => {
                        backoff().await;
                        continue;
                    }
                };
                ledger.delivered(&tasks);
                if tasks.is_empty() {
                    continue;
                }
                let request = AckRequest {
                    queue: "q".into(),
                    receipts: tasks.iter().map(|t| t.receipt.clone()).collect(),
                    ..Default::default()
                };
                if let Ok(reply) = queues.ack(with_timeout(request, CALL)).await {
                    ledger.acked(&tasks, &reply.into_inner().acked);
                }
            }
        }
    });
    let locker = tokio::spawn({
        let (locks, stop, mut client) = (locks.clone(), stop.clone(), server.locks().await);
        async move {
            while !stop.load(Ordering::SeqCst) {
                let request = AcquireRequest {
                    name: "fence".into(),
                    owner: "locker".into(),
                    ttl: ms(5_000),
                    wait: None,
                    request_id: String::new(),
                };
                let Ok(won) = client.acquire(with_timeout(request, CALL)).await else {
                    backoff().await;
                    continue;
                };
                let won = won.into_inner();
                if won.acquired {
                    locks.fencing.lock().unwrap().push(won.fencing_token);
                    let request = ReleaseRequest {
                        name: "fence".into(),
                        token: won.token,
                    };
                    let _ = client.release(with_timeout(request, CALL)).await;
                }
            }
        }
    });

    let long = Duration::from_secs(30);
    eventually("200 tasks confirmed", long, || async {
        ledger.confirmed() >= 200
    })
    .await;
    let locks_before = locks.fencing.lock().unwrap().len();
    redis.kill().await;
    redis.restart().await;
    let at_restart = ledger.confirmed();
    eventually("200 more confirmed after the restart", long, || async {
        ledger.confirmed() >= at_restart + 200
    })
    .await;
    eventually("locks won after the restart", long, || async {
        locks.fencing.lock().unwrap().len() > locks_before + 5
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    producer.await?;
    locker.await?;
    // Every confirmed task delivered, and nothing left: deliveries whose Ack failed
    // while Redis was down come back when their leases end and are acked then.
    ledger
        .wait_drained(&mut server.queues().await, "q", long)
        .await;
    drained.store(true, Ordering::SeqCst);
    consumer.await?;

    println!("{}", ledger.summary());
    assert_eq!(ledger.deliveries_after_ack(), 0, "an acked task came back");
    let fencing = locks.fencing.lock().unwrap().clone();
    assert!(
        fencing.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens went backwards across the restart"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_recovers_when_redis_is_killed_and_restarted_under_load() -> TestResult {
    use tokio_stream::StreamExt;
    use tonic::Code;
    use tonic_health::pb::{
        health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
    };
    use turnstile::pb::{hold_response, subscribe_response, HoldRequest, SubscribeRequest};

    let mut redis = TestRedis::start_durable().await;
    let server =
        TestServer::start_with(&redis, |c| c.redis_timeout = Duration::from_millis(500)).await;
    let health = HealthClient::new(server.channel().await);
    let ready = |health: &HealthClient<tonic::transport::Channel>| {
        let mut health = health.clone();
        async move {
            let reply = health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .expect("health answers even while Redis is down");
            reply.into_inner().status == ServingStatus::Serving as i32
        }
    };
    let acquire = |owner: &str, wait_ms: i64| AcquireRequest {
        name: "held".into(),
        owner: owner.into(),
        ttl: ms(60_000),
        wait: ms(wait_ms),
        request_id: String::new(),
    };

    // Busy: a lock with a waiter, a Hold, a subscriber and a long poll.
    let mut locks = server.locks().await;
    let alice = locks.acquire(acquire("alice", 0)).await?.into_inner();
    let mut bob = server.locks().await;
    let waiting = tokio::spawn(async move { bob.acquire(acquire("bob", 30_000)).await });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    let mut hold = locks
        .hold(HoldRequest {
            name: "kept".into(),
            owner: "carol".into(),
            ttl: ms(1_000),
            wait: None,
            token: String::new(),
        })
        .await?
        .into_inner();
    let first = hold.next().await.expect("an event")?;
    assert!(matches!(
        first.event,
        Some(hold_response::Event::Acquired(_))
    ));
    let mut queues = server.queues().await;
    let mut subscription = queues
        .subscribe(SubscribeRequest {
            queue: "pushed".into(),
            max_in_flight: 10,
            visibility: ms(30_000),
            worker_id: String::new(),
        })
        .await?
        .into_inner();
    // The long poll is waiting once its first look (lease.lua) ran: found in Redis'
    // slow log, which keeps every command here (any other script's run, such as the
    // subscription's first dispatch, is no sign of it).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(&mut redis.conn().await)
        .await?;
    let scripts = turnstile::testing::QueueScripts::new();
    let lease_sha = scripts
        .all()
        .into_iter()
        .find(|script| script.source.name == "lease.lua")
        .expect("lease.lua")
        .inner
        .get_hash()
        .to_owned();
    let mut poller = server.queues().await;
    let polling = tokio::spawn(async move {
        poller
            .lease(LeaseRequest {
                queue: "polled".into(),
                max_tasks: 1,
                visibility: ms(30_000),
                wait: ms(20_000),
                auto_ack: false,
            })
            .await
    });
    eventually("the long poll's first look", WAIT, || async {
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(1000)
            .query_async(&mut redis.conn().await)
            .await
            .unwrap_or_default();
        format!("{log:?}").contains(&lease_sha)
    })
    .await;

    // Redis dies: readiness drops, calls answer UNAVAILABLE within their deadline, and
    // the Hold, unable to renew past its 1 s lease, says Lost.
    redis.kill().await;
    eventually("NOT_SERVING", WAIT, || {
        let up = ready(&health);
        async move { !up.await }
    })
    .await;
    let status = queues
        .stats(with_timeout(
            StatsRequest {
                queue: "pushed".into(),
            },
            Duration::from_secs(1),
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let lost = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), hold.next())
            .await?
            .expect("Lost before the end")?;
        match event.event {
            Some(hold_response::Event::Lost(lost)) => break lost,
            Some(hold_response::Event::Heartbeat(_) | hold_response::Event::Renewed(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(lost.reason.contains("redis"), "{}", lost.reason);

    // Redis is back (its AOF kept alice's lock): readiness returns by itself, and every
    // waiter and stream resumes without a restart of the server.
    redis.restart().await;
    eventually("SERVING again", WAIT, || ready(&health)).await;
    let released = retry_unavailable("release", || {
        let (mut locks, token) = (locks.clone(), alice.token.clone());
        async move {
            let request = ReleaseRequest {
                name: "held".into(),
                token,
            };
            locks.release(request).await
        }
    })
    .await;
    assert!(released.into_inner().released);
    // Woken at once, not at alice's lease end in 60 s.
    let won = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await???
        .into_inner();
    assert!(won.acquired, "the waiter did not resume");
    for queue in ["pushed", "polled"] {
        retry_unavailable("enqueue", || {
            let mut queues = queues.clone();
            let request = EnqueueRequest {
                queue: queue.into(),
                tasks: vec![TaskSpec {
                    id: format!("after-{queue}"),
                    ..Default::default()
                }],
                ..Default::default()
            };
            async move { queues.enqueue(request).await }
        })
        .await;
    }
    let pushed = loop {
        let message = tokio::time::timeout(Duration::from_secs(5), subscription.next())
            .await?
            .expect("the subscription survived")?;
        if let Some(subscribe_response::Event::Task(task)) = message.event {
            break task;
        }
    };
    assert_eq!(pushed.id, "after-pushed");
    let polled = tokio::time::timeout(Duration::from_secs(5), polling)
        .await???
        .into_inner()
        .tasks;
    assert_eq!(polled.len(), 1, "the long poll did not resume");
    assert_eq!(polled[0].id, "after-polled");
    Ok(())
}

/// `--redis-wait-replicas 1` on a Redis with one replica: writes answer once the
/// replica confirmed them; with the replica gone, a write is UNAVAILABLE naming the
/// flag (it may have happened: the caller retries it), and reads go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_replicas_a_write_no_replica_confirmed_is_unavailable() -> TestResult {
    let primary = TestRedis::start().await;
    let mut replica = TestRedis::start().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port)
        .query_async(&mut replica.conn().await)
        .await?;
    eventually("the replica syncs", WAIT, || async {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut replica.conn().await)
            .await
            .unwrap_or_default();
        info.contains("master_link_status:up")
    })
    .await;
    let server = TestServer::start_with(&primary, |c| {
        c.redis_wait_replicas = 1;
        c.redis_timeout = Duration::from_secs(2);
    })
    .await;
    let (mut locks, mut queues) = (server.locks().await, server.queues().await);
    let enqueue = |id: &str| EnqueueRequest {
        queue: "q".into(),
        tasks: vec![TaskSpec {
            id: id.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    // A loaded machine may delay the replica's ack past the WAIT: a write that answered
    // UNAVAILABLE is retried until confirmed, as a client does (enqueue by id and an
    // acquire with a request id are idempotent).
    let enqueue_confirmed = |id: &'static str| {
        let queues = queues.clone();
        common::retry_unavailable("enqueue", move || {
            let mut queues = queues.clone();
            async move { queues.enqueue(enqueue(id)).await }
        })
    };
    enqueue_confirmed("confirmed").await;
    let won = common::retry_unavailable("acquire", || {
        let mut locks = locks.clone();
        async move {
            locks
                .acquire(AcquireRequest {
                    name: "l".into(),
                    owner: "alice".into(),
                    request_id: "first".into(),
                    ..Default::default()
                })
                .await
        }
    })
    .await
    .into_inner();
    assert!(won.acquired);
    // Both writes are on the replica already: WAIT answered after they got there.
    let on_replica: i64 = redis::cmd("EXISTS")
        .arg("turnstile:lock:{l}")
        .query_async(&mut replica.conn().await)
        .await?;
    assert_eq!(on_replica, 1);
    // A Redis that forgot the scripts: NOSCRIPT inside the pipeline with WAIT, then
    // the script is loaded and the pair sent again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut primary.conn().await)
        .await?;
    enqueue_confirmed("after-flush").await;

    replica.kill().await;
    let started = std::time::Instant::now();
    let refused = queues.enqueue(enqueue("unconfirmed")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("--redis-wait-replicas"),
        "{refused:?}"
    );
    // WAIT gives up at half the Redis timeout, so the answer comes before the timeout.
    assert!(started.elapsed() < Duration::from_secs(5));
    let refused = locks
        .release(ReleaseRequest {
            name: "l".into(),
            token: won.token,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    // Reads wait for nobody.
    let stats = queues
        .stats(StatsRequest { queue: "q".into() })
        .await?
        .into_inner();
    assert_eq!(
        stats.ready, 3,
        "the unconfirmed write happened on the primary"
    );
    Ok(())
}
