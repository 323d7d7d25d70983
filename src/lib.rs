//! turnstile: distributed locks, semaphores, task queues and schedules over gRPC, kept
//! in Redis, every state change one Lua script. This library is the server and, in
//! [`client`], the Rust client library (it reaches the server over gRPC only, using
//! [`pb`] and the foundations). The command line and the benchmark live in the
//! binary's own module tree and use only what is public here.
//!
//! The layers, top to bottom (ARCHITECTURE.md draws them with a request's path); a
//! module imports only from layers below its own:
//! - composition: [`config`] (flags and `TURNSTILE_*` variables into one `Config`,
//!   defaults beside their flags) and [`server`] (`run(config, listener, shutdown)`
//!   wires the layers below; `main` and the tests both call it).
//! - the gRPC face, [`grpc`]: the only code that knows tonic and the protobuf types:
//!   router, the one RPC path, the lock, queue, schedule and semaphore adapters, the
//!   auth layer, wire, connections, TLS, deadlines, heartbeats, trace context, health,
//!   [`pb`].
//! - the web dashboard, [`web`], beside the gRPC face: its pages read the same stores
//!   under the same tenants.
//! - the domain: [`lock`] (`LockStore`, Hold, waiters), [`queue`] (`QueueStore`,
//!   long polls, the Subscribe scheduler) and [`schedule`] (`ScheduleStore`, fire
//!   times, the fire timer; it enqueues through a port the composition root fills
//!   with the queue store), each with its Lua scripts; above them [`semaphore`]
//!   (`SemaphoreStore`, its line of waiters in Redis), built on the locks' leases and
//!   Hold engine.
//! - below the domain: [`redis`] (connections, keys, scripts, events, the embedded
//!   `redis-server`), [`auth`] (tokens, tenants, permissions: policy only),
//!   [`metrics`].
//! - foundations every layer may use: [`error`], [`shutdown`], [`time`], [`token`],
//!   [`tenant`], [`method`] (the RPCs and status codes by name), [`limits`],
//!   [`validate`].

pub mod auth;
pub mod client;
pub mod config;
pub mod error;
pub mod grpc;
pub mod limits;
pub mod lock;
pub mod method;
pub(crate) mod metrics;
pub mod queue;
pub mod redis;
pub mod schedule;
pub mod semaphore;
pub mod server;
pub mod shutdown;
pub(crate) mod tenant;
pub mod time;
pub mod token;
pub(crate) mod validate;
pub mod web;

/// The generated protobuf types and gRPC clients: the public surface clients build on.
pub use grpc::pb;
