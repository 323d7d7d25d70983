//! The semaphore store's script calls: one method per script (keys, then arguments in
//! the order the script's header gives), the reply decoded by position. The acquire
//! path, which may wait, is in `acquire.rs`.

use std::time::Duration;

use super::{
    model::{Grant, SemaphoreDescription, SemaphoreHolder, SemaphoreSpec},
    SemaphoreStore, LINE_TTL, MAX_LISTED,
};
use crate::{
    error::{Error, Result},
    lock::{generation_arg, Lease, Renewal},
    redis::{keys::Event, reply},
};

/// What one run of `acquire.lua` answered.
#[derive(Debug)]
pub(super) enum Tried {
    /// Granted (not yet claimed by the caller).
    Acquired(Grant),
    /// Not now.
    Busy {
        in_use: u32,
        limit: u32,
        /// The earliest end of a holder's lease (Unix ms, Redis clock), if any.
        next_ms: Option<i64>,
    },
}

impl SemaphoreStore {
    /// One attempt to take `spec.permits` with `token`; with a `ticket` the caller
    /// waits: not granted, it joins the line (or renews its entry there).
    pub(super) async fn try_acquire(
        &self,
        spec: &SemaphoreSpec,
        token: &str,
        ticket: Option<&str>,
    ) -> Result<Tried> {
        let keys = self.redis.keys.semaphore(&spec.name);
        let mut call = self.scripts.acquire.key(&keys.all);
        call.arg(token)
            .arg(&spec.owner)
            .arg(spec.limit)
            .arg(spec.permits)
            .arg(ms(spec.ttl))
            .arg(&spec.request_id)
            .arg(ticket.unwrap_or(""))
            .arg(ms(LINE_TTL))
            .arg(self.redis.keys.channel(Event::SemaphoreWake));
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(keys.sem(), &call).await?;
        match reply::int(&reply, 0)? {
            1 => Ok(Tried::Acquired(Grant {
                lease: Lease {
                    token: reply::string(&reply, 1)?,
                    fencing_token: reply::int(&reply, 2)? as u64,
                    expires_at_ms: reply::int(&reply, 3)?,
                },
                in_use: reply::int(&reply, 4)? as u32,
                limit: reply::int(&reply, 5)? as u32,
            })),
            0 => Ok(Tried::Busy {
                in_use: reply::int(&reply, 1)? as u32,
                limit: reply::int(&reply, 2)? as u32,
                next_ms: Some(reply::int(&reply, 3)?).filter(|&at| at > 0),
            }),
            _ => Err(Error::FailedPrecondition {
                field: "limit",
                reason: format!(
                    "the semaphore's holders use limit {}, not {}; every caller must state the same limit while it is held",
                    reply::int(&reply, 1)?,
                    spec.limit
                ),
            }),
        }
    }

    /// Leaves the line (a waiter that gave up); failures are logged (the entry's lease
    /// ends within `LINE_TTL`).
    pub(super) async fn leave(&self, name: &str, ticket: &str, permits: u32) {
        let keys = self.redis.keys.semaphore(name);
        let mut call = self.scripts.leave.key(&keys.all);
        call.arg(format!("{ticket}:{permits}"))
            .arg(self.redis.keys.channel(Event::SemaphoreWake));
        let left: Result<i64> = self.redis.invoke_keyed(keys.sem(), &call).await;
        if let Err(err) = left {
            tracing::warn!(semaphore = name, cause = %err, "could not leave a semaphore's line; the entry ends with its lease");
        }
    }

    /// Releases permits nobody will use; failures are logged (they expire anyway).
    pub(super) async fn give_back(&self, name: &str, token: &str) {
        if let Err(err) = self.release(name, token).await {
            tracing::warn!(semaphore = name, cause = %err, "could not give back unused permits; they return with their ttl");
        }
    }

    /// Gives back the permits `token` holds.
    pub async fn release(&self, name: &str, token: &str) -> Result<bool> {
        self.release_at(name, token, None).await
    }

    /// Gives back the permits `token` holds at attach `generation` (`None`: any).
    pub(super) async fn release_at(
        &self,
        name: &str,
        token: &str,
        generation: Option<u64>,
    ) -> Result<bool> {
        let keys = self.redis.keys.semaphore(name);
        let mut call = self.scripts.release.key(&keys.all);
        call.arg(token)
            .arg(self.redis.keys.channel(Event::SemaphoreWake))
            .arg(generation_arg(generation));
        let released: i64 = self.redis.invoke_keyed(keys.sem(), &call).await?;
        Ok(released == 1)
    }

    /// Resets the lease of `token` to `ttl` from now; the new end (Unix ms).
    pub async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Option<i64>> {
        Ok(self
            .renew(name, token, ttl, None, false)
            .await?
            .expires_at_ms())
    }

    /// One run of `extend.lua`: a renewal at `generation` (`None`: any), or with
    /// `take_over` a Hold re-attach.
    pub(super) async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        generation: Option<u64>,
        take_over: bool,
    ) -> Result<Renewal> {
        let keys = self.redis.keys.semaphore(name);
        let mut call = self.scripts.extend.key(&keys.all);
        call.arg(token)
            .arg(ms(ttl))
            .arg(generation_arg(generation))
            .arg(if take_over { "1" } else { "0" })
            .arg(self.redis.keys.channel(Event::SemaphoreWake));
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(keys.sem(), &call).await?;
        Ok(Renewal::from_reply(&reply, token)?.0)
    }

    /// The limit, permits in use, live holders and waiters (read only).
    pub async fn describe(&self, name: &str) -> Result<SemaphoreDescription> {
        let keys = self.redis.keys.semaphore(name);
        let mut call = self.scripts.describe.key(&keys.all);
        call.arg(MAX_LISTED);
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(keys.sem(), &call).await?;
        let listed = reply::int(&reply, 3)? as usize;
        let holders = (0..listed)
            .map(|at| {
                let base = 4 + at * 4;
                Ok(SemaphoreHolder {
                    owner: reply::string(&reply, base)?,
                    permits: reply::int(&reply, base + 1)? as u32,
                    fencing_token: reply::int(&reply, base + 2)? as u64,
                    expires_at_ms: reply::int(&reply, base + 3)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(SemaphoreDescription {
            limit: reply::int(&reply, 0)? as u32,
            in_use: reply::int(&reply, 1)? as u32,
            waiting: reply::int(&reply, 2)? as u32,
            holders,
        })
    }
}

fn ms(duration: Duration) -> u64 {
    (duration.as_millis() as u64).max(1)
}
