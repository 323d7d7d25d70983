//! turnstile: distributed locks and task queues over gRPC, kept in Redis, every state
//! change one Lua script.
//!
//! Crate map:
//! - [`config`]: flags and `TURNSTILE_*` environment variables into one `Config`.
//! - [`server`]: `run(config, listener, shutdown)` wires Redis, services, health and
//!   reflection together; `main` and the tests both call it.
//! - [`redis`]: the pool, keys, scripts, the embedded `redis-server` and pub/sub wake-ups.
//! - [`lock`]: `LockStore` (the domain) and `LockApi` (the gRPC adapter), plus `Hold`.
//! - [`queue`]: `QueueStore` (the domain), `QueueApi` (the gRPC adapter) and the
//!   Subscribe `scheduler`.
//! - [`bench`]: `turnstile bench`, the scenarios measured against their floors.
//! - [`error`], [`validate`], [`deadline`], [`rpc`], [`limits`], [`shutdown`],
//!   [`health`], [`metrics`]: the pieces every RPC shares.

pub mod bench;
pub mod config;
pub mod deadline;
pub mod error;
pub mod health;
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
pub mod validate;
