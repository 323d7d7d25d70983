//! `dashboard`: the web dashboard under the loads the issue names, over real HTTP.
//! 1,000 queues of a few tasks each, then the overview loaded 20 times: time to first
//! byte and to the whole page (p50, p99). A queue of 100,000 DEAD tasks: its first
//! DEAD page and its 500th (reached by following `ListTasks`' cursor there; a page
//! starts from its cursor's entry, so both should cost the same). Then the
//! Redis commands per second with one tab and with twenty tabs refreshing the
//! overview's live region as `live.js` does (every 2 s): one render serves every tab,
//! so the ratio should be about 1.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

use super::{
    failed,
    redis_cost::Usage,
    report::{Extra, Report},
    sample::Latency,
    target::Target,
};
use turnstile::pb::{
    queue_service_client::QueueServiceClient, EnqueueRequest, LeaseRequest, ListTasksRequest,
    StatsRequest, TaskSpec, TaskState,
};

const QUEUES: usize = 1_000;
const DEAD: usize = 100_000;
const LOADS: usize = 20;
const TABS: usize = 20;
const REFRESH: Duration = Duration::from_secs(2);
const TAB_WINDOW: Duration = Duration::from_secs(10);

/// One `GET path` over a fresh connection: time to the first byte of the answer, to
/// its end, and its status.
async fn load(addr: &str, path: &str) -> Result<(Duration, Duration, u16), String> {
    let sent = Instant::now();
    let mut socket = TcpStream::connect(addr)
        .await
        .map_err(|err| format!("dashboard {addr}: {err}"))?;
    socket
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .map_err(|err| err.to_string())?;
    let mut first = [0u8; 12];
    socket
        .read_exact(&mut first)
        .await
        .map_err(|err| err.to_string())?;
    let ttfb = sent.elapsed();
    let mut rest = Vec::new();
    socket
        .read_to_end(&mut rest)
        .await
        .map_err(|err| err.to_string())?;
    let status = std::str::from_utf8(&first[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((ttfb, sent.elapsed(), status))
}

/// `LOADS` loads of `path`: the TTFB and whole-page latencies.
async fn loads(addr: &str, path: &str) -> Result<(Latency, Latency), String> {
    let (mut ttfb, mut whole) = (Latency::default(), Latency::default());
    for _ in 0..LOADS {
        let (first, all, status) = load(addr, path).await?;
        if status != 200 {
            return Err(format!("GET {path}: HTTP {status}"));
        }
        ttfb.record(first);
        whole.record(all);
    }
    Ok((ttfb, whole))
}

pub async fn dashboard(target: &Target) -> Result<Report, String> {
    let Some(addr) = target.dashboard.clone() else {
        // Counted as a scenario the build lacks (`bench --against` an older one).
        return Err(format!("{}: no dashboard", tonic::Code::Unimplemented));
    };
    let redis_url = target
        .redis_url
        .clone()
        .ok_or("the dashboard scenario counts Redis commands: it needs the Redis")?;
    let channels = target.server_channels(4).await?;
    let mut queues = QueueServiceClient::new(channels[0].clone());

    // 1,000 queues of three tasks each.
    let mut enqueues = tokio::task::JoinSet::new();
    for n in 0..QUEUES {
        let mut client = QueueServiceClient::new(channels[n % channels.len()].clone());
        enqueues.spawn(async move {
            client
                .enqueue(EnqueueRequest {
                    queue: format!("bench:dash:{n:04}"),
                    tasks: (0..3)
                        .map(|t| TaskSpec {
                            id: format!("t{t}"),
                            payload: b"{\"n\":1}".to_vec().into(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .await
                .map(drop)
                .map_err(failed)
        });
        if enqueues.len() >= 64 {
            enqueues
                .join_next()
                .await
                .ok_or("no enqueue")?
                .map_err(|e| e.to_string())??;
        }
    }
    while let Some(done) = enqueues.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let (overview_ttfb, overview_whole) = loads(&addr, "/?prefix=bench%3Adash%3A").await?;

    // 100,000 DEAD tasks: one attempt each, leased for a millisecond; the next script
    // on the queue finds the leases ended and the attempts spent.
    let dead_queue = "bench:dash:dead";
    for chunk in 0..DEAD / 1000 {
        queues
            .enqueue(EnqueueRequest {
                queue: dead_queue.into(),
                tasks: (0..1000)
                    .map(|t| TaskSpec {
                        id: format!("d{:06}", chunk * 1000 + t),
                        payload: b"{\"order\":42,\"lines\":[1,2,3]}".to_vec().into(),
                        max_attempts: 1,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .await
            .map_err(failed)?;
        queues
            .lease(LeaseRequest {
                queue: dead_queue.into(),
                max_tasks: 1000,
                visibility: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 1_000_000,
                }),
                ..Default::default()
            })
            .await
            .map_err(failed)?;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = queues
            .stats(StatsRequest {
                queue: dead_queue.into(),
            })
            .await
            .map_err(failed)?
            .into_inner();
        if stats.dead as usize >= DEAD {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {} of {DEAD} tasks went DEAD", stats.dead));
        }
    }
    let (first_ttfb, first_whole) = loads(
        &addr,
        &format!("/queue?name={}&state=dead", "bench%3Adash%3Adead"),
    )
    .await?;
    // The 500th page of 100: after the 49,900th DEAD task, found a thousand at a time.
    let mut token = String::new();
    for size in [1000; 49].into_iter().chain([900]) {
        token = queues
            .list_tasks(ListTasksRequest {
                queue: dead_queue.into(),
                state: TaskState::Dead as i32,
                group: None,
                page_size: size,
                page_token: token,
            })
            .await
            .map_err(failed)?
            .into_inner()
            .next_page_token;
    }
    let (deep_ttfb, deep_whole) = loads(
        &addr,
        &format!(
            "/queue?name={}&state=dead&after={token}&at=49901",
            "bench%3Adash%3Adead"
        ),
    )
    .await?;

    // Tabs refreshing the overview's live region, one and then twenty.
    let live = "/live/overview?prefix=bench%3Adash%3A&sort=name";
    let mut per_s = Vec::new();
    for tabs in [1, TABS] {
        let before = Usage::read(&redis_url).await?;
        let end = Instant::now() + TAB_WINDOW;
        let mut open = tokio::task::JoinSet::new();
        for tab in 0..tabs {
            let addr = addr.clone();
            open.spawn(async move {
                // Tabs opened at different instants, as people open them.
                tokio::time::sleep(REFRESH * tab as u32 / tabs as u32).await;
                while Instant::now() < end {
                    load(&addr, live).await?;
                    tokio::time::sleep(REFRESH).await;
                }
                Ok::<(), String>(())
            });
        }
        while let Some(done) = open.join_next().await {
            done.map_err(|e| e.to_string())??;
        }
        let after = Usage::read(&redis_url).await?;
        per_s.push((after.commands - before.commands) as f64 / TAB_WINDOW.as_secs_f64());
    }

    let ms = |latency: &Latency, q: f64| Extra::Number(latency.quantile_ms(q));
    Ok(Report {
        scenario: "dashboard",
        // Overview loads a second, one at a time (1 / the median whole load).
        ops_per_s: 1000.0 / overview_whole.quantile_ms(0.5).max(0.001),
        latency: Some((
            overview_whole.quantile_ms(0.5),
            overview_whole.quantile_ms(0.99),
            overview_whole.max_ms(),
        )),
        ..Report::default()
    }
    .extra("overview_queues", Extra::Count(QUEUES as u64))
    .extra("overview_ttfb_p50_ms", ms(&overview_ttfb, 0.5))
    .extra("overview_ttfb_p99_ms", ms(&overview_ttfb, 0.99))
    .extra("overview_p50_ms", ms(&overview_whole, 0.5))
    .extra("dead_tasks", Extra::Count(DEAD as u64))
    .extra("dead_page_1_ttfb_p50_ms", ms(&first_ttfb, 0.5))
    .extra("dead_page_1_p50_ms", ms(&first_whole, 0.5))
    .extra("dead_page_500_ttfb_p50_ms", ms(&deep_ttfb, 0.5))
    .extra("dead_page_500_p50_ms", ms(&deep_whole, 0.5))
    .extra("dead_page_500_p99_ms", ms(&deep_whole, 0.99))
    .extra("redis_cmds_per_s_1_tab", Extra::Number(per_s[0]))
    .extra("redis_cmds_per_s_20_tabs", Extra::Number(per_s[1]))
    .extra(
        "tabs_20_over_1",
        Extra::Number(per_s[1] / per_s[0].max(0.001)),
    ))
}
