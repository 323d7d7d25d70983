//! `LockApi` implements the generated `LockService`: validate and convert the request,
//! call `LockStore`, convert the answer. Nothing else happens here.

use std::{future::Future, pin::Pin, time::Duration};

use tokio::sync::oneshot;
use tokio_stream::{wrappers::ReceiverStream, Stream, StreamExt};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{
    hold, AcquireOutcome, AcquireSpec, Holder, LockStore, Stop, DEFAULT_TTL, MAX_TTL, MAX_WAIT,
    MIN_TTL,
};
use crate::{
    deadline,
    error::{Error, Result},
    pb::{self, lock_service_server::LockService},
    time::timestamp_from_ms,
    validate::{self, DurationRule},
};

const TTL: DurationRule = DurationRule {
    default: DEFAULT_TTL,
    min: MIN_TTL,
    max: MAX_TTL,
};
const WAIT: DurationRule = DurationRule {
    default: Duration::ZERO,
    min: Duration::ZERO,
    max: MAX_WAIT,
};

/// The gRPC face of [`LockStore`].
#[derive(Clone)]
pub struct LockApi {
    store: LockStore,
    /// `--stream-heartbeat`.
    heartbeat: Duration,
}

impl LockApi {
    /// The service over `store`, with Hold heartbeats every `heartbeat`.
    pub fn new(store: LockStore, heartbeat: Duration) -> Self {
        Self { store, heartbeat }
    }

    /// Runs the (maybe waiting) acquire on its own task, so that a caller that goes away
    /// mid-script cannot leave a lock behind: the task releases what nobody will read.
    async fn acquire_detached(
        &self,
        spec: AcquireSpec,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<AcquireOutcome> {
        let stop = Stop {
            deadline,
            cancel: self.store.shutdown().child_token(),
        };
        // Dropping this handler (client cancel, tonic's own timeout) ends the wait.
        let caller_gone = stop.cancel.clone().drop_guard();
        let (tx, rx) = oneshot::channel();
        let store = self.store.clone();
        self.store.shutdown().spawn(
            async move {
                let result = store.acquire(&spec, &stop).await;
                if let Err(Ok(AcquireOutcome::Acquired(lease))) = tx.send(result) {
                    store.give_back(&spec.name, &lease.token).await;
                }
            }
            .in_current_span(),
        );
        let result = rx
            .await
            .map_err(|_| Error::Internal("acquire task ended without an answer".into()))?;
        caller_gone.disarm();
        result
    }
}

/// Races a non-waiting call against the caller's deadline, so a slow Redis answers
/// UNAVAILABLE before the caller gives up instead of a bare CANCELLED.
async fn within<T>(
    deadline: Option<tokio::time::Instant>,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, call).await.unwrap_or_else(|_| {
            Err(Error::Unavailable(
                "redis did not answer before the deadline".into(),
            ))
        }),
        None => call.await,
    }
}

/// Logs the error once, where the RPC ends, and converts it.
fn reply<T>(result: Result<T>) -> Result<Response<T>, Status> {
    match result {
        Ok(message) => Ok(Response::new(message)),
        Err(err) => {
            match &err {
                Error::Unavailable(_) => tracing::warn!(cause = %err, "rpc failed"),
                Error::Internal(_) => tracing::error!(cause = %err, "rpc failed"),
                _ => tracing::debug!(cause = %err, "rpc refused"),
            }
            Err(err.into())
        }
    }
}

fn lock_info(holder: Holder) -> pb::LockInfo {
    pb::LockInfo {
        owner: holder.owner,
        fencing_token: holder.fencing_token,
        expires_at: Some(timestamp_from_ms(holder.expires_at_ms)),
    }
}

fn acquire_spec(
    name: &str,
    owner: &str,
    ttl: Option<&prost_types::Duration>,
    wait: Option<&prost_types::Duration>,
    request_id: &str,
) -> Result<AcquireSpec> {
    Ok(AcquireSpec {
        name: validate::name("name", name)?.to_owned(),
        owner: validate::owner("owner", owner)?.to_owned(),
        ttl: validate::duration("ttl", ttl, TTL)?,
        wait: validate::duration("wait", wait, WAIT)?,
        request_id: validate::optional_id("request_id", request_id)?.to_owned(),
    })
}

fn record(field: &'static str, value: &str) {
    tracing::Span::current().record(field, value);
}

type HoldStream = Pin<Box<dyn Stream<Item = Result<pb::HoldResponse, Status>> + Send>>;

#[tonic::async_trait]
impl LockService for LockApi {
    #[tracing::instrument(name = "Acquire", skip_all, fields(lock, owner))]
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let spec = acquire_spec(
                    &request.name,
                    &request.owner,
                    request.ttl.as_ref(),
                    request.wait.as_ref(),
                    &request.request_id,
                )?;
                record("lock", &spec.name);
                record("owner", &spec.owner);
                Ok(match self.acquire_detached(spec, deadline).await? {
                    AcquireOutcome::Acquired(lease) => pb::AcquireResponse {
                        acquired: true,
                        token: lease.token,
                        fencing_token: lease.fencing_token,
                        expires_at: Some(timestamp_from_ms(lease.expires_at_ms)),
                        holder: None,
                    },
                    AcquireOutcome::Held(holder) => pb::AcquireResponse {
                        holder: Some(lock_info(holder)),
                        ..Default::default()
                    },
                })
            }
            .await,
        )
    }

    #[tracing::instrument(name = "Release", skip_all, fields(lock))]
    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let name = validate::name("name", &request.name)?;
                let token = validate::token("token", &request.token)?;
                record("lock", name);
                let released = within(deadline, self.store.release(name, token)).await?;
                Ok(pb::ReleaseResponse { released })
            }
            .await,
        )
    }

    #[tracing::instrument(name = "Extend", skip_all, fields(lock))]
    async fn extend(
        &self,
        request: Request<pb::ExtendRequest>,
    ) -> Result<Response<pb::ExtendResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let name = validate::name("name", &request.name)?;
                let token = validate::token("token", &request.token)?;
                let ttl = validate::duration("ttl", request.ttl.as_ref(), TTL)?;
                record("lock", name);
                let until = within(deadline, self.store.extend(name, token, ttl)).await?;
                Ok(pb::ExtendResponse {
                    extended: until.is_some(),
                    expires_at: until.map(timestamp_from_ms),
                })
            }
            .await,
        )
    }

    #[tracing::instrument(name = "Describe", skip_all, fields(lock))]
    async fn describe(
        &self,
        request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let name = validate::name("name", &request.name)?;
                let token = validate::optional_token("token", &request.token)?;
                record("lock", name);
                let seen = within(deadline, self.store.describe(name, token)).await?;
                Ok(pb::DescribeResponse {
                    held: seen.holder.is_some(),
                    info: seen.holder.map(lock_info),
                    held_by_token: seen.held_by_token,
                })
            }
            .await,
        )
    }

    #[tracing::instrument(name = "ReleaseAll", skip_all, fields(owner))]
    async fn release_all(
        &self,
        request: Request<pb::ReleaseAllRequest>,
    ) -> Result<Response<pb::ReleaseAllResponse>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        reply(
            async {
                let owner = validate::owner("owner", &request.owner)?;
                record("owner", owner);
                let released = within(deadline, self.store.release_all(owner)).await?;
                Ok(pb::ReleaseAllResponse { released })
            }
            .await,
        )
    }

    type HoldStream = HoldStream;

    #[tracing::instrument(name = "Hold", skip_all, fields(lock, owner))]
    async fn hold(
        &self,
        request: Request<pb::HoldRequest>,
    ) -> Result<Response<Self::HoldStream>, Status> {
        let deadline = deadline::from_metadata(request.metadata());
        let request = request.into_inner();
        let started = async {
            let spec = acquire_spec(
                &request.name,
                &request.owner,
                request.ttl.as_ref(),
                request.wait.as_ref(),
                "",
            )?;
            record("lock", &spec.name);
            record("owner", &spec.owner);
            if self.store.shutdown().is_triggered() {
                return Err(Error::ShuttingDown);
            }
            let permit = self.store.limits().open_stream()?;
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            let store = self.store.clone();
            let heartbeat = self.heartbeat;
            self.store.shutdown().spawn(
                async move {
                    let _permit = permit;
                    hold::run(store, spec, deadline, heartbeat, tx).await;
                }
                .in_current_span(),
            );
            Ok(rx)
        }
        .await;
        reply(started.map(|rx| {
            let stream =
                ReceiverStream::new(rx).map(|event| event.map(hold_response).map_err(Status::from));
            Box::pin(stream) as HoldStream
        }))
    }
}

fn hold_response(event: hold::HoldEvent) -> pb::HoldResponse {
    use pb::hold_response::{Acquired, Event, Lost, Renewed};
    let event = match event {
        hold::HoldEvent::Acquired(lease) => Event::Acquired(Acquired {
            token: lease.token,
            fencing_token: lease.fencing_token,
            expires_at: Some(timestamp_from_ms(lease.expires_at_ms)),
        }),
        hold::HoldEvent::Renewed(until) => Event::Renewed(Renewed {
            expires_at: Some(timestamp_from_ms(until)),
        }),
        hold::HoldEvent::Lost(reason) => Event::Lost(Lost {
            reason: reason.to_owned(),
        }),
        hold::HoldEvent::Heartbeat => Event::Heartbeat(pb::Heartbeat {
            sent_at: Some(timestamp_from_ms(crate::time::now_ms())),
        }),
    };
    pb::HoldResponse { event: Some(event) }
}
