//! `idle`: 5,000 idle Subscribe streams and 10,000 Acquire calls waiting on a held lock,
//! for 10 s: what they cost Redis (commands per second, from INFO) and the server: its
//! RSS, read before, with the streams open, with the waiters added and after all have
//! left, so the report gives KB per stream, KB per waiter and what stays resident. The
//! waiters come in two waves of 5,000: at 2,500 a second (`server_kb_per_waiter_paced`),
//! then all at once (`server_kb_per_waiter`, the figure the goal is about).
//! (RSS deltas are what the allocator asked the OS for: memory freed by an earlier
//! scenario and reused here makes them smaller, never larger.)

use std::time::Duration;

use tokio::{task::JoinSet, time::Instant};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{
    redis_cost::Usage,
    report::{Extra, Report},
    ride_out,
    sample::Progress,
    target::Target,
};
use turnstile::{
    pb::{
        lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient,
        AcquireRequest, ReleaseRequest, SubscribeRequest,
    },
    token::new_token,
};

/// 5,000 each, not 1,000: the server's RSS grows in steps of about 4 MiB, which at 1,000
/// items made the figures move in steps of about 4 KB (2026-11-27).
const STREAMS: usize = 5_000;
const WAITERS: usize = 5_000;
/// The paced wave arrives this many at a time, every [`PACE`].
const PACED_BATCH: usize = 50;
const PACE: Duration = Duration::from_millis(20);
const MEASURE: Duration = Duration::from_secs(10);

/// A memory figure of `pid` from /proc (`VmRSS`: resident now, `VmHWM`: its peak), in
/// MB.
fn memory_mb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Starts the `i`-th Acquire that waits (up to 50 s) on the held lock `name`, in
/// `tasks`, until `stop`.
fn wait_on(
    channel: Channel,
    name: String,
    i: usize,
    stop: &CancellationToken,
    tasks: &mut JoinSet<()>,
) {
    let mut locks = LockServiceClient::new(channel);
    let stop = stop.clone();
    tasks.spawn(async move {
        let acquire = locks.acquire(AcquireRequest {
            name,
            owner: format!("bench-waiter-{i}"),
            ttl: None,
            wait: Some(prost_types::Duration {
                seconds: 50,
                nanos: 0,
            }),
            request_id: String::new(),
        });
        tokio::select! {
            _ = acquire => {}
            () = stop.cancelled() => {}
        }
    });
}

/// Opens a Subscribe stream on `queue` and keeps reading it, in `tasks`, until `stop`.
pub(super) async fn hold_stream(
    channel: Channel,
    queue: String,
    max_in_flight: u32,
    stop: &CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Result<(), String> {
    let queues = QueueServiceClient::new(channel);
    let request = SubscribeRequest {
        queue,
        max_in_flight,
        visibility: None,
        worker_id: String::new(),
    };
    let mut stream = ride_out(|| {
        let (mut queues, request) = (queues.clone(), request.clone());
        async move { queues.subscribe(request).await }
    })
    .await?;
    let stop = stop.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                event = stream.next() => if !matches!(event, Some(Ok(_))) { break },
                () = stop.cancelled() => break,
            }
        }
    });
    Ok(())
}

pub async fn idle(target: &Target) -> Result<Report, String> {
    // HTTP/2 servers cap concurrent streams per connection (often 200): 100 each.
    let channels = target
        .server_channels((STREAMS + 2 * WAITERS).div_ceil(100))
        .await?;
    let stop = CancellationToken::new();
    // A name of its own: under --against the runs share one Redis, and the lock of the
    // run before may still be held by a waiter whose call was just dropped.
    let name = format!("bench:idle:{}", new_token());
    let locks = LockServiceClient::new(channels[0].clone());
    // Ridden out like every call outside the timed part: on a loaded machine the
    // server's Redis call may pass its 2 s `--redis-timeout` (UNAVAILABLE), and a
    // slow moment must cost a figure, not the run. The request id makes the retry safe.
    let acquire = AcquireRequest {
        name: name.clone(),
        owner: "bench-holder".into(),
        ttl: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        wait: None,
        request_id: new_token(),
    };
    let held = ride_out(|| {
        let (mut locks, acquire) = (locks.clone(), acquire.clone());
        async move { locks.acquire(acquire).await }
    })
    .await?;
    if !held.acquired {
        return Err(format!("idle: the lock {name} was not free"));
    }
    let rss_now = || target.server_pid.and_then(|pid| memory_mb(pid, "VmRSS"));
    let settle = || tokio::time::sleep(Duration::from_secs(1));
    settle().await;
    let rss_base = rss_now();
    let mut tasks = JoinSet::new();
    for i in 0..STREAMS {
        let channel = channels[i % channels.len()].clone();
        let queue = format!("bench:idle:{}", i % 10);
        hold_stream(channel, queue, 1, &stop, &mut tasks).await?;
    }
    settle().await;
    let rss_streams = rss_now();
    // Waiters arriving at a steady pace, then a burst of as many: after a burst the
    // allocator keeps pages that its in-flight calls left partly used.
    for i in 0..WAITERS {
        if i % PACED_BATCH == 0 {
            tokio::time::sleep(PACE).await;
        }
        let channel = channels[(STREAMS + i) % channels.len()].clone();
        wait_on(channel, name.clone(), i, &stop, &mut tasks);
    }
    settle().await;
    let rss_paced = rss_now();
    for i in WAITERS..2 * WAITERS {
        let channel = channels[(STREAMS + i) % channels.len()].clone();
        wait_on(channel, name.clone(), i, &stop, &mut tasks);
    }
    // Let every call arrive and settle.
    settle().await;
    let rss_waiters = rss_now();
    let (progress, shown) = Progress::show("idle".into());
    let url = target.redis_url.clone();
    let before = Usage::read_if(url.as_deref()).await?;
    let started = Instant::now();
    while started.elapsed() < MEASURE {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress.tick();
    }
    let after = Usage::read_if(url.as_deref()).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let rss = target.server_pid.and_then(|pid| memory_mb(pid, "VmRSS"));
    let peak = target.server_pid.and_then(|pid| memory_mb(pid, "VmHWM"));
    drop(shown);
    // How long 15,000 callers leaving at once keep the server busy: the release is
    // answered after the server has handled their going.
    let leaving = Instant::now();
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    let release = ReleaseRequest {
        name,
        token: held.token,
    };
    ride_out(|| {
        let (mut locks, release) = (locks.clone(), release.clone());
        async move { locks.release(release).await }
    })
    .await?;
    let leave_ms = leaving.elapsed().as_secs_f64() * 1000.0;
    settle().await;
    let rss_after = rss_now();
    // Our own INFO is one of the commands counted.
    let per_s = before
        .zip(after)
        .map(|(b, a)| a.commands.saturating_sub(b.commands).saturating_sub(1) as f64 / elapsed);
    let mut report = Report {
        scenario: "idle",
        ops_per_s: per_s.unwrap_or(f64::NAN),
        ..Report::default()
    }
    .extra("streams", Extra::Count(STREAMS as u64))
    .extra("waiters", Extra::Count(2 * WAITERS as u64))
    .extra("leave_ms", Extra::Number(leave_ms));
    if let Some(per_s) = per_s {
        report = report.extra("redis_commands_per_s", Extra::Number(per_s));
    }
    if let Some(rss) = rss {
        report = report.extra("server_rss_mb", Extra::Number(rss));
    }
    // The allocator keeps much of an earlier burst's peak (seckill's 10,000 calls) as
    // resident memory, so RSS read after one is not what idle streams cost: the
    // default order runs idle first, and the peak so far is shown beside.
    if let Some(peak) = peak {
        report = report.extra("server_peak_rss_mb", Extra::Number(peak));
    }
    let kb_each = |from: Option<f64>, to: Option<f64>, count: usize| {
        from.zip(to)
            .map(|(from, to)| (to - from) * 1024.0 / count as f64)
    };
    if let Some(kb) = kb_each(rss_base, rss_streams, STREAMS) {
        report = report.extra("server_kb_per_stream", Extra::Number(kb));
    }
    if let Some(kb) = kb_each(rss_paced, rss_waiters, WAITERS) {
        report = report.extra("server_kb_per_waiter", Extra::Number(kb));
    }
    if let Some(kb) = kb_each(rss_streams, rss_paced, WAITERS) {
        report = report.extra("server_kb_per_waiter_paced", Extra::Number(kb));
    }
    // What the server keeps once every stream and waiter has gone, over its start.
    if let Some(kept) = rss_base.zip(rss_after).map(|(base, after)| after - base) {
        report = report.extra("server_rss_kept_mb", Extra::Number(kept));
    }
    Ok(report)
}
