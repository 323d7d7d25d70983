//! `semaphore`: a semaphore of 8 permits shared by 32 clients over the servers, half
//! taking one permit and half two, each in a loop of Acquire (waiting in line) and
//! Release. Reports grants per second, the time from Acquire sent to granted (the wait
//! in line included), the most permits any grant saw in use (never above the limit),
//! and the server's CPU per grant.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::time::Instant;

use super::{
    failed,
    redis_cost::ServerCpu,
    report::{Extra, Report},
    sample::{Latency, Progress},
    target::Target,
};
use turnstile::pb::{
    semaphore_service_client::SemaphoreServiceClient, SemaphoreServiceAcquireRequest,
    SemaphoreServiceReleaseRequest,
};

const NAME: &str = "bench:semaphore";
const LIMIT: u32 = 8;
const CLIENTS: usize = 32;

pub async fn semaphore(target: &Target, duration: Duration) -> Result<Report, String> {
    let channels = target.server_channels(CLIENTS.min(8)).await?;
    let (progress, _shown) = Progress::show("semaphore".into());
    let most = Arc::new(AtomicU32::new(0));
    let server = ServerCpu::read(target);
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let mut semaphores = SemaphoreServiceClient::new(channels[client % channels.len()].clone());
        let (progress, most) = (progress.clone(), most.clone());
        clients.spawn(async move {
            let mut latency = Latency::default();
            let permits = 1 + (client % 2) as u32;
            while started.elapsed() < duration {
                let sent = Instant::now();
                let won = semaphores
                    .acquire(SemaphoreServiceAcquireRequest {
                        name: NAME.into(),
                        owner: format!("bench-{client}"),
                        limit: LIMIT,
                        permits,
                        ttl: Some(prost_types::Duration {
                            seconds: 30,
                            nanos: 0,
                        }),
                        wait: Some(prost_types::Duration {
                            seconds: 30,
                            nanos: 0,
                        }),
                        request_id: String::new(),
                    })
                    .await
                    .map_err(failed)?
                    .into_inner();
                if !won.acquired {
                    return Err("a waiter was not granted within 30 s".to_owned());
                }
                latency.record(sent.elapsed());
                most.fetch_max(won.in_use, Ordering::Relaxed);
                semaphores
                    .release(SemaphoreServiceReleaseRequest {
                        name: NAME.into(),
                        token: won.token,
                    })
                    .await
                    .map_err(failed)?;
                progress.add(1);
            }
            Ok::<_, String>(latency)
        });
    }
    let mut latency = Latency::default();
    while let Some(done) = clients.join_next().await {
        latency.merge(&done.map_err(|err| err.to_string())??);
    }
    let grants = latency.count();
    let most = most.load(Ordering::Relaxed);
    if most > LIMIT {
        return Err(format!("a grant saw {most} of {LIMIT} permits in use"));
    }
    let report = Report::new(
        "semaphore",
        grants as f64 / started.elapsed().as_secs_f64(),
        &latency,
    )
    .extra("grants", Extra::Count(grants))
    .extra("most_in_use", Extra::Count(u64::from(most)));
    Ok(match server {
        Some(server) => server.add_to(grants, report),
        None => report,
    })
}
