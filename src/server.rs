//! `run(config, listener, shutdown_signal)`: starts (or connects to) Redis, wires the
//! services, health, reflection and metrics, serves until the signal, then drains:
//! NOT_SERVING → cancel → streams release and end → connections close → tracked tasks
//! finish (bounded) → the embedded Redis stops. `main` and the tests both call it.

use std::{future::Future, sync::Arc};

use tokio::net::TcpListener;
use tonic::transport::ServerTlsConfig;
use tonic_health::ServingStatus;

use crate::{
    auth::Auth,
    config::Config,
    error::Error,
    grpc::{
        connections::ConnectionLimit,
        health,
        router::{self, Services, Settings},
        tls,
    },
    limits::Limits,
    lock::LockStore,
    metrics::{self, Metrics},
    queue::{scheduler::Scheduler, Fire, FireOutcome, NewTask, QueueStore},
    redis::{
        connection_info,
        embedded::{Bind, EmbeddedOptions, EmbeddedRedis},
        events::Events,
        redact, Keys, Redis, TenantScoped,
    },
    schedule::{self, BoxFuture, FireCall, FireReply, ScheduleStore, TaskTemplate},
    semaphore::SemaphoreStore,
    shutdown::Shutdown,
    tenant::Tenant,
    web,
};

/// Serves on `listener` until `shutdown_signal` completes, then shuts down gracefully.
/// Errors are start-up failures (no redis-server, a port in use), as one line.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown_signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    // Everything that can refuse the start is checked before Redis is started.
    config.check_exposure()?;
    let auth = match &config.auth_file {
        Some(path) => Auth::from_file(path)?,
        None => Auth::open(),
    };
    let tls = tls::server_config(tls::ServerPem {
        cert: config.tls_cert.as_deref(),
        key: config.tls_key.as_deref(),
        client_ca: config.tls_client_ca.as_deref(),
    })?;
    let redis_ca = tls::redis_ca(config.redis_ca.as_deref())?;
    let shutdown = Shutdown::new();
    let embedded = match &config.redis_url {
        Some(_) => None,
        None => {
            let options = EmbeddedOptions {
                dir: config.data_dir.clone(),
                bind: Bind::UnixSocket,
                append_only: true,
                fsync_always: false,
            };
            let redis = EmbeddedRedis::start(&options).await?;
            tracing::info!(url = redis.url(), dir = %redis.dir().display(), "embedded redis started");
            Some(redis)
        }
    };
    let url = config.redis_url.clone().unwrap_or_else(|| {
        embedded
            .as_ref()
            .map(|r| r.url().to_owned())
            .unwrap_or_default()
    });
    let grace = config.shutdown_grace;
    let serving = async {
        // With --redis-cluster, the URL lists the cluster's seed nodes.
        let nodes = if config.redis_cluster {
            url.split(',').map(str::trim).collect()
        } else {
            vec![url.as_str()]
        };
        let info = nodes
            .into_iter()
            .map(|node| connection_info(node, redis_ca.clone()))
            .collect::<crate::error::Result<Vec<_>>>()
            .map_err(|err| err.to_string())?;
        let server = Listening {
            listener,
            tls,
            auth,
        };
        serve(
            &config,
            (info, redis_ca, &redact(&url)),
            server,
            shutdown_signal,
            &shutdown,
        )
        .await
    };
    // The drain is bounded: a client that keeps a connection open (a health Watch, a
    // stream it never reads) must not hold the exit back past --shutdown-grace.
    let result = tokio::select! {
        result = serving => result,
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "connections still open after the shutdown grace; closing them");
            Ok(())
        }
    };
    // Also after a start-up failure, so the background tasks stop at once.
    shutdown.trigger();
    if !shutdown
        .drain(grace.saturating_sub(shutdown.since_triggered()))
        .await
    {
        tracing::warn!(?grace, "some tasks were still running at exit");
    }
    if let Some(redis) = embedded {
        redis.stop().await;
        tracing::info!("embedded redis stopped");
    }
    result
}

/// This replica's name on the Workers page: the machine's name and the gRPC port.
fn replica_name(listener: &TcpListener) -> String {
    let port = listener.local_addr().map(|addr| addr.port()).unwrap_or(0);
    format!("{}:{port}", crate::token::hostname())
}

/// What the gRPC side serves with.
struct Listening {
    listener: TcpListener,
    /// `None`: plaintext.
    tls: Option<ServerTlsConfig>,
    auth: Auth,
}

async fn serve(
    config: &Config,
    (nodes, redis_ca, url): (Vec<redis::ConnectionInfo>, Option<Vec<u8>>, &str),
    listening: Listening,
    shutdown_signal: impl Future<Output = ()> + Send + 'static,
    shutdown: &Shutdown,
) -> Result<(), String> {
    let Listening {
        listener,
        tls,
        auth,
    } = listening;
    let keys = Keys::new(&config.key_prefix);
    let redis = if config.redis_cluster {
        Redis::cluster(nodes.clone(), redis_ca, config.redis_timeout, keys)
    } else {
        Redis::with_info(nodes[0].clone(), config.redis_timeout, keys)
    }
    .map_err(|err| err.to_string())?
    .wait_replicas(config.redis_wait_replicas);
    // A Redis too old for our scripts is refused at start; one that is down is
    // checked by the readiness probe when it comes up (NOT_SERVING until then).
    match redis.check_version().await {
        Err(Error::Internal(why)) => return Err(format!("{url}: {why}")),
        Err(err) => {
            tracing::warn!(cause = %err, "redis not reachable at start; not serving until it is")
        }
        Ok(()) => {}
    }
    let limits = Limits::new(config.max_streams, config.max_waiters);
    let locks = LockStore::new(redis.clone(), limits.clone(), shutdown.clone());
    if let Err(err) = redis.load_scripts(&locks.scripts().all()).await {
        tracing::warn!(cause = %err, "scripts not loaded at boot; they load on first use");
    }
    let queues = QueueStore::new(redis.clone(), shutdown.clone());
    if let Err(err) = redis.load_scripts(&queues.scripts().all()).await {
        tracing::warn!(cause = %err, "queue scripts not loaded at boot; they load on first use");
    }
    let scheduler = Scheduler::new(
        queues.clone(),
        limits.clone(),
        shutdown.clone(),
        config.reattach_grace,
        replica_name(&listener),
    );
    let schedules = ScheduleStore::new(redis.clone(), Arc::new(ScheduleQueues(queues.clone())));
    if let Err(err) = redis.load_scripts(&schedules.scripts().all()).await {
        tracing::warn!(cause = %err, "schedule scripts not loaded at boot; they load on first use");
    }
    let semaphores = SemaphoreStore::new(redis.clone(), limits.clone(), shutdown.clone());
    if let Err(err) = redis.load_scripts(&semaphores.scripts().all()).await {
        tracing::warn!(cause = %err, "semaphore scripts not loaded at boot; they load on first use");
    }
    let events = Events::spawn(
        nodes,
        vec![
            locks.event_route(),
            locks.changed_route(),
            queues.event_route(),
            queues.done_route(),
            scheduler.event_route(),
            schedules.event_route(),
            semaphores.event_route(),
        ],
        shutdown,
    );
    shutdown.spawn(schedules.timer().clone().run(shutdown.clone()));

    let reporter = tonic_health::server::HealthReporter::new();
    reporter
        .set_service_status(health::LIVENESS_SERVICE, ServingStatus::Serving)
        .await;
    health::set_readiness(&reporter, ServingStatus::NotServing).await;
    let metrics = Metrics::new(auth.is_on());
    health::spawn_probe(
        redis.clone(),
        (reporter.clone(), metrics.clone()),
        events,
        shutdown,
    );

    let metrics_listener = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|err| {
            format!(
                "cannot listen for metrics on {}: {err}",
                config.metrics_listen
            )
        })?;
    let metrics_addr = metrics_listener
        .local_addr()
        .map_err(|err| err.to_string())?;
    let connections = ConnectionLimit::new(config.max_connections);
    connections.register(&metrics);
    redis.errors.register(&metrics);
    locks.register_metrics(&metrics);
    queues.register_metrics(&metrics);
    schedules.timer().register_metrics(&metrics);
    metrics::spawn(metrics_listener, metrics.clone(), shutdown);
    // The dashboard takes the gRPC port's certificate and key (read again here into
    // rustls' own config: tonic's is not reachable).
    let dashboard_tls = match (
        &config.tls_cert,
        &config.tls_key,
        &config.dashboard_listen.0,
    ) {
        (Some(cert), Some(key), Some(_)) => Some(web::tls::acceptor(cert, key)?),
        _ => None,
    };
    let dashboard_addr = match config.dashboard_listen.0 {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|err| format!("cannot listen for the dashboard on {addr}: {err}"))?;
            let bound = listener.local_addr().map_err(|err| err.to_string())?;
            web::spawn(
                listener,
                web::Dashboard {
                    queues: queues.clone(),
                    locks: locks.clone(),
                    semaphores: semaphores.clone(),
                    schedules: schedules.clone(),
                    auth: auth.clone(),
                    redis: redis.clone(),
                    sampler: Default::default(),
                    tls: dashboard_tls.clone(),
                },
                shutdown,
            );
            Some(bound)
        }
        None => None,
    };

    auth.spawn_reloader(shutdown);
    let addr = listener.local_addr().map_err(|err| err.to_string())?;
    tracing::info!(
        %addr,
        metrics = %metrics_addr,
        dashboard = %dashboard_addr.map_or_else(
            || "off".to_owned(),
            |addr| format!("{}://{addr}/", if dashboard_tls.is_some() { "https" } else { "http" })
        ),
        tls = tls.is_some(),
        auth = auth.is_on(),
        "ready"
    );

    let draining = {
        let shutdown = shutdown.clone();
        let reporter = reporter.clone();
        async move {
            tokio::select! {
                () = shutdown_signal => {}
                () = shutdown.cancelled() => {}
            }
            tracing::info!("shutting down");
            health::set_readiness(&reporter, ServingStatus::NotServing).await;
            shutdown.trigger();
        }
    };
    let settings = Settings {
        stream_heartbeat: config.stream_heartbeat,
        max_message_size: config.max_message_size,
        keepalive_interval: config.keepalive_interval,
        keepalive_timeout: config.keepalive_timeout,
        connection_age: config.connection_age(),
        tls,
    };
    let services = Services {
        locks,
        queues,
        scheduler,
        schedules,
        semaphores,
        auth,
        metrics,
    };
    router::serve(
        listener,
        connections,
        settings,
        (services, reporter),
        draining,
    )
    .await
}

/// The schedules' way into the queues ([`schedule::Queues`]): a fire is
/// `QueueStore::fire` (`queue/lua/fire.lua`), a trigger a plain enqueue.
struct ScheduleQueues(QueueStore);

/// A schedule's task as the queue store takes it.
fn scheduled_task(id: String, task: &TaskTemplate, schedule: crate::queue::Schedule) -> NewTask {
    NewTask {
        id,
        payload: task.payload.clone().into(),
        schedule,
        replace: false,
        max_attempts: task.max_attempts,
        dedupe_window: std::time::Duration::ZERO,
        fresh_id: false,
        group: task.group.clone(),
        priority: task.priority,
    }
}

impl schedule::Queues for ScheduleQueues {
    fn fire<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
        calls: Vec<FireCall<'a>>,
    ) -> BoxFuture<'a, crate::error::Result<Vec<FireReply>>> {
        Box::pin(async move {
            let fires: Vec<Fire> = calls
                .into_iter()
                .map(|call| Fire {
                    schedule: call.schedule.to_owned(),
                    at_ms: call.at_ms,
                    skip_overlap: call.skip_overlap,
                    task: scheduled_task(
                        call.id,
                        call.task,
                        crate::queue::Schedule::At(call.at_ms),
                    ),
                })
                .collect();
            let fired = self.0.tenant(tenant).fire(queue, &fires).await?;
            Ok(fired
                .into_iter()
                .map(|fired| FireReply {
                    outcome: match fired.outcome {
                        FireOutcome::Fired { .. } => schedule::FireOutcome::Fired,
                        FireOutcome::Overlap => schedule::FireOutcome::Overlap,
                        FireOutcome::Done => schedule::FireOutcome::Done,
                        FireOutcome::Early => schedule::FireOutcome::Early,
                    },
                    now_ms: fired.now_ms,
                    handled_ms: fired.handled_ms,
                    enqueued_ms: fired.enqueued_ms,
                })
                .collect())
        })
    }

    fn last_fire<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
        schedule: &'a str,
    ) -> BoxFuture<'a, crate::error::Result<i64>> {
        Box::pin(async move { self.0.tenant(tenant).last_fire(queue, schedule).await })
    }

    fn enqueue_now<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
        id: String,
        task: &'a TaskTemplate,
    ) -> BoxFuture<'a, crate::error::Result<()>> {
        Box::pin(async move {
            let task = scheduled_task(id, task, crate::queue::Schedule::Now);
            self.0.tenant(tenant).enqueue(queue, &[task]).await?;
            Ok(())
        })
    }
}
