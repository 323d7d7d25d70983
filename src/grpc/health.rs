//! Readiness follows Redis: a probe PINGs it (every second while it answers, every
//! 250 ms while it does not; on each return it also checks the Redis version), sets
//! `turnstile_redis_up`, and flips `""`, `turnstile.v1.LockService` and
//! `turnstile.v1.QueueService` between SERVING and NOT_SERVING. `liveness` stays
//! SERVING while the process runs, so a Redis outage does not get replicas restarted.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use tonic_health::{server::HealthReporter, ServingStatus};

use crate::{
    metrics::{Family, Kind, Metrics},
    redis::{events::Events, Redis},
    shutdown::Shutdown,
};

/// The services whose health follows Redis.
pub const READINESS_SERVICES: [&str; 3] =
    ["", "turnstile.v1.LockService", "turnstile.v1.QueueService"];
/// The service that is SERVING while the process runs.
pub const LIVENESS_SERVICE: &str = "liveness";

const PROBE_WHILE_UP: Duration = Duration::from_secs(1);
const PROBE_WHILE_DOWN: Duration = Duration::from_millis(250);

/// What the health service answers: the liveness service SERVING from the start, the
/// readiness services as the probe last found Redis (NOT_SERVING until it has, and
/// again from the start of a shutdown). Cheap to clone.
#[derive(Clone)]
pub struct Health(pub(super) HealthReporter);

impl Health {
    /// Live, not ready yet.
    pub async fn new() -> Self {
        let reporter = HealthReporter::new();
        reporter
            .set_service_status(LIVENESS_SERVICE, ServingStatus::Serving)
            .await;
        set_readiness(&reporter, ServingStatus::NotServing).await;
        Self(reporter)
    }

    /// Not ready any more: a shutdown has begun.
    pub async fn not_ready(&self) {
        set_readiness(&self.0, ServingStatus::NotServing).await;
    }
}

/// Sets every readiness service to `status`.
async fn set_readiness(reporter: &HealthReporter, status: ServingStatus) {
    for service in READINESS_SERVICES {
        reporter.set_service_status(service, status).await;
    }
}

/// Spawns the probe; it stops at shutdown (which sets NOT_SERVING itself).
pub fn spawn_probe(
    redis: Redis,
    (Health(reporter), metrics): (Health, Metrics),
    events: Events,
    shutdown: &Shutdown,
) {
    let up_now = Arc::new(AtomicBool::new(false));
    let read = up_now.clone();
    metrics.register(Family::single(
        "turnstile_redis_up",
        Kind::Gauge,
        "1 while the readiness probe finds Redis answering.",
        move || u64::from(read.load(Ordering::Relaxed)),
    ));
    let task_shutdown = shutdown.clone();
    shutdown.spawn(async move {
        let mut up = None;
        loop {
            // Up means it answers and is new enough: a Redis replaced by an older one
            // (below 7.0 every Acquire would fail) stays NOT_SERVING, and says why.
            let now_up = match (up, redis.ping().await) {
                (Some(true), Ok(())) => true,
                (_, Ok(())) => match redis.check_version().await {
                    Ok(()) => true,
                    Err(err) => {
                        if up != Some(false) {
                            tracing::error!(cause = %err, "redis cannot serve turnstile");
                        }
                        false
                    }
                },
                (_, Err(_)) => false,
            };
            if task_shutdown.is_triggered() {
                return;
            }
            up_now.store(now_up, Ordering::Relaxed);
            if up != Some(now_up) {
                if now_up {
                    tracing::info!("redis answers: serving");
                    if up.is_some() {
                        // The pub/sub socket may be half-open after an outage.
                        events.resubscribe();
                    }
                } else {
                    tracing::warn!("redis does not answer: not serving");
                }
                let status = if now_up {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                set_readiness(&reporter, status).await;
                up = Some(now_up);
            }
            let pause = if now_up {
                PROBE_WHILE_UP
            } else {
                PROBE_WHILE_DOWN
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = task_shutdown.cancelled() => return,
            }
        }
    });
}
