//! Lock scenarios: `lock` (cycles on distinct names, with its Redis and transport
//! floors), `handoff` (one contended name) and `seckill` (10,000 buyers, one lock).

use std::{
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{task::JoinSet, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{
    failed,
    redis_cost::{ServerCpu, Usage},
    report::{Extra, Report},
    sample::{drive, Latency, Progress},
    target::Target,
};
use turnstile::{
    floor::Floor,
    pb::{lock_service_client::LockServiceClient, AcquireRequest, ReleaseRequest},
};

type Locks = LockServiceClient<Channel>;

const TTL: prost_types::Duration = prost_types::Duration {
    seconds: 10,
    nanos: 0,
};

/// Connections for `clients` concurrent callers: one per 16, at most 8.
pub fn connections_for(clients: usize) -> usize {
    clients.div_ceil(16).clamp(1, 8)
}

#[derive(Clone)]
struct Cycler {
    locks: Locks,
    name: String,
    owner: String,
}

fn cyclers(channels: &[Channel], clients: usize, prefix: &str) -> Vec<Cycler> {
    (0..clients)
        .map(|i| Cycler {
            locks: LockServiceClient::new(channels[i % channels.len()].clone()),
            name: format!("bench:{prefix}:{i}"),
            owner: format!("bench-{i}"),
        })
        .collect()
}

/// One Acquire + Release over gRPC.
async fn grpc_cycle(mut c: Cycler) -> Result<Cycler, String> {
    let reply = c
        .locks
        .acquire(AcquireRequest {
            name: c.name.clone(),
            owner: c.owner.clone(),
            ttl: Some(TTL),
            wait: None,
            request_id: String::new(),
        })
        .await
        .map_err(failed)?
        .into_inner();
    if !reply.acquired {
        return Err(format!("{} was not free", c.name));
    }
    let released = c
        .locks
        .release(ReleaseRequest {
            name: c.name.clone(),
            token: reply.token,
        })
        .await
        .map_err(failed)?
        .into_inner()
        .released;
    if !released {
        return Err(format!("{} was not released", c.name));
    }
    Ok(c)
}

/// `lock`: N clients Acquire+Release distinct names; the floors in the same run.
pub async fn lock(target: &Target, clients: usize, duration: Duration) -> Result<Report, String> {
    let connections = connections_for(clients);
    let channels = target.server_channels(connections).await?;
    let before = Usage::read_if(target.redis_url.as_deref()).await?;
    let server_before = ServerCpu::read(target);
    let turnstile = drive(
        "lock",
        cyclers(&channels, clients, "lock"),
        duration,
        grpc_cycle,
    )
    .await?;
    let after = Usage::read_if(target.redis_url.as_deref()).await?;
    let server_cost = server_before.map(|before| before.add_to(turnstile.count, Report::default()));

    let noop = target.noop_channels(connections).await?;
    let noop_before = target.noop_pid.and_then(ServerCpu::of);
    let transport = drive(
        "lock (transport floor)",
        cyclers(&noop, clients, "lock"),
        duration,
        grpc_cycle,
    )
    .await?;

    // The Redis floor runs the library's stores in this process: its CPU per cycle is
    // what the stores and redis-rs cost without gRPC.
    let bench_before = ServerCpu::of(std::process::id());
    let redis = match &target.redis_url {
        Some(url) => Some(redis_floor(url, clients, duration).await?),
        None => None,
    };
    let floor = redis.map_or(transport.ops_per_s(), |(redis, _)| {
        redis.min(transport.ops_per_s())
    });
    let mut report = Report::new("lock", turnstile.ops_per_s(), &turnstile.latency)
        .extra("clients", Extra::Count(clients as u64))
        .extra("connections", Extra::Count(connections as u64))
        .extra(
            "transport_floor_ops_per_s",
            Extra::Number(transport.ops_per_s()),
        );
    if let Some((redis, cycles)) = redis {
        report = report.extra("redis_floor_ops_per_s", Extra::Number(redis));
        if let Some(bench) = bench_before {
            report = bench.add_as("redis_floor_client_us_per_op", cycles, report);
        }
    }
    if let Some((before, after)) = before.zip(after) {
        report = before.add_to(after, turnstile.count, report);
    }
    if let Some(cost) = server_cost {
        report.extras.extend(cost.extras);
    }
    if let Some(noop) = noop_before {
        report = noop.add_as("transport_floor_server_us_per_op", transport.count, report);
    }
    report.floor_ops_per_s = Some(floor);
    Ok(report)
}

/// The same acquire and release scripts run straight on Redis by the library's
/// `Floor`, same concurrency, no gRPC: cycles a second and cycles run.
async fn redis_floor(url: &str, clients: usize, duration: Duration) -> Result<(f64, u64), String> {
    let floor = Floor::connect(url)?;
    let states = (0..clients)
        .map(|i| {
            (
                floor.clone(),
                format!("bench:lock-floor:{i}"),
                format!("bench-{i}"),
            )
        })
        .collect();
    let sampled = drive(
        "lock (redis floor)",
        states,
        duration,
        |(floor, name, owner)| async move {
            floor.lock_cycle(&name, &owner).await?;
            Ok((floor, name, owner))
        },
    )
    .await?;
    Ok((sampled.ops_per_s(), sampled.count))
}

/// `handoff`: clients queued on one name; the holder releases after a short hold; the
/// latency is from Release sent to the next Acquire returning.
pub async fn handoff(target: &Target, duration: Duration) -> Result<Report, String> {
    const CLIENTS: usize = 8;
    const HOLD: Duration = Duration::from_millis(1);
    let channels = target.server_channels(2).await?;
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (progress, _shown) = Progress::show("handoff".into());
    let server = ServerCpu::read(target);
    let started = Instant::now();
    let until = started + duration;
    let mut clients = JoinSet::new();
    for i in 0..CLIENTS {
        let mut locks = LockServiceClient::new(channels[i % channels.len()].clone());
        let released_at = released_at.clone();
        let progress = progress.clone();
        clients.spawn(async move {
            let mut latency = Latency::default();
            while Instant::now() < until {
                let reply = locks
                    .acquire(AcquireRequest {
                        name: "bench:handoff".into(),
                        owner: format!("bench-{i}"),
                        ttl: Some(TTL),
                        wait: Some(prost_types::Duration {
                            seconds: 10,
                            nanos: 0,
                        }),
                        request_id: String::new(),
                    })
                    .await
                    .map_err(failed)?
                    .into_inner();
                if !reply.acquired {
                    continue;
                }
                let handed = released_at.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(at) = handed {
                    latency.record(at.elapsed());
                    progress.tick();
                }
                tokio::time::sleep(HOLD).await;
                *released_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                locks
                    .release(ReleaseRequest {
                        name: "bench:handoff".into(),
                        token: reply.token,
                    })
                    .await
                    .map_err(failed)?;
            }
            Ok::<_, String>(latency)
        });
    }
    let mut latency = Latency::default();
    while let Some(client) = clients.join_next().await {
        latency.merge(&client.map_err(|e| e.to_string())??);
    }
    let ops = latency.count() as f64 / started.elapsed().as_secs_f64();
    let report = Report::new("handoff", ops, &latency)
        .extra("clients", Extra::Count(CLIENTS as u64))
        .extra("hold_ms", Extra::Number(HOLD.as_secs_f64() * 1000.0));
    // Per handoff: the Acquire that waited and the Release that woke it.
    Ok(match server {
        Some(server) => server.add_to(latency.count(), report),
        None => report,
    })
}

/// `seckill`: 10,000 buyers, 100 in stock, one lock around a read-then-write of the
/// stock that only the lock keeps correct. Sales must equal the stock exactly.
pub async fn seckill(target: &Target) -> Result<Report, String> {
    const BUYERS: usize = 10_000;
    const STOCK: i64 = 100;
    let channels = target.server_channels(50).await?;
    let stock = Arc::new(AtomicI64::new(STOCK));
    let sales = Arc::new(AtomicU64::new(0));
    let sold_out = CancellationToken::new();
    let (progress, _shown) = Progress::show("seckill".into());
    let server = ServerCpu::read(target);
    let started = Instant::now();
    let sold_out_after: Arc<Mutex<Option<Duration>>> = Arc::default();
    let mut buyers = JoinSet::new();
    for i in 0..BUYERS {
        let mut locks = LockServiceClient::new(channels[i % channels.len()].clone());
        let (stock, sales, sold_out) = (stock.clone(), sales.clone(), sold_out.clone());
        let (progress, sold_out_after) = (progress.clone(), sold_out_after.clone());
        buyers.spawn(async move {
            let asked = Instant::now();
            let request = AcquireRequest {
                name: "bench:seckill".into(),
                owner: format!("buyer-{i}"),
                ttl: Some(TTL),
                wait: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                request_id: format!("buy-{i}"),
            };
            // Like any client (or a mesh), retry UNAVAILABLE: the first burst of 10,000
            // calls can outlast --redis-timeout on a slow machine. The request_id makes
            // the retry safe.
            let mut tries = 0;
            let reply = loop {
                let acquire = locks.acquire(request.clone());
                let reply = tokio::select! {
                    reply = acquire => reply,
                    () = sold_out.cancelled() => return Ok(None),
                };
                match reply {
                    Ok(reply) => break reply.into_inner(),
                    Err(status) if status.code() == tonic::Code::Unavailable && tries < 5 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(100 * tries)).await;
                    }
                    Err(status) => return Err(failed(status)),
                }
            };
            if !reply.acquired {
                return Ok(None);
            }
            // Read, yield, write: without the lock, buyers would oversell here.
            let left = stock.load(Ordering::SeqCst);
            tokio::task::yield_now().await;
            let sold = left > 0;
            if sold {
                stock.store(left - 1, Ordering::SeqCst);
                progress.tick();
                if sales.fetch_add(1, Ordering::SeqCst) + 1 == STOCK as u64 {
                    *sold_out_after.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(started.elapsed());
                    sold_out.cancel();
                }
            }
            // A failed release (an overloaded server answering UNAVAILABLE) is not
            // fatal: the lease ends with its ttl and the next buyer goes on.
            let _ = locks
                .release(ReleaseRequest {
                    name: "bench:seckill".into(),
                    token: reply.token,
                })
                .await;
            Ok::<_, String>(sold.then(|| asked.elapsed()))
        });
    }
    let mut latency = Latency::default();
    while let Some(buyer) = buyers.join_next().await {
        if let Some(waited) = buyer.map_err(|e| e.to_string())?? {
            latency.record(waited);
        }
    }
    let sales = sales.load(Ordering::SeqCst);
    let left = stock.load(Ordering::SeqCst);
    if sales != STOCK as u64 || left != 0 {
        return Err(format!(
            "seckill broke mutual exclusion: {sales} sales of {STOCK}, stock left {left}"
        ));
    }
    let sell_out = sold_out_after
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_else(|| started.elapsed());
    let report = Report::new("seckill", sales as f64 / sell_out.as_secs_f64(), &latency)
        .extra("buyers", Extra::Count(BUYERS as u64))
        .extra("stock", Extra::Count(STOCK as u64))
        .extra("sales", Extra::Count(sales))
        .extra(
            "sell_out_ms",
            Extra::Number(sell_out.as_secs_f64() * 1000.0),
        );
    // Per buyer: each one's calls until it bought or saw the stock gone.
    Ok(match server {
        Some(server) => server.add_to(BUYERS as u64, report),
        None => report,
    })
}
