//! The lock store's script calls: one method per script (keys, then arguments in the
//! order the script's header gives), the reply decoded by position. The acquire path,
//! which may wait, is in `acquire.rs`.

use std::time::Duration;

use super::{
    model::{generation_arg, AcquireOutcome, AcquireSpec, Description, Holder, Lease, Renewal},
    LockStore, INDEX_SLACK_MS,
};
use crate::{
    error::{Error, Result},
    redis::{keys::Event, reply},
    time::now_ms,
};

impl LockStore {
    /// One attempt to take the lock with `token`. Until `indexed` is set, the owner
    /// index entry (for ReleaseAll) is written alongside the script, not after it, so
    /// a won lock costs one round trip and no crash between a win and its entry can
    /// hide the lock: a waiting call writes it on its first try, covering any win
    /// within its wait plus the lease, and not again. An entry for a try that lost is
    /// harmless (ReleaseAll checks the owner). A win whose entry could not be written
    /// is given back, since ReleaseAll could not find it.
    pub(super) async fn try_acquire(
        &self,
        spec: &AcquireSpec,
        token: &str,
        will_wait: bool,
        indexed: &mut bool,
    ) -> Result<AcquireOutcome> {
        let keys = self.redis.keys.lock(&spec.name);
        let mut call = self.scripts.acquire.key(&keys.lock);
        call.key(&keys.fence)
            .key(&keys.watched)
            .key(&keys.index)
            .arg(token)
            .arg(&spec.owner)
            .arg(ttl_ms(spec.ttl))
            .arg(&spec.request_id)
            .arg(if will_wait { "1" } else { "0" })
            .arg(self.redis.keys.channel(Event::LockChanged))
            .arg(&spec.name);
        self.slots.register(&self.redis, keys.slot).await?;
        let attempt = if *indexed {
            self.redis.invoke_keyed(&keys.lock, &call).await
        } else {
            let wait = if will_wait { spec.wait } else { Duration::ZERO };
            let until = now_ms() + (wait + spec.ttl).as_millis() as i64 + INDEX_SLACK_MS;
            let (attempt, index) = tokio::join!(
                self.redis.invoke_keyed(&keys.lock, &call),
                self.index
                    .record(self.redis.keys.owner_locks(&spec.owner), &spec.name, until)
            );
            match index {
                Ok(()) => *indexed = true,
                Err(err) => {
                    tracing::debug!(lock = spec.name, cause = %err, "owner index not written")
                }
            }
            attempt
        };
        let (status, text, fencing_token, expires_at_ms): (i64, String, u64, i64) = attempt?;
        if status != 1 {
            return Ok(AcquireOutcome::Held(Holder {
                owner: text,
                fencing_token,
                expires_at_ms,
            }));
        }
        if !*indexed {
            self.give_back(&spec.name, &text).await;
            return Err(Error::Unavailable(
                "the lock was won but its ReleaseAll entry could not be written".into(),
            ));
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
        self.release_at(name, token, None).await
    }

    /// Frees the lock if `token` holds it at attach `generation` (`None`: any), so a
    /// Hold stream that was taken over by a re-attach cannot free its successor's lease.
    pub(super) async fn release_at(
        &self,
        name: &str,
        token: &str,
        generation: Option<u64>,
    ) -> Result<bool> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.release.key(&keys.lock);
        call.key(&keys.index)
            .arg(token)
            .arg(self.redis.keys.channel(Event::LockReleased))
            .arg(generation_arg(generation))
            .arg(name);
        let released: i64 = self.redis.invoke_keyed(&keys.lock, &call).await?;
        Ok(released == 1)
    }

    /// Resets the lease to `ttl` from now if `token` holds it; the new end (Unix ms).
    pub async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Option<i64>> {
        Ok(self
            .renew(name, token, ttl, None, false)
            .await?
            .expires_at_ms())
    }

    /// One script run of `extend.lua`: a renewal by a caller at attach `generation`
    /// (`None`: any), or with `take_over` a Hold re-attach, which moves the lease to
    /// the next generation. The owner index entry follows the new end of the lease.
    pub(super) async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        generation: Option<u64>,
        take_over: bool,
    ) -> Result<Renewal> {
        let keys = self.redis.keys.lock(name);
        let mut call = self.scripts.extend.key(&keys.lock);
        call.key(&keys.index)
            .arg(token)
            .arg(ttl_ms(ttl))
            .arg(generation_arg(generation))
            .arg(if take_over { "1" } else { "0" })
            .arg(name);
        let reply: Vec<redis::Value> = self.redis.invoke_keyed(&keys.lock, &call).await?;
        let (renewal, owner) = Renewal::from_reply(&reply, token)?;
        if let (Some(owner), Some(expires_at_ms)) = (owner, renewal.expires_at_ms()) {
            self.index
                .record(
                    self.redis.keys.owner_locks(&owner),
                    name,
                    expires_at_ms + INDEX_SLACK_MS,
                )
                .await?;
        }
        Ok(renewal)
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

    /// Whether `name` is held now under exactly `fencing_token`, and its holder: one
    /// read (`describe.lua`, read only).
    pub async fn check_fence(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<(bool, Option<Holder>)> {
        let seen = self.describe(name, "").await?;
        let current = seen
            .holder
            .as_ref()
            .is_some_and(|holder| holder.fencing_token == fencing_token);
        Ok((current, seen.holder))
    }

    /// Frees every lock `owner` holds; the names freed.
    pub async fn release_all(&self, owner: &str) -> Result<Vec<String>> {
        let index = self.redis.keys.owner_locks(owner);
        // An entry's score is its lease's end plus a slack (by a server's clock): one
        // below now cannot be held, so the cost follows the locks that may still be
        // held, not every name the owner ever took.
        let names: Vec<String> = self
            .redis
            .query(
                redis::cmd("ZRANGE")
                    .arg(&index)
                    .arg(now_ms())
                    .arg("+inf")
                    .arg("BYSCORE"),
            )
            .await?;
        let channel = self.redis.keys.channel(Event::LockReleased);
        let mut released = Vec::new();
        // Each name is its own slot, so each release is its own script; they run
        // concurrently, pipelined on the shared sockets, a bounded number at a time.
        for chunk in names.chunks(RELEASE_ALL_IN_FLIGHT) {
            let mut calls = tokio::task::JoinSet::new();
            for (at, name) in chunk.iter().enumerate() {
                let (store, owner, channel, name) = (
                    self.clone(),
                    owner.to_owned(),
                    channel.clone(),
                    name.clone(),
                );
                calls.spawn(async move {
                    let keys = store.redis.keys.lock(&name);
                    let mut call = store.scripts.release_owner.key(&keys.lock);
                    call.key(&keys.index).arg(&owner).arg(&channel).arg(&name);
                    let freed: Result<i64> = store.redis.invoke_keyed(&keys.lock, &call).await;
                    freed.map(|freed| (at, freed == 1))
                });
            }
            let mut freed = Vec::with_capacity(chunk.len());
            while let Some(done) = calls.join_next().await {
                let done = done.map_err(|err| Error::Internal(format!("release task: {err}")))?;
                freed.push(done?);
            }
            freed.sort_unstable();
            released.extend(
                freed
                    .into_iter()
                    .filter(|&(_, was_held)| was_held)
                    .map(|(at, _)| chunk[at].clone()),
            );
        }
        Ok(released)
    }
}

/// How many of a ReleaseAll's release scripts are in flight at once.
const RELEASE_ALL_IN_FLIGHT: usize = 1000;

fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}
