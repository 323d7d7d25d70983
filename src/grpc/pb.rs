//! The generated protobuf and gRPC code of `proto/turnstile/v1`, and the descriptor set
//! that server reflection serves. Nothing here is written by hand.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("turnstile.v1");

/// The encoded `FileDescriptorSet` of every turnstile proto file (for reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/turnstile_descriptor.bin"));
