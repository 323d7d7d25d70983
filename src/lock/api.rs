//! `LockApi` implements the generated `LockService`: validate and convert the request,
//! call `LockStore`, convert the answer. Nothing else happens here.

use std::{pin::Pin, time::Duration};

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
    rpc::{self, record, reply, within},
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

    /// Runs the acquire: a try-once in the caller's task, a waiting one detached from
    /// it. Either way a lock won for a caller who went away is released again.
    async fn acquire_detached(
        &self,
        spec: AcquireSpec,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<AcquireOutcome> {
        if spec.wait.is_zero() {
            return within(deadline, self.store.try_once(&spec)).await;
        }
        let store = self.store.clone();
        let giver = self.store.clone();
        let name = spec.name.clone();
        rpc::detached(
            self.store.shutdown(),
            move |cancel| async move { store.acquire(&spec, &Stop { deadline, cancel }).await },
            move |outcome| async move {
                if let AcquireOutcome::Acquired(lease) = outcome {
                    giver.give_back(&name, &lease.token).await;
                }
            },
        )
        .await
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

type HoldStream = Pin<Box<dyn Stream<Item = Result<pb::HoldResponse, Status>> + Send>>;

#[tonic::async_trait]
impl LockService for LockApi {
    #[tracing::instrument(level = "debug", name = "Acquire", skip_all, fields(lock, owner))]
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

    #[tracing::instrument(level = "debug", name = "Release", skip_all, fields(lock))]
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

    #[tracing::instrument(level = "debug", name = "Extend", skip_all, fields(lock))]
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

    #[tracing::instrument(level = "debug", name = "Describe", skip_all, fields(lock))]
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

    #[tracing::instrument(level = "debug", name = "ReleaseAll", skip_all, fields(owner))]
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

    #[tracing::instrument(level = "debug", name = "Hold", skip_all, fields(lock, owner))]
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
