//! `SemaphoreApi` implements the generated `SemaphoreService`: each handler validates
//! and converts the request, calls `SemaphoreStore`, and converts the answer. The
//! durations follow the locks' rules (`grpc/lock.rs`).

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use super::{
    lease::{hold_event, TTL, WAIT},
    pb::{self, semaphore_service_server::SemaphoreService},
    proto_time::{self, timestamp_from_ms},
    rpc::{self, record, Bound, ResponseStream},
};
use crate::{
    error::{Error, Result},
    lock::hold::{HoldEvent, HoldSpec},
    method::Method,
    redis::TenantScoped,
    semaphore::{SemaphoreOutcome, SemaphoreSpec, SemaphoreStore, MAX_LIMIT},
    time::now_ms,
    validate,
};

/// The gRPC face of [`SemaphoreStore`].
#[derive(Clone)]
pub struct SemaphoreApi {
    store: SemaphoreStore,
    /// `--stream-heartbeat`.
    heartbeat: Duration,
}

impl SemaphoreApi {
    /// The service over `store`, with Hold heartbeats every `heartbeat`.
    pub fn new(store: SemaphoreStore, heartbeat: Duration) -> Self {
        Self { store, heartbeat }
    }
}

/// The fields every request that takes permits carries.
struct Asked<'a> {
    name: &'a str,
    owner: &'a str,
    limit: u32,
    permits: u32,
    ttl: Option<&'a prost_types::Duration>,
    wait: Option<&'a prost_types::Duration>,
    request_id: &'a str,
}

fn semaphore_spec(asked: Asked<'_>) -> Result<SemaphoreSpec> {
    let name = semaphore_name(asked.name)?.to_owned();
    if asked.limit == 0 {
        return Err(Error::invalid(
            "limit",
            format!("must be stated, from 1 to {MAX_LIMIT} (it has no default)"),
        ));
    }
    let limit = validate::count("limit", asked.limit, 0, MAX_LIMIT)?;
    let permits = validate::count("permits", asked.permits, 1, MAX_LIMIT)?;
    if permits > limit {
        return Err(Error::invalid(
            "permits",
            format!("must be at most limit ({limit}), got {permits}"),
        ));
    }
    let spec = SemaphoreSpec {
        name,
        owner: validate::owner("owner", asked.owner)?.to_owned(),
        limit,
        permits,
        ttl: proto_time::duration("ttl", asked.ttl, TTL)?,
        wait: proto_time::duration("wait", asked.wait, WAIT)?,
        request_id: validate::optional_id("request_id", asked.request_id)?.to_owned(),
    };
    record("owner", &spec.owner);
    Ok(spec)
}

fn semaphore_name(name: &str) -> Result<&str> {
    let name = validate::name("name", name)?;
    record("semaphore", name);
    Ok(name)
}

#[tonic::async_trait]
impl SemaphoreService for SemaphoreApi {
    async fn acquire(
        &self,
        request: Request<pb::SemaphoreServiceAcquireRequest>,
    ) -> Result<Response<pb::SemaphoreServiceAcquireResponse>, Status> {
        rpc::unary(
            Method::SemaphoreAcquire,
            Bound::Own,
            request,
            |call, r| async move {
                let spec = semaphore_spec(Asked {
                    name: &r.name,
                    owner: &r.owner,
                    limit: r.limit,
                    permits: r.permits,
                    ttl: r.ttl.as_ref(),
                    wait: r.wait.as_ref(),
                    request_id: &r.request_id,
                })?;
                let outcome = self
                    .store
                    .tenant(&call.tenant)
                    .acquire(spec, call.deadline)
                    .await?;
                Ok(match outcome {
                    SemaphoreOutcome::Acquired(grant) => pb::SemaphoreServiceAcquireResponse {
                        acquired: true,
                        token: grant.lease.token,
                        fencing_token: grant.lease.fencing_token,
                        expires_at: Some(timestamp_from_ms(grant.lease.expires_at_ms)),
                        in_use: grant.in_use,
                        limit: grant.limit,
                    },
                    SemaphoreOutcome::Busy { in_use, limit } => {
                        pb::SemaphoreServiceAcquireResponse {
                            in_use,
                            limit,
                            ..Default::default()
                        }
                    }
                })
            },
        )
        .await
    }

    async fn release(
        &self,
        request: Request<pb::SemaphoreServiceReleaseRequest>,
    ) -> Result<Response<pb::SemaphoreServiceReleaseResponse>, Status> {
        rpc::unary(
            Method::SemaphoreRelease,
            Bound::Race,
            request,
            |call, r| async move {
                let name = semaphore_name(&r.name)?;
                let token = validate::token("token", &r.token)?;
                let released = self.store.tenant(&call.tenant).release(name, token).await?;
                Ok(pb::SemaphoreServiceReleaseResponse { released })
            },
        )
        .await
    }

    async fn extend(
        &self,
        request: Request<pb::SemaphoreServiceExtendRequest>,
    ) -> Result<Response<pb::SemaphoreServiceExtendResponse>, Status> {
        rpc::unary(
            Method::SemaphoreExtend,
            Bound::Race,
            request,
            |call, r| async move {
                let name = semaphore_name(&r.name)?;
                let token = validate::token("token", &r.token)?;
                let ttl = proto_time::duration("ttl", r.ttl.as_ref(), TTL)?;
                let until = self
                    .store
                    .tenant(&call.tenant)
                    .extend(name, token, ttl)
                    .await?;
                Ok(pb::SemaphoreServiceExtendResponse {
                    extended: until.is_some(),
                    expires_at: until.map(timestamp_from_ms),
                })
            },
        )
        .await
    }

    async fn describe(
        &self,
        request: Request<pb::SemaphoreServiceDescribeRequest>,
    ) -> Result<Response<pb::SemaphoreServiceDescribeResponse>, Status> {
        rpc::unary(
            Method::SemaphoreDescribe,
            Bound::Race,
            request,
            |call, r| async move {
                let name = semaphore_name(&r.name)?;
                let seen = self.store.tenant(&call.tenant).describe(name).await?;
                Ok(pb::SemaphoreServiceDescribeResponse {
                    limit: seen.limit,
                    in_use: seen.in_use,
                    waiting: seen.waiting,
                    holders: seen
                        .holders
                        .into_iter()
                        .map(|holder| pb::SemaphoreHolder {
                            owner: holder.owner,
                            permits: holder.permits,
                            fencing_token: holder.fencing_token,
                            expires_at: Some(timestamp_from_ms(holder.expires_at_ms)),
                        })
                        .collect(),
                })
            },
        )
        .await
    }

    type HoldStream = ResponseStream<pb::SemaphoreServiceHoldResponse>;

    async fn hold(
        &self,
        request: Request<pb::SemaphoreServiceHoldRequest>,
    ) -> Result<Response<Self::HoldStream>, Status> {
        rpc::stream(Method::SemaphoreHold, self.heartbeat, request, |call, r| {
            let spec = HoldSpec {
                acquire: semaphore_spec(Asked {
                    name: &r.name,
                    owner: &r.owner,
                    limit: r.limit,
                    permits: r.permits,
                    ttl: r.ttl.as_ref(),
                    wait: r.wait.as_ref(),
                    request_id: "",
                })?,
                token: Some(validate::optional_token("token", &r.token)?)
                    .filter(|token| !token.is_empty())
                    .map(str::to_owned),
                deadline: call.deadline,
                retires_at: call.retires_at,
            };
            let events = self.store.tenant(&call.tenant).hold(spec)?;
            Ok(events.map(|event| event.map(hold_response)))
        })
    }
}

fn hold_response(event: HoldEvent) -> pb::SemaphoreServiceHoldResponse {
    use pb::semaphore_service_hold_response::Event;
    let event = match hold_event(event) {
        pb::hold_response::Event::Acquired(acquired) => Event::Acquired(acquired),
        pb::hold_response::Event::Renewed(renewed) => Event::Renewed(renewed),
        pb::hold_response::Event::Lost(lost) => Event::Lost(lost),
        pb::hold_response::Event::Heartbeat(beat) => Event::Heartbeat(beat),
    };
    pb::SemaphoreServiceHoldResponse { event: Some(event) }
}

impl rpc::Heartbeat for pb::SemaphoreServiceHoldResponse {
    fn heartbeat() -> Self {
        pb::SemaphoreServiceHoldResponse {
            event: Some(pb::semaphore_service_hold_response::Event::Heartbeat(
                pb::Heartbeat {
                    sent_at: Some(timestamp_from_ms(now_ms())),
                },
            )),
        }
    }
}
