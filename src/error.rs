//! The one error type of the server. Its one conversion into a gRPC `Status` is the
//! gRPC layer's (`grpc/status.rs`); Redis failures are classified into it in
//! `redis/errors.rs`.
//!
//! Expected outcomes (a lock not acquired, a stale token) are values in the stores'
//! outcome enums, never an `Error`: an `Error` is something the caller must act on.

use std::fmt;

/// Something an RPC could not do, named by what the caller can do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The request is wrong; `field` is spelled as in the `.proto`.
    InvalidArgument {
        /// The request field at fault, e.g. `ttl`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Redis is unreachable or too slow; safe to retry (maybe on another replica).
    Unavailable(String),
    /// The server is shutting down; reconnect elsewhere.
    ShuttingDown,
    /// The stream's connection reached `--max-connection-age` and its grace; reconnect.
    ConnectionRetired,
    /// The caller's deadline passed while the call was waiting.
    DeadlineExceeded,
    /// A configured limit (`--max-streams`, `--max-waiters`) is reached.
    ResourceExhausted(String),
    /// No token, or one the auth file does not list (or no longer lists).
    Unauthenticated(String),
    /// The token is known but lacks the permission the RPC needs.
    PermissionDenied(String),
    /// The request contradicts the state it acts on (a semaphore's `limit` while its
    /// holders use another); `field` is spelled as in the `.proto`.
    FailedPrecondition {
        /// The request field at fault, e.g. `limit`.
        field: &'static str,
        /// What it contradicts.
        reason: String,
    },
    /// The named thing (a schedule) does not exist.
    NotFound(String),
    /// A bug or an unexpected reply: not the caller's fault.
    Internal(String),
}

/// Results of the server's own operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `INVALID_ARGUMENT` naming `field`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { field, reason }
            | Error::FailedPrecondition { field, reason } => write!(f, "{field}: {reason}"),
            Error::Unavailable(why) => write!(f, "redis unavailable: {why}"),
            Error::ShuttingDown => f.write_str("server is shutting down"),
            Error::ConnectionRetired => {
                f.write_str("the connection reached --max-connection-age; reconnect")
            }
            Error::DeadlineExceeded => f.write_str("deadline exceeded while waiting"),
            Error::ResourceExhausted(what) => f.write_str(what),
            Error::Unauthenticated(why) | Error::PermissionDenied(why) | Error::NotFound(why) => {
                f.write_str(why)
            }
            Error::Internal(why) => write!(f, "internal error: {why}"),
        }
    }
}

impl std::error::Error for Error {}
