//! Bad input, seeded (issue 43): every RPC of the four services is sent messages built
//! from its own descriptor (the server's reflection set), each field's value plausible
//! or hostile (empty, huge, negative, a wrong wire type, invalid UTF-8, unknown fields,
//! nested messages gone wrong), and byte-level mutations of them (truncated, flipped,
//! spliced). The contract allows only OK or the status codes it names; never INTERNAL
//! or UNKNOWN, and the server keeps answering. `TURNSTILE_FUZZ_SEED` replays a run.

use crate::common;

use std::time::Duration;

use common::{ledger::Rng, TestRedis, TestResult, TestServer};
use prost::{bytes::BufMut, Message};
use prost_types::{
    field_descriptor_proto::{Label, Type},
    DescriptorProto, FileDescriptorSet,
};
use tonic::{codegen::http::uri::PathAndQuery, Code};

/// Calls per RPC.
const CALLS: usize = 60;

/// The codes a call may end with (the contract's; UNAVAILABLE only if the server is
/// shutting down, which it is not here).
const ALLOWED: [Code; 8] = [
    Code::Ok,
    Code::InvalidArgument,
    Code::NotFound,
    Code::FailedPrecondition,
    Code::AlreadyExists,
    Code::ResourceExhausted,
    Code::DeadlineExceeded,
    Code::OutOfRange,
];

/// A message given as its encoded bytes, sent as they are.
#[derive(Clone, Debug, Default)]
struct Raw(Vec<u8>);

impl Message for Raw {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Every message type of the set, by its full name (`.turnstile.v1.AcquireRequest`).
struct Schema(Vec<(String, DescriptorProto)>);

impl Schema {
    fn load() -> Self {
        let set = FileDescriptorSet::decode(turnstile::pb::FILE_DESCRIPTOR_SET)
            .expect("the descriptor set");
        let mut all = Vec::new();
        for file in &set.file {
            let package = file.package();
            for message in &file.message_type {
                collect(&format!(".{package}"), message, &mut all);
            }
        }
        Self(all)
    }

    fn message(&self, name: &str) -> Option<&DescriptorProto> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }
}

fn collect(scope: &str, message: &DescriptorProto, all: &mut Vec<(String, DescriptorProto)>) {
    let name = format!("{scope}.{}", message.name());
    for nested in &message.nested_type {
        collect(&name, nested, all);
    }
    all.push((name, message.clone()));
}

/// A string or bytes value: a plausible name, or (`hostile`) anything.
fn string_value(rng: &mut Rng, hostile: bool) -> Vec<u8> {
    match if hostile { rng.below(10) } else { 9 } {
        0 => Vec::new(),
        1 => vec![b'x'; [256, 257, 512, 513, 5000][rng.below(5) as usize]],
        2 => b"caf\xe9".to_vec(),
        3 => b"a\nb\x7f".to_vec(),
        4 => (0..rng.below(40)).map(|_| rng.below(256) as u8).collect(),
        5 => b"t1.zz".to_vec(),
        _ => ["q", "a", "lock", "LockRoom:{42}", "owner", "g", "s"][rng.below(7) as usize]
            .as_bytes()
            .to_vec(),
    }
}

/// A varint value: small, or (`hostile`) anything from 0 to the extremes.
fn varint_value(rng: &mut Rng, hostile: bool) -> u64 {
    if !hostile {
        return rng.below(5);
    }
    match rng.below(8) {
        0 => 0,
        1 => u64::MAX,
        2 => (-1i64) as u64,
        3 => u32::MAX as u64,
        4 => 1 << 31,
        _ => rng.below(2000),
    }
}

/// A random value of `message` (nested up to `depth`), plausible or `hostile`.
fn message_bytes(
    schema: &Schema,
    message: &DescriptorProto,
    rng: &mut Rng,
    depth: u32,
    hostile: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    for field in &message.field {
        if rng.below(3) == 0 {
            continue;
        }
        let repeats = if field.label() == Label::Repeated {
            rng.below(4)
        } else {
            1
        };
        for _ in 0..repeats {
            let number = field.number() as u32;
            // A 64-bit value whatever the field's type, now and then (a wrong wire
            // type for most fields).
            if hostile && rng.below(25) == 0 {
                prost::encoding::encode_key(
                    number,
                    prost::encoding::WireType::SixtyFourBit,
                    &mut out,
                );
                out.put_u64_le(rng.next());
                continue;
            }
            match field.r#type() {
                Type::String | Type::Bytes => {
                    prost::encoding::bytes::encode(number, &string_value(rng, hostile), &mut out)
                }
                Type::Message if depth > 0 => {
                    let inner = schema
                        .message(field.type_name())
                        .map(|m| message_bytes(schema, m, rng, depth - 1, hostile))
                        .unwrap_or_default();
                    prost::encoding::bytes::encode(number, &inner, &mut out);
                }
                Type::Message => {}
                Type::Double | Type::Fixed64 | Type::Sfixed64 => {
                    prost::encoding::encode_key(
                        number,
                        prost::encoding::WireType::SixtyFourBit,
                        &mut out,
                    );
                    out.put_u64_le(rng.next());
                }
                Type::Float | Type::Fixed32 | Type::Sfixed32 => {
                    prost::encoding::encode_key(
                        number,
                        prost::encoding::WireType::ThirtyTwoBit,
                        &mut out,
                    );
                    out.put_u32_le(rng.next() as u32);
                }
                _ => {
                    prost::encoding::encode_key(
                        number,
                        prost::encoding::WireType::Varint,
                        &mut out,
                    );
                    prost::encoding::encode_varint(varint_value(rng, hostile), &mut out);
                }
            }
        }
    }
    // An unknown field now and then.
    if hostile && rng.below(10) == 0 {
        prost::encoding::uint64::encode(900 + rng.below(50) as u32, &rng.next(), &mut out);
    }
    out
}

/// Byte-level damage: truncated, a byte flipped, or random bytes spliced in.
fn mutate(mut bytes: Vec<u8>, rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 if !bytes.is_empty() => bytes.truncate(rng.below(bytes.len() as u64) as usize),
        1 if !bytes.is_empty() => {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        2 => {
            let at = rng.below(bytes.len() as u64 + 1) as usize;
            let junk: Vec<u8> = (0..1 + rng.below(8))
                .map(|_| rng.below(256) as u8)
                .collect();
            bytes.splice(at..at, junk);
        }
        _ => {}
    }
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_messages_to_every_rpc_get_only_the_contract_s_codes() -> TestResult {
    let seed = common::ledger::seed_from("TURNSTILE_FUZZ_SEED");
    let mut rng = Rng(seed);
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let schema = Schema::load();
    let set = FileDescriptorSet::decode(turnstile::pb::FILE_DESCRIPTOR_SET)?;
    let mut calls = 0;
    for file in &set.file {
        for service in &file.service {
            for method in &service.method {
                let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                let input = schema
                    .message(method.input_type())
                    .unwrap_or_else(|| panic!("no message {}", method.input_type()));
                for _ in 0..CALLS {
                    // A third hostile, a sixth of those damaged byte by byte too.
                    let hostile = rng.below(3) == 0;
                    let mut bytes = message_bytes(&schema, input, &mut rng, 3, hostile);
                    if hostile && rng.below(2) == 0 {
                        bytes = mutate(bytes, &mut rng);
                    }
                    let code = call(&server, &path, bytes.clone(), method.server_streaming()).await;
                    assert!(
                        ALLOWED.contains(&code),
                        "{path} answered {code:?} to {bytes:?} (TURNSTILE_FUZZ_SEED={seed})"
                    );
                    calls += 1;
                }
            }
        }
    }
    assert!(calls >= 35 * CALLS, "only {calls} calls: RPCs went missing");
    // And it still serves.
    let alive = call(
        &server,
        "/turnstile.v1.QueueService/Stats",
        b"\x0a\x01q".to_vec(),
        false,
    )
    .await;
    assert_eq!(alive, Code::Ok);
    Ok(())
}

/// One call with `bytes` as its request: its status code (a stream's, from its first
/// message or its end; a stream still open after a short while counts as OK).
async fn call(server: &TestServer, path: &str, bytes: Vec<u8>, streaming: bool) -> Code {
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("ready");
    let path = PathAndQuery::try_from(path).expect("a path");
    let codec = tonic_prost::ProstCodec::<Raw, ()>::default();
    let mut request = tonic::Request::new(Raw(bytes));
    // Waiting calls (a Lease with a wait, an Acquire on a held lock) end in time.
    request.set_timeout(Duration::from_secs(2));
    if !streaming {
        return match grpc.unary(request, path, codec).await {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        };
    }
    match grpc.server_streaming(request, path, codec).await {
        Err(status) => status.code(),
        Ok(response) => {
            let mut stream = response.into_inner();
            match tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
                Ok(Err(status)) => status.code(),
                _ => Code::Ok,
            }
        }
    }
}
