//! The gRPC face: the only code that knows tonic, HTTP/2 and the generated protobuf
//! types. A request meets, in order: `connections` (the connection ceiling and age),
//! tonic (TLS from `tls`), `auth` (the bearer token and the method's permission, before
//! any byte of the message is decoded), `wire` (the size ceiling and the codec), then
//! an adapter (`lock`, `queue`) whose every RPC is one closure given to `rpc` (the span,
//! the deadline from `deadline`, metrics, the error's `Status`, the stream heartbeats of
//! `heartbeat`). `router` puts them together with health and reflection.
//!
//! Adapters validate, call a store scoped to the caller's tenant and convert the answer;
//! no proto type goes below this module.

pub(crate) mod auth;
pub mod connections;
pub(crate) mod deadline;
pub(crate) mod flow;
pub(crate) mod health;
pub(crate) mod heartbeat;
pub(crate) mod lease;
pub(crate) mod lock;
pub(crate) mod metered;
pub mod pb;
pub(crate) mod proto_time;
pub(crate) mod queue;
pub(crate) mod revocable;
pub(crate) mod router;
pub(crate) mod rpc;
pub(crate) mod schedule;
pub(crate) mod semaphore;
pub mod status;
pub(crate) mod tls;
pub(crate) mod traceparent;
pub(crate) mod wire;
