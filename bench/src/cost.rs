//! `cost`: what one operation costs the server and Redis in CPU instructions, counted
//! by valgrind's callgrind, which this noisy machine cannot move (timings on two shared
//! cores move by a third from run to run; instruction counts by well under 1%). A
//! redis-server and a `turnstile serve` of the target's binary run under callgrind; for
//! each workload the counters are zeroed (`callgrind_control -z`), the fixed workload
//! runs, and a dump (`-d`) gives the instructions since: 2,000 lock cycles (Acquire and
//! Release, 8 clients on names of their own), 2,000 tasks with one Ack each (enqueued in
//! batches of 100, delivered to 4 Subscribe streams), and 2,000 grouped tasks (100
//! groups, the queue's group cap 8). `--against PATH` runs the same on an older build.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    task::JoinSet,
};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use super::{
    failed,
    report::{Extra, Report},
    target::Target,
};
use turnstile::{
    embedded::free_port,
    pb::{
        lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient,
        subscribe_response::Event, AckRequest, AcquireRequest, ConfigureQueueRequest,
        EnqueueRequest, ReleaseRequest, SubscribeRequest, TaskSpec,
    },
};

/// Lock clients, each cycling a name of its own.
const LOCKERS: u64 = 8;
/// Subscribe streams draining a queue, and each one's `max_in_flight`.
const STREAMS: usize = 4;
const IN_FLIGHT: u32 = 8;
/// Groups of the grouped workload.
const GROUPS: u64 = 100;

/// A process under callgrind, its dumps in `dir` as `<name>.out.<n>`.
struct Counted {
    child: Child,
    pid: u32,
    out: PathBuf,
    dumps: u32,
}

impl Counted {
    /// Starts `program args` under callgrind; with `ready`, waits for a stderr line that
    /// contains it and returns that line.
    async fn start(
        dir: &Path,
        name: &str,
        program: &Path,
        args: &[&str],
        ready: Option<&str>,
    ) -> Result<(Self, Option<String>), String> {
        let out = dir.join(format!("{name}.out"));
        let mut child = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(program)
            .args(args)
            .env("TURNSTILE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot start valgrind (apt install valgrind): {err}"))?;
        let pid = child.id().ok_or("valgrind exited at once")?;
        let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
        let mut seen = None;
        if let Some(ready) = ready {
            seen = tokio::time::timeout(Duration::from_secs(300), async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains(ready) {
                        return Some(line);
                    }
                }
                None
            })
            .await
            .ok()
            .flatten();
            if seen.is_none() {
                return Err(format!(
                    "{} under callgrind did not log {ready}",
                    program.display()
                ));
            }
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((
            Self {
                child,
                pid,
                out,
                dumps: 0,
            },
            seen,
        ))
    }

    async fn control(&self, flag: &str) -> Result<(), String> {
        let status = Command::new("callgrind_control")
            .arg(flag)
            .arg(self.pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map_err(|err| format!("callgrind_control: {err}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("callgrind_control {flag} {}: {status}", self.pid))
    }

    /// Zeroes the counters.
    async fn zero(&self) -> Result<(), String> {
        self.control("-z").await
    }

    /// Instructions since the last zero (a dump's `summary:` line).
    async fn instructions(&mut self) -> Result<u64, String> {
        self.control("-d").await?;
        self.dumps += 1;
        let dump = PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        // The dump is written by the process itself, shortly after the command.
        for _ in 0..600 {
            if let Ok(text) = std::fs::read_to_string(&dump) {
                if let Some(line) = text.lines().find(|l| l.starts_with("summary:")) {
                    return line["summary:".len()..]
                        .trim()
                        .parse()
                        .map_err(|err| format!("{}: {err}", dump.display()));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("no dump at {}", dump.display()))
    }
}

/// Instructions per operation of each workload, for the server and for Redis.
/// `ops` operations of each workload (2,000 by default; the smoke test runs fewer).
/// With `keep`, the callgrind dumps are left in that directory for `callgrind_annotate`
/// (`server.out.1` is the lock workload, `.2` the queue, `.3` the grouped; the same for
/// `redis.out.*`).
pub async fn cost(target: &Target, ops: u64, keep: Option<&Path>) -> Result<Report, String> {
    let dir = match keep {
        Some(dir) => dir.to_owned(),
        None => std::env::temp_dir().join(format!("turnstile-bench-cost-{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
    let port = free_port().map_err(|err| err.to_string())?.to_string();
    let (mut redis, _) = Counted::start(
        &dir,
        "redis",
        Path::new("redis-server"),
        &[
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        None,
    )
    .await?;
    // Redis says it is ready on stdout; a connection that is accepted says it too.
    let mut answered = false;
    for _ in 0..3000 {
        if tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
            .await
            .is_ok()
        {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !answered {
        return Err("redis-server under callgrind did not listen within 300 s".into());
    }
    let redis_url = format!("redis://127.0.0.1:{port}");
    let (mut server, ready) = Counted::start(
        &dir,
        "server",
        target.bin(),
        &[
            "serve",
            "--redis-url",
            &redis_url,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--dashboard-listen",
            "off",
            "--log-format",
            "json",
        ],
        Some("\"ready\""),
    )
    .await?;
    let addr = ready
        .as_deref()
        .and_then(|line| line.split("\"addr\":\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .ok_or("no addr in the server's ready line")?;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .map_err(|err| err.to_string())?
        .connect()
        .await
        .map_err(|err| format!("cannot connect to {addr}: {err}"))?;
    let mut report = Report {
        scenario: "cost",
        ..Report::default()
    };
    // A warm-up of each workload first (scripts loaded, connections made, buffers
    // grown), then the counted run.
    for (name, grouped) in [
        ("lock", None),
        ("queue", Some(false)),
        ("grouped", Some(true)),
    ] {
        let run = |n| {
            let channel = channel.clone();
            async move {
                match grouped {
                    None => lock_cycles(&channel, n).await,
                    Some(grouped) => tasks(&channel, n, grouped).await,
                }
            }
        };
        run(ops / 10).await?;
        server.zero().await?;
        redis.zero().await?;
        run(ops).await?;
        let server_ir = server.instructions().await? as f64 / ops as f64;
        let redis_ir = redis.instructions().await? as f64 / ops as f64;
        let (server_key, redis_key, ratio_key) = match name {
            "lock" => (
                "lock_server_instr",
                "lock_redis_instr",
                "lock_server_per_redis",
            ),
            "queue" => (
                "queue_server_instr",
                "queue_redis_instr",
                "queue_server_per_redis",
            ),
            _ => (
                "grouped_server_instr",
                "grouped_redis_instr",
                "grouped_server_per_redis",
            ),
        };
        report = report
            .extra(server_key, Extra::Number(server_ir.round()))
            .extra(redis_key, Extra::Number(redis_ir.round()))
            .extra(ratio_key, Extra::Number(server_ir / redis_ir));
    }
    let _ = server.child.kill().await;
    let _ = redis.child.kill().await;
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(report)
}

/// `n` Acquire + Release cycles (rounded down to a multiple of `LOCKERS`) over `LOCKERS`
/// clients, each on a name of its own.
async fn lock_cycles(channel: &Channel, n: u64) -> Result<(), String> {
    let mut clients = JoinSet::new();
    for client in 0..LOCKERS {
        let mut locks = LockServiceClient::new(channel.clone());
        clients.spawn(async move {
            for _ in 0..n / LOCKERS {
                let won = locks
                    .acquire(AcquireRequest {
                        name: format!("cost:{client}"),
                        owner: format!("cost-{client}"),
                        ttl: Some(prost_types::Duration {
                            seconds: 10,
                            nanos: 0,
                        }),
                        ..Default::default()
                    })
                    .await
                    .map_err(failed)?
                    .into_inner();
                locks
                    .release(ReleaseRequest {
                        name: format!("cost:{client}"),
                        token: won.token,
                    })
                    .await
                    .map_err(failed)?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(done) = clients.join_next().await {
        done.map_err(|err| err.to_string())??;
    }
    Ok(())
}

/// `n` tasks enqueued in batches of 100 (grouped: over `GROUPS` groups, the queue's
/// group cap `IN_FLIGHT`), each delivered to one of `STREAMS` Subscribe streams and
/// acked on its own.
async fn tasks(channel: &Channel, n: u64, grouped: bool) -> Result<(), String> {
    let mut queues = QueueServiceClient::new(channel.clone());
    let queue = if grouped {
        "cost:grouped"
    } else {
        "cost:plain"
    };
    if grouped {
        queues
            .configure_queue(ConfigureQueueRequest {
                queue: queue.into(),
                group_max_in_flight: Some(IN_FLIGHT),
                ..Default::default()
            })
            .await
            .map_err(failed)?;
    }
    for start in (0..n).step_by(100) {
        let batch = (start..(start + 100).min(n))
            .map(|k| TaskSpec {
                payload: b"x".to_vec().into(),
                group: if grouped {
                    format!("g{}", k % GROUPS)
                } else {
                    String::new()
                },
                ..Default::default()
            })
            .collect();
        queues
            .enqueue(EnqueueRequest {
                queue: queue.into(),
                tasks: batch,
                ..Default::default()
            })
            .await
            .map_err(failed)?;
    }
    let acked = Arc::new(AtomicU64::new(0));
    let mut streams = JoinSet::new();
    for _ in 0..STREAMS {
        let mut queues = queues.clone();
        let acked = acked.clone();
        streams.spawn(async move {
            let mut stream = queues
                .subscribe(SubscribeRequest {
                    queue: queue.into(),
                    max_in_flight: IN_FLIGHT,
                    ..Default::default()
                })
                .await
                .map_err(failed)?
                .into_inner();
            while acked.load(Ordering::SeqCst) < n {
                let Some(message) = stream.next().await else {
                    break;
                };
                if let Some(Event::Task(task)) = message.map_err(failed)?.event {
                    let reply = queues
                        .ack(AckRequest {
                            queue: queue.into(),
                            receipts: vec![task.receipt],
                            ..Default::default()
                        })
                        .await
                        .map_err(failed)?;
                    if reply.into_inner().acked.first() == Some(&true) {
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            Ok::<_, String>(())
        });
    }
    // A stream whose last task went to another stream waits for more: once all are
    // acked, the rest are cut.
    while acked.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if streams.is_empty() {
            return Err("every stream ended before the tasks were acked".into());
        }
        if let Some(done) = streams.try_join_next() {
            done.map_err(|err| err.to_string())??;
        }
    }
    streams.abort_all();
    Ok(())
}
