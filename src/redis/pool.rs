//! The sockets of one Redis: a few multiplexed connections kept checked out of a bb8
//! pool, each replaced when a failure shows it dead. Concurrent calls share them: many
//! in-flight commands are pipelined on a few sockets instead of each taking a socket of
//! its own, and a call keyed by a name always uses that name's socket, so two calls on
//! one name reach Redis in the order they were made.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use bb8_redis::RedisConnectionManager;
use redis::aio::MultiplexedConnection;

/// Sockets the commands are spread over (each carries many pipelined commands).
pub const SOCKETS: usize = 4;
/// bb8's limit: the working sockets plus room to replace broken ones while the old
/// ones are still being handed back.
pub(super) const POOL_SIZE: u32 = 2 * SOCKETS as u32;

/// One pooled connection and whether a failure showed it to be dead.
#[derive(Clone)]
pub struct Conn {
    /// The multiplexed connection (clones share the socket).
    pub(super) mux: MultiplexedConnection,
    /// Set when a command on it failed with a connection error; the pool then drops it.
    pub(super) broken: Arc<AtomicBool>,
}

/// bb8-redis' manager, plus the broken-flag check that lets the pool drop a dead
/// socket: a multiplexed connection does not reconnect, so after a Redis restart every
/// pooled socket would fail forever without it.
pub(super) struct Manager {
    pub(super) inner: RedisConnectionManager,
    /// The `--redis-timeout`, as the connections' own response timeout.
    pub(super) timeout: Duration,
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<Conn, redis::RedisError> {
        let mut mux = self.inner.connect().await?;
        // redis-rs defaults to a 500 ms response timeout; ours is --redis-timeout.
        mux.set_response_timeout(self.timeout);
        Ok(Conn {
            mux,
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        self.inner.is_valid(&mut conn.mux).await
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken.load(Ordering::Relaxed)
    }
}

/// One of the sockets in use: empty until first used or after it broke.
#[derive(Default)]
pub(super) struct Socket {
    /// Kept checked out, so bb8 counts it as in use and hands it back (to be closed)
    /// only when it is replaced.
    pub(super) pooled: Mutex<Option<bb8::PooledConnection<'static, Manager>>>,
}

/// The socket a key's calls use (FNV-1a: stable and cheap; any spread will do).
pub(super) fn socket_of(key: &str) -> usize {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % SOCKETS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::{socket_of, SOCKETS};

    #[test]
    fn a_key_always_uses_one_socket_and_keys_spread_over_all() {
        assert_eq!(
            socket_of("turnstile:lock:{a}"),
            socket_of("turnstile:lock:{a}")
        );
        let mut used = [0usize; SOCKETS];
        for n in 0..1000 {
            used[socket_of(&format!("turnstile:lock:{{n{n}}}"))] += 1;
        }
        assert!(used.iter().all(|&count| count > 150), "{used:?}");
    }
}
