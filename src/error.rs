//! The one error type of the server and its one conversion into a gRPC `Status`.
//!
//! Expected outcomes (a lock not acquired, a stale token) are values in the stores'
//! outcome enums, never an `Error`: an `Error` is something the caller must act on.

use std::fmt;

use tonic::{Code, Status};

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
            Error::InvalidArgument { field, reason } => write!(f, "{field}: {reason}"),
            Error::Unavailable(why) => write!(f, "redis unavailable: {why}"),
            Error::ShuttingDown => f.write_str("server is shutting down"),
            Error::ConnectionRetired => {
                f.write_str("the connection reached --max-connection-age; reconnect")
            }
            Error::DeadlineExceeded => f.write_str("deadline exceeded while waiting"),
            Error::ResourceExhausted(what) => f.write_str(what),
            Error::Unauthenticated(why) | Error::PermissionDenied(why) => f.write_str(why),
            Error::Internal(why) => write!(f, "internal error: {why}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let code = match &err {
            Error::InvalidArgument { .. } => Code::InvalidArgument,
            Error::Unavailable(_) | Error::ShuttingDown | Error::ConnectionRetired => {
                Code::Unavailable
            }
            Error::DeadlineExceeded => Code::DeadlineExceeded,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::Internal(_) => Code::Internal,
        };
        let message = err.to_string();
        match err {
            Error::InvalidArgument { field, reason } => invalid_argument(field, &reason),
            _ => Status::new(code, message),
        }
    }
}

/// INVALID_ARGUMENT whose message starts with `field`; the field also goes in a
/// google.rpc.BadRequest, for clients that read the richer error model instead of
/// parsing the message.
pub fn invalid_argument(field: &str, reason: &str) -> Status {
    let code = Code::InvalidArgument;
    let message = format!("{field}: {reason}");
    let details = rich::bad_request(code, &message, field, reason);
    Status::with_details(code, message, details.into())
}

/// The google.rpc error details we send, as prost messages (the few fields we use of
/// `google/rpc/status.proto` and `error_details.proto`).
pub mod rich {
    use prost::Message;

    /// `google.rpc.Status`: what `grpc-status-details-bin` carries.
    #[derive(Clone, PartialEq, Message)]
    pub struct RpcStatus {
        /// The gRPC code.
        #[prost(int32, tag = "1")]
        pub code: i32,
        /// The same message as the status.
        #[prost(string, tag = "2")]
        pub message: String,
        /// Typed details.
        #[prost(message, repeated, tag = "3")]
        pub details: Vec<prost_types::Any>,
    }

    /// `google.rpc.BadRequest`.
    #[derive(Clone, PartialEq, Message)]
    pub struct BadRequest {
        /// One per field at fault.
        #[prost(message, repeated, tag = "1")]
        pub field_violations: Vec<FieldViolation>,
    }

    /// `google.rpc.BadRequest.FieldViolation`.
    #[derive(Clone, PartialEq, Message)]
    pub struct FieldViolation {
        /// The field, as the `.proto` spells it.
        #[prost(string, tag = "1")]
        pub field: String,
        /// What is wrong with it.
        #[prost(string, tag = "2")]
        pub description: String,
    }

    /// The type URL of [`BadRequest`] in an `Any`.
    pub const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";

    /// An encoded `google.rpc.Status` with one `BadRequest` naming `field`.
    pub fn bad_request(code: tonic::Code, message: &str, field: &str, reason: &str) -> Vec<u8> {
        let bad = BadRequest {
            field_violations: vec![FieldViolation {
                field: field.to_owned(),
                description: reason.to_owned(),
            }],
        };
        RpcStatus {
            code: code as i32,
            message: message.to_owned(),
            details: vec![prost_types::Any {
                type_url: BAD_REQUEST_TYPE.to_owned(),
                value: bad.encode_to_vec(),
            }],
        }
        .encode_to_vec()
    }
}

impl From<redis::RedisError> for Error {
    /// Which Redis failures a client may retry. Everything about reaching Redis (a
    /// dropped or refused connection, a response timeout, a server still loading its
    /// AOF after a restart, a cluster mid-failover) is UNAVAILABLE: the request may
    /// succeed on a retry and the mesh retries it. A script error or an unexpected reply
    /// type means our code is wrong: INTERNAL, which nobody should retry blindly.
    fn from(err: redis::RedisError) -> Self {
        use redis::ErrorKind;
        let transient = err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_timeout()
            || err.is_unrecoverable_error()
            // A script running past `lua-time-limit` blocks every command: Redis is busy.
            || err.code() == Some("BUSY")
            || matches!(
                err.kind(),
                ErrorKind::Server(
                    redis::ServerErrorKind::BusyLoading
                        | redis::ServerErrorKind::TryAgain
                        | redis::ServerErrorKind::ClusterDown
                        | redis::ServerErrorKind::MasterDown
                        | redis::ServerErrorKind::ReadOnly
                )
            );
        if transient {
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

/// The status name as gRPC spells it (`UNAVAILABLE`), as grpcurl and the other
/// languages' clients print it (the CLI's errors, the metrics' `code` label).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
