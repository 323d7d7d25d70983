//! turnstile on a Redis Cluster (`--redis-cluster`): a local cluster of six
//! `redis-server` processes (three primaries, three replicas), and names chosen so
//! that their slots are served by different primaries, side by side.

use crate::common;

use std::time::Duration;

use common::{cluster::TestCluster, ms, TestResult, TestServer};
use tokio_stream::StreamExt;
use turnstile::pb::{self, hold_response, subscribe_response};

/// `count` names whose keys (built by `key`) are served by different primaries.
fn names_on_different_primaries(
    cluster: &TestCluster,
    prefix: &str,
    key: impl Fn(&str) -> String,
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut names = Vec::new();
    for n in 0.. {
        let name = format!("{prefix}-{n}");
        let primary = cluster.primary_of(&key(&name));
        if !seen.contains(&primary) {
            seen.push(primary);
            names.push(name);
        }
        if names.len() == 3 {
            return names;
        }
    }
    unreachable!()
}

fn acquire(name: &str, owner: &str, wait_ms: i64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        name: name.into(),
        owner: owner.into(),
        ttl: ms(30_000),
        wait: ms(wait_ms),
        request_id: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_wake_waiters_and_release_all_across_the_primaries_of_a_cluster() -> TestResult {
    let cluster = TestCluster::start_steady().await;
    let server = TestServer::start(&cluster).await;
    let other = TestServer::start(&cluster).await;
    let names =
        names_on_different_primaries(&cluster, "lock", |n| format!("turnstile:lock:{{{n}}}"));
    let mut locks = server.locks().await;
    for name in &names {
        let won = locks.acquire(acquire(name, "alice", 0)).await?.into_inner();
        assert!(won.acquired, "{name}");
        // A waiter on another replica wakes when the lock is released here.
        let mut waiter = other.locks().await;
        let waiting = {
            let name = name.clone();
            tokio::spawn(async move { waiter.acquire(acquire(&name, "bob", 10_000)).await })
        };
        other.wait_metric("turnstile_lock_waiters", 1.0).await;
        let released = locks
            .release(pb::ReleaseRequest {
                name: name.clone(),
                token: won.token.clone(),
            })
            .await?
            .into_inner();
        assert!(released.released);
        let woke = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await???
            .into_inner();
        assert!(woke.acquired, "{name}: the waiter was not woken");
        assert!(woke.fencing_token > won.fencing_token);
    }
    // ReleaseAll finds an owner's locks on every primary.
    for name in &names {
        assert!(
            locks
                .acquire(acquire(&format!("{name}-x"), "carol", 0))
                .await?
                .into_inner()
                .acquired
        );
    }
    let mut released = locks
        .release_all(pb::ReleaseAllRequest {
            owner: "carol".into(),
        })
        .await?
        .into_inner()
        .released;
    released.sort();
    let mut expected: Vec<String> = names.iter().map(|n| format!("{n}-x")).collect();
    expected.sort();
    assert_eq!(released, expected);
    // A Hold renews on its slot's primary.
    let mut hold = locks
        .hold(pb::HoldRequest {
            name: format!("{}-held", names[0]),
            owner: "dave".into(),
            ttl: ms(600),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut renewed = 0;
    while renewed < 2 {
        match hold.next().await.expect("a message")?.event {
            Some(hold_response::Event::Renewed(_)) => renewed += 1,
            Some(hold_response::Event::Acquired(_) | hold_response::Event::Heartbeat(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_lease_ack_and_push_to_subscribers_across_the_primaries_of_a_cluster() -> TestResult
{
    let cluster = TestCluster::start_steady().await;
    let server = TestServer::start(&cluster).await;
    let other = TestServer::start(&cluster).await;
    let names = names_on_different_primaries(&cluster, "queue", |n| {
        format!("turnstile:queue:{{{n}}}:pending")
    });
    let mut queues = server.queues().await;
    for queue in &names {
        // A subscriber on the other replica gets a task enqueued here, pushed at once.
        let mut subscriber = other.queues().await;
        let mut stream = subscriber
            .subscribe(pb::SubscribeRequest {
                queue: queue.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        other
            .wait_metric("turnstile_streams_open{kind=\"subscribe\"}", 1.0)
            .await;
        queues
            .enqueue(pb::EnqueueRequest {
                queue: queue.clone(),
                tasks: vec![
                    pb::TaskSpec {
                        id: "pushed".into(),
                        ..Default::default()
                    },
                    pb::TaskSpec {
                        id: "leased".into(),
                        schedule: Some(pb::task_spec::Schedule::Delay(ms(200).unwrap())),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            })
            .await?;
        let pushed = loop {
            let message = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await?
                .expect("a message")?;
            if let Some(subscribe_response::Event::Task(task)) = message.event {
                break task;
            }
        };
        assert_eq!(pushed.id, "pushed");
        // The Ack goes to the replica that did not deliver it (while the stream is
        // open: closing it would give the task back).
        let acked = queues
            .ack(pb::AckRequest {
                queue: queue.clone(),
                receipts: vec![pushed.receipt],
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(acked.acked, [true], "{queue}");
        drop(stream);
        // A delayed task, long-polled.
        let leased = queues
            .lease(pb::LeaseRequest {
                queue: queue.clone(),
                wait: ms(5_000),
                ..Default::default()
            })
            .await?
            .into_inner()
            .tasks;
        assert_eq!(leased.len(), 1, "{queue}");
        assert_eq!(leased[0].id, "leased");
        queues
            .ack(pb::AckRequest {
                queue: queue.clone(),
                receipts: vec![leased[0].receipt.clone()],
                ..Default::default()
            })
            .await?;
        let stats = queues
            .stats(pb::StatsRequest {
                queue: queue.clone(),
            })
            .await?
            .into_inner();
        assert_eq!(
            (stats.ready, stats.delayed, stats.in_flight, stats.dead),
            (0, 0, 0, 0)
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_failover_under_load_keeps_serving_and_fencing_tokens_never_go_backwards(
) -> TestResult {
    use std::sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    };
    let mut cluster = TestCluster::start().await;
    let server = TestServer::start(&cluster).await;
    let lock = "failover-lock";
    let queue = "failover-queue";
    let victim = cluster.primary_of(&format!("turnstile:lock:{{{lock}}}"));
    let stop = Arc::new(AtomicBool::new(false));
    let fences = Arc::new(Mutex::new(Vec::<u64>::new()));
    let (locked, worked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let unexpected = Arc::new(Mutex::new(Vec::<tonic::Status>::new()));
    // A status the switch may cause: anything else is a failure.
    let expected = |status: &tonic::Status| {
        matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
        )
    };
    let mut load = tokio::task::JoinSet::new();
    for client in 0..2 {
        let (mut locks, stop, fences, locked, unexpected) = (
            server.locks().await,
            stop.clone(),
            fences.clone(),
            locked.clone(),
            unexpected.clone(),
        );
        load.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let request = tonic::Request::new(acquire(lock, &format!("c{client}"), 2_000));
                match locks.acquire(request).await {
                    Ok(won) if won.get_ref().acquired => {
                        let won = won.into_inner();
                        fences.lock().unwrap().push(won.fencing_token);
                        locked.fetch_add(1, Ordering::Relaxed);
                        let _ = locks
                            .release(pb::ReleaseRequest {
                                name: lock.into(),
                                token: won.token,
                            })
                            .await;
                    }
                    Ok(_) => {}
                    // A client's back-off after UNAVAILABLE.
                    Err(status) if expected(&status) => common::backoff().await,
                    Err(status) => unexpected.lock().unwrap().push(status),
                }
            }
        });
    }
    {
        let (mut queues, stop, worked, unexpected) = (
            server.queues().await,
            stop.clone(),
            worked.clone(),
            unexpected.clone(),
        );
        load.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let round = async {
                    queues
                        .enqueue(pb::EnqueueRequest {
                            queue: queue.into(),
                            tasks: vec![pb::TaskSpec::default()],
                            ..Default::default()
                        })
                        .await?;
                    let tasks = queues
                        .lease(pb::LeaseRequest {
                            queue: queue.into(),
                            ..Default::default()
                        })
                        .await?
                        .into_inner()
                        .tasks;
                    queues
                        .ack(pb::AckRequest {
                            queue: queue.into(),
                            receipts: tasks.into_iter().map(|t| t.receipt).collect(),
                            ..Default::default()
                        })
                        .await?;
                    Ok::<_, tonic::Status>(())
                };
                match round.await {
                    Ok(()) => {
                        worked.fetch_add(1, Ordering::Relaxed);
                    }
                    // A client's back-off after UNAVAILABLE.
                    Err(status) if expected(&status) => common::backoff().await,
                    Err(status) => unexpected.lock().unwrap().push(status),
                }
            }
        });
    }
    // Progress before the fault, then kill the primary of the lock's slot.
    let progressed = |counter: &Arc<AtomicU64>, above: u64| {
        let counter = counter.clone();
        async move {
            common::eventually("progress", Duration::from_secs(60), || {
                let now = counter.load(Ordering::Relaxed);
                async move { now > above }
            })
            .await;
            counter.load(Ordering::Relaxed)
        }
    };
    progressed(&locked, 20).await;
    progressed(&worked, 20).await;
    let killed = std::time::Instant::now();
    cluster.kill(victim);
    cluster
        .wait_failover(victim, &format!("turnstile:lock:{{{lock}}}"))
        .await;
    let promoted = killed.elapsed();
    // The service answers again: both kinds of work go on past the failover.
    let locks_now = locked.load(Ordering::Relaxed);
    progressed(&locked, locks_now + 20).await;
    progressed(&worked, worked.load(Ordering::Relaxed) + 20).await;
    eprintln!(
        "failover: replica promoted {promoted:?} after the kill, locks and work going again after {:?}; \
         {} lock cycles and {} task rounds in all",
        killed.elapsed(),
        locked.load(Ordering::Relaxed),
        worked.load(Ordering::Relaxed)
    );
    stop.store(true, Ordering::Relaxed);
    while load.join_next().await.is_some() {}
    let unexpected = unexpected.lock().unwrap();
    assert!(
        unexpected.is_empty(),
        "statuses other than UNAVAILABLE: {unexpected:?}"
    );
    let fences = fences.lock().unwrap();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens went backwards across the failover"
    );
    Ok(())
}

/// `--redis-wait-replicas 1`: a task whose Enqueue answered OK survives the failover
/// of its primary. The primary's replica is frozen (SIGSTOP) and its replication link
/// cut while more tasks are enqueued, so those writes reach only the primary; the
/// primary is then killed and the replica, thawed, takes over without them.
/// Unconfirmed, they were never promised: their calls answered UNAVAILABLE. (With the
/// check broken, they are confirmed and lost: the test goes red.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_replicas_no_confirmed_task_is_lost_when_its_primary_fails() -> TestResult {
    let mut cluster = TestCluster::start().await;
    let server = TestServer::start_with(&cluster, |c| {
        c.redis_wait_replicas = 1;
        c.redis_timeout = Duration::from_secs(2);
    })
    .await;
    let queue = "durable";
    let key = format!("turnstile:queue:{{{queue}}}:pending");
    let victim = cluster.primary_of(&key);
    let replica = cluster.replica_of(victim);
    let queues = server.queues().await;
    let mut confirmed = Vec::new();
    let mut refused = 0;
    let enqueue = |id: String| {
        let mut queues = queues.clone();
        async move {
            queues
                .enqueue(pb::EnqueueRequest {
                    queue: queue.into(),
                    tasks: vec![pb::TaskSpec {
                        id: id.clone(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await
                .map(|_| id)
        }
    };
    // A loaded machine may delay the replica's ack past the WAIT: the client retries,
    // as every client of a write that answered UNAVAILABLE does (enqueue by id is
    // idempotent), until the write is confirmed.
    for n in 0..20 {
        let id = format!("before-{n}");
        confirmed.push(
            common::retry_unavailable("enqueue before the freeze", || enqueue(id.clone())).await,
        );
    }
    cluster.signal(replica, libc::SIGSTOP);
    cluster.cut_replicas(victim);
    for n in 0..3 {
        match enqueue(format!("frozen-{n}")).await {
            Ok(id) => confirmed.push(id),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                refused += 1;
            }
        }
    }
    cluster.kill(victim);
    cluster.signal(replica, libc::SIGCONT);
    cluster.wait_failover(victim, &key).await;
    let present: Vec<String> = common::retry_unavailable("peek after the failover", || {
        let mut queues = queues.clone();
        async move {
            queues
                .peek(pb::PeekRequest {
                    queue: queue.into(),
                    state: pb::TaskState::Ready as i32,
                    limit: 1000,
                    group: None,
                })
                .await
        }
    })
    .await
    .into_inner()
    .tasks
    .into_iter()
    .map(|task| task.id)
    .collect();
    let lost: Vec<&String> = confirmed
        .iter()
        .filter(|id| !present.contains(id))
        .collect();
    assert!(
        lost.is_empty(),
        "confirmed tasks lost in the failover: {lost:?}"
    );
    assert_eq!(refused, 3, "writes the frozen replica could not confirm");
    Ok(())
}

/// The node a server's pub/sub connection is on fails: the subscription moves to
/// another node by itself, and a waiter is woken by a release at once again (not by
/// its lease's 30 s end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_survive_the_failure_of_the_node_the_subscription_is_on() -> TestResult {
    let mut cluster = TestCluster::start().await;
    let server = TestServer::start(&cluster).await;
    let mut locks = server.locks().await;
    // The subscription is made once the server is ready; find its node.
    let mut subscribed = Vec::new();
    common::eventually("a pattern subscription", Duration::from_secs(10), || {
        subscribed = cluster.subscribed_nodes(|_| true);
        let found = subscribed.len() == 1;
        async move { found }
    })
    .await;
    let victim = subscribed[0];
    let was_primary = cluster.primaries().contains(&victim);
    cluster.kill(victim);
    common::eventually(
        "the subscription on another node",
        Duration::from_secs(30),
        || {
            let found = cluster.subscribed_nodes(|port| port != victim).len() == 1;
            async move { found }
        },
    )
    .await;
    let name = "wake";
    if was_primary {
        // Its replica takes over its slots; wait until every node says the cluster is ok.
        cluster.wait_failover(victim, "turnstile:lock:{wake}").await;
    }
    // Calls may answer UNAVAILABLE until a killed primary's replica took over.
    let held = common::retry_unavailable("acquire after the failure", || {
        let mut locks = locks.clone();
        async move { locks.acquire(acquire(name, "alice", 0)).await }
    })
    .await
    .into_inner();
    assert!(held.acquired);
    let mut waiter = locks.clone();
    let waiting = tokio::spawn(async move { waiter.acquire(acquire(name, "bob", 20_000)).await });
    server.wait_metric("turnstile_lock_waiters", 1.0).await;
    let released = std::time::Instant::now();
    locks
        .release(pb::ReleaseRequest {
            name: name.into(),
            token: held.token,
        })
        .await?;
    let won = waiting.await??.into_inner();
    assert!(won.acquired, "the waiter was not woken");
    // A release wakes within milliseconds; without the subscription only the 20 s
    // wait's end would answer (not acquired), or the 30 s lease's end.
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken {:?} after the release",
        released.elapsed()
    );
    Ok(())
}
