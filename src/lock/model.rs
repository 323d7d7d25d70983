//! What the lock store takes and answers: a validated `AcquireSpec`, and the
//! outcomes (`Lease`, `Holder`, `AcquireOutcome`, `Won`, `Description`). Plain data,
//! except [`Won`], which gives its lease back unless claimed.

use std::{future::Future, time::Duration};

use tokio::{sync::OwnedSemaphorePermit, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    error::Result,
    limits::Limits,
    redis::reply,
    shutdown::{Shutdown, Unclaimed},
};

/// What a caller asks for when taking a lock.
#[derive(Clone, Debug)]
pub struct AcquireSpec {
    /// The lock name (validated).
    pub name: String,
    /// Who takes it (validated).
    pub owner: String,
    /// The lease length.
    pub ttl: Duration,
    /// How long to wait for a held lock (zero: try once).
    pub wait: Duration,
    /// Retry key: the same owner + request_id gets the same lease back ('' for none).
    pub request_id: String,
}

/// One lease of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The owner token: proves the holder in Release/Extend.
    pub token: String,
    /// Strictly increasing per name.
    pub fencing_token: u64,
    /// End of the lease, Unix ms (Redis clock).
    pub expires_at_ms: i64,
}

/// Who holds a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The owner that took it.
    pub owner: String,
    /// The fencing token of its lease.
    pub fencing_token: u64,
    /// End of its lease, Unix ms (Redis clock).
    pub expires_at_ms: i64,
}

/// How a renewal (`extend.lua`) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease runs on, at this attach generation (0 until a Hold re-attached).
    Renewed {
        /// The lease with its new end.
        lease: Lease,
        /// Its attach generation after this call.
        generation: u64,
    },
    /// The token does not hold the lock (released, expired, taken).
    NotHeld,
    /// The token holds it, but a later Hold stream re-attached and owns it now.
    TakenOver,
}

impl Renewal {
    /// The reply of an `extend.lua` (a lock's or a semaphore's: `{1, expires_at_ms,
    /// owner, fencing, generation}`, `{0}` not held, `{2}` taken over) for `token`; with
    /// the owner when renewed.
    pub fn from_reply(reply: &[redis::Value], token: &str) -> Result<(Self, Option<String>)> {
        Ok(match reply::int(reply, 0)? {
            1 => (
                Renewal::Renewed {
                    lease: Lease {
                        token: token.to_owned(),
                        fencing_token: reply::int(reply, 3)? as u64,
                        expires_at_ms: reply::int(reply, 1)?,
                    },
                    generation: reply::int(reply, 4)? as u64,
                },
                Some(reply::string(reply, 2)?),
            ),
            2 => (Renewal::TakenOver, None),
            _ => (Renewal::NotHeld, None),
        })
    }

    /// The new end of the lease (Unix ms), if renewed: what the unary `Extend` answers.
    pub fn expires_at_ms(&self) -> Option<i64> {
        match self {
            Renewal::Renewed { lease, .. } => Some(lease.expires_at_ms),
            Renewal::NotHeld | Renewal::TakenOver => None,
        }
    }
}

/// The attach generation as the `extend.lua` and `release.lua` scripts take it ('' for
/// any: the unary calls).
pub fn generation_arg(generation: Option<u64>) -> String {
    generation.map(|g| g.to_string()).unwrap_or_default()
}

/// How an acquire attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The caller holds the lock.
    Acquired(Lease),
    /// Someone else holds it (and the caller did not wait, or its `wait` ran out).
    Held(Holder),
}

/// A lease won for a caller that has not taken it yet. Dropped unclaimed (the caller
/// left, or gave up while the script was in flight), it gives the lock back.
pub type Won = Unclaimed<Lease>;

/// How a waiting acquire ended, before its caller took the lease.
#[derive(Debug)]
pub enum Attempt {
    /// Won, not yet claimed.
    Won(Won),
    /// Someone else holds it (the call did not wait, or its `wait` ran out).
    Held(Holder),
}

/// What `Describe` saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// The holder, if the lock is held.
    pub holder: Option<Holder>,
    /// Whether the given token is the holder's.
    pub held_by_token: bool,
}

/// When a waiting acquire stops early.
#[derive(Clone, Debug)]
pub struct Stop {
    /// The caller's deadline, minus a margin (`DEADLINE_EXCEEDED` after it).
    pub deadline: Option<Instant>,
    /// Cancelled when the caller left or the server shuts down.
    pub cancel: CancellationToken,
}

impl Stop {
    /// A waiting call's turn for its first try (`limits::FIRST_TRIES`), held until the
    /// try is answered; none for a later try or a call that does not wait.
    pub async fn first_try(
        &self,
        first: bool,
        limits: &Limits,
        shutdown: &Shutdown,
    ) -> Result<Option<OwnedSemaphorePermit>> {
        if !first {
            return Ok(None);
        }
        self.until(limits.first_try(), shutdown).await.map(Some)
    }

    /// `turn`, unless the caller leaves, the server shuts down or the deadline passes
    /// first (then why, as [`Stop::error`]).
    async fn until<T>(&self, turn: impl Future<Output = T>, shutdown: &Shutdown) -> Result<T> {
        let deadline = async {
            match self.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            done = turn => Ok(done),
            () = self.cancel.cancelled() => Err(self.error(shutdown.is_triggered())),
            () = deadline => Err(self.error(shutdown.is_triggered())),
        }
    }

    /// Why a wait stopped: the server shutting down, the deadline, or the caller gone.
    pub fn error(&self, shutting_down: bool) -> crate::error::Error {
        use crate::error::Error;
        if shutting_down {
            Error::ShuttingDown
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Error::DeadlineExceeded
        } else {
            // The caller left; nobody reads this.
            Error::Internal("caller went away".into())
        }
    }
}
