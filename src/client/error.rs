//! The client's one error type: a non-OK status as the variant a caller acts on (with
//! the server's message, which names the field for INVALID_ARGUMENT), plus the two
//! outcomes SDK.md gives types of their own, [`Error::NotAcquired`] and
//! [`Error::LeaseLost`], a task a call waited for that failed ([`Error::TaskFailed`]),
//! and a bad setting found before any call.

use std::fmt;

use tonic::{Code, Status};

/// What went wrong in a client call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// INVALID_ARGUMENT: the message names the field (`name: must be 1–512 bytes …`).
    InvalidArgument(String),
    /// UNAUTHENTICATED: no token, or one the server does not know.
    Unauthenticated(String),
    /// PERMISSION_DENIED: the token may not do this.
    PermissionDenied(String),
    /// NOT_FOUND: no such schedule (or other named thing).
    NotFound(String),
    /// FAILED_PRECONDITION: the state does not allow it.
    FailedPrecondition(String),
    /// RESOURCE_EXHAUSTED: a server limit (waiters, streams, request size).
    ResourceExhausted(String),
    /// UNAVAILABLE, after retrying for as long as the call's deadline allowed.
    Unavailable(String),
    /// DEADLINE_EXCEEDED.
    DeadlineExceeded(String),
    /// Any other status.
    Status {
        /// The gRPC status code.
        code: Code,
        /// The server's message.
        message: String,
    },
    /// A lock or permits not acquired within the wait.
    NotAcquired {
        /// The lock or semaphore.
        name: String,
    },
    /// The lease is gone (see [`Lease::lost`](super::Lease::lost)).
    LeaseLost {
        /// The lock or semaphore.
        name: String,
        /// Why, as the server or the keeper said.
        reason: String,
    },
    /// A bad address, certificate or token, found before any call.
    Config(String),
    /// A task [`Queue::call`](super::Queue::call) waited for ended without a result:
    /// DEAD or cancelled.
    TaskFailed {
        /// The task.
        id: String,
        /// `DEAD` or `CANCELLED`.
        state: String,
        /// Why, as its last failed delivery's Nack said ('' when none did).
        last_error: String,
    },
}

/// A client call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The gRPC status code behind this error, if it came from a call.
    pub fn code(&self) -> Option<Code> {
        Some(match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::NotFound(_) => Code::NotFound,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Unavailable(_) => Code::Unavailable,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::Status { code, .. } => *code,
            Error::NotAcquired { .. }
            | Error::LeaseLost { .. }
            | Error::Config(_)
            | Error::TaskFailed { .. } => return None,
        })
    }
}

impl From<Status> for Error {
    fn from(status: Status) -> Self {
        let message = status.message().to_owned();
        match status.code() {
            Code::InvalidArgument => Error::InvalidArgument(message),
            Code::Unauthenticated => Error::Unauthenticated(message),
            Code::PermissionDenied => Error::PermissionDenied(message),
            Code::NotFound => Error::NotFound(message),
            Code::FailedPrecondition => Error::FailedPrecondition(message),
            Code::ResourceExhausted => Error::ResourceExhausted(message),
            Code::Unavailable => Error::Unavailable(message),
            Code::DeadlineExceeded => Error::DeadlineExceeded(message),
            code => Error::Status { code, message },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotAcquired { name } => write!(f, "{name}: not acquired within the wait"),
            Error::LeaseLost { name, reason } => write!(f, "{name}: lease lost: {reason}"),
            Error::Config(message) => f.write_str(message),
            Error::TaskFailed {
                id,
                state,
                last_error,
            } => write!(f, "task {id} ended {state}: {last_error}"),
            Error::InvalidArgument(message)
            | Error::Unauthenticated(message)
            | Error::PermissionDenied(message)
            | Error::NotFound(message)
            | Error::FailedPrecondition(message)
            | Error::ResourceExhausted(message)
            | Error::Unavailable(message)
            | Error::DeadlineExceeded(message)
            | Error::Status { message, .. } => {
                let code = self.code().unwrap_or(Code::Unknown);
                write!(f, "{}: {message}", crate::method::code_name(code as i32))
            }
        }
    }
}

impl std::error::Error for Error {}

/// A stream that failed with one of these will not succeed by opening it again; any
/// other failure of a long-lived stream (Hold, Subscribe, Watch) is a cut, and the
/// stream re-opens.
pub(crate) fn is_final(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::Unimplemented
            | Code::NotFound
    )
}
