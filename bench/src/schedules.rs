//! `schedules`: 10,000 schedules firing every second over three server replicas on one
//! Redis. Over a measured minute: the fires enqueued against the fire times (they must
//! be equal), duplicates (must be 0), each fire's enqueue lateness (the task's
//! `enqueued_at` against its fire time, Redis' clock) and its arrival at a subscriber,
//! Redis commands and server CPU per fire. Before it: what the same 10,000 schedules
//! cost Redis while none is due, against the replicas with none; and how promptly a
//! few schedules' fires reach a waiting subscriber (the contract's promptness, apart
//! from a burst of 10,000 fires at one instant, which takes Redis alone a few hundred
//! milliseconds to store).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{
    failed,
    queues::{collect, subscribers},
    redis_cost::{cpu_seconds, Usage},
    report::{Extra, Report},
    sample::{Latency, Progress},
    target::Target,
};
use turnstile::{
    pb::{
        schedule, schedule_service_client::ScheduleServiceClient, PutScheduleRequest, Schedule,
        ScheduledTask,
    },
    token::new_token,
};

/// Schedules, queues they feed, and replicas.
const SCHEDULES: usize = 10_000;
const QUEUES: usize = 20;
const REPLICAS: usize = 3;
/// The measured window.
const WINDOW_S: i64 = 60;
/// Schedules of the promptness phase (into one queue, whose one subscriber waits), and
/// its window: a few fires at an instant, as a periodic job is, not a burst of
/// thousands (whose lateness is the time Redis takes to store them all).
const SPARSE: usize = 10;
const SPARSE_WINDOW_S: i64 = 20;
/// Put calls at once.
const PUTTERS: usize = 16;

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Puts `count` schedules (`<prefix>s<n>` into `<prefix>q<n % queues>`) with `spec`.
async fn put_all(
    channels: &[Channel],
    prefix: &str,
    (count, queues): (usize, usize),
    spec: schedule::Spec,
) -> Result<(), String> {
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for p in 0..PUTTERS {
        let mut client = ScheduleServiceClient::new(channels[p % channels.len()].clone());
        let (next, spec, prefix) = (next.clone(), spec.clone(), prefix.to_owned());
        set.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= count {
                    return Ok::<_, String>(());
                }
                client
                    .put_schedule(PutScheduleRequest {
                        schedule: Some(Schedule {
                            name: format!("{prefix}s{n}"),
                            queue: format!("{prefix}q{}", n % queues),
                            spec: Some(spec.clone()),
                            task: Some(ScheduledTask {
                                payload: b"tick".to_vec(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    })
                    .await
                    .map_err(failed)?;
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Redis commands per second over `seconds` (our own INFO excluded).
async fn commands_per_s(url: &str, seconds: u64) -> Result<f64, String> {
    let before = Usage::read(url).await?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let after = Usage::read(url).await?;
    Ok(after
        .commands
        .saturating_sub(before.commands)
        .saturating_sub(1) as f64
        / seconds as f64)
}

/// The servers' CPU seconds, summed.
fn cpu(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|pid| cpu_seconds(*pid)).sum()
}

/// What one phase of fires every second measured.
struct Phase {
    /// Fire times in the window, and the distinct fires that reached a subscriber.
    expected: u64,
    distinct: u64,
    /// Fires that reached a subscriber more than once.
    duplicates: u64,
    /// Push time minus fire time, at the subscribers.
    pickup: Latency,
    /// Enqueue time (the task's `enqueued_at`, Redis' clock) minus fire time.
    enqueue: Latency,
    before: Usage,
    after: Usage,
    cpu_s: f64,
}

fn ms_of(at: Option<&prost_types::Timestamp>) -> i64 {
    at.map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

/// `count` schedules every second into `queues` queues, each with a subscriber, over a
/// window of `window_s` seconds that starts a few seconds from now.
async fn every_second(
    replicas: &Target,
    channels: &[Channel],
    url: &str,
    prefix: &str,
    (count, queues, window_s): (usize, usize, i64),
) -> Result<Phase, String> {
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let enqueue: Arc<Mutex<Latency>> = Arc::default();
    let stop = CancellationToken::new();
    let names: Vec<String> = (0..queues).map(|q| format!("{prefix}q{q}")).collect();
    // The window opens once every replica has the schedules (set below): nothing
    // before it is counted.
    let window = Arc::new((AtomicI64::new(i64::MAX), AtomicI64::new(i64::MAX)));
    let record = {
        let (seen, enqueue, window) = (seen.clone(), enqueue.clone(), window.clone());
        move |task: &turnstile::pb::Task| {
            let due = ms_of(task.due_at.as_ref());
            let (start, end) = (
                window.0.load(Ordering::Relaxed),
                window.1.load(Ordering::Relaxed),
            );
            if due < start || due >= end {
                return None;
            }
            let late = ms_of(task.enqueued_at.as_ref()) - due;
            lock(&enqueue).record(Duration::from_millis(late.max(0) as u64));
            *lock(&seen).entry(task.id.clone()).or_default() += 1;
            let now_us = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            Some(Duration::from_micros((now_us - due * 1000).max(0) as u64))
        }
    };
    let acked = Arc::new(AtomicU64::new(0));
    let subs = subscribers(channels, &names, queues, true, acked, stop.clone(), record).await?;
    let every = schedule::Spec::Every(prost_types::Duration {
        seconds: 1,
        nanos: 0,
    });
    put_all(channels, prefix, (count, queues), every).await?;
    // The replicas read the changed schedules (a few reads each), then fire.
    let window_start = (unix_ms() / 1000 + 3) * 1000;
    let window_end = window_start + window_s * 1000;
    window.1.store(window_end, Ordering::Relaxed);
    window.0.store(window_start, Ordering::Relaxed);
    let (progress, shown) = Progress::show(format!("schedules ({count} every second)"));
    while unix_ms() < window_start {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (before, cpu_before) = (Usage::read(url).await?, cpu(&replicas.server_pids));
    while unix_ms() < window_end {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress.tick();
    }
    let (after, cpu_after) = (Usage::read(url).await?, cpu(&replicas.server_pids));
    // The window's last fires reach their subscribers; then the schedules stop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    put_all(
        channels,
        prefix,
        (count, queues),
        schedule::Spec::Cron("0 0 1 1 *".into()),
    )
    .await?;
    drop(shown);
    stop.cancel();
    let pickup = collect(subs).await;
    let seen = lock(&seen);
    let enqueue = lock(&enqueue).clone();
    Ok(Phase {
        expected: count as u64 * window_s as u64,
        distinct: seen.len() as u64,
        duplicates: seen.values().map(|n| u64::from(n - 1)).sum(),
        pickup,
        enqueue,
        before,
        after,
        cpu_s: cpu_after - cpu_before,
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub async fn schedules(target: &Target) -> Result<Report, String> {
    let url = target
        .redis_url
        .clone()
        .ok_or("schedules needs the Redis (--redis-url with --server)")?;
    let prefix = format!("turnstile-bench-schedules-{}", new_token());
    let replicas = Target::replicas(
        target.bin(),
        &url,
        &["--key-prefix", &prefix],
        REPLICAS,
        Vec::new(),
    )
    .await?;
    let result = run(&replicas, &url).await;
    replicas.stop().await;
    result
}

async fn run(replicas: &Target, url: &str) -> Result<Report, String> {
    let channels = replicas.server_channels(REPLICAS * 2).await?;
    // Idle: the replicas alone, then with 10,000 schedules that fire once a year.
    let (progress, shown) = Progress::show("schedules (idle cost)".into());
    let idle_none = commands_per_s(url, 5).await?;
    let yearly = schedule::Spec::Cron("0 0 1 1 *".into());
    put_all(&channels, "", (SCHEDULES, QUEUES), yearly).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_yearly = commands_per_s(url, 5).await?;
    progress.tick();
    drop(shown);
    // A few schedules: how promptly a fire reaches a waiting subscriber.
    let sparse = every_second(
        replicas,
        &channels,
        url,
        "sparse-",
        (SPARSE, 1, SPARSE_WINDOW_S),
    )
    .await?;
    // 10,000 every second for a minute.
    let dense = every_second(replicas, &channels, url, "", (SCHEDULES, QUEUES, WINDOW_S)).await?;
    let fires = dense.distinct.max(1);
    let commands = dense.after.commands.saturating_sub(dense.before.commands) as f64;
    let report = Report::new(
        "schedules",
        dense.distinct as f64 / WINDOW_S as f64,
        &dense.pickup,
    )
    .extra("fire_times", Extra::Count(dense.expected))
    .extra("fires_enqueued", Extra::Count(dense.distinct))
    .extra(
        "duplicates",
        Extra::Count(dense.duplicates + sparse.duplicates),
    )
    .extra(
        "enqueue_lateness_p50_ms",
        Extra::Number(dense.enqueue.quantile_ms(0.5)),
    )
    .extra(
        "enqueue_lateness_p99_ms",
        Extra::Number(dense.enqueue.quantile_ms(0.99)),
    )
    .extra(
        "drain_lateness_p99_ms",
        Extra::Number(dense.pickup.quantile_ms(0.99)),
    )
    .extra("sparse_fires_enqueued", Extra::Count(sparse.distinct))
    .extra("sparse_fire_times", Extra::Count(sparse.expected))
    .extra(
        "sparse_enqueue_p99_ms",
        Extra::Number(sparse.enqueue.quantile_ms(0.99)),
    )
    .extra(
        "sparse_pickup_p50_ms",
        Extra::Number(sparse.pickup.quantile_ms(0.5)),
    )
    .extra(
        "sparse_pickup_p99_ms",
        Extra::Number(sparse.pickup.quantile_ms(0.99)),
    )
    .extra(
        "redis_commands_per_fire",
        Extra::Number(commands / fires as f64),
    )
    .extra(
        "server_us_per_fire",
        Extra::Number(dense.cpu_s * 1e6 / fires as f64),
    )
    .extra("idle_redis_commands_per_s", Extra::Number(idle_none))
    .extra(
        "idle_with_schedules_redis_commands_per_s",
        Extra::Number(idle_yearly),
    );
    Ok(dense.before.add_to(dense.after, fires, report))
}
