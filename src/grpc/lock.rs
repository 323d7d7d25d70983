//! `LockApi` implements the generated `LockService`: each handler validates and
//! converts the request, calls `LockStore`, and converts the answer. Deadlines, spans,
//! error logging and heartbeats are `rpc`'s.

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use super::{
    flow::{self, Listing},
    lease::{hold_event, TTL, WAIT},
    pb::{self, lock_service_server::LockService},
    proto_time::{self, timestamp_from_ms},
    rpc::{self, record, record_count, Bound, ResponseStream},
};
use crate::{
    error::{Error, Result},
    lock::{hold, watch, AcquireOutcome, AcquireSpec, Holder, LockStore},
    method::Method,
    redis::TenantScoped,
    time::now_ms,
    validate,
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
    let spec = AcquireSpec {
        name: validate::name("name", name)?.to_owned(),
        owner: validate::owner("owner", owner)?.to_owned(),
        ttl: proto_time::duration("ttl", ttl, TTL)?,
        wait: proto_time::duration("wait", wait, WAIT)?,
        request_id: validate::optional_id("request_id", request_id)?.to_owned(),
    };
    record("lock", &spec.name);
    record("owner", &spec.owner);
    Ok(spec)
}

fn lock_name(name: &str) -> Result<&str> {
    let name = validate::name("name", name)?;
    record("lock", name);
    Ok(name)
}

#[tonic::async_trait]
impl LockService for LockApi {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        rpc::unary(Method::Acquire, Bound::Own, request, |call, r| async move {
            let spec = acquire_spec(
                &r.name,
                &r.owner,
                r.ttl.as_ref(),
                r.wait.as_ref(),
                &r.request_id,
            )?;
            Ok(
                match self
                    .store
                    .tenant(&call.tenant)
                    .acquire(spec, call.deadline)
                    .await?
                {
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
                },
            )
        })
        .await
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        rpc::unary(
            Method::Release,
            Bound::Race,
            request,
            |call, r| async move {
                let name = lock_name(&r.name)?;
                let token = validate::token("token", &r.token)?;
                let released = self.store.tenant(&call.tenant).release(name, token).await?;
                Ok(pb::ReleaseResponse { released })
            },
        )
        .await
    }

    async fn extend(
        &self,
        request: Request<pb::ExtendRequest>,
    ) -> Result<Response<pb::ExtendResponse>, Status> {
        rpc::unary(Method::Extend, Bound::Race, request, |call, r| async move {
            let name = lock_name(&r.name)?;
            let token = validate::token("token", &r.token)?;
            let ttl = proto_time::duration("ttl", r.ttl.as_ref(), TTL)?;
            let until = self
                .store
                .tenant(&call.tenant)
                .extend(name, token, ttl)
                .await?;
            Ok(pb::ExtendResponse {
                extended: until.is_some(),
                expires_at: until.map(timestamp_from_ms),
            })
        })
        .await
    }

    async fn check_fence(
        &self,
        request: Request<pb::CheckFenceRequest>,
    ) -> Result<Response<pb::CheckFenceResponse>, Status> {
        rpc::unary(
            Method::CheckFence,
            Bound::Race,
            request,
            |call, r| async move {
                let name = lock_name(&r.name)?;
                if r.fencing_token == 0 {
                    return Err(Error::invalid(
                        "fencing_token",
                        "must be a fencing token Acquire or Hold gave (above 0)",
                    ));
                }
                let (current, holder) = self
                    .store
                    .tenant(&call.tenant)
                    .check_fence(name, r.fencing_token)
                    .await?;
                Ok(pb::CheckFenceResponse {
                    current,
                    holder: holder.map(lock_info),
                })
            },
        )
        .await
    }

    async fn describe(
        &self,
        request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeResponse>, Status> {
        rpc::unary(
            Method::Describe,
            Bound::Race,
            request,
            |call, r| async move {
                let name = lock_name(&r.name)?;
                let token = validate::optional_token("token", &r.token)?;
                let seen = self
                    .store
                    .tenant(&call.tenant)
                    .describe(name, token)
                    .await?;
                Ok(pb::DescribeResponse {
                    held: seen.holder.is_some(),
                    info: seen.holder.map(lock_info),
                    held_by_token: seen.held_by_token,
                })
            },
        )
        .await
    }

    async fn release_all(
        &self,
        request: Request<pb::ReleaseAllRequest>,
    ) -> Result<Response<pb::ReleaseAllResponse>, Status> {
        rpc::unary(
            Method::ReleaseAll,
            Bound::Race,
            request,
            |call, r| async move {
                let owner = validate::owner("owner", &r.owner)?;
                record("owner", owner);
                let released = self.store.tenant(&call.tenant).release_all(owner).await?;
                Ok(pb::ReleaseAllResponse { released })
            },
        )
        .await
    }

    async fn list_locks(
        &self,
        request: Request<pb::ListLocksRequest>,
    ) -> Result<Response<pb::ListLocksResponse>, Status> {
        rpc::unary(
            Method::ListLocks,
            Bound::Race,
            request,
            |call, r| async move {
                let prefix = validate::optional_name("prefix", &r.prefix)?;
                let size = flow::page_size(r.page_size)?;
                let after = flow::page_after(Listing::Locks, &r.page_token)?;
                let page = self
                    .store
                    .tenant(&call.tenant)
                    .list(prefix, after.as_deref(), size)
                    .await?;
                record_count(page.locks.len());
                Ok(pb::ListLocksResponse {
                    locks: page
                        .locks
                        .into_iter()
                        .map(|(name, holder)| pb::LockSummary {
                            name,
                            owner: holder.owner,
                            fencing_token: holder.fencing_token,
                            expires_at: Some(timestamp_from_ms(holder.expires_at_ms)),
                        })
                        .collect(),
                    next_page_token: flow::page_token(Listing::Locks, page.next_after),
                })
            },
        )
        .await
    }

    type WatchStream = ResponseStream<pb::WatchResponse>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        rpc::stream(Method::Watch, self.heartbeat, request, |call, r| {
            let name = lock_name(&r.name)?;
            let events = self.store.tenant(&call.tenant).watch(name)?;
            Ok(events.map(|event| event.map(watch_response)))
        })
    }

    type HoldStream = ResponseStream<pb::HoldResponse>;

    async fn hold(
        &self,
        request: Request<pb::HoldRequest>,
    ) -> Result<Response<Self::HoldStream>, Status> {
        rpc::stream(Method::Hold, self.heartbeat, request, |call, r| {
            let spec = hold::HoldSpec {
                acquire: acquire_spec(&r.name, &r.owner, r.ttl.as_ref(), r.wait.as_ref(), "")?,
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

fn watch_response(event: watch::WatchEvent) -> pb::WatchResponse {
    use pb::watch_response::{Event, Free};
    let event = match event {
        watch::WatchEvent::Held(holder) => Event::Held(lock_info(holder)),
        watch::WatchEvent::Free(fencing_token) => Event::Free(Free { fencing_token }),
    };
    pb::WatchResponse { event: Some(event) }
}

impl rpc::Heartbeat for pb::WatchResponse {
    fn heartbeat() -> Self {
        pb::WatchResponse {
            event: Some(pb::watch_response::Event::Heartbeat(pb::Heartbeat {
                sent_at: Some(timestamp_from_ms(now_ms())),
            })),
        }
    }
}

fn hold_response(event: hold::HoldEvent) -> pb::HoldResponse {
    pb::HoldResponse {
        event: Some(hold_event(event)),
    }
}

impl rpc::Heartbeat for pb::HoldResponse {
    fn heartbeat() -> Self {
        pb::HoldResponse {
            event: Some(pb::hold_response::Event::Heartbeat(pb::Heartbeat {
                sent_at: Some(timestamp_from_ms(now_ms())),
            })),
        }
    }
}
