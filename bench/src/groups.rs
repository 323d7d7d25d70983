//! `groups`: what flow control costs. Deliveries per second with 1, 1,000 and 100,000
//! groups against the ungrouped rate in the same run (a prefilled queue drained by
//! Subscribe workers with batched acks); a quiet group's pickup p99 while another group
//! holds a million READY tasks, against the same pickup with no backlog; a 1,000/s rate
//! limit over 10 s; and Redis commands per second of a paused queue with 100 open
//! streams and READY tasks.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{task::JoinSet, time::Instant};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{
    failed,
    idle::hold_stream,
    queues::{age, collect, stamp, subscribers, SUBSCRIBERS},
    redis_cost::Usage,
    report::{Extra, Report},
    sample::{Latency, Progress},
    target::Target,
};
use turnstile::{
    pb::{
        queue_service_client::QueueServiceClient, subscribe_response::Event, AckRequest,
        ConfigureQueueRequest, EnqueueRequest, RateLimit, SubscribeRequest, TaskSpec,
    },
    token::new_token,
};

/// Tasks drained per group count.
const DRAIN_TASKS: usize = 200_000;
/// The backlog of the busy group behind the quiet one.
const BACKLOG: usize = 1_000_000;
/// Tasks per prefill Enqueue, and prefill calls at once.
const PREFILL_BATCH: usize = 1_000;
const PREFILLERS: usize = 4;
const RATE: u32 = 1_000;
const RATE_MEASURE: Duration = Duration::from_secs(10);
const PAUSED_STREAMS: usize = 100;

fn queue_name(what: &str) -> String {
    format!("bench:groups:{what}:{}", new_token())
}

/// Enqueues `count` tasks into `queue`, the n-th in the group `group_of(n)`.
async fn prefill(
    channels: &[Channel],
    queue: &str,
    count: usize,
    group_of: impl Fn(usize) -> String + Send + Sync + 'static,
) -> Result<(), String> {
    let group_of = Arc::new(group_of);
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for p in 0..PREFILLERS {
        let mut queues = QueueServiceClient::new(channels[p % channels.len()].clone());
        let (queue, next, group_of) = (queue.to_owned(), next.clone(), group_of.clone());
        set.spawn(async move {
            loop {
                let from = next.fetch_add(PREFILL_BATCH as u64, Ordering::Relaxed) as usize;
                if from >= count {
                    return Ok::<_, String>(());
                }
                let tasks = (from..count.min(from + PREFILL_BATCH))
                    .map(|n| TaskSpec {
                        payload: vec![0; 8].into(),
                        group: group_of(n),
                        ..TaskSpec::default()
                    })
                    .collect();
                queues
                    .enqueue(EnqueueRequest {
                        queue: queue.clone(),
                        tasks,
                        ..Default::default()
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

/// A drain's figures: tasks per second, and Redis CPU µs per task (NaN without the
/// Redis URL).
struct Drained {
    per_s: f64,
    redis_us: f64,
}

/// Drains `queue` of `count` tasks with Subscribe workers (batched acks) for at most
/// `duration`: tasks per second until the last ack.
async fn drain(
    target: &Target,
    channels: &[Channel],
    queue: &str,
    count: usize,
    duration: Duration,
    label: String,
) -> Result<Drained, String> {
    let before = Usage::read_if(target.redis_url.as_deref()).await?;
    let acked = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let (progress, shown) = Progress::show(label);
    let started = Instant::now();
    let subs = subscribers(
        channels,
        &[queue.to_owned()],
        SUBSCRIBERS,
        true,
        acked.clone(),
        stop.clone(),
        |_| None,
    )
    .await?;
    let (mut last, mut shown_count) = (started, 0);
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = acked.load(Ordering::Relaxed);
        if now > shown_count {
            progress.add(now - shown_count);
            shown_count = now;
            last = Instant::now();
        }
        if now as usize >= count {
            break;
        }
    }
    let after = Usage::read_if(target.redis_url.as_deref()).await?;
    drop(shown);
    stop.cancel();
    collect(subs).await;
    Ok(Drained {
        per_s: shown_count as f64 / last.duration_since(started).as_secs_f64().max(1e-3),
        redis_us: before
            .zip(after)
            .map_or(f64::NAN, |(b, a)| b.cpu_us_per_op(a, shown_count)),
    })
}

/// Deliveries per second of a queue whose tasks are spread over `groups` groups (0:
/// ungrouped).
async fn rate_with(
    target: &Target,
    channels: &[Channel],
    groups: usize,
    duration: Duration,
) -> Result<Drained, String> {
    let queue = queue_name(&format!("g{groups}"));
    prefill(channels, &queue, DRAIN_TASKS, move |n| {
        if groups == 0 {
            String::new()
        } else {
            format!("g{}", n % groups)
        }
    })
    .await?;
    drain(
        target,
        channels,
        &queue,
        DRAIN_TASKS,
        duration,
        format!("groups ({groups} groups)"),
    )
    .await
}

/// How long the worker of the pickup runs spends on a task, on average, and how many
/// it runs at once: it drains the backlog at about 4,000 tasks/s, as real work would,
/// so the figure is the quiet group's wait behind the busy one, not a saturated
/// server's.
const WORK: Duration = Duration::from_millis(2);
const WORKER_SLOTS: u32 = 8;

/// The work of the worker's n-th task: spread evenly over 0.5–1.5 × [`WORK`] (a
/// golden-ratio sequence), as real tasks vary. With the same time for every task, the
/// tasks that one dispatch handed out together would end together, so the worker would
/// free its slots all at once every few milliseconds, and the quiet task's figure would
/// be that cycle's length, not its turn in the rotation. The work ends on the precise
/// timer, not tokio's: its 1 ms wheel would end every task on a millisecond tick, and
/// the worker would again free its slots in bursts (about four each millisecond), so
/// the quiet task would wait up to a millisecond for the next tick.
fn work(n: u64) -> Duration {
    let spread = (n as f64 * 0.618_033_988_749_895).fract();
    WORK.mul_f64(0.5 + spread)
}

/// Pickup latency of tasks enqueued every 5 ms into the group `quiet`, pushed to a
/// worker that also works through `backlog` READY tasks of the group `busy`.
async fn quiet_pickup(
    channels: &[Channel],
    backlog: usize,
    duration: Duration,
) -> Result<Latency, String> {
    let queue = queue_name("quiet");
    if backlog > 0 {
        prefill(channels, &queue, backlog, |_| "busy".to_owned()).await?;
    }
    let epoch = Instant::now();
    let stop = CancellationToken::new();
    let mut worker = QueueServiceClient::new(channels[1].clone());
    let mut stream = worker
        .subscribe(SubscribeRequest {
            queue: queue.clone(),
            max_in_flight: WORKER_SLOTS,
            visibility: None,
            worker_id: String::new(),
        })
        .await
        .map_err(failed)?
        .into_inner();
    let work = {
        let (stop, queue) = (stop.clone(), queue.clone());
        tokio::spawn(async move {
            let mut latency = Latency::default();
            let mut handed = 0u64;
            loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    () = stop.cancelled() => break,
                };
                let Some(Ok(event)) = event else { break };
                let Some(Event::Task(task)) = event.event else {
                    continue;
                };
                if task.group == "quiet" {
                    latency.record(age(epoch, &task.payload));
                }
                let (mut worker, queue) = (worker.clone(), queue.clone());
                handed += 1;
                let work = work(handed);
                tokio::spawn(async move {
                    turnstile::time::precise::sleep_until(Instant::now() + work).await;
                    let _ = worker
                        .ack(AckRequest {
                            queue,
                            receipts: vec![task.receipt],
                            ..Default::default()
                        })
                        .await;
                });
            }
            latency
        })
    };
    let (progress, shown) = Progress::show(format!("groups (pickup, backlog {backlog})"));
    let mut queues = QueueServiceClient::new(channels[0].clone());
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while started.elapsed() < duration {
        tick.tick().await;
        queues
            .enqueue(EnqueueRequest {
                queue: queue.clone(),
                tasks: vec![TaskSpec {
                    payload: stamp(epoch),
                    group: "quiet".into(),
                    ..TaskSpec::default()
                }],
                ..Default::default()
            })
            .await
            .map_err(failed)?;
        progress.tick();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(shown);
    stop.cancel();
    work.await.map_err(|e| e.to_string())
}

/// Deliveries per second of a queue limited to [`RATE`]/s (the default burst, one
/// second's worth), over [`RATE_MEASURE`] once the first burst has gone.
async fn limited_rate(channels: &[Channel]) -> Result<f64, String> {
    let queue = queue_name("rate");
    let mut queues = QueueServiceClient::new(channels[0].clone());
    queues
        .configure_queue(ConfigureQueueRequest {
            queue: queue.clone(),
            rate_limit: Some(RateLimit {
                limit: RATE,
                period: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                burst: 0,
            }),
            ..Default::default()
        })
        .await
        .map_err(failed)?;
    let tasks = RATE as usize * (RATE_MEASURE.as_secs() as usize + 5);
    prefill(channels, &queue, tasks, |_| String::new()).await?;
    let acked = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let subs = subscribers(
        channels,
        &[queue],
        SUBSCRIBERS,
        true,
        acked.clone(),
        stop.clone(),
        |_| None,
    )
    .await?;
    // The first second's burst goes at once; then the steady rate.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (progress, shown) = Progress::show("groups (rate limit)".into());
    let (from, started) = (acked.load(Ordering::Relaxed), Instant::now());
    while started.elapsed() < RATE_MEASURE {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress.tick();
    }
    let done = acked.load(Ordering::Relaxed) - from;
    let elapsed = started.elapsed();
    drop(shown);
    stop.cancel();
    collect(subs).await;
    Ok(done as f64 / elapsed.as_secs_f64())
}

/// Redis commands per second while a paused queue with READY tasks has
/// [`PAUSED_STREAMS`] open streams (None without the Redis URL).
async fn paused_cost(target: &Target, channels: &[Channel]) -> Result<Option<f64>, String> {
    let queue = queue_name("paused");
    let mut queues = QueueServiceClient::new(channels[0].clone());
    queues
        .configure_queue(ConfigureQueueRequest {
            queue: queue.clone(),
            paused: Some(true),
            ..Default::default()
        })
        .await
        .map_err(failed)?;
    prefill(channels, &queue, 1_000, |n| format!("g{}", n % 10)).await?;
    let stop = CancellationToken::new();
    let mut streams = JoinSet::new();
    for i in 0..PAUSED_STREAMS {
        let channel = channels[i % channels.len()].clone();
        hold_stream(channel, queue.clone(), 4, &stop, &mut streams).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let url = target.redis_url.clone();
    let before = Usage::read_if(url.as_deref()).await?;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = Usage::read_if(url.as_deref()).await?;
    stop.cancel();
    while streams.join_next().await.is_some() {}
    // Our own INFO is one of the commands counted.
    Ok(before.zip(after).map(|(b, a)| {
        a.commands.saturating_sub(b.commands).saturating_sub(1) as f64
            / started.elapsed().as_secs_f64()
    }))
}

pub async fn groups(target: &Target, duration: Duration) -> Result<Report, String> {
    let channels = target.server_channels(4).await?;
    let ungrouped = rate_with(target, &channels, 0, duration).await?;
    let mut by_groups = Vec::new();
    for groups in [1, 1_000, 100_000] {
        by_groups.push((
            groups,
            rate_with(target, &channels, groups, duration).await?,
        ));
    }
    let calm = quiet_pickup(&channels, 0, duration).await?;
    let busy = quiet_pickup(&channels, BACKLOG, duration).await?;
    let limited = limited_rate(&channels).await?;
    let paused = paused_cost(target, &channels).await?;
    let most = by_groups
        .last()
        .map_or(f64::NAN, |(_, drained)| drained.per_s);
    let mut report = Report::new("groups", most, &busy)
        .extra("ungrouped_ops_per_s", Extra::Number(ungrouped.per_s))
        .extra(
            "ungrouped_redis_us_per_op",
            Extra::Number(ungrouped.redis_us),
        );
    report.floor_ops_per_s = Some(ungrouped.per_s);
    for (groups, drained) in by_groups {
        let (rate, cost) = match groups {
            1 => ("groups_1_ops_per_s", "groups_1_redis_us_per_op"),
            1_000 => ("groups_1000_ops_per_s", "groups_1000_redis_us_per_op"),
            _ => ("groups_100000_ops_per_s", "groups_100000_redis_us_per_op"),
        };
        report = report
            .extra(rate, Extra::Number(drained.per_s))
            .extra(cost, Extra::Number(drained.redis_us));
    }
    report = report
        .extra("backlog", Extra::Count(BACKLOG as u64))
        .extra("quiet_pickup_p99_ms", Extra::Number(busy.quantile_ms(0.99)))
        .extra("calm_pickup_p99_ms", Extra::Number(calm.quantile_ms(0.99)))
        .extra("calm_pickup_p50_ms", Extra::Number(calm.quantile_ms(0.5)))
        .extra("rate_limit_per_s", Extra::Number(limited))
        .extra(
            "rate_limit_error_pct",
            Extra::Number((limited - f64::from(RATE)).abs() * 100.0 / f64::from(RATE)),
        );
    if let Some(paused) = paused {
        report = report.extra("paused_redis_commands_per_s", Extra::Number(paused));
    }
    Ok(report)
}
