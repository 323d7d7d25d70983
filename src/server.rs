//! `run(config, listener, shutdown_signal)`: starts (or connects to) Redis, wires the
//! services, health, reflection and metrics, serves until the signal, then drains:
//! NOT_SERVING → cancel → streams release and end → connections close → tracked tasks
//! finish (bounded) → the embedded Redis stops. `main` and the tests both call it.

use std::future::Future;

use tokio::net::TcpListener;

use crate::{
    auth::Auth,
    config::Config,
    error::Error,
    grpc::{
        connections::ConnectionLimit,
        health::{self, Health},
        router::{self, Services, Settings},
        tls,
    },
    limits::Limits,
    lock::LockStore,
    metrics::{self, Metrics},
    queue::QueueStore,
    redis::{
        connection_info,
        embedded::{Bind, EmbeddedOptions, EmbeddedRedis},
        events::Events,
        redact, Keys, Redis,
    },
    schedule::ScheduleStore,
    semaphore::SemaphoreStore,
    shutdown::Shutdown,
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
    tls: Option<tls::ServerTls>,
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
    let queues = QueueStore::new(redis.clone(), shutdown.clone()).serving_streams(
        limits.clone(),
        config.reattach_grace,
        replica_name(&listener),
    );
    if let Err(err) = redis.load_scripts(&queues.scripts().all()).await {
        tracing::warn!(cause = %err, "queue scripts not loaded at boot; they load on first use");
    }
    let schedules = ScheduleStore::new(redis.clone(), queues.clone());
    if let Err(err) = redis.load_scripts(&schedules.scripts().all()).await {
        tracing::warn!(cause = %err, "schedule scripts not loaded at boot; they load on first use");
    }
    let semaphores = SemaphoreStore::new(redis.clone(), limits.clone(), shutdown.clone());
    if let Err(err) = redis.load_scripts(&semaphores.scripts().all()).await {
        tracing::warn!(cause = %err, "semaphore scripts not loaded at boot; they load on first use");
    }
    let mut routes = vec![
        locks.event_route(),
        locks.changed_route(),
        queues.event_route(),
        queues.done_route(),
        schedules.event_route(),
        semaphores.event_route(),
    ];
    routes.extend(queues.slot_freed_route());
    let events = Events::spawn(nodes, routes, shutdown);
    shutdown.spawn(schedules.timer().clone().run(shutdown.clone()));

    let health = Health::new().await;
    let metrics = Metrics::new(auth.is_on());
    health::spawn_probe(
        redis.clone(),
        (health.clone(), metrics.clone()),
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
        workers = %tokio::runtime::Handle::current().metrics().num_workers(),
        "ready"
    );

    let draining = {
        let shutdown = shutdown.clone();
        let health = health.clone();
        async move {
            tokio::select! {
                () = shutdown_signal => {}
                () = shutdown.cancelled() => {}
            }
            tracing::info!("shutting down");
            health.not_ready().await;
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
        schedules,
        semaphores,
        auth,
        metrics,
    };
    router::serve(
        listener,
        connections,
        settings,
        (services, health),
        draining,
    )
    .await
}
