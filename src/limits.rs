//! The configured ceilings on open streams and waiting calls. A permit is held for as
//! long as the stream is open or the call waits; past the ceiling a call gets
//! RESOURCE_EXHAUSTED at once instead of queueing without bound.

use std::{sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// The longest `wait` of any call (`Acquire`, `Hold`, a long-poll `Lease`): 1 h.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Counters of open streams and waiting calls, shared by every service.
#[derive(Clone, Debug)]
pub struct Limits {
    /// One permit per open `Hold`/`Subscribe` stream (`--max-streams`).
    streams: Arc<Semaphore>,
    /// One permit per `Acquire`/`Hold` call waiting on a held lock (`--max-waiters`).
    waiters: Arc<Semaphore>,
    max_streams: usize,
    max_waiters: usize,
}

impl Limits {
    /// Ceilings of `max_streams` streams and `max_waiters` waiters.
    pub fn new(max_streams: usize, max_waiters: usize) -> Self {
        Self {
            streams: Arc::new(Semaphore::new(max_streams.min(Semaphore::MAX_PERMITS))),
            waiters: Arc::new(Semaphore::new(max_waiters.min(Semaphore::MAX_PERMITS))),
            max_streams,
            max_waiters,
        }
    }

    /// A permit for one more open stream, or RESOURCE_EXHAUSTED.
    pub fn open_stream(&self) -> Result<OwnedSemaphorePermit> {
        self.streams.clone().try_acquire_owned().map_err(|_| {
            Error::ResourceExhausted(format!(
                "too many open streams (--max-streams {})",
                self.max_streams
            ))
        })
    }

    /// A permit for one more waiting call, or RESOURCE_EXHAUSTED.
    pub fn start_waiting(&self) -> Result<OwnedSemaphorePermit> {
        self.waiters.clone().try_acquire_owned().map_err(|_| {
            Error::ResourceExhausted(format!(
                "too many waiting calls (--max-waiters {})",
                self.max_waiters
            ))
        })
    }

    /// How many calls wait now (for metrics).
    pub fn waiting(&self) -> usize {
        self.max_waiters.min(Semaphore::MAX_PERMITS) - self.waiters.available_permits()
    }
}
