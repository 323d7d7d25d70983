//! `limits`: how long any one script holds Redis at sizes a big deployment reaches. It
//! fills a million READY tasks, 100,000 groups of one task each, 100,000 dedupe windows
//! that end together, 10,000 schedules every second, 10,000 locks of one owner and
//! 100,000 DEAD tasks, then works each the way clients and the dashboard do (leases of
//! 1,000, a Subscribe drain, peeks and pages, stats, redrive and cancel of everything
//! DEAD, ReleaseAll, the schedules' fires), with Redis' slow log recording every
//! command over 1 ms. It reports each script's longest run (`SLOWLOG`, named by
//! SHA1 through `turnstile::floor::script_names`); goal: none above 5 ms.
//!
//! The slow log counts wall time, and a fork makes every command after it slower while
//! the child's copy-on-write lasts: a run with three automatic AOF rewrites (forks of
//! 15 ms at 470 MB) read plain `HDEL`s and `ZREM`s of 8 ms and scripts of 12-17 ms, a
//! run without one 5-7 ms. Forks are Redis' persistence, not a script's work, so the
//! rewrites wait until the run is over (`auto-aof-rewrite-percentage` 0, put back
//! after) and the report says how many forks the run saw.

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use turnstile::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient, schedule,
    schedule_service_client::ScheduleServiceClient, subscribe_response::Event, AckRequest,
    AcquireRequest, CancelRequest, EnqueueRequest, LeaseRequest, ListTasksRequest, PeekRequest,
    PutScheduleRequest, RedriveRequest, ReleaseAllRequest, Schedule, ScheduledTask, StatsRequest,
    SubscribeRequest, TaskSpec, TaskState,
};

use super::{
    failed,
    report::{Extra, Report},
    ride_out,
    sample::Latency,
    scale::{self, Store},
    target::Target,
};

/// `client.method(request)`, ridden out through UNAVAILABLE (`ride_out`): a fresh
/// client and request for each try.
macro_rules! call {
    ($client:expr, $method:ident, $request:expr) => {
        ride_out(|| {
            let (mut client, request) = ($client.clone(), $request);
            async move { client.$method(request).await }
        })
    };
}

/// The slow log's threshold: every command over this is recorded.
const SLOWER_THAN_US: u64 = 1000;
/// Enqueue calls at once while filling.
const FILLERS: usize = 8;
/// Tasks per Enqueue while filling.
const BATCH: usize = 1000;

/// The sizes, scaled by `fraction` (1.0 for the real run; the smoke test runs a
/// hundredth).
struct Sizes {
    tasks: usize,
    groups: usize,
    windows: usize,
    schedules: usize,
    locks: usize,
    dead: usize,
}

impl Sizes {
    fn scaled(fraction: f64) -> Self {
        let of = |n: f64| ((n * fraction) as usize).max(10);
        Self {
            tasks: of(1_000_000.0),
            groups: of(100_000.0),
            windows: of(100_000.0),
            schedules: of(10_000.0),
            locks: of(10_000.0),
            dead: of(100_000.0),
        }
    }
}

/// Runs the scenario on the target's Redis (it needs to read its slow log).
/// `limits` on the Redis of `target`.
pub async fn limits(target: &Target, fraction: f64) -> Result<Report, String> {
    measure(target, fraction, "limits").await
}

/// `limits` on a Redis Cluster of three primaries started here (whatever `--server`
/// says), under one server: every node's slow log read.
pub async fn limits_cluster(bin: &Path, fraction: f64) -> Result<Report, String> {
    let dir = std::env::temp_dir().join(format!("turnstile-limits-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (url, args, nodes) = scale::start_store(Store::Cluster, &dir).await?;
    let target = Target::replicas(bin, &url, &args, 1, nodes).await?;
    let measured = measure(&target, fraction, "limits_cluster").await;
    target.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

async fn measure(target: &Target, fraction: f64, scenario: &'static str) -> Result<Report, String> {
    let url = target
        .redis_url
        .clone()
        .ok_or("limits reads Redis' slow log: it needs the Redis")?;
    let sizes = Sizes::scaled(fraction);
    let channels = target.server_channels(FILLERS).await?;
    let mut slowlog = SlowLog::open(&url).await?;
    let rewrite_percentage = slowlog.config("auto-aof-rewrite-percentage").await?;
    slowlog.set("auto-aof-rewrite-percentage", "0").await?;

    // Filled first (filling is not what is measured: its runs are bounded already).
    eprintln!("limits: filling");
    fill(&channels, "limits:tasks", sizes.tasks, plain).await?;
    fill(&channels, "limits:groups", sizes.groups, |n| TaskSpec {
        group: format!("g{n}"),
        ..plain(n)
    })
    .await?;
    fill(&channels, "limits:windows", sizes.windows, |n| TaskSpec {
        dedupe_window: Some(prost_types::Duration {
            seconds: 2,
            nanos: 0,
        }),
        ..plain(n)
    })
    .await?;
    fill(&channels, "limits:dead", sizes.dead, |n| TaskSpec {
        max_attempts: 1,
        ..plain(n)
    })
    .await?;
    slowlog.reset().await?;
    let forks_before = slowlog.forks().await?;

    let mut queues = QueueServiceClient::new(channels[0].clone());
    eprintln!("limits: leases of 1,000");
    for queue in ["limits:tasks", "limits:groups"] {
        for _ in 0..(20.0 * fraction).ceil() as usize {
            call!(queues, lease, lease(queue, 1000, 60_000, false)).await?;
        }
    }
    eprintln!("limits: a Subscribe drain of each");
    for queue in ["limits:tasks", "limits:groups"] {
        drain(channels[1].clone(), queue, (20_000.0 * fraction) as usize).await?;
    }
    eprintln!("limits: peeks, pages and stats");
    for queue in ["limits:tasks", "limits:groups", "limits:dead"] {
        for state in [TaskState::Ready, TaskState::InFlight, TaskState::Dead] {
            call!(
                queues,
                peek,
                PeekRequest {
                    queue: queue.into(),
                    state: state as i32,
                    limit: 1000,
                    ..Default::default()
                }
            )
            .await?;
            call!(
                queues,
                list_tasks,
                ListTasksRequest {
                    queue: queue.into(),
                    state: state as i32,
                    page_size: 1000,
                    ..Default::default()
                }
            )
            .await?;
        }
        call!(
            queues,
            stats,
            StatsRequest {
                queue: queue.into(),
            }
        )
        .await?;
    }
    eprintln!("limits: dedupe windows ending together");
    // Every task of the windows' queue acked as it is leased (auto_ack): each window
    // starts then, and all end 2 s later.
    lease_until_empty(&queues, "limits:windows", 60_000, true).await?;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for n in 0..100 {
        let spec = TaskSpec {
            id: format!("after-{n}"),
            ..plain(n)
        };
        call!(
            queues,
            enqueue,
            EnqueueRequest {
                queue: "limits:windows".into(),
                tasks: vec![spec.clone()],
                ..Default::default()
            }
        )
        .await?;
    }
    eprintln!("limits: DEAD tasks: made, paged, redriven, cancelled");
    // Leased with a 1 ms lease and one attempt: the expiry passes make them DEAD.
    lease_until_empty(&queues, "limits:dead", 1, false).await?;
    wait_dead(&mut queues, sizes.dead).await?;
    call!(
        queues,
        list_tasks,
        ListTasksRequest {
            queue: "limits:dead".into(),
            state: TaskState::Dead as i32,
            page_size: 1000,
            ..Default::default()
        }
    )
    .await?;
    call!(
        queues,
        redrive,
        RedriveRequest {
            queue: "limits:dead".into(),
            ids: Vec::new(),
        }
    )
    .await?;
    let ids: Vec<String> = (0..sizes.dead.min(1000)).map(|n| format!("t{n}")).collect();
    call!(
        queues,
        cancel,
        CancelRequest {
            queue: "limits:dead".into(),
            ids: ids.clone(),
            ..Default::default()
        }
    )
    .await?;
    eprintln!("limits: locks of one owner");
    locks_of_one_owner(&channels, sizes.locks).await?;
    eprintln!("limits: schedules every second");
    schedules(&channels, sizes.schedules).await?;

    let forks = slowlog.forks().await? - forks_before;
    slowlog
        .set("auto-aof-rewrite-percentage", &rewrite_percentage)
        .await?;
    let longest = slowlog.longest().await?;
    let worst = longest.first().map_or(0.0, |(_, ms)| *ms);
    let mut report = Report::new(scenario, 0.0, &Latency::default())
        .extra("longest_script_ms", Extra::Number(worst))
        .extra(
            "scripts_over_5_ms",
            Extra::Count(longest.iter().filter(|(_, ms)| *ms > 5.0).count() as u64),
        )
        .extra("forks_during_run", Extra::Count(forks))
        .extra("redis_nodes", Extra::Count(slowlog.nodes.len() as u64));
    let listed: Vec<String> = longest
        .iter()
        .map(|(name, ms)| format!("{name} {ms:.1}"))
        .collect();
    report = report.extra("longest_runs_ms", Extra::Text(listed.join(", ")));
    Ok(report)
}

/// Task `n` of 8 zero bytes, due now.
fn plain(n: usize) -> TaskSpec {
    TaskSpec {
        id: format!("t{n}"),
        payload: vec![0; 8].into(),
        ..Default::default()
    }
}

fn lease(queue: &str, max_tasks: u32, visibility_ms: i64, auto_ack: bool) -> LeaseRequest {
    LeaseRequest {
        queue: queue.into(),
        max_tasks,
        visibility: Some(prost_types::Duration {
            seconds: visibility_ms / 1000,
            nanos: ((visibility_ms % 1000) * 1_000_000) as i32,
        }),
        auto_ack,
        ..Default::default()
    }
}

/// Leases 1,000 at a time from `queue` until none is left.
async fn lease_until_empty(
    queues: &QueueServiceClient<Channel>,
    queue: &str,
    visibility_ms: i64,
    auto_ack: bool,
) -> Result<(), String> {
    while !call!(queues, lease, lease(queue, 1000, visibility_ms, auto_ack))
        .await?
        .tasks
        .is_empty()
    {}
    Ok(())
}

/// Enqueues `count` tasks made by `spec` into `queue`, `BATCH` a call, `FILLERS` calls
/// at once.
async fn fill(
    channels: &[Channel],
    queue: &str,
    count: usize,
    spec: impl Fn(usize) -> TaskSpec + Send + Sync + 'static,
) -> Result<(), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let spec = Arc::new(spec);
    let mut set = JoinSet::new();
    for c in 0..FILLERS {
        let client = QueueServiceClient::new(channels[c % channels.len()].clone());
        let (next, spec, queue) = (next.clone(), spec.clone(), queue.to_owned());
        set.spawn(async move {
            loop {
                let from = next.fetch_add(BATCH, Ordering::Relaxed);
                if from >= count {
                    return Ok::<_, String>(());
                }
                let tasks: Vec<TaskSpec> = (from..(from + BATCH).min(count)).map(&*spec).collect();
                call!(
                    client,
                    enqueue,
                    EnqueueRequest {
                        queue: queue.clone(),
                        tasks: tasks.clone(),
                        ..Default::default()
                    }
                )
                .await?;
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// A Subscribe worker (1,000 slots) takes and acks `count` tasks of `queue`.
async fn drain(channel: Channel, queue: &str, count: usize) -> Result<(), String> {
    let mut queues = QueueServiceClient::new(channel);
    let mut stream = queues
        .subscribe(SubscribeRequest {
            queue: queue.into(),
            max_in_flight: 1000,
            visibility: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            worker_id: String::new(),
        })
        .await
        .map_err(failed)?
        .into_inner();
    let mut receipts = Vec::new();
    let mut done = 0;
    while done < count {
        let message = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .map_err(|_| format!("{queue}: no delivery in 30 s"))?
            .ok_or("the stream ended")?
            .map_err(failed)?;
        if let Some(Event::Task(task)) = message.event {
            receipts.push(task.receipt);
            done += 1;
        }
        if receipts.len() >= 500 || (done >= count && !receipts.is_empty()) {
            let batch = std::mem::take(&mut receipts);
            call!(
                queues,
                ack,
                AckRequest {
                    queue: queue.into(),
                    receipts: batch.clone(),
                    ..Default::default()
                }
            )
            .await?;
        }
    }
    Ok(())
}

/// Waits until `dead` tasks of the DEAD queue are DEAD (the expiry passes move them).
async fn wait_dead(queues: &mut QueueServiceClient<Channel>, dead: usize) -> Result<(), String> {
    for _ in 0..600 {
        let stats = call!(
            queues,
            stats,
            StatsRequest {
                queue: "limits:dead".into(),
            }
        )
        .await?;
        if stats.dead as usize >= dead {
            return Ok(());
        }
        // Each look runs an expiry pass: looking is what moves them.
        call!(queues, lease, lease("limits:dead", 1, 1, false)).await?;
    }
    Err("the DEAD queue never filled".into())
}

/// `count` locks taken by one owner, then all released by one ReleaseAll.
async fn locks_of_one_owner(channels: &[Channel], count: usize) -> Result<(), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for c in 0..FILLERS {
        let client = LockServiceClient::new(channels[c % channels.len()].clone());
        let next = next.clone();
        set.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    return Ok::<_, String>(());
                }
                call!(
                    client,
                    acquire,
                    AcquireRequest {
                        name: format!("limits:lock{n}"),
                        owner: "limits-owner".into(),
                        ttl: Some(prost_types::Duration {
                            seconds: 600,
                            nanos: 0,
                        }),
                        ..Default::default()
                    }
                )
                .await?;
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let locks = LockServiceClient::new(channels[0].clone());
    call!(
        locks,
        release_all,
        ReleaseAllRequest {
            owner: "limits-owner".into(),
        }
    )
    .await?;
    Ok(())
}

/// `count` schedules every second into one queue, fired for three seconds.
async fn schedules(channels: &[Channel], count: usize) -> Result<(), String> {
    let schedules = ScheduleServiceClient::new(channels[0].clone());
    for n in 0..count {
        let request = PutScheduleRequest {
            schedule: Some(Schedule {
                name: format!("limits:s{n}"),
                queue: "limits:fires".into(),
                spec: Some(schedule::Spec::Every(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                })),
                task: Some(ScheduledTask {
                    payload: b"tick".to_vec(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        call!(schedules, put_schedule, request.clone()).await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(())
}

/// Redis' slow log, recording every command over [`SLOWER_THAN_US`]: of each node
/// when `url` lists a cluster's (comma-separated).
struct SlowLog {
    nodes: Vec<redis::aio::MultiplexedConnection>,
}

impl SlowLog {
    async fn open(url: &str) -> Result<Self, String> {
        let mut nodes = Vec::new();
        for node in url.split(',') {
            let client = redis::Client::open(node).map_err(|e| e.to_string())?;
            nodes.push(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(Self { nodes })
    }

    /// A config parameter's value (the first node's).
    async fn config(&mut self, name: &str) -> Result<String, String> {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut self.nodes[0])
            .await
            .map_err(|e| e.to_string())?;
        pair.get(1)
            .cloned()
            .ok_or_else(|| format!("CONFIG GET {name} gave nothing"))
    }

    /// Sets a config parameter on every node.
    async fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        for node in &mut self.nodes {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query_async::<()>(node)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Forks the nodes have made since they started (`INFO stats`' `total_forks`).
    async fn forks(&mut self) -> Result<u64, String> {
        let mut forks = 0;
        for node in &mut self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .query_async(node)
                .await
                .map_err(|e| e.to_string())?;
            forks += info
                .lines()
                .find_map(|line| line.strip_prefix("total_forks:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .ok_or_else(|| "INFO stats gave no total_forks".to_owned())?;
        }
        Ok(forks)
    }

    /// Starts recording from now.
    async fn reset(&mut self) -> Result<(), String> {
        self.set("slowlog-log-slower-than", &SLOWER_THAN_US.to_string())
            .await?;
        self.set("slowlog-max-len", "100000").await?;
        for node in &mut self.nodes {
            redis::cmd("SLOWLOG")
                .arg("RESET")
                .query_async::<()>(node)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Each command's longest recorded run (scripts by name), longest first, in ms.
    async fn longest(&mut self) -> Result<Vec<(String, f64)>, String> {
        let mut entries: Vec<redis::Value> = Vec::new();
        for node in &mut self.nodes {
            let mut of_node: Vec<redis::Value> = redis::cmd("SLOWLOG")
                .arg("GET")
                .arg(100_000)
                .query_async(node)
                .await
                .map_err(|e| e.to_string())?;
            entries.append(&mut of_node);
        }
        let names: HashMap<String, String> = turnstile::floor::script_names().into_iter().collect();
        let mut longest: HashMap<String, f64> = HashMap::new();
        for entry in entries {
            let redis::Value::Array(fields) = entry else {
                continue;
            };
            let micros = match fields.get(2) {
                Some(redis::Value::Int(us)) => *us as f64,
                _ => continue,
            };
            let args: Vec<String> = match fields.get(3) {
                Some(redis::Value::Array(args)) => args
                    .iter()
                    .map(|arg| match arg {
                        redis::Value::BulkString(bytes) => {
                            String::from_utf8_lossy(bytes).into_owned()
                        }
                        _ => String::new(),
                    })
                    .collect(),
                _ => continue,
            };
            let command = args
                .first()
                .map(|c| c.to_ascii_uppercase())
                .unwrap_or_default();
            let name = match command.as_str() {
                "EVALSHA" | "EVALSHA_RO" => {
                    let script = args
                        .get(1)
                        .and_then(|sha| names.get(sha).cloned())
                        .unwrap_or_else(|| "an unknown script".into());
                    // The hash tag of its first key: which queue (or lock space) it ran on.
                    let tag = args
                        .get(3)
                        .and_then(|key| Some(&key[key.find('{')?..=key.find('}')?]));
                    match tag {
                        Some(tag) => format!("{script} {tag}"),
                        None => script,
                    }
                }
                "EVAL" | "EVAL_RO" => "a script sent whole".into(),
                other => other.to_owned(),
            };
            let ms = micros / 1000.0;
            let slot = longest.entry(name).or_default();
            *slot = slot.max(ms);
        }
        let mut sorted: Vec<(String, f64)> = longest.into_iter().collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(sorted)
    }
}
