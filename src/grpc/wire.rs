//! What a request meets before its handler runs: the protobuf codec of turnstile's
//! services and the ceiling on a request message's size. Both turn the caller's bad
//! input into the status gRPC clients expect, never INTERNAL or OUT_OF_RANGE:
//! - a request that does not decode (a string field that is not UTF-8, a truncated
//!   message) is INVALID_ARGUMENT naming the field, like every other bad field;
//! - a request message over `--max-message-size` is RESOURCE_EXHAUSTED (tonic answers
//!   OUT_OF_RANGE; gRPC's convention for a message over the receive limit is
//!   RESOURCE_EXHAUSTED), and tonic refuses it from its length prefix, before
//!   buffering it.

use std::{
    future::Future,
    marker::PhantomData,
    pin::Pin,
    task::{Context, Poll},
};

use prost::Message;
use tonic::{
    codec::{BufferSettings, DecodeBuf, Decoder},
    codegen::{http, Service},
    server::NamedService,
    Status,
};

/// prost's codec with [`RequestDecoder`] (build.rs names it as the services' codec).
/// The generated clients (the benchmark's, the tests') share it; for them a reply
/// that does not decode would read INVALID_ARGUMENT, which our server never sends.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// Decodes a message with prost; an error names the field it stopped at.
#[derive(Debug)]
pub struct RequestDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|err| undecodable(&err.to_string()))
    }
}

/// INVALID_ARGUMENT for a prost decode error, whose text reads
/// `failed to decode Protobuf message: TaskSpec.id: EnqueueRequest.tasks: <why>`
/// (innermost field first): the field path outermost first (`tasks.id`), as the
/// `.proto` spells it.
fn undecodable(text: &str) -> Status {
    let rest = text
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(text);
    let mut fields = Vec::new();
    let mut why = rest;
    while let Some((head, tail)) = why.split_once(": ") {
        match head.split_once('.') {
            Some((message, field)) if is_identifier(message) && is_identifier(field) => {
                fields.push(field);
                why = tail;
            }
            _ => break,
        }
    }
    fields.reverse();
    let field = if fields.is_empty() {
        "request".to_string()
    } else {
        fields.join(".")
    };
    let reason = if why.contains("UTF-8") {
        "must be valid UTF-8 (the bytes sent are not)".to_string()
    } else {
        format!("could not be decoded: {why}")
    };
    super::status::invalid_argument(&field, &reason)
}

fn is_identifier(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A service whose request-size refusals answer RESOURCE_EXHAUSTED, naming the
/// setting. tonic refuses an oversized request with OUT_OF_RANGE in the response
/// headers (a trailers-only response, before any handler runs); no handler of ours
/// answers OUT_OF_RANGE, so only that refusal is rewritten.
#[derive(Debug, Clone)]
pub struct SizeLimited<S>(pub S);

/// The start of tonic's message for a request over the receive limit.
const TOO_LARGE: &str = "Error, decoded message length too large";

impl<S, B> Service<http::Request<B>> for SizeLimited<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answer = self.0.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            let headers = response.headers_mut();
            // A successful call carries no grpc-status header (it comes in the
            // trailers); only an OUT_OF_RANGE one is decoded further.
            if headers.get("grpc-status").is_none_or(|code| code != "11") {
                return Ok(response);
            }
            let refused = Status::from_header_map(headers)
                .filter(|status| status.message().starts_with(TOO_LARGE));
            if let Some(refused) = refused {
                let detail = refused.message()[TOO_LARGE.len()..].trim_start_matches(": ");
                headers.remove("grpc-message");
                Status::resource_exhausted(format!(
                    "request message too large (--max-message-size): {detail}"
                ))
                .add_header(headers)
                .expect("a status is a valid header");
            }
            Ok(response)
        })
    }
}

impl<S: NamedService> NamedService for SizeLimited<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use super::undecodable;

    #[test]
    fn a_decode_error_names_the_field_outermost_first() {
        let status = undecodable(
            "failed to decode Protobuf message: TaskSpec.id: EnqueueRequest.tasks: invalid string value: data is not UTF-8 encoded",
        );
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "tasks.id: must be valid UTF-8 (the bytes sent are not)"
        );
        let status = undecodable("failed to decode Protobuf message: buffer underflow");
        assert_eq!(
            status.message(),
            "request: could not be decoded: buffer underflow"
        );
    }
}
