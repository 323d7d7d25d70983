//! The binary's client side: code that talks to a turnstile server from outside, like
//! `redis-benchmark` and `redis-cli` beside `redis-server`. It is compiled into the
//! `turnstile` binary only, never into the server library, and uses only the library's
//! public surface (the generated gRPC clients, the stores' public methods, the
//! embedded Redis).
//!
//! - [`bench`]: the benchmark.
//! - [`lock`] and [`work`]: run a command under a lock, or once per task.
//! - [`admin`]: `enqueue`, `stats`, `peek`, `cancel`, `redrive`.
//! - [`client`] (flags, connection, errors), [`output`] (tables, JSON, RFC 3339) and
//!   [`run`] (the user's command): what the commands share.

pub mod admin;
pub mod bench;
pub mod client;
pub mod lock;
pub mod output;
pub mod run;
pub mod work;
