//! The gRPC server: health, reflection and the four services, each service behind the
//! auth layer and the size ceiling, on the accepted connections, until `draining`
//! completes. The composition root (`server.rs`) builds the stores and hands them here.

use std::{future::Future, time::Duration};

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic_health::{pb::health_server::HealthServer, server::HealthService};

use super::{
    auth::Authorized,
    connections::{ConnectionAge, ConnectionLimit},
    lock::LockApi,
    metered::Metered,
    pb::{
        self, lock_service_server::LockServiceServer, queue_service_server::QueueServiceServer,
        schedule_service_server::ScheduleServiceServer,
        semaphore_service_server::SemaphoreServiceServer,
    },
    queue::QueueApi,
    schedule::ScheduleApi,
    semaphore::SemaphoreApi,
    wire::SizeLimited,
};
use crate::{
    auth::Auth, lock::LockStore, metrics::Metrics, queue::QueueStore, schedule::ScheduleStore,
    semaphore::SemaphoreStore,
};

/// How the gRPC server serves, from the flags of the same names.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `--stream-heartbeat`.
    pub stream_heartbeat: Duration,
    /// `--max-message-size`.
    pub max_message_size: usize,
    /// `--keepalive-interval`; zero turns pings off.
    pub keepalive_interval: Duration,
    /// `--keepalive-timeout`.
    pub keepalive_timeout: Duration,
    /// `--max-connection-age` and its grace, if connections age out.
    pub connection_age: Option<ConnectionAge>,
    /// `None`: plaintext.
    pub tls: Option<super::tls::ServerTls>,
}

/// What the services serve: the domain's stores and engines, who may call, and where
/// calls are counted.
pub struct Services {
    /// Every LockService RPC.
    pub locks: LockStore,
    /// Every QueueService RPC (a store serving this replica's Subscribe streams).
    pub queues: QueueStore,
    /// Every ScheduleService RPC.
    pub schedules: ScheduleStore,
    /// Every SemaphoreService RPC.
    pub semaphores: SemaphoreStore,
    /// The bearer tokens; checked before any handler.
    pub auth: Auth,
    /// Where each RPC is counted.
    pub metrics: Metrics,
}

/// Serves `services` (and health, as `health` reports it, and reflection) on the connections `listener`
/// accepts within `connections`, until `draining` completes and the connections close.
pub async fn serve(
    listener: TcpListener,
    connections: ConnectionLimit,
    settings: Settings,
    (services, health): (Services, super::health::Health),
    draining: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|err| format!("reflection: {err}"))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|err| format!("reflection: {err}"))?;
    let mut builder = Server::builder()
        .http2_keepalive_interval(
            (!settings.keepalive_interval.is_zero()).then_some(settings.keepalive_interval),
        )
        .http2_keepalive_timeout(Some(settings.keepalive_timeout));
    if let Some(age) = settings.connection_age {
        // Only the age: the grace is ours (see `connections.rs`).
        builder = builder.max_connection_age(age.age);
    }
    if let Some(tls) = settings.tls {
        builder = builder
            .tls_config(tls.0)
            .map_err(|err| format!("tls: {err}"))?;
    }
    let Services {
        locks,
        queues,
        schedules,
        semaphores,
        auth,
        metrics,
    } = services;
    builder
        .add_service(HealthServer::new(HealthService::from_health_reporter(
            health.0,
        )))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(guarded(
            &auth,
            &metrics,
            LockServiceServer::new(LockApi::new(locks, settings.stream_heartbeat))
                .max_decoding_message_size(settings.max_message_size),
        ))
        .add_service(guarded(
            &auth,
            &metrics,
            QueueServiceServer::new(QueueApi::new(queues, settings.stream_heartbeat))
                .max_decoding_message_size(settings.max_message_size),
        ))
        .add_service(guarded(
            &auth,
            &metrics,
            ScheduleServiceServer::new(ScheduleApi::new(schedules))
                .max_decoding_message_size(settings.max_message_size),
        ))
        .add_service(guarded(
            &auth,
            &metrics,
            SemaphoreServiceServer::new(SemaphoreApi::new(semaphores, settings.stream_heartbeat))
                .max_decoding_message_size(settings.max_message_size),
        ))
        .serve_with_incoming_shutdown(
            connections.accept(listener, settings.connection_age),
            draining,
        )
        .await
        .map_err(|err| format!("server failed: {err}"))
}

/// The one layer stack of each of our services, outside in: the size ceiling (before a
/// byte is decoded), metering, then auth.
fn guarded<S>(auth: &Auth, metrics: &Metrics, service: S) -> SizeLimited<Metered<Authorized<S>>> {
    SizeLimited(Metered::new(
        Authorized::new(service, auth.clone()),
        metrics.clone(),
    ))
}
