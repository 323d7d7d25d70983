//! The binary's client side: code that talks to a turnstile server from outside, like
//! `redis-benchmark` beside `redis-server`. It is compiled into the `turnstile` binary
//! only, never into the server library, and uses only the library's public surface
//! (the generated gRPC clients, the stores' public methods, the embedded Redis).

pub mod bench;
