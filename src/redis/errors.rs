//! The one classification of Redis failures: what kind of failure a `RedisError` is
//! (for `turnstile_redis_errors_total`), whether a client may retry it (UNAVAILABLE)
//! or our code is wrong (INTERNAL), and whether it shows a socket to be dead.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use crate::{
    error::Error,
    metrics::{Family, Kind, Metrics},
};

/// How a Redis command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No answer within `--redis-timeout` (or no connection from the pool in time).
    Timeout,
    /// Refused, dropped or broken connections.
    Connection,
    /// Redis answered that it cannot serve now (loading, busy script, failover,
    /// read-only).
    Busy,
    /// Anything else (a script error, an unexpected reply).
    Other,
}

impl ErrorKind {
    /// Every kind, in the metrics' order.
    pub const ALL: [ErrorKind; 4] = [Self::Timeout, Self::Connection, Self::Busy, Self::Other];

    /// The `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Busy => "busy",
            Self::Other => "other",
        }
    }

    /// Which kind `err` is. Everything about reaching Redis (a dropped or refused
    /// connection, a response timeout, a server still loading its AOF after a restart,
    /// a cluster mid-failover) is transient: the request may succeed on a retry. A
    /// script error or an unexpected reply type means our code is wrong.
    pub fn of(err: &redis::RedisError) -> Self {
        use redis::{ErrorKind as Redis, ServerErrorKind as Server};
        if err.is_timeout() {
            Self::Timeout
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
        {
            Self::Connection
        } else if err.code() == Some("BUSY")
            // A script running past `lua-time-limit` blocks every command: Redis is busy.
            || matches!(
                err.kind(),
                Redis::Server(
                    Server::BusyLoading
                        | Server::TryAgain
                        | Server::ClusterDown
                        | Server::MasterDown
                        | Server::ReadOnly
                )
            )
        {
            Self::Busy
        } else {
            Self::Other
        }
    }

    /// Whether a client may retry a call that failed so (UNAVAILABLE, which meshes
    /// retry), rather than INTERNAL, which nobody should retry blindly.
    pub fn is_transient(self) -> bool {
        self != Self::Other
    }
}

/// Whether `err` shows the socket it came on to be dead, so that a fresh one is taken:
/// a multiplexed connection does not reconnect by itself.
pub fn breaks_socket(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        if ErrorKind::of(&err).is_transient() {
            Error::Unavailable(err.to_string())
        } else {
            Error::Internal(err.to_string())
        }
    }
}

impl From<bb8::RunError<redis::RedisError>> for Error {
    /// A pool that cannot hand out a connection in time (`RunError::TimedOut`) is a
    /// Redis that is down or overloaded: UNAVAILABLE, like the error it hides.
    fn from(err: bb8::RunError<redis::RedisError>) -> Self {
        match err {
            bb8::RunError::User(err) => err.into(),
            bb8::RunError::TimedOut => Error::Unavailable("no redis connection in time".into()),
        }
    }
}

/// Failed commands by [`ErrorKind`], shared by every clone of a `Redis`.
#[derive(Clone, Debug, Default)]
pub struct ErrorCounts(Arc<[AtomicUsize; 4]>);

impl ErrorCounts {
    pub(super) fn add(&self, kind: ErrorKind) {
        self.0[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Failures of `kind` since start.
    pub fn get(&self, kind: ErrorKind) -> usize {
        self.0[kind as usize].load(Ordering::Relaxed)
    }

    /// Reports the counts as `turnstile_redis_errors_total{kind}`.
    pub fn register(&self, metrics: &Metrics) {
        let counts = self.clone();
        metrics.register(Family::new(
            "turnstile_redis_errors_total",
            Kind::Counter,
            "Failed Redis commands, by kind.",
            Box::new(move || {
                ErrorKind::ALL
                    .map(|kind| {
                        let labels = format!("kind=\"{}\"", kind.as_str());
                        (labels, counts.get(kind) as u64)
                    })
                    .into()
            }),
        ));
    }
}
