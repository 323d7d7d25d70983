//! The one conversion of an [`Error`] into a gRPC `Status`, with the richer error
//! model's `google.rpc.BadRequest` for bad input.

use tonic::{Code, Status};

use crate::error::Error;

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
            Error::NotFound(_) => Code::NotFound,
            Error::FailedPrecondition { .. } => Code::FailedPrecondition,
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
