//! turnstile: distributed locks, semaphores, task queues and schedules over gRPC, kept
//! in Redis, every state change one Lua script. This library is the server and, in
//! [`client`], the Rust client library (it reaches the server over gRPC only, using
//! [`pb`] and the foundations). The command line lives in the binary's own module tree
//! and the benchmark in its own binary (`bench/`); both use only what is public here.
//!
//! Public: [`server`] (`run`) and [`config`], [`client`] and [`pb`], the foundations a
//! client needs ([`time`], [`token`], [`method`]), [`embedded`] (a `redis-server`
//! child) and [`floor`] (the benchmark's one entry: the scripts run straight on Redis).
//! Everything else is `pub(crate)`, so the compiler finds what nothing uses.
//!
//! The layers, top to bottom (ARCHITECTURE.md draws them with a request's path); a
//! module imports only from layers below its own:
//! - composition: [`config`] (flags and `TURNSTILE_*` variables into one `Config`,
//!   defaults beside their flags) and [`server`] (`run(config, listener, shutdown)`
//!   wires the layers below; `main` and the tests both call it).
//! - the gRPC face, `grpc`: the only code that knows tonic and the protobuf types:
//!   router, the one RPC path, the lock, queue, schedule and semaphore adapters, the
//!   auth layer, wire, connections, TLS, deadlines, heartbeats, trace context, health,
//!   [`pb`].
//! - the web dashboard, `web`, beside the gRPC face: its pages read the same stores
//!   under the same tenants.
//! - the domain: `lock` (`LockStore`, Hold, waiters) and `queue` (`QueueStore`, its
//!   one door: long polls, acks, the Subscribe feeds), each with its Lua scripts;
//!   above them `semaphore` (`SemaphoreStore`, its line of waiters in Redis), built on
//!   the locks' leases and Hold engine, and `schedule` (`ScheduleStore`, fire times,
//!   the fire timer), which enqueues through the queue store.
//! - below the domain: `redis` (connections, keys, scripts, events, the embedded
//!   `redis-server`), `auth` (tokens, tenants, permissions: policy only),
//!   `metrics`.
//! - foundations every layer may use: `error`, `shutdown`, [`time`], [`token`],
//!   `tenant`, [`method`] (the RPCs and status codes by name), `limits`,
//!   `validate`.

pub(crate) mod auth;
pub mod client;
pub mod config;
pub(crate) mod error;
pub mod floor;
pub(crate) mod grpc;
pub(crate) mod limits;
pub(crate) mod lock;
pub mod method;
pub(crate) mod metrics;
pub(crate) mod queue;
pub(crate) mod redis;
pub(crate) mod schedule;
pub(crate) mod semaphore;
pub mod server;
pub(crate) mod shutdown;
pub(crate) mod tenant;
pub mod time;
pub mod token;
pub(crate) mod validate;
pub(crate) mod web;

/// The generated protobuf types and gRPC clients: the public surface clients build on.
pub use grpc::pb;
/// Unix milliseconds to and from `google.protobuf.Timestamp`, for raw requests.
pub use grpc::proto_time::{ms_from_timestamp, timestamp_from_ms};
/// A `redis-server` child of this process: the server's embedded Redis, which the
/// benchmark and the tests start too.
pub use redis::embedded;

/// White-box pieces this repository's own tests reach (the Lua scripts as assembled,
/// the key layout, the store's error type, the rich error details): not part of the
/// library's surface, hidden from its documentation, free to change.
#[doc(hidden)]
pub mod testing {
    pub use crate::auth::sha256;
    pub use crate::error::Error;
    pub use crate::grpc::status::rich;
    pub use crate::limits::FIRST_TRIES;
    pub use crate::lock::LockScripts;
    pub use crate::queue::QueueScripts;
    pub use crate::redis::{connection_info, script::NO_WRITES, Keys, Redis, Script, Source};
    pub use crate::schedule::ScheduleScripts;
    pub use crate::semaphore::SemaphoreScripts;
}
