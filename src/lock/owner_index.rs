//! The owner index behind `ReleaseAll`, written by group commit (`redis::batch`). Each
//! owner has a sorted set of the lock names it may hold (score: lease end plus a slack,
//! Unix ms) in its own slot. A won lock is recorded before its Acquire answers, so a
//! ReleaseAll sent after it always sees it. Concurrent records share one pipeline, so a
//! busy server pays one Redis round trip per batch instead of one per Acquire, and an
//! idle one adds no delay. Only entries waiting for a write live here, never lock state.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use crate::{
    error::Result,
    redis::{batch::GroupCommit, Redis},
    time::now_ms,
};

/// The most entries one pipeline carries.
const MAX_BATCH: usize = 1000;
/// About one write in this many also drops the owner's ended entries. Entries ended are
/// harmless (ReleaseAll checks the owner of each name), so the set only needs trimming
/// often enough to stay small: an owner that takes ever new names keeps about this many
/// stale ones, and an idle owner's whole set expires with its last entry.
const PRUNE_EVERY: u64 = 8;

/// One name to record.
struct Entry {
    /// The owner's index key (`Keys::owner_locks`, built in the caller's tenant).
    index: String,
    name: String,
    until_ms: i64,
}

/// The group-commit writer of the owner index. One per `LockStore`.
pub(crate) struct OwnerIndex {
    redis: Redis,
    /// Entries waiting for the pipeline in flight (one batch for every owner).
    batches: Arc<GroupCommit<(), Entry, ()>>,
    /// Counts owner writes, to pick the ones that also prune.
    writes: Arc<AtomicU64>,
}

impl OwnerIndex {
    pub(crate) fn new(redis: Redis) -> Self {
        Self {
            redis,
            batches: GroupCommit::new(MAX_BATCH),
            writes: Arc::default(),
        }
    }

    /// Records in the owner index `index` (its key) that the owner may hold `name`
    /// until `until_ms`; returns once it is stored. Stored even if this caller goes
    /// away: an extra entry is harmless.
    pub(crate) async fn record(&self, index: String, name: &str, until_ms: i64) -> Result<()> {
        let entry = Entry {
            index,
            name: name.to_owned(),
            until_ms,
        };
        let (redis, writes) = (self.redis.clone(), self.writes.clone());
        self.batches
            .submit((), vec![entry], move |(), batch| {
                let (redis, writes) = (redis.clone(), writes.clone());
                async move {
                    redis.query_pipe(&pipeline(&batch, &writes)).await?;
                    Ok(vec![(); batch.len()])
                }
            })
            .await
            .map(|_| ())
    }
}

/// Per owner in the batch: one `ZADD GT` of all its names (a later end never moves
/// back), sometimes a trim of ended entries, and the set's expiry at its latest entry
/// (`NX` sets a first one, `GT` only raises it).
fn pipeline(batch: &[Entry], writes: &AtomicU64) -> redis::Pipeline {
    let mut owners: HashMap<&str, Vec<&Entry>> = HashMap::new();
    for entry in batch {
        owners.entry(&entry.index).or_default().push(entry);
    }
    let mut pipe = redis::pipe();
    let now = format!("({}", now_ms());
    for (key, entries) in owners {
        let zadd = pipe.cmd("ZADD").arg(key).arg("GT");
        for entry in &entries {
            zadd.arg(entry.until_ms).arg(&entry.name);
        }
        zadd.ignore();
        let write = writes.fetch_add(1, Ordering::Relaxed) + 1;
        if mix(write).is_multiple_of(PRUNE_EVERY) {
            pipe.cmd("ZREMRANGEBYSCORE")
                .arg(key)
                .arg("-inf")
                .arg(&now)
                .ignore();
        }
        let until = entries.iter().map(|e| e.until_ms).max().unwrap_or(0);
        pipe.cmd("PEXPIREAT").arg(key).arg(until).arg("NX").ignore();
        pipe.cmd("PEXPIREAT").arg(key).arg(until).arg("GT").ignore();
    }
    pipe
}

/// splitmix64's finalizer: spreads a counter's bits, so the owners picked to prune do
/// not follow the order in which owners write.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
