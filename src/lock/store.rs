//! The lock store's script calls: one method per script (keys, then arguments in the
//! order the script's header gives), the reply decoded by position. The acquire path,
//! which may wait, is in `acquire.rs`.

use std::time::Duration;

use super::{
    model::{AcquireOutcome, AcquireSpec, Description, Holder, Lease},
    LockStore, INDEX_SLACK_MS,
};
use crate::{error::Result, redis::reply, time::now_ms};

impl LockStore {
    /// One attempt to take the lock with `token`.
    pub(super) async fn try_acquire(
        &self,
        spec: &AcquireSpec,
        token: &str,
        will_wait: bool,
    ) -> Result<AcquireOutcome> {
        let keys = self.redis.keys.lock(&spec.name);
        let mut call = self.scripts.acquire.key(&keys.lock);
        call.key(&keys.fence)
            .arg(token)
            .arg(&spec.owner)
            .arg(ttl_ms(spec.ttl))
            .arg(&spec.request_id)
            .arg(if will_wait { "1" } else { "0" });
        // The owner index (for ReleaseAll): a try-once call writes it alongside the
        // script, not after, so a won lock costs one round trip; an entry for a try
        // that lost is harmless, as ReleaseAll checks the owner. A waiting call, whose
        // tries mostly lose, writes it only once it has won.
        let until = now_ms() + ttl_ms(spec.ttl) as i64 + INDEX_SLACK_MS;
        let (attempt, indexed) = if will_wait {
            (self.redis.invoke_keyed(&keys.lock, &call).await, None)
        } else {
            let (attempt, indexed) = tokio::join!(
                self.redis.invoke_keyed(&keys.lock, &call),
                self.index.record(&spec.owner, &spec.name, until)
            );
            (attempt, Some(indexed))
        };
        let (status, text, fencing_token, expires_at_ms): (i64, String, u64, i64) = attempt?;
        if status != 1 {
            return Ok(AcquireOutcome::Held(Holder {
                owner: text,
                fencing_token,
                expires_at_ms,
            }));
        }
        let indexed = match indexed {
            Some(indexed) => indexed,
            None if text == token => self.index.record(&spec.owner, &spec.name, until).await,
            None => Ok(()),
        };
        if let Err(err) = indexed {
            // Not answered as won, so not left held: ReleaseAll could not find it.
            self.give_back(&spec.name, &text).await;
            return Err(err);
        }
        let lease = Lease {
            token: text,
            fencing_token,
            expires_at_ms,
        };
        Ok(AcquireOutcome::Acquired(lease))
    }

    /// Releases a lease nobody will use; failures are logged (it expires anyway).
    pub(super) async fn give_back(&self, name: &str, token: &str) {
        if let Err(err) = self.release(name, token).await {
            tracing::warn!(lock = name, cause = %err, "could not give back an unused lock; it expires with its ttl");
        }
    }

    /// Frees the lock if `token` holds it.
    pub async fn release(&self, name: &str, token: &str) -> Result<bool> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.release.key(&keys.lock);
        call.arg(token).arg(self.redis.keys.lock_released_channel());
        let released: i64 = self.redis.invoke_keyed(&keys.lock, &call).await?;
        Ok(released == 1)
    }

    /// Resets the lease to `ttl` from now if `token` holds it; the new end (Unix ms).
    pub async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Option<i64>> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.extend.key(&keys.lock);
        call.arg(token).arg(ttl_ms(ttl));
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(&keys.lock, &call).await?;
        if reply::int(&reply, 0)? != 1 {
            return Ok(None);
        }
        let expires_at_ms = reply::int(&reply, 1)?;
        let owner = reply::string(&reply, 2)?;
        self.index
            .record(&owner, name, expires_at_ms + INDEX_SLACK_MS)
            .await?;
        Ok(Some(expires_at_ms))
    }

    /// Who holds the lock, and whether `token` ('' for none) is the holder's.
    pub async fn describe(&self, name: &str, token: &str) -> Result<Description> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.describe.key(&keys.lock);
        call.arg(token);
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(&keys.lock, &call).await?;
        if reply::int(&reply, 0)? != 1 {
            return Ok(Description {
                holder: None,
                held_by_token: false,
            });
        }
        let holder = Holder {
            owner: reply::string(&reply, 1)?,
            fencing_token: reply::int(&reply, 2)? as u64,
            expires_at_ms: reply::int(&reply, 3)?,
        };
        Ok(Description {
            holder: Some(holder),
            held_by_token: reply::int(&reply, 4)? == 1,
        })
    }

    /// Frees every lock `owner` holds; the names freed.
    pub async fn release_all(&self, owner: &str) -> Result<Vec<String>> {
        let index = self.redis.keys.owner_locks(owner);
        let names: Vec<String> = self
            .redis
            .query(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let channel = self.redis.keys.lock_released_channel();
        let mut released = Vec::new();
        // Each name is its own slot, so each release is its own script.
        for name in names {
            let keys = self.redis.keys.lock(&name);
            let mut call = self.scripts.release_owner.key(&keys.lock);
            call.arg(owner).arg(&channel);
            let freed: i64 = self.redis.invoke_keyed(&keys.lock, &call).await?;
            if freed == 1 {
                released.push(name);
            }
        }
        Ok(released)
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}
