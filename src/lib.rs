//! turnstile: distributed locks and task queues over gRPC, kept in Redis, every state
//! change one Lua script. This library is the server; the client-side code (the
//! benchmark) lives in the binary's own module tree and uses only what is public here.
//!
//! Crate map (see ARCHITECTURE.md for a request's path through it):
//! - [`config`]: flags and `TURNSTILE_*` environment variables into one `Config`.
//! - [`server`]: `run(config, listener, shutdown)` wires Redis, services, health and
//!   reflection together; `main` and the tests both call it.
//! - [`rpc`]: the one path every RPC takes (span, deadline, error logging, heartbeats);
//!   [`traceparent`]: the caller's W3C trace id on that span.
//! - [`redis`]: the connections (one Redis or a cluster), keys, scripts, reply decoding, group commit, the
//!   embedded `redis-server` and pub/sub wake-ups.
//! - [`lock`]: `LockStore` (the domain) and `LockApi` (the gRPC adapter), plus `Hold`.
//! - [`queue`]: `QueueStore` (the domain), `QueueApi` (the gRPC adapter) and the
//!   Subscribe `scheduler`.
//! - [`tls`]: the gRPC server's TLS and mTLS, and the CA for `rediss://`.
//! - [`wire`] (the codec, the request size ceiling) and [`connections`] (the
//!   connection ceiling and age): what a request meets before any handler.
//! - [`auth`]: bearer tokens, tenants and permissions, checked before any handler.
//! - [`error`], [`validate`], [`deadline`], [`heartbeat`], [`limits`], [`shutdown`],
//!   [`token`], [`time`], [`health`], [`metrics`]: the pieces every RPC shares.

pub mod auth;
pub mod config;
pub mod connections;
pub mod deadline;
pub mod error;
pub mod health;
pub mod heartbeat;
pub mod limits;
pub mod lock;
pub mod metrics;
pub mod pb;
pub mod queue;
pub mod redis;
pub mod rpc;
pub mod server;
pub mod shutdown;
pub mod time;
pub mod tls;
pub mod token;
pub mod traceparent;
pub mod validate;
pub mod wire;
