//! The index of held locks behind `ListLocks`. The lock scripts keep it: a win adds the
//! name with its lease's end (and drops at most two names whose lease ended), a renewal
//! moves the end, a release removes the name; all in the same script as the lock, so no
//! crash can part the index from the locks, and a lease that just runs out is not
//! listed (its end is past). On one Redis the tenant has one index; on a cluster, one
//! per hash slot (`Keys::lock`), and this module records which slots a tenant uses, so
//! a listing reads only those.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use super::{Holder, LockStore};
use crate::{
    error::{Error, Result},
    redis::Redis,
    time::now_ms,
};

/// How long a replica trusts that a slot it registered is still in the tenant's set
/// (a failover may lose the write; registering again is one SADD).
const REREGISTER: Duration = Duration::from_secs(600);
/// How many of a listing's reads are in flight at once.
const IN_FLIGHT: usize = 256;

/// The slots this replica registered, by the tenant's set of slots.
#[derive(Debug, Default)]
pub(crate) struct SlotRegistry {
    seen: Mutex<HashMap<(String, u16), Instant>>,
}

impl SlotRegistry {
    /// Makes sure the tenant's set of slots holds `slot` (nothing on one Redis: `None`)
    /// before a lock on it can be won, so a listing never misses it.
    pub(crate) async fn register(&self, redis: &Redis, slot: Option<u16>) -> Result<()> {
        let Some(slot) = slot else {
            return Ok(());
        };
        let set = redis.keys.lock_slots();
        let key = (set, slot);
        let fresh = {
            let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            seen.get(&key).is_some_and(|at| at.elapsed() < REREGISTER)
        };
        if fresh {
            return Ok(());
        }
        let _: i64 = redis
            .query(redis::cmd("SADD").arg(&key.0).arg(slot))
            .await?;
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Instant::now());
        Ok(())
    }
}

/// One page of held locks.
#[derive(Debug)]
pub struct LockPage {
    /// The locks, by name, with their holders.
    pub locks: Vec<(String, Holder)>,
    /// Where the next page starts (after this name); `None` on the last page.
    pub next_after: Option<String>,
}

impl LockStore {
    /// The held locks whose name starts with `prefix`, by name, after `after`, at most
    /// `size`. Reads the names held from the index (one read per index: the tenant's,
    /// or each slot it uses on a cluster), then each listed lock's holder.
    pub async fn list(&self, prefix: &str, after: Option<&str>, size: usize) -> Result<LockPage> {
        let keys = &self.redis.keys;
        let indexes: Vec<String> = if keys.has_slot_indexes() {
            let slots: Vec<u16> = self
                .redis
                .query(redis::cmd("SMEMBERS").arg(keys.lock_slots()))
                .await?;
            slots
                .into_iter()
                .map(|slot| keys.lock_index(Some(slot)))
                .collect()
        } else {
            vec![keys.lock_index(None)]
        };
        let from = format!("({}", now_ms());
        let reads = indexes.into_iter().map(|index| {
            let (redis, from) = (self.redis.clone(), from.clone());
            async move {
                let names: Vec<String> = redis
                    .query(
                        redis::cmd("ZRANGE")
                            .arg(&index)
                            .arg(&from)
                            .arg("+inf")
                            .arg("BYSCORE"),
                    )
                    .await?;
                Ok(names)
            }
        });
        let mut names: Vec<String> = all(reads)
            .await?
            .into_iter()
            .flatten()
            .filter(|name| name.starts_with(prefix) && after.is_none_or(|after| **name > *after))
            .collect();
        names.sort_unstable();
        names.dedup();
        let more = names.len() > size;
        names.truncate(size);
        let next_after = more.then(|| names.last().cloned()).flatten();
        let looks = names.into_iter().map(|name| {
            let store = self.clone();
            async move {
                let seen = store.describe(&name, "").await?;
                Ok(seen.holder.map(|holder| (name, holder)))
            }
        });
        // A lock released since the index was read is left out.
        let locks = all(looks).await?.into_iter().flatten().collect();
        Ok(LockPage { locks, next_after })
    }
}

/// Runs `calls`, at most [`IN_FLIGHT`] at once; their answers in order, or the first
/// error.
async fn all<T, F>(calls: impl IntoIterator<Item = F>) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T>> + Send + 'static,
{
    let calls: Vec<F> = calls.into_iter().collect();
    let mut answers = Vec::with_capacity(calls.len());
    let mut calls = calls.into_iter().peekable();
    while calls.peek().is_some() {
        let mut running = tokio::task::JoinSet::new();
        for (at, call) in calls.by_ref().take(IN_FLIGHT).enumerate() {
            running.spawn(async move { call.await.map(|answer| (at, answer)) });
        }
        let mut chunk = Vec::with_capacity(running.len());
        while let Some(done) = running.join_next().await {
            chunk.push(done.map_err(|err| Error::Internal(format!("listing task: {err}")))??);
        }
        chunk.sort_unstable_by_key(|(at, _)| *at);
        answers.extend(chunk.into_iter().map(|(_, answer)| answer));
    }
    Ok(answers)
}
