//! `watch`: how soon a `Watch` stream hears of a change. One watcher on one name; a
//! client on another connection takes the lock and releases it, each time waiting for
//! the watcher to report it; the latency is from the call sent (Acquire or Release) to
//! the watcher's event, so it holds the call's round trip too.

use std::time::Duration;

use tokio::time::Instant;
use tokio_stream::StreamExt;

use super::{
    failed,
    redis_cost::ServerCpu,
    report::{Extra, Report},
    sample::{Latency, Progress},
    target::Target,
};
use turnstile::pb::{
    lock_service_client::LockServiceClient, watch_response::Event, AcquireRequest, ReleaseRequest,
    WatchRequest,
};

const NAME: &str = "bench:watch";

pub async fn watch(target: &Target, duration: Duration) -> Result<Report, String> {
    let channels = target.server_channels(2).await?;
    let mut watcher = LockServiceClient::new(channels[0].clone());
    let mut locks = LockServiceClient::new(channels[1 % channels.len()].clone());
    let mut stream = watcher
        .watch(WatchRequest { name: NAME.into() })
        .await
        .map_err(failed)?
        .into_inner();
    // The next event that is not a heartbeat.
    async fn next(
        stream: &mut tonic::Streaming<turnstile::pb::WatchResponse>,
    ) -> Result<Event, String> {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
                Ok(Some(Ok(message))) => match message.event {
                    Some(Event::Heartbeat(_)) | None => continue,
                    Some(event) => return Ok(event),
                },
                Ok(Some(Err(status))) => return Err(failed(status)),
                Ok(None) => return Err("the watch stream ended".into()),
                Err(_) => return Err("no watch event within 10 s".into()),
            }
        }
    }
    // The state now.
    next(&mut stream).await?;
    let (progress, _shown) = Progress::show("watch".into());
    let mut latency = Latency::default();
    let server = ServerCpu::read(target);
    let started = Instant::now();
    while started.elapsed() < duration {
        let sent = Instant::now();
        let won = locks
            .acquire(AcquireRequest {
                name: NAME.into(),
                owner: "bench".into(),
                ttl: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                wait: None,
                request_id: String::new(),
            })
            .await
            .map_err(failed)?
            .into_inner();
        if !matches!(next(&mut stream).await?, Event::Held(_)) {
            return Err("the watcher did not report the holder".into());
        }
        latency.record(sent.elapsed());
        let sent = Instant::now();
        locks
            .release(ReleaseRequest {
                name: NAME.into(),
                token: won.token,
            })
            .await
            .map_err(failed)?;
        if !matches!(next(&mut stream).await?, Event::Free(_)) {
            return Err("the watcher did not report the release".into());
        }
        latency.record(sent.elapsed());
        progress.add(2);
    }
    let changes = latency.count();
    let report = Report::new(
        "watch",
        changes as f64 / started.elapsed().as_secs_f64(),
        &latency,
    )
    .extra("changes", Extra::Count(changes));
    // Per change: the Acquire or Release and the watcher's look.
    Ok(match server {
        Some(server) => server.add_to(changes, report),
        None => report,
    })
}
