//! The `Redis` handle: a bb8 pool of multiplexed connections, a timeout on every
//! command, and script invocation by SHA. Cheap to clone; every store holds one.
//!
//! Concurrent requests share connections: a call borrows a pooled connection only long
//! enough to clone its multiplexed handle, so many in-flight commands are pipelined on
//! a few sockets instead of each taking a socket of its own.

pub mod embedded;
pub mod events;
pub mod keys;
pub mod script;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use bb8_redis::RedisConnectionManager;
use redis::aio::MultiplexedConnection;

use crate::error::{Error, Result};
pub use keys::Keys;
pub use script::Script;

/// Pooled sockets to Redis; each carries many pipelined commands at once.
const POOL_SIZE: u32 = 8;

/// One pooled connection and whether a failure showed it to be dead.
#[derive(Clone)]
pub struct Conn {
    /// The multiplexed connection (clones share the socket).
    mux: MultiplexedConnection,
    /// Set when a command on it failed with a connection error; the pool then drops it.
    broken: Arc<AtomicBool>,
}

/// bb8-redis' manager, plus the broken-flag check that lets the pool drop a dead
/// socket: a multiplexed connection does not reconnect, so after a Redis restart every
/// pooled socket would fail forever without it.
struct Manager {
    inner: RedisConnectionManager,
    /// The `--redis-timeout`, as the connections' own response timeout.
    timeout: Duration,
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

/// The server's way to Redis. Clone it freely.
#[derive(Clone)]
pub struct Redis {
    pool: bb8::Pool<Manager>,
    /// `--redis-timeout`: the longest any one command may take.
    timeout: Duration,
    /// The key layout.
    pub keys: Keys,
    /// The URL, for the dedicated pub/sub connection.
    url: String,
}

impl Redis {
    /// A pool for `url`. Connects lazily, so the server starts (NOT_SERVING) even
    /// while Redis is down.
    pub fn new(url: &str, timeout: Duration, keys: Keys) -> Result<Self> {
        let inner = RedisConnectionManager::new(url)
            .map_err(|err| Error::invalid("redis_url", format!("{url}: {err}")))?;
        let pool = bb8::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(1))
            .connection_timeout(timeout)
            .test_on_check_out(false)
            .build_unchecked(Manager { inner, timeout });
        Ok(Self {
            pool,
            timeout,
            keys,
            url: url.to_owned(),
        })
    }

    /// The URL this handle connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection to run commands on, shared with other in-flight calls.
    async fn conn(&self) -> Result<Conn> {
        loop {
            let pooled = self.pool.get().await?;
            if !pooled.broken.load(Ordering::Relaxed) {
                return Ok(pooled.clone());
            }
            // Dropping it returns it to the pool, which closes it (has_broken).
        }
    }

    /// Runs one script invocation (EVALSHA, loading the script on NOSCRIPT) with the
    /// Redis timeout; a connection error marks the socket broken.
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        let mut conn = self.conn().await?;
        let reply =
            tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn.mux)).await;
        conn.finish(reply, self.timeout)
    }

    /// Runs one plain command with the Redis timeout.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn().await?;
        let reply = tokio::time::timeout(self.timeout, cmd.query_async(&mut conn.mux)).await;
        conn.finish(reply, self.timeout)
    }

    /// Runs a pipeline of plain commands whose replies are ignored, with the Redis timeout.
    pub async fn query_pipe(&self, pipe: &redis::Pipeline) -> Result<()> {
        let mut conn = self.conn().await?;
        let reply = tokio::time::timeout(self.timeout, pipe.query_async(&mut conn.mux)).await;
        conn.finish(reply, self.timeout)
    }

    /// `SCRIPT LOAD`s every script, so the first request runs by SHA at once.
    pub async fn load_scripts(&self, scripts: &[&Script]) -> Result<()> {
        for script in scripts {
            let mut conn = self.conn().await?;
            let reply = tokio::time::timeout(
                self.timeout,
                script.inner.prepare_invoke().load_async(&mut conn.mux),
            )
            .await;
            conn.finish(reply, self.timeout)?;
        }
        Ok(())
    }

    /// PING, for the readiness probe.
    pub async fn ping(&self) -> Result<()> {
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(())
    }
}

impl Conn {
    /// Turns a timed reply into our result, flagging the socket on connection trouble.
    fn finish<T>(
        &self,
        reply: std::result::Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<T> {
        match reply {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
                {
                    self.broken.store(true, Ordering::Relaxed);
                }
                Err(err.into())
            }
            Err(_) => {
                // A socket that stopped answering may be half-open: start a fresh one.
                self.broken.store(true, Ordering::Relaxed);
                Err(Error::Unavailable(format!(
                    "redis did not answer within {timeout:?}"
                )))
            }
        }
    }
}
