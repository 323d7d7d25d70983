//! The integration tests, one binary (as cargo's own `tests/testsuite/main.rs`): each
//! module is one area, and the crate is linked once instead of once per file. Every
//! test talks to a real `redis-server` and to the real server over real gRPC; the
//! harness is in `common/`, split by what it starts.

#[macro_use]
mod common;

mod auth;
mod bad_input;
mod browser;
mod chaos;
mod cli;
mod client;
mod cluster;
mod dashboard;
mod faults;
mod flow;
mod fuzz;
mod guides;
mod interop;
mod layers;
mod list_locks;
mod lock;
mod model;
mod outcomes;
mod process;
mod queue;
mod schedule;
mod scripts;
mod semaphore;
mod server;
mod subscribe;
mod watch;
