//! Compiles `proto/` with protox (pure Rust, so a fresh machine needs no `protoc`) and
//! generates the tonic services, plus the descriptor set that server reflection serves.

use std::{env, path::PathBuf};

use prost::Message;

const PROTOS: [&str; 3] = [
    "proto/turnstile/v1/common.proto",
    "proto/turnstile/v1/lock.proto",
    "proto/turnstile/v1/queue.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(out.join("turnstile_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Undecodable requests are INVALID_ARGUMENT naming the field (src/grpc/wire.rs).
        .codec_path("crate::grpc::wire::Codec")
        .bytes(".turnstile.v1.Task.payload")
        .bytes(".turnstile.v1.TaskSpec.payload")
        .compile_fds(fds)?;
    Ok(())
}
