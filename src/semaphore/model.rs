//! What the semaphore store takes and answers: a validated [`SemaphoreSpec`] and the
//! outcomes. Plain data; a lease won is the locks' [`Won`](crate::lock::Won).

use std::time::Duration;

use crate::lock::Lease;

/// What a caller asks for when taking permits.
#[derive(Clone, Debug)]
pub struct SemaphoreSpec {
    /// The semaphore name (validated).
    pub name: String,
    /// Who takes the permits (validated).
    pub owner: String,
    /// The most permits held at once, as the caller states it (1..=MAX_LIMIT).
    pub limit: u32,
    /// How many permits (1..=limit).
    pub permits: u32,
    /// The lease length.
    pub ttl: Duration,
    /// How long to wait in line (zero: try once).
    pub wait: Duration,
    /// Retry key: the same owner + request_id gets the same lease back ('' for none).
    pub request_id: String,
}

/// Permits granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The holder's lease (token, fencing token, end).
    pub lease: Lease,
    /// The permits held now, this grant's included.
    pub in_use: u32,
    /// The semaphore's limit.
    pub limit: u32,
}

/// How an acquire ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SemaphoreOutcome {
    /// Granted.
    Acquired(Grant),
    /// Not granted (the call did not wait, or its `wait` ran out).
    Busy {
        /// The permits held now.
        in_use: u32,
        /// The semaphore's limit.
        limit: u32,
    },
}

/// One live holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemaphoreHolder {
    /// The owner that took the permits.
    pub owner: String,
    /// How many it holds.
    pub permits: u32,
    /// The fencing token of its grant.
    pub fencing_token: u64,
    /// End of its lease, Unix ms (Redis clock).
    pub expires_at_ms: i64,
}

/// What `Describe` saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemaphoreDescription {
    /// The limit last set (0 for a semaphore nobody used).
    pub limit: u32,
    /// The permits the live holders hold.
    pub in_use: u32,
    /// The live holders, soonest end first (at most [`super::MAX_LISTED`]).
    pub holders: Vec<SemaphoreHolder>,
    /// The waiters in line, over every server.
    pub waiting: u32,
}
