//! The built binary as a user runs it: the embedded Redis default, the ready line, the
//! metrics endpoint, SIGTERM draining to exit 0, and the error without redis-server;
//! and several server processes on one Redis: Subscribe delivers each task to exactly
//! one worker, and a SIGKILLed server loses none of its deliveries.

use crate::common;

use std::{
    io::{Read, Write},
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::{
    json_field, ms, ready_line, serve_command, LoggedServer, ServerProcess, TempDir, TestRedis,
    TestResult, TestStore, BIN,
};
use tokio_stream::StreamExt;
use turnstile::pb::{
    hold_response::Event, lock_service_client::LockServiceClient, subscribe_response, AckRequest,
    EnqueueRequest, HoldRequest, LeaseRequest, StatsRequest, SubscribeRequest, TaskSpec,
};

fn sigterm(child: &Child) {
    signal(child, "TERM");
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(started.elapsed() < within, "did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_embedded_redis_logs_ready_and_drains_on_sigterm() -> TestResult {
    let dir = TempDir::new("proc");
    let mut child = serve_command()
        .args(["--log-format", "json"])
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .env_remove("TURNSTILE_REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let line = ready_line(&mut child);
    let addr = json_field(&line, "addr");
    let metrics = json_field(&line, "metrics");
    // One worker thread per CPU unless --worker-threads says otherwise.
    let cpus = std::thread::available_parallelism()?.get();
    assert_eq!(json_field(&line, "workers"), cpus.to_string(), "{line}");

    // The embedded Redis keeps an append-only file in the data dir.
    assert!(
        dir.0.join("data").join("redis.sock").exists(),
        "no unix socket in the data dir"
    );

    let mut locks = LockServiceClient::connect(format!("http://{addr}")).await?;
    let hold = HoldRequest {
        name: "proc".into(),
        owner: "alice".into(),
        ttl: None,
        wait: None,
        token: String::new(),
    };
    let mut stream = locks.hold(hold).await?.into_inner();
    let first = stream.next().await.expect("an event")?;
    assert!(matches!(first.event, Some(Event::Acquired(_))));

    let mut scrape = std::net::TcpStream::connect(&metrics)?;
    scrape.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")?;
    let mut body = String::new();
    scrape.read_to_string(&mut body)?;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("turnstile_streams_open{kind=\"hold\"} 1"),
        "{body}"
    );

    sigterm(&child);
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await? {
            Some(Ok(_)) => continue,
            Some(Err(status)) => break status,
            None => panic!("the Hold stream ended without UNAVAILABLE"),
        }
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let exit = wait_exit(&mut child, Duration::from_secs(20));
    assert!(exit.success(), "exit status {exit}");
    assert!(
        !dir.0.join("data").join("redis.sock").exists(),
        "embedded redis still running"
    );
    let aof = std::fs::read_dir(dir.0.join("data").join("appendonlydir"))?.count();
    assert!(aof > 0, "no append-only file");
    Ok(())
}

#[test]
fn serve_without_redis_server_on_path_says_how_to_fix_it() {
    let dir = TempDir::new("nopath");
    let output = serve_command()
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .env("PATH", dir.0.as_os_str())
        .env_remove("TURNSTILE_REDIS_URL")
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("redis-server") && last.contains("--redis-url"),
        "{stderr}"
    );
    assert!(last.contains("apt-get install redis-server"), "{stderr}");
}

/// Whether a process with `pid` exists (signal 0 checks without sending anything).
fn alive(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A child process SIGKILLed on drop, so a failing test leaves no server behind.
struct Reaped(Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `turnstile serve` with the embedded Redis in `data`, JSON logs on a pipe.
fn serve_embedded(data: &std::path::Path) -> Reaped {
    Reaped(
        serve_command()
            .args(["--log-format", "json"])
            .arg("--data-dir")
            .arg(data)
            .env_remove("TURNSTILE_REDIS_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn turnstile"),
    )
}

#[test]
fn sigint_drains_like_sigterm() {
    let dir = TempDir::new("sigint");
    let data = dir.0.join("data");
    let mut server = serve_embedded(&data);
    let line = ready_line(&mut server);
    assert!(line.contains("ready"), "{line}");
    signal(&server, "INT");
    let exit = wait_exit(&mut server, Duration::from_secs(20));
    assert!(exit.success(), "exit status {exit}");
    assert!(
        !data.join("redis.sock").exists(),
        "embedded redis still running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_server_takes_its_embedded_redis_with_it_and_the_next_one_keeps_the_data(
) -> TestResult {
    let dir = TempDir::new("orphan");
    let data = dir.0.join("data");
    let mut first = serve_embedded(&data);
    let addr = json_field(&ready_line(&mut first), "addr");
    let mut queues =
        turnstile::pb::queue_service_client::QueueServiceClient::connect(format!("http://{addr}"))
            .await?;
    queues
        .enqueue(EnqueueRequest {
            queue: "kept".into(),
            tasks: tasks(0, 1),
            ..Default::default()
        })
        .await?;
    let redis_pid = std::fs::read_to_string(data.join("redis.pid"))?
        .trim()
        .to_owned();
    assert!(alive(&redis_pid), "no redis-server at pid {redis_pid}");

    first.kill()?;
    first.wait()?;
    common::eventually_blocking(
        &format!("redis-server {redis_pid} exits with its SIGKILLed server"),
        common::WAIT,
        || !alive(&redis_pid),
    );

    // The next server on the same data dir starts its own Redis and finds the task.
    let mut second = serve_embedded(&data);
    let addr = json_field(&ready_line(&mut second), "addr");
    let mut queues =
        turnstile::pb::queue_service_client::QueueServiceClient::connect(format!("http://{addr}"))
            .await?;
    let stats = queues
        .stats(StatsRequest {
            queue: "kept".into(),
        })
        .await?
        .into_inner();
    assert_eq!(stats.ready, 1, "the confirmed task survived");
    sigterm(&second);
    assert!(wait_exit(&mut second, Duration::from_secs(20)).success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_never_opens_a_data_dir_whose_redis_is_alive() -> TestResult {
    let dir = TempDir::new("twice");
    let data = dir.0.join("data");
    let mut first = serve_embedded(&data);
    let addr = json_field(&ready_line(&mut first), "addr");
    let redis_pid = std::fs::read_to_string(data.join("redis.pid"))?;

    let mut second = serve_embedded(&data);
    let mut stderr = String::new();
    let stderr_pipe = second.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::BufReader::new(stderr_pipe).read_to_string(&mut text);
        text
    });
    // It must give up (after waiting up to 5 s for a dying Redis); a second server
    // that started instead would never exit, and is killed when `second` drops.
    let status = wait_exit(&mut second, Duration::from_secs(30));
    assert!(!status.success());
    stderr.push_str(&reader.join().expect("stderr reader"));
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("in use by another redis-server") && last.contains(redis_pid.trim()),
        "{stderr}"
    );
    // The first server and its Redis are untouched.
    let mut queues =
        turnstile::pb::queue_service_client::QueueServiceClient::connect(format!("http://{addr}"))
            .await?;
    queues
        .stats(StatsRequest {
            queue: "any".into(),
        })
        .await?;
    assert_eq!(std::fs::read_to_string(data.join("redis.pid"))?, redis_pid);
    sigterm(&first);
    assert!(wait_exit(&mut first, Duration::from_secs(20)).success());
    Ok(())
}

fn tasks(from: usize, count: usize) -> Vec<TaskSpec> {
    (from..from + count)
        .map(|n| TaskSpec {
            id: format!("t{n}"),
            payload: n.to_string().into_bytes().into(),
            ..Default::default()
        })
        .collect()
}

on_each_store!(three_server_processes_deliver_2000_tasks_exactly_once);
/// Three server processes on `store`, four subscribers spread over them, each acking
/// through another replica than the one it is subscribed to.
async fn three_server_processes_deliver_2000_tasks_exactly_once(store: TestStore) -> TestResult {
    const TOTAL: usize = 2000;
    let replicas = 3;
    let servers: Vec<ServerProcess> = (0..replicas)
        .map(|_| ServerProcess::start_on(&store))
        .collect();
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..4 {
        // Subscribed on one replica, acking through the next.
        let mut queues = servers[w % replicas].queues().await;
        let mut acker = servers[(w + 1) % replicas].queues().await;
        let delivered = delivered.clone();
        let mut stream = queues
            .subscribe(SubscribeRequest {
                queue: "drain".into(),
                max_in_flight: 16,
                visibility: ms(30_000),
                worker_id: String::new(),
            })
            .await?
            .into_inner();
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while delivered.load(std::sync::atomic::Ordering::SeqCst) < TOTAL {
                let Ok(event) =
                    tokio::time::timeout(Duration::from_millis(200), stream.next()).await
                else {
                    continue;
                };
                let Some(subscribe_response::Event::Task(task)) = event.expect("open")?.event
                else {
                    continue;
                };
                delivered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let acked = acker
                    .ack(AckRequest {
                        queue: "drain".into(),
                        receipts: vec![task.receipt],
                        ..Default::default()
                    })
                    .await?
                    .into_inner()
                    .acked;
                assert_eq!(acked, [true]);
                seen.push(task.id);
            }
            Ok::<_, tonic::Status>(seen)
        }));
    }
    let mut producer = servers[0].queues().await;
    for batch in 0..4 {
        producer
            .enqueue(EnqueueRequest {
                queue: "drain".into(),
                tasks: tasks(batch * 500, 500),
                ..Default::default()
            })
            .await?;
    }
    let mut all = Vec::new();
    let mut shares = Vec::new();
    for worker in workers {
        let seen = tokio::time::timeout(Duration::from_secs(60), worker).await???;
        shares.push(seen.len());
        all.extend(seen);
    }
    assert_eq!(all.len(), TOTAL, "deliveries (shares {shares:?})");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), TOTAL, "distinct tasks delivered");
    assert!(
        shares.iter().all(|&n| n > 0),
        "a worker got nothing: {shares:?}"
    );
    let stats = producer
        .stats(StatsRequest {
            queue: "drain".into(),
        })
        .await?
        .into_inner();
    common::assert_drained(&stats);
    Ok(())
}

on_each_store!(killed_server_loses_no_delivery_and_no_lock_outlives_its_ttl);
/// Three servers on `store`; the one holding a lock and three deliveries is
/// SIGKILLed: the deliveries come back through another, and the lock is free once its
/// TTL ends.
async fn killed_server_loses_no_delivery_and_no_lock_outlives_its_ttl(
    store: TestStore,
) -> TestResult {
    let mut doomed = ServerProcess::start_on(&store);
    let survivor = ServerProcess::start_on(&store);
    let _third = ServerProcess::start_on(&store);
    let mut doomed_locks = LockServiceClient::connect(format!("http://{}", doomed.addr)).await?;
    let lock = doomed_locks
        .acquire(turnstile::pb::AcquireRequest {
            name: "crash-lock".into(),
            owner: "doomed".into(),
            ttl: ms(1_000),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(lock.acquired);
    let mut queues = doomed.queues().await;
    queues
        .enqueue(EnqueueRequest {
            queue: "crash".into(),
            tasks: tasks(0, 3),
            ..Default::default()
        })
        .await?;
    let mut stream = queues
        .subscribe(SubscribeRequest {
            queue: "crash".into(),
            max_in_flight: 3,
            visibility: ms(500),
            worker_id: String::new(),
        })
        .await?
        .into_inner();
    let mut held = 0;
    while held < 3 {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await?
            .expect("open")?;
        if let Some(subscribe_response::Event::Task(_)) = event.event {
            held += 1;
        }
    }
    doomed.kill();

    // Nobody gave them back; their leases end and another replica hands them out.
    let mut queues = survivor.queues().await;
    let mut ids = Vec::new();
    let started = std::time::Instant::now();
    while ids.len() < 3 {
        assert!(started.elapsed() < common::WAIT, "got back {ids:?}");
        let leased = queues
            .lease(LeaseRequest {
                queue: "crash".into(),
                max_tasks: 3,
                visibility: ms(30_000),
                wait: ms(2_000),
                auto_ack: false,
            })
            .await?
            .into_inner()
            .tasks;
        for task in leased {
            assert_eq!(task.attempt, 2, "{}", task.id);
            ids.push(task.id);
        }
    }
    ids.sort();
    assert_eq!(ids, ["t0", "t1", "t2"]);
    // The lock the dead server's client held ends with its 1 s TTL: a waiter on the
    // survivor gets it (a timer at its expiry), well within its wait.
    let mut locks = LockServiceClient::connect(format!("http://{}", survivor.addr)).await?;
    let won = locks
        .acquire(turnstile::pb::AcquireRequest {
            name: "crash-lock".into(),
            owner: "survivor".into(),
            ttl: ms(10_000),
            wait: ms(10_000),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(won.acquired, "the lock outlived its ttl");
    assert!(won.fencing_token > lock.fencing_token);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_read_from_their_turnstile_environment_variables() -> TestResult {
    let redis = TestRedis::start().await;
    let port = turnstile::embedded::free_port()?;
    let mut server = Reaped(
        Command::new(BIN)
            .arg("serve")
            .env("TURNSTILE_LISTEN", format!("127.0.0.1:{port}"))
            .env("TURNSTILE_REDIS_URL", redis.url())
            .env("TURNSTILE_METRICS_LISTEN", "127.0.0.1:0")
            .env("TURNSTILE_DASHBOARD_LISTEN", "127.0.0.1:0")
            .env("TURNSTILE_KEY_PREFIX", "envtest")
            .env("TURNSTILE_LOG_FORMAT", "json")
            .env("TURNSTILE_STREAM_HEARTBEAT", "100ms")
            .env("TURNSTILE_MAX_STREAMS", "1")
            .env("TURNSTILE_MAX_MESSAGE_SIZE", "2048")
            .env("TURNSTILE_MAX_CONNECTIONS", "2")
            .env("TURNSTILE_WORKER_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?,
    );
    // TURNSTILE_LOG_FORMAT=json and TURNSTILE_LISTEN.
    let line = ready_line(&mut server);
    assert_eq!(json_field(&line, "addr"), format!("127.0.0.1:{port}"));
    // TURNSTILE_WORKER_THREADS=1.
    assert_eq!(json_field(&line, "workers"), "1", "{line}");
    let mut locks = LockServiceClient::connect(format!("http://127.0.0.1:{port}")).await?;
    let hold = |name: &str| HoldRequest {
        name: name.into(),
        owner: "env".into(),
        ttl: ms(60_000),
        wait: None,
        token: String::new(),
    };
    let mut stream = locks.hold(hold("e")).await?.into_inner();
    let acquired = stream.next().await.expect("an event")?;
    assert!(matches!(acquired.event, Some(Event::Acquired(_))));
    // TURNSTILE_STREAM_HEARTBEAT=100ms: a heartbeat long before the 15 s default.
    let beat = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await?
        .expect("an event")?;
    assert!(matches!(beat.event, Some(Event::Heartbeat(_))), "{beat:?}");
    // TURNSTILE_MAX_STREAMS=1.
    let refused = locks.hold(hold("f")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // TURNSTILE_KEY_PREFIX=envtest (through TURNSTILE_REDIS_URL's Redis).
    let exists: bool = redis::cmd("EXISTS")
        .arg("envtest:lock:{e}")
        .query_async(&mut redis.conn().await)
        .await?;
    assert!(exists, "no key under the prefix");
    // TURNSTILE_MAX_MESSAGE_SIZE=2048, on a second connection.
    let mut queues = turnstile::pb::queue_service_client::QueueServiceClient::connect(format!(
        "http://127.0.0.1:{port}"
    ))
    .await?;
    let big = queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks: vec![TaskSpec {
                payload: vec![0u8; 3000].into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(big.code(), tonic::Code::ResourceExhausted, "{big:?}");
    // TURNSTILE_MAX_CONNECTIONS=2: a third connection is closed at once.
    let third = async {
        let mut locks = LockServiceClient::connect(format!("http://127.0.0.1:{port}")).await?;
        locks
            .describe(turnstile::pb::DescribeRequest {
                name: "g".into(),
                token: String::new(),
            })
            .await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    assert!(third.await.is_err(), "a third connection was served");
    Ok(())
}

/// The first line of `reader` that says the server is ready.
fn ready_in(reader: impl std::io::Read) -> String {
    use std::io::BufRead;
    std::io::BufReader::new(reader)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains("ready"))
        .expect("a ready line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_coloured_only_at_a_terminal_and_never_with_no_color() -> TestResult {
    let redis = TestRedis::start().await;
    // A pipe (a file, a log collector): plain text.
    let mut piped = Reaped(
        serve_command()
            .arg("--redis-url")
            .arg(redis.url())
            .env_remove("NO_COLOR")
            .stderr(Stdio::piped())
            .spawn()?,
    );
    let line = ready_line(&mut piped);
    assert!(!line.contains('\x1b'), "colour on a pipe: {line:?}");
    // A terminal: script(1) runs the server on a pseudo-terminal and copies what it
    // writes to its own stdout. Colour, unless NO_COLOR is set.
    let server = format!(
        "{BIN} serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --redis-url {}",
        redis.url()
    );
    for (no_color, coloured) in [(None, true), (Some("1"), false)] {
        let mut command = Command::new("script");
        command
            .args(["-qefc", &server, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        match no_color {
            Some(value) => command.env("NO_COLOR", value),
            None => command.env_remove("NO_COLOR"),
        };
        let mut terminal = Reaped(command.spawn()?);
        let line = ready_in(terminal.stdout.take().expect("piped stdout"));
        assert_eq!(
            line.contains('\x1b'),
            coloured,
            "NO_COLOR={no_color:?}: {line:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_reattaches_by_token_on_another_replica_when_its_replica_is_sigtermed() -> TestResult
{
    let redis = TestRedis::start().await;
    let mut leaving = LoggedServer::start(&redis, &[]);
    let staying = LoggedServer::start(&redis, &[]);
    let mut locks = leaving.locks().await;
    let request = HoldRequest {
        name: "leader".into(),
        owner: "node-1".into(),
        ttl: ms(3_000),
        wait: None,
        token: String::new(),
    };
    let mut stream = locks.hold(request.clone()).await?.into_inner();
    let Some(Event::Acquired(acquired)) = stream.next().await.expect("an event")?.event else {
        panic!("no Acquired")
    };
    leaving.signal(libc::SIGTERM);
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await? {
            Some(Ok(_)) => continue,
            Some(Err(status)) => break status,
            None => panic!("the Hold stream ended without UNAVAILABLE"),
        }
    };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(leaving.wait_exit().success());
    // The client re-opens Hold on the other replica with its token: the same lease.
    let mut elsewhere = staying.locks().await;
    let mut again = elsewhere
        .hold(HoldRequest {
            token: acquired.token.clone(),
            ..request
        })
        .await?
        .into_inner();
    match again.next().await.expect("an event")?.event {
        Some(Event::Acquired(same)) => {
            assert_eq!(same.token, acquired.token);
            assert_eq!(same.fencing_token, acquired.fencing_token);
        }
        other => panic!("expected Acquired, got {other:?}"),
    }
    // And renews it there.
    loop {
        match tokio::time::timeout(Duration::from_secs(5), again.next())
            .await?
            .expect("an event")?
            .event
        {
            Some(Event::Renewed(_)) => break,
            Some(Event::Heartbeat(_)) => continue,
            other => panic!("expected Renewed, got {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_traceparent_joins_the_rpc_span_in_the_log() -> TestResult {
    let redis = TestRedis::start().await;
    let server = LoggedServer::start(&redis, &[]);
    let mut locks = server.locks().await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(turnstile::pb::DescribeRequest {
        name: String::new(),
        token: String::new(),
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-00f067aa0ba902b7-01").parse()?,
    );
    // An empty name is refused, and the refusal is logged (debug) inside the span.
    let refused = locks.describe(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let line = server.wait_line("rpc refused");
    assert!(line.contains(trace_id), "{line}");
    assert!(line.contains("00f067aa0ba902b7"), "{line}");
    Ok(())
}
