//! Faults with real processes: Redis SIGKILLed and restarted while clients enqueue,
//! work and take locks. What a client was told is stored must still be there after.

mod common;

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::{ms, with_timeout, TestRedis, TestResult, TestServer};
use turnstile::pb::{
    AckRequest, AcquireRequest, EnqueueRequest, LeaseRequest, ReleaseRequest, StatsRequest,
    TaskSpec,
};

/// Waits (bounded) until `done` holds, checking every 10 ms.
async fn until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the clients were told, shared with the checks at the end.
#[derive(Default)]
struct Told {
    /// Ids whose Enqueue answered created.
    enqueued: Mutex<HashSet<String>>,
    /// Ids delivered at least once.
    delivered: Mutex<HashSet<String>>,
    /// Ids whose Ack answered true. (An Ack whose answer was lost as Redis died may
    /// have finished its tasks too: the queue is checked empty at the end.)
    acked: Mutex<HashSet<String>>,
    /// Every delivery, by id.
    deliveries: AtomicUsize,
    /// Deliveries of an id after its Ack was confirmed: must stay 0.
    after_ack: AtomicUsize,
    /// Fencing tokens of the won locks, in the order they were won.
    fencing: Mutex<Vec<u64>>,
    /// Producer and locker stop.
    stop: AtomicBool,
    /// The queue is drained: the consumer stops.
    drained: AtomicBool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_confirmed_is_lost_when_redis_is_sigkilled_with_fsync_always() -> TestResult {
    let mut redis = TestRedis::start_durable().await;
    let server = TestServer::start(&redis).await;
    let told = Arc::new(Told::default());
    let call = Duration::from_secs(2);

    let producer = tokio::spawn({
        let (told, mut queues) = (told.clone(), server.queues().await);
        async move {
            let mut batch = 0;
            while !told.stop.load(Ordering::SeqCst) {
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
                };
                match queues.enqueue(with_timeout(request, call)).await {
                    Ok(reply) => {
                        let mut enqueued = told.enqueued.lock().unwrap();
                        for result in reply.into_inner().results {
                            assert!(result.created);
                            enqueued.insert(result.id);
                        }
                    }
                    // Not confirmed: it may or may not be stored, and counts for nothing.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
    });
    let consumer = tokio::spawn({
        let (told, mut queues) = (told.clone(), server.queues().await);
        async move {
            loop {
                let request = LeaseRequest {
                    queue: "q".into(),
                    max_tasks: 10,
                    visibility: ms(1_000),
                    wait: ms(200),
                    auto_ack: false,
                };
                let tasks = match queues.lease(with_timeout(request, call)).await {
                    Ok(reply) => reply.into_inner().tasks,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                if tasks.is_empty() && told.drained.load(Ordering::SeqCst) {
                    return;
                }
                for task in &tasks {
                    told.deliveries.fetch_add(1, Ordering::SeqCst);
                    told.delivered.lock().unwrap().insert(task.id.clone());
                    if told.acked.lock().unwrap().contains(&task.id) {
                        told.after_ack.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let request = AckRequest {
                    queue: "q".into(),
                    receipts: tasks.iter().map(|t| t.receipt.clone()).collect(),
                };
                if let Ok(reply) = queues.ack(with_timeout(request, call)).await {
                    let mut acked = told.acked.lock().unwrap();
                    for (task, done) in tasks.iter().zip(reply.into_inner().acked) {
                        if done {
                            acked.insert(task.id.clone());
                        }
                    }
                }
            }
        }
    });
    let locker = tokio::spawn({
        let (told, mut locks) = (told.clone(), server.locks().await);
        async move {
            while !told.stop.load(Ordering::SeqCst) {
                let request = AcquireRequest {
                    name: "fence".into(),
                    owner: "locker".into(),
                    ttl: ms(5_000),
                    wait: None,
                    request_id: String::new(),
                };
                let Ok(won) = locks.acquire(with_timeout(request, call)).await else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let won = won.into_inner();
                if won.acquired {
                    told.fencing.lock().unwrap().push(won.fencing_token);
                    let request = ReleaseRequest {
                        name: "fence".into(),
                        token: won.token,
                    };
                    let _ = locks.release(with_timeout(request, call)).await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    let enqueued = || told.enqueued.lock().unwrap().len();
    until("200 tasks confirmed", Duration::from_secs(30), || {
        enqueued() >= 200
    })
    .await;
    let locks_before = told.fencing.lock().unwrap().len();
    redis.kill().await;
    redis.restart().await;
    let at_restart = enqueued();
    until(
        "200 more confirmed after the restart",
        Duration::from_secs(30),
        || enqueued() >= at_restart + 200,
    )
    .await;
    until(
        "locks won after the restart",
        Duration::from_secs(30),
        || told.fencing.lock().unwrap().len() > locks_before + 5,
    )
    .await;
    told.stop.store(true, Ordering::SeqCst);
    producer.await?;
    locker.await?;
    // Every confirmed task delivered, and nothing left: deliveries whose Ack failed
    // while Redis was down come back when their leases end and are acked then.
    let mut queues = server.queues().await;
    let draining = Instant::now();
    loop {
        let undelivered = told
            .enqueued
            .lock()
            .unwrap()
            .difference(&told.delivered.lock().unwrap())
            .count();
        // A call may still meet a socket that Redis' restart broke: try again.
        let Ok(stats) = queues.stats(StatsRequest { queue: "q".into() }).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let stats = stats.into_inner();
        if undelivered == 0 && stats.ready + stats.delayed + stats.in_flight + stats.dead == 0 {
            break;
        }
        assert!(
            draining.elapsed() < Duration::from_secs(30),
            "{undelivered} confirmed tasks never delivered; left: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    told.drained.store(true, Ordering::SeqCst);
    consumer.await?;

    let (confirmed, acked) = (enqueued(), told.acked.lock().unwrap().len());
    let deliveries = told.deliveries.load(Ordering::SeqCst);
    println!(
        "tasks confirmed {confirmed}, acks answered {acked}, deliveries {deliveries}, \
         duplicates {}, deliveries after a confirmed ack {}",
        deliveries.saturating_sub(confirmed),
        told.after_ack.load(Ordering::SeqCst)
    );
    assert_eq!(
        told.after_ack.load(Ordering::SeqCst),
        0,
        "an acked task came back"
    );
    let fencing = told.fencing.lock().unwrap().clone();
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
    let mut health = HealthClient::new(server.channel().await);
    let ready = |health: &mut HealthClient<tonic::transport::Channel>| {
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
    server.wait_metric("turnstile_waiting_calls", 1.0).await;
    let mut hold = locks
        .hold(HoldRequest {
            name: "kept".into(),
            owner: "carol".into(),
            ttl: ms(1_000),
            wait: None,
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
    let looks = redis.command_calls("evalsha").await;
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
    redis.wait_command_calls_above("evalsha", looks).await;

    // Redis dies: readiness drops, calls answer UNAVAILABLE within their deadline, and
    // the Hold, unable to renew past its 1 s lease, says Lost.
    redis.kill().await;
    let started = Instant::now();
    while ready(&mut health).await {
        assert!(started.elapsed() < Duration::from_secs(10), "still SERVING");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let started = Instant::now();
    while !ready(&mut health).await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never SERVING again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    loop {
        let request = ReleaseRequest {
            name: "held".into(),
            token: alice.token.clone(),
        };
        match locks.release(request).await {
            Ok(reply) => {
                assert!(reply.into_inner().released);
                break;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                assert!(started.elapsed() < Duration::from_secs(10), "{status:?}");
            }
        }
    }
    // Woken at once, not at alice's lease end in 60 s.
    let won = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await???
        .into_inner();
    assert!(won.acquired, "the waiter did not resume");
    // Each pooled socket fails once after a Redis restart (UNAVAILABLE, safe to retry)
    // before it is replaced: a client retries, as the contract says it may.
    for queue in ["pushed", "polled"] {
        let started = Instant::now();
        loop {
            let request = EnqueueRequest {
                queue: queue.into(),
                tasks: vec![TaskSpec {
                    id: format!("after-{queue}"),
                    ..Default::default()
                }],
            };
            match queues.enqueue(request).await {
                Ok(_) => break,
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                    assert!(started.elapsed() < Duration::from_secs(10), "{status:?}");
                }
            }
        }
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
