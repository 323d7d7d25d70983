//! The Rust client library (`turnstile::client`) on the twelve scenarios of SDK.md,
//! against a real server and Redis. The scenarios that need a process to kill or
//! signal run the command line (`turnstile lock`, `turnstile work`), which is built on
//! the library.

use crate::common;

use std::{
    collections::{HashMap, HashSet},
    process::Stdio,
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use common::{
    cli_of as cli, eventually, send_signal as signal, TempDir, TestRedis, TestResult, TestServer,
    BIN, WAIT,
};
use tokio::{process::Command, time::Instant};
use tokio_stream::StreamExt;
use turnstile::client::{Backoff, Client, Enqueue, Error, Options, Task, TaskError, TaskState};

/// A client of `server` (all its replicas).
fn client_of(server: &TestServer) -> Client {
    Client::new(Options {
        server: Some(format!("http://{}", server.addr)),
        ..Options::default()
    })
    .expect("client")
}

/// The lines of a file (none when it does not exist yet).
fn lines_of(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What a queue holds: (ready, delayed, in flight, dead).
async fn counts(client: &Client, queue: &str) -> (u64, u64, u64, u64) {
    let stats = client.queue(queue).stats().await.expect("stats");
    (stats.ready, stats.delayed, stats.in_flight, stats.dead)
}

/// Scenario 1: 8 workers × 200 critical sections on one name never overlap, and the
/// fencing tokens strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_never_overlap_and_fencing_tokens_increase() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (client, inside, tokens) = (client_of(&server), inside.clone(), tokens.clone());
        workers.spawn(async move {
            for _ in 0..200 {
                let lease = client
                    .lock("counter", Duration::from_secs(10))
                    .owner(format!("w{w}"))
                    .await?;
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(lease.fencing_token());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                assert!(lease.release().await?);
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 1_600);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );
    Ok(())
}

/// Scenario 2: a held lease whose Redis stops past its TTL fires `lost` within TTL +
/// 2 s, and the work it guards is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_redis_stops_is_lost_within_its_ttl() -> TestResult {
    let mut redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let ttl = Duration::from_secs(1);
    let lease = client.lock("gone", ttl).await?;
    let lost = lease.lost();
    let work = tokio::spawn({
        let lost = lost.clone();
        async move {
            tokio::select! {
                () = std::future::pending::<()>() => "finished",
                () = lost.cancelled() => "cancelled",
            }
        }
    });
    assert!(lease.check().is_ok());
    redis.kill().await;
    tokio::time::timeout(ttl + Duration::from_secs(2), lost.cancelled()).await?;
    assert_eq!(work.await?, "cancelled");
    assert!(matches!(lease.check(), Err(Error::LeaseLost { .. })));
    Ok(())
}

/// Scenario 3: a lease held through a restart of the replica its stream is on (two
/// replicas) keeps its fencing token and never fires `lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_a_restart_of_its_replica() -> TestResult {
    let redis = TestRedis::start().await;
    let mut replicas = [
        Some(TestServer::start(&redis).await),
        Some(TestServer::start(&redis).await),
    ];
    let addrs: Vec<_> = replicas.iter().flatten().map(|r| r.addr).collect();
    let client = Client::new(Options {
        server: Some(format!("http://{},{}", addrs[0], addrs[1])),
        ..Options::default()
    })?;
    let lease = client.lock("steady", Duration::from_secs(3)).await?;
    let fencing = lease.fencing_token();
    let open = "turnstile_streams_open{kind=\"hold\"}";
    let mut on = None;
    for (i, replica) in replicas.iter().enumerate() {
        if replica.as_ref().unwrap().metric(open).await == 1.0 {
            on = Some(i);
        }
    }
    let on = on.expect("the stream is on one replica");
    replicas[on].take().unwrap().shutdown().await?;
    replicas[on] = Some(TestServer::start_at(&redis, addrs[on]).await);
    // Re-attached (on either replica), same lease: the holder is still this token.
    eventually("the stream re-attached", WAIT, || async {
        let mut total = 0.0;
        for replica in replicas.iter().flatten() {
            total += replica.metric(open).await;
        }
        total == 1.0
    })
    .await;
    assert!(client.check_fence("steady", fencing).await?);
    assert_eq!(lease.fencing_token(), fencing);
    assert!(!lease.lost().is_cancelled(), "{:?}", lease.lost_reason());
    assert!(lease.release().await?);
    Ok(())
}

/// Scenario 4: the leader process is SIGKILLed; another leads within TTL + 2 s, and a
/// watcher sees both leaders in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_followed_by_the_next_and_a_watcher_sees_both() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let mut states = Box::pin(client.watch("leader"));
    let first = tokio::time::timeout(WAIT, states.next()).await?.unwrap()?;
    assert!(!first.held);
    let ttl = Duration::from_secs(1);
    let mut leader = cli(&server)
        .args([
            "lock", "leader", "--owner", "a", "--ttl", "1s", "--wait", "60s", "--", "sleep", "60",
        ])
        .spawn()?;
    let led = tokio::time::timeout(WAIT, states.next()).await?.unwrap()?;
    assert_eq!((led.held, led.owner.as_str()), (true, "a"));
    let campaign = tokio::spawn({
        let client = client.clone();
        async move { client.campaign("leader", "b", ttl).await }
    });
    leader.start_kill()?;
    leader.wait().await?;
    let killed = Instant::now();
    let next = tokio::time::timeout(ttl + Duration::from_secs(2), campaign).await???;
    assert!(killed.elapsed() <= ttl + Duration::from_secs(2));
    assert!(next.fencing_token() > led.fencing_token);
    // The watcher: a's end, then b (a "free" in between may be skipped).
    let mut seen = Vec::new();
    while seen
        .last()
        .is_none_or(|s: &turnstile::client::LockState| s.owner != "b")
    {
        seen.push(tokio::time::timeout(WAIT, states.next()).await?.unwrap()?);
    }
    let holders: Vec<&str> = seen
        .iter()
        .filter(|s| s.held)
        .map(|s| s.owner.as_str())
        .collect();
    assert_eq!(holders, ["b"], "{seen:?}");
    assert_eq!(seen.last().unwrap().fencing_token, next.fencing_token());
    next.release().await?;
    Ok(())
}

/// Scenario 5: 20 clients through a semaphore of limit 3 never see more than 3
/// holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_holders_than_its_limit() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let holders = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..20 {
        let (client, holders, most) = (client_of(&server), holders.clone(), most.clone());
        clients.spawn(async move {
            for _ in 0..5 {
                let permit = client
                    .semaphore("pool", 3, Duration::from_secs(10))
                    .owner(format!("c{c}"))
                    .wait(Duration::from_secs(60))
                    .await?;
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Held across awaits, so that the others' grants would overlap it.
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
                holders.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(done) = clients.join_next().await {
        done??;
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} holders at once");
    Ok(())
}

/// Scenario 6: 1,000 tasks at concurrency 8, each handled and acked once; a failing
/// handler is retried after its backoff; `Retry(delay)` is honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_handles_each_task_once_and_retries_as_told() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let queue = client.queue("jobs");
    queue
        .enqueue_many((0..1_000).map(|i| Enqueue::new(format!("{i}")).id(format!("t{i}"))))
        .await?;
    queue.enqueue(Enqueue::new("fail once").id("flaky")).await?;
    queue
        .enqueue(Enqueue::new("retry once").id("later"))
        .await?;
    let handled: Arc<Mutex<HashMap<String, Vec<Instant>>>> = Arc::default();
    let worker = client
        .worker("jobs", {
            let handled = handled.clone();
            move |task: Task| {
                let handled = handled.clone();
                async move {
                    handled
                        .lock()
                        .unwrap()
                        .entry(task.id.clone())
                        .or_default()
                        .push(Instant::now());
                    match (task.id.as_str(), task.attempt) {
                        ("flaky", 1) => Err(TaskError::msg("it broke")),
                        ("later", 1) => Err(TaskError::retry(Duration::from_millis(400))),
                        _ => Ok(()),
                    }
                }
            }
        })
        .concurrency(8)
        .backoff(Backoff {
            initial: Duration::from_millis(300),
            jitter: 0.0,
            ..Backoff::default()
        })
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    eventually("every task acked", Duration::from_secs(60), || async {
        counts(&client, "jobs").await == (0, 0, 0, 0) && handled.lock().unwrap().len() == 1_002
    })
    .await;
    stop.cancel();
    running.await??;
    let handled = handled.lock().unwrap();
    for i in 0..1_000 {
        assert_eq!(handled[&format!("t{i}")].len(), 1, "t{i}");
    }
    for (id, after) in [("flaky", 300), ("later", 400)] {
        let tries = &handled[id];
        assert_eq!(tries.len(), 2, "{id}");
        // By the local clock, a little under the delay (the server counts from the
        // Nack, which comes a moment after the handler returned).
        assert!(
            tries[1] - tries[0] >= Duration::from_millis(after - 50),
            "{id}: {:?}",
            tries[1] - tries[0]
        );
    }
    Ok(())
}

/// Scenario 7: a handler that runs 3 × `visibility` is not delivered twice: its lease
/// is extended while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_longer_than_its_visibility_is_not_delivered_twice() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    client
        .queue("long")
        .enqueue(Enqueue::new("x").id("slow"))
        .await?;
    let deliveries = Arc::new(AtomicU32::new(0));
    let visibility = Duration::from_millis(600);
    // The lease's end as Redis keeps it: each extension sets it to then + visibility.
    let lease_end = |queue: turnstile::client::Queue| async move {
        let running = queue.peek(TaskState::InFlight, 1).await.ok()?;
        running
            .first()
            .map(|task| common::unix_ms(&task.lease_expires_at))
    };
    let worker = client
        .worker("long", {
            let (deliveries, queue) = (deliveries.clone(), client.queue("long"));
            move |_task: Task| {
                let (deliveries, queue) = (deliveries.clone(), queue.clone());
                async move {
                    deliveries.fetch_add(1, Ordering::SeqCst);
                    // Runs until an extension moved the lease's end 3 × visibility past
                    // the first one: the handler has run that long (the first lease
                    // long over) when it returns.
                    let first = lease_end(queue.clone()).await.expect("in flight");
                    let far = first + 3 * visibility.as_millis() as i64;
                    eventually("three visibilities of extensions", WAIT, || async {
                        lease_end(queue.clone()).await.is_some_and(|end| end >= far)
                    })
                    .await;
                    Ok(())
                }
            }
        })
        .concurrency(2)
        .visibility(visibility)
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    eventually("the task acked", WAIT, || async {
        counts(&client, "long").await == (0, 0, 0, 0) && deliveries.load(Ordering::SeqCst) > 0
    })
    .await;
    stop.cancel();
    running.await??;
    assert_eq!(deliveries.load(Ordering::SeqCst), 1);
    Ok(())
}

/// Scenario 8: SIGTERM to a worker process mid-run: the running handlers finish and
/// are acked, it exits 0 within its drain timeout, and no task is lost or acked
/// unfinished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sent_sigterm_finishes_what_runs_and_loses_nothing() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let queue = client.queue("drain");
    queue
        .enqueue_many((0..40).map(|i| Enqueue::new("x").id(format!("d{i}"))))
        .await?;
    let dir = TempDir::new("client-drain");
    let (started, finished) = (dir.0.join("started"), dir.0.join("finished"));
    let script = format!(
        "echo $TURNSTILE_TASK_ID >> {}; sleep 0.5; echo $TURNSTILE_TASK_ID >> {}",
        started.display(),
        finished.display()
    );
    let worker = cli(&server)
        .args([
            "work",
            "drain",
            "--concurrency",
            "4",
            "--drain-timeout",
            "20s",
            "--json",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    eventually("four tasks running", WAIT, || async {
        lines_of(&started).len() >= 4
    })
    .await;
    signal(&worker, libc::SIGTERM);
    let out = tokio::time::timeout(Duration::from_secs(30), worker.wait_with_output()).await??;
    assert!(out.status.success(), "{}", out.status);
    let acked: HashSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|line| line["outcome"] == "acked")
        .map(|line| line["id"].as_str().unwrap().to_owned())
        .collect();
    let finished: HashSet<String> = lines_of(&finished).into_iter().collect();
    let started: HashSet<String> = lines_of(&started).into_iter().collect();
    // What started finished and was acked; nothing else was.
    assert_eq!(started, finished);
    assert_eq!(acked, finished);
    // The rest is READY again, at once (no lease left to run out).
    let (ready, delayed, in_flight, dead) = counts(&client, "drain").await;
    assert_eq!((delayed, in_flight, dead), (0, 0, 0));
    assert_eq!(ready as usize + acked.len(), 40);
    Ok(())
}

/// Scenario 9: SIGKILL to a worker process mid-run: its tasks reach another worker,
/// and every one of 1,000 is handled at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_tasks_reach_another_worker() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start_with(&redis, |c| {
        c.reattach_grace = Duration::from_millis(500);
    })
    .await;
    let client = client_of(&server);
    client
        .queue("crash")
        .enqueue_many((0..1_000).map(|i| Enqueue::new("x").id(format!("k{i}"))))
        .await?;
    let dir = TempDir::new("client-kill");
    let handled_file = dir.0.join("handled");
    let script = format!("echo $TURNSTILE_TASK_ID >> {}", handled_file.display());
    let mut doomed = cli(&server)
        .args([
            "work",
            "crash",
            "--concurrency",
            "8",
            "--visibility",
            "2s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()?;
    eventually("the first worker handled some", WAIT, || async {
        lines_of(&handled_file).len() >= 50
    })
    .await;
    doomed.start_kill()?;
    doomed.wait().await?;
    let handled: Arc<Mutex<HashSet<String>>> = Arc::default();
    let worker = client
        .worker("crash", {
            let handled = handled.clone();
            move |task: Task| {
                handled.lock().unwrap().insert(task.id.clone());
                async { Ok(()) }
            }
        })
        .concurrency(8)
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    eventually("every task acked", Duration::from_secs(60), || async {
        counts(&client, "crash").await == (0, 0, 0, 0)
    })
    .await;
    stop.cancel();
    running.await??;
    let mut all: HashSet<String> = lines_of(&handled_file).into_iter().collect();
    all.extend(handled.lock().unwrap().iter().cloned());
    assert_eq!(all.len(), 1_000);
    Ok(())
}

/// Scenario 10: a producer and a worker through a restart of their server: no task
/// lost, none enqueued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_worker_ride_through_a_server_restart() -> TestResult {
    let redis = TestRedis::start().await;
    let mut server = Some(TestServer::start(&redis).await);
    let addr = server.as_ref().unwrap().addr;
    let client = client_of(server.as_ref().unwrap());
    let handled: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let worker = client
        .worker("restart", {
            let handled = handled.clone();
            move |task: Task| {
                *handled.lock().unwrap().entry(task.id.clone()).or_default() += 1;
                async { Ok(()) }
            }
        })
        .concurrency(4)
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    let producer = tokio::spawn({
        let queue = client.queue("restart");
        async move {
            let mut ids = Vec::new();
            for i in 0..300 {
                ids.push(queue.enqueue(format!("{i}")).await?.id);
            }
            Ok::<_, Error>(ids)
        }
    });
    eventually("a hundred handled", WAIT, || async {
        handled.lock().unwrap().len() >= 100
    })
    .await;
    server.take().unwrap().shutdown().await?;
    server = Some(TestServer::start_at(&redis, addr).await);
    let ids = tokio::time::timeout(Duration::from_secs(60), producer).await???;
    eventually("every task handled", Duration::from_secs(30), || async {
        counts(&client, "restart").await == (0, 0, 0, 0) && handled.lock().unwrap().len() == 300
    })
    .await;
    stop.cancel();
    running.await??;
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 300, "an id was chosen twice");
    let handled = handled.lock().unwrap();
    assert!(ids.iter().all(|id| handled.contains_key(id)));
    drop(server);
    Ok(())
}

/// Scenario 11: typed errors: a bad name is the invalid-argument error naming the
/// field; a wrong token the unauthenticated one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed_and_name_the_field() -> TestResult {
    let redis = TestRedis::start().await;
    let dir = TempDir::new("client-auth");
    let auth = common::write_auth_file(
        &dir.0.join("auth.toml"),
        &[("good", "t", &["lock", "produce"])],
    );
    let server = TestServer::start_with(&redis, |c| c.auth_file = Some(auth.clone())).await;
    let with_token = |token: &str| {
        Client::new(Options {
            server: Some(format!("http://{}", server.addr)),
            token: Some(token.into()),
            ..Options::default()
        })
    };
    let good = with_token("good")?;
    match good.lock("", Duration::from_secs(1)).await {
        Err(Error::InvalidArgument(message)) => assert!(message.starts_with("name"), "{message}"),
        other => panic!("{other:?}"),
    }
    match good.queue("q").enqueue(Enqueue::new("x").id("")).await {
        Ok(enqueued) => assert!(!enqueued.id.is_empty(), "an id was filled"),
        other => panic!("{other:?}"),
    }
    let err = with_token("bad")?.queue("q").stats().await.unwrap_err();
    assert!(matches!(err, Error::Unauthenticated(_)), "{err:?}");
    assert_eq!(err.code(), Some(tonic::Code::Unauthenticated));
    Ok(())
}

/// Scenario 12: TLS with a private CA and a bearer token, all from the environment
/// variables (`turnstile lock` reads them through the library).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_a_token_come_from_the_environment() -> TestResult {
    let redis = TestRedis::start().await;
    let (pki, ca) = common::Pki::new();
    let id = common::Pki::issue(&ca, &["localhost"]);
    let (cert, key) = (
        pki.write("server.pem", &id.cert),
        pki.write("server.key", &id.key),
    );
    let ca_file = pki.write("ca.pem", &pki.ca_pem);
    let auth = common::write_auth_file(&pki.dir.0.join("auth.toml"), &[("secret", "t", &["lock"])]);
    let server = TestServer::start_tls(
        &redis,
        |c| {
            c.tls_cert = Some(cert.clone());
            c.tls_key = Some(key.clone());
            c.auth_file = Some(auth.clone());
        },
        Some(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&pki.ca_pem))
                .domain_name("localhost"),
        ),
    )
    .await;
    let run = |token: &str| {
        let mut command = Command::new(BIN);
        command
            .args(["lock", "tls", "--", "true"])
            .env(
                "TURNSTILE_SERVER",
                format!("https://localhost:{}", server.addr.port()),
            )
            .env("TURNSTILE_CA_CERT", &ca_file)
            .env("TURNSTILE_TOKEN", token)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    };
    let out = run("secret").output().await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = run("wrong").output().await?;
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("UNAUTHENTICATED"));
    // And in-process, the same settings given explicitly.
    let client = Client::new(Options {
        server: Some(format!("https://localhost:{}", server.addr.port())),
        token: Some("secret".into()),
        ca_cert: Some(ca_file.clone()),
    })?;
    let lease = client.lock("tls", Duration::from_secs(5)).await?;
    assert!(lease.release().await?);
    Ok(())
}

/// Every Nack carries the failure's text: the retry sees why the last try failed, and
/// `TaskError::fail` gives up (DEAD now, saying why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_s_text_is_the_task_s_last_error_and_fail_gives_up() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let queue = client.queue("outcomes");
    queue.enqueue(Enqueue::new("x").id("broken")).await?;
    queue.enqueue(Enqueue::new("x").id("hopeless")).await?;
    let seen: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let worker = client
        .worker("outcomes", {
            let seen = seen.clone();
            move |task: Task| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .entry(task.id.clone())
                        .or_default()
                        .push(task.last_error.clone());
                    match (task.id.as_str(), task.attempt) {
                        ("broken", 1) => Err(TaskError::msg("the disk is full")),
                        ("hopeless", _) => Err(TaskError::fail("no such customer")),
                        _ => Ok(()),
                    }
                }
            }
        })
        .backoff(Backoff {
            initial: Duration::from_millis(100),
            ..Backoff::default()
        })
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    eventually("both ended", WAIT, || async {
        let retried = seen.lock().unwrap().get("broken").map(Vec::len) == Some(2);
        retried && counts(&client, "outcomes").await == (0, 0, 0, 1)
    })
    .await;
    stop.cancel();
    running.await??;
    assert_eq!(seen.lock().unwrap()["broken"], ["", "the disk is full"]);
    let dead = queue.peek(turnstile::client::TaskState::Dead, 10).await?;
    let dead: Vec<_> = dead
        .iter()
        .map(|t| (t.id.as_str(), t.attempt, t.last_error.as_str()))
        .collect();
    assert_eq!(dead, [("hopeless", 1, "no such customer")]);
    Ok(())
}

/// `task.progress(..)` rides on the next lease extension; a later delivery of the task
/// finds it in `last_progress`, so a retry resumes where the last try got to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_rides_on_the_extension_and_a_retry_resumes_from_it() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    client
        .queue("resumable")
        .enqueue(Enqueue::new("x").id("job"))
        .await?;
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let visibility = Duration::from_millis(600);
    let worker = client
        .worker("resumable", {
            let (seen, queue) = (seen.clone(), client.queue("resumable"));
            move |task: Task| {
                let (seen, queue) = (seen.clone(), queue.clone());
                async move {
                    seen.lock().unwrap().push(task.last_progress.clone());
                    if task.attempt > 1 {
                        return Ok(());
                    }
                    task.progress("step 3 of 5");
                    // Fails once the server has it (the next extension, at two thirds
                    // of the visibility, carried it).
                    let kept = || async {
                        let running = queue.peek(TaskState::InFlight, 1).await;
                        running
                            .is_ok_and(|t| t.first().is_some_and(|t| t.progress == b"step 3 of 5"))
                    };
                    eventually("the progress kept", WAIT, kept).await;
                    Err(TaskError::retry(Duration::ZERO))
                }
            }
        })
        .visibility(visibility)
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    eventually("the retry done", WAIT, || async {
        let tries = seen.lock().unwrap().len();
        tries == 2 && counts(&client, "resumable").await == (0, 0, 0, 0)
    })
    .await;
    stop.cancel();
    running.await??;
    assert_eq!(
        *seen.lock().unwrap(),
        [b"".to_vec(), b"step 3 of 5".to_vec()]
    );
    Ok(())
}

/// A lease dropped without `release()` is released in the background (SDK.md: a lease
/// is released on exit): the next holder gets the lock long before its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lease_is_released_without_waiting_for_its_ttl() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let ttl = Duration::from_secs(60);
    let lease = client.lock("dropped", ttl).owner("a").await?;
    drop(lease);
    let next = client.lock("dropped", ttl).owner("b").wait(WAIT).await?;
    assert_eq!(next.owner(), "b");
    assert!(next.release().await?);
    Ok(())
}

/// `Queue::call` is a remote call: the handler's return value comes back as the
/// result; a handler that gives up makes it `TaskFailed` with its reason; `get`
/// tells the story.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_returns_the_handler_s_result_and_a_failed_one_its_reason() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let worker = client
        .worker("squares", |task: Task| async move {
            let n: u64 = task.json()?;
            if n == 13 {
                return Err(TaskError::fail("unlucky"));
            }
            Ok(turnstile::client::Json(n * n))
        })
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    let queue = client.queue("squares");
    let result = queue
        .call(Enqueue::json(&7)?.id("seven"), Duration::from_secs(30))
        .await?;
    assert_eq!(result.as_ref(), b"49");
    let failed = queue
        .call(Enqueue::json(&13)?.id("thirteen"), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(
        failed,
        Error::TaskFailed {
            id: "thirteen".into(),
            state: "DEAD".into(),
            last_error: "unlucky".into()
        }
    );
    let story = queue.get("thirteen").await?;
    assert_eq!(story.history.len(), 1);
    assert_eq!(
        story.history[0].outcome(),
        turnstile::pb::AttemptOutcome::GaveUp
    );
    // A finished task that is not kept is gone; waiting for it runs out.
    assert!(matches!(queue.get("seven").await, Err(Error::NotFound(_))));
    assert_eq!(queue.wait("seven", Duration::from_millis(200)).await?, None);
    stop.cancel();
    running.await??;
    Ok(())
}

/// `cancel_running` reaches the worker running the task: its handler's cancellation
/// fires (its future is dropped), and the task ends CANCELLED, never to run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_cancelled_stops_its_handler_and_ends_cancelled() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let client = client_of(&server);
    let started = Arc::new(AtomicU32::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let worker = client
        .worker("endless", {
            let (started, stopped) = (started.clone(), stopped.clone());
            move |task: Task| {
                let (started, stopped) = (started.clone(), stopped.clone());
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    let cancelled = task.cancelled();
                    // Work outside the handler's future watches the token.
                    tokio::spawn(async move {
                        cancelled.cancelled().await;
                        stopped.store(true, Ordering::SeqCst);
                    });
                    std::future::pending::<()>().await;
                    Ok(())
                }
            }
        })
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    let queue = client.queue("endless");
    // Kept once ended, so a wait begun after the end still finds it.
    queue
        .configure(turnstile::pb::ConfigureQueueRequest {
            keep_completed: Some(turnstile::pb::Retention {
                age: None,
                count: 10,
            }),
            ..Default::default()
        })
        .await?;
    queue.enqueue(Enqueue::new("x").id("forever")).await?;
    eventually("the handler started", WAIT, || async {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(queue.cancel_running(["forever"]).await?, ["forever"]);
    let ended = queue
        .wait("forever", Duration::from_secs(30))
        .await?
        .expect("ended");
    assert_eq!(ended.state(), TaskState::Cancelled);
    eventually("the handler's cancellation fired", WAIT, || async {
        stopped.load(Ordering::SeqCst)
    })
    .await;
    assert_eq!(counts(&client, "endless").await, (0, 0, 0, 0));
    assert_eq!(started.load(Ordering::SeqCst), 1, "never run again");
    stop.cancel();
    running.await??;
    Ok(())
}

/// A `Wait` whose replica restarts under it is made again by the library, and the
/// task's end (on another replica) answers it with the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_through_a_restart_of_its_replica() -> TestResult {
    use redis::AsyncCommands;
    let redis = TestRedis::start().await;
    let mut waiter_side = Some(TestServer::start(&redis).await);
    let worker_side = TestServer::start(&redis).await;
    let addr = waiter_side.as_ref().unwrap().addr;
    let client = client_of(waiter_side.as_ref().unwrap());
    let worker = client_of(&worker_side);
    worker
        .queue("jobs")
        .enqueue(Enqueue::new("x").id("late"))
        .await?;
    let waiting = tokio::spawn({
        let queue = client.queue("jobs");
        async move { queue.wait("late", Duration::from_secs(60)).await }
    });
    let watched = turnstile::testing::Keys::new("turnstile").queue("jobs").all[23].clone();
    let registered = || {
        let (redis, watched) = (&redis, watched.clone());
        async move {
            let mut conn = redis.conn().await;
            let score: Option<f64> = conn.zscore(&watched, "late").await.unwrap_or(None);
            score.unwrap_or(0.0)
        }
    };
    eventually("the wait registered", WAIT, || async {
        registered().await > 0.0
    })
    .await;
    let first = registered().await;
    // The waiter's replica restarts: the library makes the wait again (a later end).
    waiter_side.take().unwrap().shutdown().await?;
    waiter_side = Some(TestServer::start_at(&redis, addr).await);
    eventually("the wait made again", WAIT, || async {
        registered().await > first
    })
    .await;
    let leased = worker_side
        .queues()
        .await
        .lease(common::lease_of("jobs", 1))
        .await?
        .into_inner()
        .tasks;
    worker_side
        .queues()
        .await
        .ack(turnstile::pb::AckRequest {
            queue: "jobs".into(),
            receipts: vec![leased[0].receipt.clone()],
            results: [(leased[0].receipt.clone(), b"done".to_vec())].into(),
        })
        .await?;
    let ended = waiting.await??.expect("done");
    assert_eq!(ended.state(), TaskState::Completed);
    assert_eq!(ended.result, b"done");
    drop(waiter_side);
    Ok(())
}
