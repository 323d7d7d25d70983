//! What a request meets before its handler runs: the protobuf codec of turnstile's
//! services and the ceiling on a request message's size. Both turn the caller's bad
//! input into the status gRPC clients expect, never INTERNAL or OUT_OF_RANGE:
//! - a request that does not decode (a string field that is not UTF-8, a truncated
//!   message) is INVALID_ARGUMENT naming the field, like every other bad field;
//! - a request message over `--max-message-size` is RESOURCE_EXHAUSTED (tonic answers
//!   OUT_OF_RANGE; gRPC's convention for a message over the receive limit is
//!   RESOURCE_EXHAUSTED), and tonic refuses it from its length prefix, before
//!   buffering it.
//!
//! The codec's encoder ([`ReplyEncoder`]) also decides how much memory a stream's
//! encode buffer holds while the stream is quiet.

use std::{
    future::Future,
    marker::PhantomData,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use prost::{bytes::BufMut, Message};
use tonic::{
    codec::{BufferSettings, DecodeBuf, Decoder, EncodeBuf, Encoder},
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
    type Encoder = ReplyEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReplyEncoder {
            block: FIRST_BLOCK,
            grown: None,
            message: PhantomData,
        }
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// The first block a response's encode buffer gets: a unary answer or a stream's first
/// messages.
const FIRST_BLOCK: usize = 256;
/// The largest block: tonic's default buffer, for a stream that sends fast.
const LAST_BLOCK: usize = 8 * 1024;
/// A stream that fills its block again within this time gets one twice as large; one
/// that took longer gets one half as large.
const RAMP: Duration = Duration::from_secs(1);
/// tonic's default: encoded messages are handed to HTTP/2 once this many bytes wait.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// Encodes a message with prost into tonic's encode buffer, which starts empty and
/// grows in blocks sized to the stream's pace.
///
/// tonic allocates its default 8 KiB buffer when a response starts and keeps the part
/// not yet written to for as long as the stream lives (each message is split off the
/// front). Measured with heaptrack under `bench idle` (2026-11-27), that was 8.2 KB of
/// the 13 KB a quiet Subscribe stream held. A fixed 1 KiB buffer saved it but cost the
/// batched queue 12% (a busy stream allocates again every few messages). So a block is
/// allocated only when a message does not fit: 256 bytes at first, twice as large when
/// the last block filled within [`RAMP`] (a busy stream reaches 8 KiB after five
/// blocks), half as large when it took longer (a quiet stream, whose heartbeats come
/// every 15 s, stays at 256 bytes).
#[derive(Debug)]
pub struct ReplyEncoder<T> {
    /// The size of the next block.
    block: usize,
    /// When the last block was allocated.
    grown: Option<Instant>,
    message: PhantomData<T>,
}

impl<T> ReplyEncoder<T> {
    /// The size of the block to allocate now, from the pace of the last one.
    fn next_block(&mut self) -> usize {
        let now = Instant::now();
        if let Some(grown) = self.grown {
            self.block = if now.duration_since(grown) < RAMP {
                (self.block * 2).min(LAST_BLOCK)
            } else {
                (self.block / 2).max(FIRST_BLOCK)
            };
        }
        self.grown = Some(now);
        self.block
    }
}

impl<T: Message> Encoder for ReplyEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        let len = item.encoded_len();
        // The room left in the block (tonic wrote the message's 5-byte header first).
        if buf.chunk_mut().len() < len {
            let block = self.next_block();
            buf.reserve(len.max(block));
        }
        item.encode(buf)
            .map_err(|err| Status::internal(format!("encoding a reply: {err}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        // Nothing is allocated before the first message.
        BufferSettings::new(0, YIELD_THRESHOLD)
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
    use std::{
        marker::PhantomData,
        time::{Duration, Instant},
    };

    use super::{undecodable, ReplyEncoder, FIRST_BLOCK, LAST_BLOCK, RAMP};

    #[test]
    fn a_busy_stream_s_blocks_grow_to_the_last_and_a_quiet_one_s_shrink() {
        let mut encoder = ReplyEncoder::<()> {
            block: FIRST_BLOCK,
            grown: None,
            message: PhantomData,
        };
        // One after another: 256, 512, … up to 8 KiB, never more.
        let sizes: Vec<usize> = (0..8).map(|_| encoder.next_block()).collect();
        assert_eq!(sizes, [256, 512, 1024, 2048, 4096, 8192, 8192, 8192]);
        assert_eq!(*sizes.last().unwrap(), LAST_BLOCK);
        // A block that lasted longer than RAMP: half as large next time.
        let long_ago = Instant::now() - RAMP - Duration::from_millis(10);
        encoder.grown = Some(long_ago);
        assert_eq!(encoder.next_block(), 4096);
        for _ in 0..10 {
            encoder.grown = Some(long_ago);
            encoder.next_block();
        }
        assert_eq!(encoder.block, FIRST_BLOCK);
    }

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
