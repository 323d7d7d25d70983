//! Queue scenarios: `queue` (producers and Subscribe workers end to end, acks one by one
//! or batched, with its Redis floor), `pickup` (enqueue → push to an idle subscriber)
//! and `delayed` (lateness of tasks falling due).

use std::{
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use prost::bytes::Bytes;
use tokio::{sync::mpsc, task::JoinSet, time::Instant};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{
    failed,
    redis_cost::{ServerCpu, Usage},
    report::{Extra, Report},
    sample::{Latency, Progress},
    target::Target,
};
use turnstile::{
    floor::Floor,
    pb::{
        queue_service_client::QueueServiceClient, subscribe_response::Event, task_spec, AckRequest,
        EnqueueRequest, SubscribeRequest, TaskSpec,
    },
    token::new_token,
};

type Queues = QueueServiceClient<Channel>;

pub(super) const SUBSCRIBERS: usize = 4;
const MAX_IN_FLIGHT: u32 = 64;
const PRODUCERS: usize = 2;
const BATCH: usize = 100;
/// Producers pause while this many tasks are enqueued and not yet acked, so latency
/// measures the pipeline, not an ever-growing backlog.
const BACKLOG: i64 = 2_000;
/// Batched acks: up to this many receipts, or this long after the first.
const ACK_BATCH: usize = 64;
const ACK_LINGER: Duration = Duration::from_millis(5);

/// Nanoseconds since `epoch`, as a payload.
pub(super) fn stamp(epoch: Instant) -> Bytes {
    Bytes::copy_from_slice(&(epoch.elapsed().as_nanos() as u64).to_be_bytes())
}

/// How long ago (since `epoch`) `payload` was stamped.
pub(super) fn age(epoch: Instant, payload: &[u8]) -> Duration {
    let sent = payload
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes);
    Duration::from_nanos((epoch.elapsed().as_nanos() as u64).saturating_sub(sent))
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

async fn enqueue(queues: &mut Queues, queue: &str, tasks: Vec<TaskSpec>) -> Result<(), String> {
    queues
        .enqueue(EnqueueRequest {
            queue: queue.to_owned(),
            tasks,
            ..Default::default()
        })
        .await
        .map_err(failed)?;
    Ok(())
}

/// Acks receipts one RPC each, or in batches as worker libraries do; counts what was
/// acked.
#[derive(Clone)]
struct Acker {
    tx: mpsc::UnboundedSender<String>,
}

impl Acker {
    fn start(queues: Queues, queue: String, batched: bool, acked: Arc<AtomicU64>) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut receipts = vec![first];
                if batched {
                    let until = Instant::now() + ACK_LINGER;
                    while receipts.len() < ACK_BATCH {
                        tokio::select! {
                            receipt = rx.recv() => match receipt {
                                Some(receipt) => receipts.push(receipt),
                                None => break,
                            },
                            () = tokio::time::sleep_until(until) => break,
                        }
                    }
                }
                let mut queues = queues.clone();
                let (queue, acked) = (queue.clone(), acked.clone());
                tokio::spawn(async move {
                    let reply = queues
                        .ack(AckRequest {
                            queue,
                            receipts,
                            ..Default::default()
                        })
                        .await;
                    if let Ok(reply) = reply {
                        let n = reply.into_inner().acked.iter().filter(|a| **a).count();
                        acked.fetch_add(n as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        Self { tx }
    }

    fn ack(&self, receipt: String) {
        let _ = self.tx.send(receipt);
    }
}

/// Subscribers on `queue` that ack every task and record `latency(task)` for each.
pub(super) async fn subscribers(
    channels: &[Channel],
    queues: &[String],
    count: usize,
    batched: bool,
    acked: Arc<AtomicU64>,
    stop: CancellationToken,
    latency: impl Fn(&turnstile::pb::Task) -> Option<Duration> + Clone + Send + Sync + 'static,
) -> Result<JoinSet<Latency>, String> {
    let mut set = JoinSet::new();
    for k in 0..count {
        let queue = &queues[k % queues.len()];
        let mut queues = QueueServiceClient::new(channels[k % channels.len()].clone());
        let mut stream = queues
            .subscribe(SubscribeRequest {
                queue: queue.to_owned(),
                max_in_flight: MAX_IN_FLIGHT,
                visibility: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                worker_id: String::new(),
            })
            .await
            .map_err(failed)?
            .into_inner();
        let acker = Acker::start(queues, queue.to_owned(), batched, acked.clone());
        let (stop, latency_of) = (stop.clone(), latency.clone());
        set.spawn(async move {
            let mut latency = Latency::default();
            loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    () = stop.cancelled() => break,
                };
                let Some(Ok(event)) = event else { break };
                if let Some(Event::Task(task)) = event.event {
                    if let Some(l) = latency_of(&task) {
                        latency.record(l);
                    }
                    acker.ack(task.receipt);
                }
            }
            latency
        });
    }
    Ok(set)
}

pub(super) async fn collect(mut set: JoinSet<Latency>) -> Latency {
    let mut latency = Latency::default();
    while let Some(Ok(part)) = set.join_next().await {
        latency.merge(&part);
    }
    latency
}

/// `queue`: producers enqueue batches, Subscribe workers ack every task.
pub async fn queue(target: &Target, duration: Duration, batched: bool) -> Result<Report, String> {
    let name = if batched { "queue_batched" } else { "queue" };
    queue_over(target, name, 1, duration, batched).await
}

/// [`queue`] with the work spread over `count` queues: a producer and a subscriber (at
/// least as many as one queue has) per queue.
pub async fn queue_over(
    target: &Target,
    name: &'static str,
    count: usize,
    duration: Duration,
    batched: bool,
) -> Result<Report, String> {
    let run = new_token();
    let names: Vec<String> = (0..count)
        .map(|q| format!("bench:{name}:{run}:{q}"))
        .collect();
    let (subscriber_count, producer_count) = (SUBSCRIBERS.max(count), PRODUCERS.max(count));
    let channels = target.server_channels(4.max(count)).await?;
    let epoch = Instant::now();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let subs = subscribers(
        &channels,
        &names,
        subscriber_count,
        batched,
        acked.clone(),
        stop.clone(),
        move |task| Some(age(epoch, &task.payload)),
    )
    .await?;
    let (progress, shown) = Progress::show(name.into());
    let enqueued = Arc::new(AtomicI64::new(0));
    let before = Usage::read_if(target.redis_url.as_deref()).await?;
    let server_before = ServerCpu::read(target);
    let started = Instant::now();
    let until = started + duration;
    let mut producers = JoinSet::new();
    for p in 0..producer_count {
        let mut queues = QueueServiceClient::new(channels[p % channels.len()].clone());
        let queue = names[p % names.len()].clone();
        let (enqueued, acked) = (enqueued.clone(), acked.clone());
        producers.spawn(async move {
            while Instant::now() < until {
                if enqueued.load(Ordering::Relaxed) - acked.load(Ordering::Relaxed) as i64 > BACKLOG
                {
                    tokio::time::sleep(Duration::from_micros(500)).await;
                    continue;
                }
                let tasks = (0..BATCH)
                    .map(|_| TaskSpec {
                        payload: stamp(epoch),
                        ..TaskSpec::default()
                    })
                    .collect();
                enqueued.fetch_add(BATCH as i64, Ordering::Relaxed);
                enqueue(&mut queues, &queue, tasks).await?;
            }
            Ok::<_, String>(())
        });
    }
    let reporter = {
        let (acked, progress) = (acked.clone(), progress.clone());
        tokio::spawn(async move {
            let mut shown = 0;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = acked.load(Ordering::Relaxed);
                progress.add(now - shown);
                shown = now;
            }
        })
    };
    tokio::time::sleep_until(until).await;
    let done = acked.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    let after = Usage::read_if(target.redis_url.as_deref()).await?;
    let server_cost = server_before.map(|before| before.add_to(done, Report::default()));
    reporter.abort();
    while let Some(producer) = producers.join_next().await {
        producer.map_err(|e| e.to_string())??;
    }
    drop(shown);
    stop.cancel();
    let latency = collect(subs).await;
    let ops = done as f64 / elapsed.as_secs_f64();
    let mut report = Report::new(name, ops, &latency)
        .extra(
            "acks",
            Extra::Text(if batched {
                format!("batched<= {ACK_BATCH}/{}ms", ACK_LINGER.as_millis())
            } else {
                "one per task".into()
            }),
        )
        .extra("subscribers", Extra::Count(subscriber_count as u64));
    if count > 1 {
        report = report.extra("queues", Extra::Count(count as u64));
    }
    if let Some((before, after)) = before.zip(after) {
        report = before.add_to(after, done, report);
    }
    if let Some(cost) = server_cost {
        report.extras.extend(cost.extras);
    }
    if batched {
        if let Some(url) = &target.redis_url {
            let (floor, us_per_task) = queue_floor(url, duration).await?;
            report.floor_ops_per_s = Some(floor);
            report = report.extra("floor_redis_us_per_op", Extra::Number(us_per_task));
        }
    }
    Ok(report)
}

/// The same enqueue, dispatch and ack scripts run straight on Redis by the library's
/// `Floor`: producers enqueue batches, consumers take up to 64 and ack them in one
/// call. No gRPC. Tasks per second, and Redis CPU µs per task.
async fn queue_floor(url: &str, duration: Duration) -> Result<(f64, f64), String> {
    let floor = Floor::connect(url)?;
    let queue = format!("bench:queue_floor:{}", new_token());
    let (progress, _shown) = Progress::show("queue (redis floor)".into());
    let enqueued = Arc::new(AtomicI64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let before = Usage::read(url).await?;
    let started = Instant::now();
    let until = started + duration;
    let mut workers = JoinSet::new();
    for _ in 0..PRODUCERS {
        let (floor, queue, enqueued, acked) = (
            floor.clone(),
            queue.clone(),
            enqueued.clone(),
            acked.clone(),
        );
        workers.spawn(async move {
            while Instant::now() < until {
                if enqueued.load(Ordering::Relaxed) - acked.load(Ordering::Relaxed) as i64 > BACKLOG
                {
                    tokio::time::sleep(Duration::from_micros(500)).await;
                    continue;
                }
                enqueued.fetch_add(BATCH as i64, Ordering::Relaxed);
                floor.enqueue(&queue, BATCH).await?;
            }
            Ok::<_, String>(())
        });
    }
    for _ in 0..SUBSCRIBERS {
        let (floor, queue, acked, progress) = (
            floor.clone(),
            queue.clone(),
            acked.clone(),
            progress.clone(),
        );
        let session = new_token();
        workers.spawn(async move {
            while Instant::now() < until {
                let n = floor.take_and_ack(&queue, &session, MAX_IN_FLIGHT).await?;
                if n == 0 {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    continue;
                }
                acked.fetch_add(n, Ordering::Relaxed);
                progress.add(n);
            }
            Ok::<_, String>(())
        });
    }
    while let Some(worker) = workers.join_next().await {
        worker.map_err(|e| e.to_string())??;
    }
    let done = acked.load(Ordering::Relaxed);
    let cost = before.cpu_us_per_op(Usage::read(url).await?, done);
    Ok((done as f64 / started.elapsed().as_secs_f64(), cost))
}

/// `pickup`: one idle subscriber; tasks enqueued one at a time, 5 ms apart.
pub async fn pickup(target: &Target, duration: Duration) -> Result<Report, String> {
    let server = ServerCpu::read(target);
    let queue = format!("bench:pickup:{}", new_token());
    let channels = target.server_channels(2).await?;
    let epoch = Instant::now();
    let stop = CancellationToken::new();
    let acked = Arc::new(AtomicU64::new(0));
    let subs = subscribers(
        &channels[1..],
        std::slice::from_ref(&queue),
        1,
        true,
        acked,
        stop.clone(),
        move |task| Some(age(epoch, &task.payload)),
    )
    .await?;
    let (progress, shown) = Progress::show("pickup".into());
    let mut queues = QueueServiceClient::new(channels[0].clone());
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let mut sent = 0u64;
    while started.elapsed() < duration {
        tick.tick().await;
        let task = TaskSpec {
            payload: stamp(epoch),
            ..TaskSpec::default()
        };
        enqueue(&mut queues, &queue, vec![task]).await?;
        sent += 1;
        progress.tick();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(shown);
    stop.cancel();
    let latency = collect(subs).await;
    let report = Report::new(
        "pickup",
        latency.count() as f64 / started.elapsed().as_secs_f64(),
        &latency,
    )
    .extra("sent", Extra::Count(sent))
    .extra("delivered", Extra::Count(latency.count()));
    // Per task: its Enqueue, dispatch, push and Ack.
    Ok(match server {
        Some(server) => server.add_to(latency.count(), report),
        None => report,
    })
}

/// `delayed`: 2,000 tasks due over 5 s, idle subscribers; lateness = delivery − due.
pub async fn delayed(target: &Target) -> Result<Report, String> {
    const TASKS: i64 = 2_000;
    const SPREAD_MS: i64 = 5_000;
    let server = ServerCpu::read(target);
    let queue = format!("bench:delayed:{}", new_token());
    let channels = target.server_channels(2).await?;
    let stop = CancellationToken::new();
    let acked = Arc::new(AtomicU64::new(0));
    let early = Arc::new(AtomicU64::new(0));
    let early_seen = early.clone();
    let subs = subscribers(
        &channels,
        std::slice::from_ref(&queue),
        SUBSCRIBERS,
        true,
        acked.clone(),
        stop.clone(),
        move |task| {
            let due_us = task.due_at.as_ref().map_or(0, turnstile::ms_from_timestamp) * 1000;
            let late = unix_us() - due_us;
            if late < 0 {
                early_seen.fetch_add(1, Ordering::Relaxed);
            }
            Some(Duration::from_micros(late.max(0) as u64))
        },
    )
    .await?;
    let (progress, shown) = Progress::show("delayed".into());
    let mut queues = QueueServiceClient::new(channels[0].clone());
    let base_ms = unix_us() / 1000 + 1_000;
    for batch in 0..4 {
        let tasks = (batch * TASKS / 4..(batch + 1) * TASKS / 4)
            .map(|i| TaskSpec {
                schedule: Some(task_spec::Schedule::DueAt(turnstile::timestamp_from_ms(
                    base_ms + i * SPREAD_MS / TASKS,
                ))),
                ..TaskSpec::default()
            })
            .collect();
        enqueue(&mut queues, &queue, tasks).await?;
    }
    let until = Instant::now() + Duration::from_millis((SPREAD_MS + 1_000 + 10_000) as u64);
    let mut shown_count = 0;
    while acked.load(Ordering::Relaxed) < TASKS as u64 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = acked.load(Ordering::Relaxed);
        progress.add(now - shown_count);
        shown_count = now;
    }
    drop(shown);
    stop.cancel();
    let latency = collect(subs).await;
    if latency.count() < TASKS as u64 {
        return Err(format!(
            "delayed: only {} of {TASKS} tasks delivered",
            latency.count()
        ));
    }
    let report = Report::new(
        "delayed",
        TASKS as f64 * 1000.0 / SPREAD_MS as f64,
        &latency,
    )
    .extra("tasks", Extra::Count(TASKS as u64))
    .extra("early", Extra::Count(early.load(Ordering::Relaxed)));
    Ok(match server {
        Some(server) => server.add_to(TASKS as u64, report),
        None => report,
    })
}
