//! The configured ceilings on open streams and waiting calls. A permit is held for as
//! long as the stream is open or the call waits; past the ceiling a call gets
//! RESOURCE_EXHAUSTED at once instead of queueing without bound.

use std::{sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// The longest `wait` of any call (`Acquire`, `Hold`, a long-poll `Lease`): 1 h.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The most first tries of waiting calls (`Acquire` and `Hold` with a wait, a
/// semaphore's) in flight at once; the others wait their turn in arrival order. A try's
/// script call holds memory only while it is in flight, but the allocator keeps the
/// pages that 5,000 tries at once left partly used: 5,000 waiting Acquires arriving
/// together cost the server 17-18 KB each, against 9 KB with at most 64 tries in flight
/// and 6-7 KB arriving paced (`bench idle`). 64 in flight still fill Redis' pipeline.
pub const FIRST_TRIES: usize = 64;

/// Counters of open streams and waiting calls, shared by every service.
#[derive(Clone, Debug)]
pub struct Limits {
    /// One permit per open `Hold`/`Subscribe` stream (`--max-streams`).
    streams: Arc<Semaphore>,
    /// One permit per `Acquire`/`Hold` call waiting on a held lock (`--max-waiters`).
    waiters: Arc<Semaphore>,
    /// One permit per waiting call's first try in flight ([`FIRST_TRIES`]).
    first_tries: Arc<Semaphore>,
    max_streams: usize,
    max_waiters: usize,
}

impl Limits {
    /// Ceilings of `max_streams` streams and `max_waiters` waiters.
    pub fn new(max_streams: usize, max_waiters: usize) -> Self {
        Self {
            streams: Arc::new(Semaphore::new(max_streams.min(Semaphore::MAX_PERMITS))),
            waiters: Arc::new(Semaphore::new(max_waiters.min(Semaphore::MAX_PERMITS))),
            first_tries: Arc::new(Semaphore::new(FIRST_TRIES)),
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

    /// A waiting call's turn for its first try (held until the try is answered): at most
    /// [`FIRST_TRIES`] at once, the others in arrival order (tokio's semaphore is fair).
    pub async fn first_try(&self) -> OwnedSemaphorePermit {
        // Never closed: `acquire_owned` fails only on a closed semaphore.
        self.first_tries
            .clone()
            .acquire_owned()
            .await
            .expect("the first-try semaphore is never closed")
    }

    /// How many waiting calls' first tries are in flight now (for metrics; at
    /// [`FIRST_TRIES`], later calls wait their turn).
    pub fn first_tries_in_flight(&self) -> usize {
        FIRST_TRIES - self.first_tries.available_permits()
    }

    /// How many calls wait now (for metrics).
    pub fn waiting(&self) -> usize {
        self.max_waiters.min(Semaphore::MAX_PERMITS) - self.waiters.available_permits()
    }
}
