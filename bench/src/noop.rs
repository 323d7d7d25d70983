//! The transport floor: a `LockService` whose `Acquire` and `Release` answer the same
//! messages turnstile does without any work (no Redis, no validation), served by tonic
//! like the real one. What it reaches is the limit of any gRPC lock service on this
//! machine. Run as `turnstile-bench --serve-noop` (hidden), a child process of the bench.

use std::{
    pin::Pin,
    sync::atomic::{AtomicU64, Ordering},
};

use tokio_stream::Stream;
use tonic::{transport::Server, Request, Response, Status};

use turnstile::{
    pb::{self, lock_service_server::LockService, lock_service_server::LockServiceServer},
    time::now_ms,
    timestamp_from_ms,
};

/// Serves the no-op lock service on a free loopback port until the process is killed;
/// its ready line on stderr is the JSON the bench reads from a `turnstile serve` child.
pub async fn serve() -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|err| format!("cannot listen on 127.0.0.1:0: {err}"))?;
    let addr = listener.local_addr().map_err(|err| err.to_string())?;
    eprintln!(r#"{{"fields":{{"message":"ready","addr":"{addr}"}}}}"#);
    Server::builder()
        .add_service(LockServiceServer::new(NoopLocks::default()))
        .serve_with_incoming(turnstile::floor::incoming(listener))
        .await
        .map_err(|err| format!("server failed: {err}"))
}

#[derive(Default)]
struct NoopLocks {
    fencing: AtomicU64,
}

type HoldStream = Pin<Box<dyn Stream<Item = Result<pb::HoldResponse, Status>> + Send>>;

#[tonic::async_trait]
impl LockService for NoopLocks {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let ttl_ms = request.get_ref().ttl.map_or(15_000, |ttl| {
            ttl.seconds * 1000 + i64::from(ttl.nanos) / 1_000_000
        });
        Ok(Response::new(pb::AcquireResponse {
            acquired: true,
            token: "0123456789abcdef0123456789abcdef".into(),
            fencing_token: self.fencing.fetch_add(1, Ordering::Relaxed) + 1,
            expires_at: Some(timestamp_from_ms(now_ms() + ttl_ms)),
            holder: None,
        }))
    }

    async fn release(
        &self,
        _: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        Ok(Response::new(pb::ReleaseResponse { released: true }))
    }

    async fn extend(
        &self,
        _: Request<pb::ExtendRequest>,
    ) -> Result<Response<pb::ExtendResponse>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }

    async fn describe(
        &self,
        _: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeResponse>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }

    async fn check_fence(
        &self,
        _: Request<pb::CheckFenceRequest>,
    ) -> Result<Response<pb::CheckFenceResponse>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }

    async fn list_locks(
        &self,
        _: Request<pb::ListLocksRequest>,
    ) -> Result<Response<pb::ListLocksResponse>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }

    async fn release_all(
        &self,
        _: Request<pb::ReleaseAllRequest>,
    ) -> Result<Response<pb::ReleaseAllResponse>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }

    type HoldStream = HoldStream;

    async fn hold(
        &self,
        _: Request<pb::HoldRequest>,
    ) -> Result<Response<Self::HoldStream>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }

    type WatchStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::WatchResponse, Status>> + Send>,
    >;

    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented(
            "the no-op server answers Acquire and Release only",
        ))
    }
}
