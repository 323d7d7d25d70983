//! Replica confirmation (`--redis-wait-replicas`): a `WAIT` sent after a write in the
//! same pipeline, and the check of its answer.

use std::time::Duration;

use crate::error::{Error, Result};

/// `--redis-wait-replicas`: how many replicas must confirm a write before its call
/// answers. Redis replicates asynchronously, so a primary that fails right after a
/// write may take it with it; `WAIT` after the write, on the same connection (it
/// counts that connection's writes), makes a confirmed write survive the failover of
/// its primary to a replica that confirmed it.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    pub(super) replicas: u32,
    /// How long `WAIT` may block: half the Redis timeout, so its answer (too few)
    /// arrives before the connection gives up on it.
    pub(super) timeout: Duration,
}

impl Wait {
    pub(super) fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(self.timeout.as_millis() as u64);
        cmd
    }

    /// The number of replicas in a `WAIT` reply.
    pub(super) fn confirmed(reply: &redis::Value) -> Option<i64> {
        match reply {
            redis::Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// UNAVAILABLE when fewer replicas confirmed than asked: the write happened on the
    /// primary, but a failover could lose it, so the caller is not told it is stored
    /// (every write can be retried: ids, request ids and receipts make retries safe).
    pub(super) fn check(&self, confirmed: i64) -> Result<()> {
        if confirmed >= i64::from(self.replicas) {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "the write was confirmed by {confirmed} of the {} replicas --redis-wait-replicas \
             asks for within {:?}; a failover may lose it, retry",
            self.replicas, self.timeout
        )))
    }
}
