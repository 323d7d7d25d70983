//! The `Redis` handle: a few multiplexed connections kept checked out of a bb8 pool,
//! a timeout on every command, and script invocation by SHA. Cheap to clone; every
//! store holds one.
//!
//! Concurrent requests share connections: each call clones the multiplexed handle of
//! one of [`SOCKETS`] connections, so many in-flight commands are pipelined on a few
//! sockets instead of each taking a socket of its own. A call keyed by a name always
//! uses that name's socket, so two calls on one name reach Redis in the order they were
//! made (a lock's give-back can never overtake its acquire). bb8 makes, checks and
//! replaces the sockets; a socket that failed is handed back and a fresh one taken.
//! On a Redis Cluster (`--redis-cluster`) every call goes through one cluster
//! connection instead (`cluster.rs`), which keeps a socket per node and routes each
//! command to its slot's primary; one name is one slot, so its calls stay in order.

pub(crate) mod batch;
pub(crate) mod cluster;
pub mod embedded;
pub(crate) mod errors;
pub(crate) mod events;
pub mod keys;
mod pool;
pub(crate) mod reply;
pub mod script;
pub mod slots;
mod url;
mod version;
mod wait;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, PoisonError,
    },
    time::Duration,
};

use bb8_redis::RedisConnectionManager;

use crate::error::{Error, Result};
use errors::{breaks_socket, ErrorCounts, ErrorKind};
pub use keys::Keys;
pub use pool::SOCKETS;
use pool::{socket_of, Conn, Manager, Socket, POOL_SIZE};
pub use script::{Invocation, Script, Source};
pub use url::{connection_info, redact};
pub use version::check_version;
use wait::Wait;

/// The server's way to Redis. Clone it freely.
#[derive(Clone)]
pub struct Redis {
    backend: Backend,
    /// `--redis-timeout`: the longest any one command may take.
    timeout: Duration,
    /// The key layout.
    pub keys: Keys,
    /// Failed commands by kind, for `turnstile_redis_errors_total`.
    pub errors: ErrorCounts,
    /// `--redis-wait-replicas`, when on.
    wait: Option<Wait>,
}

/// One Redis, or a Redis Cluster (`--redis-cluster`).
#[derive(Clone)]
enum Backend {
    Single {
        pool: bb8::Pool<Manager>,
        /// The connections in use, each checked out of `pool` until it breaks.
        sockets: Arc<[Socket; SOCKETS]>,
        /// Spreads unkeyed calls over the sockets.
        turn: Arc<AtomicUsize>,
    },
    /// The cluster client routes each command to its slot's node itself.
    Cluster(Arc<cluster::ClusterLink>),
}

/// The connection one call runs on.
enum Link {
    Single(Conn),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Link {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Link::Single(conn) => conn.mux.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Link::Single(conn) => conn.mux.req_packed_commands(cmd, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(conn) => conn.mux.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Runs `invocation` (and `wait` in the same pipeline, so both reach the same node on
/// the same connection), loading the script once on NOSCRIPT. The script's reply and,
/// with `wait`, how many replicas confirmed.
async fn run_script(
    conn: &mut Link,
    invocation: &Invocation<'_>,
    wait: Option<&Wait>,
) -> redis::RedisResult<(redis::Value, Option<i64>)> {
    let mut loaded = false;
    loop {
        let reply = match wait {
            None => invocation
                .command()
                .query_async(conn)
                .await
                .map(|value| (value, None)),
            Some(wait) => {
                let mut pipe = redis::pipe();
                pipe.add_command(invocation.command())
                    .add_command(wait.command());
                pipe.query_async::<(redis::Value, redis::Value)>(conn)
                    .await
                    .map(|(value, confirmed)| (value, Wait::confirmed(&confirmed)))
            }
        };
        match reply {
            Err(err)
                if !loaded
                    && err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                invocation
                    .script
                    .inner
                    .prepare_invoke()
                    .load_async(conn)
                    .await?;
                loaded = true;
            }
            reply => return reply,
        }
    }
}

/// A store whose every key and channel comes from its [`Redis`] handle (the lock and
/// queue stores): scoping it to a tenant is scoping that handle, in this one place.
pub trait TenantScoped: Clone {
    /// Its Redis handle, to scope.
    fn redis_mut(&mut self) -> &mut Redis;

    /// This store, for `tenant`'s names only: every key and channel it builds is in
    /// that tenant's key space. Cheap (a few reference counts).
    fn tenant(&self, tenant: &crate::tenant::Tenant) -> Self {
        let mut scoped = self.clone();
        let redis = scoped.redis_mut();
        redis.keys = redis.keys.tenant(tenant);
        scoped
    }
}

impl Redis {
    /// Where `event`'s messages of every tenant go: the pattern of its channels, and
    /// `sink` (each message names the key it is about, and so its tenant).
    pub fn route(&self, event: keys::Event, sink: Arc<dyn events::EventSink>) -> events::Route {
        (self.keys.events_pattern(event), sink)
    }

    /// A pool for `url`. Connects lazily, so the server starts (NOT_SERVING) even
    /// while Redis is down.
    pub fn new(url: &str, timeout: Duration, keys: Keys) -> Result<Self> {
        Self::with_info(connection_info(url, None)?, timeout, keys)
    }

    /// [`Redis::new`] from a parsed [`connection_info`].
    pub fn with_info(info: redis::ConnectionInfo, timeout: Duration, keys: Keys) -> Result<Self> {
        let inner = RedisConnectionManager::new(info)
            .map_err(|err| Error::invalid("redis_url", err.to_string()))?;
        let pool = bb8::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(1))
            .connection_timeout(timeout)
            .test_on_check_out(false)
            .build_unchecked(Manager { inner, timeout });
        Ok(Self {
            backend: Backend::Single {
                pool,
                sockets: Arc::default(),
                turn: Arc::default(),
            },
            timeout,
            keys,
            errors: ErrorCounts::default(),
            wait: None,
        })
    }

    /// A client of the Redis Cluster that `seeds` belong to (`--redis-cluster`); with
    /// `rediss://` seeds, `ca` (PEM) is the one CA to trust, as in [`connection_info`].
    /// Connects lazily, like [`Redis::new`].
    pub fn cluster(
        seeds: Vec<redis::ConnectionInfo>,
        ca: Option<Vec<u8>>,
        timeout: Duration,
        keys: Keys,
    ) -> Result<Self> {
        if seeds.is_empty() {
            return Err(Error::invalid("redis_url", "no seed node"));
        }
        let link = cluster::ClusterLink::new(seeds, ca, timeout)
            .map_err(|err| Error::invalid("redis_url", err.to_string()))?;
        Ok(Self {
            backend: Backend::Cluster(Arc::new(link)),
            timeout,
            keys: keys.with_slot_indexes(),
            errors: ErrorCounts::default(),
            wait: None,
        })
    }

    /// Every write confirmed by `replicas` replicas before it answers (0: off).
    pub fn wait_replicas(mut self, replicas: u32) -> Self {
        self.wait = (replicas > 0).then(|| Wait {
            replicas,
            timeout: (self.timeout / 2).max(Duration::from_millis(1)),
        });
        self
    }

    /// The same connections, building `tenant`'s keys.
    pub fn tenant(&self, tenant: &crate::tenant::Tenant) -> Self {
        let mut redis = self.clone();
        redis.keys = self.keys.tenant(tenant);
        redis
    }

    /// A connection to run commands on, shared with other in-flight calls: for one
    /// Redis the socket of `key` when given, else the next in turn.
    async fn conn(&self, key: Option<&str>) -> Result<Link> {
        let (pool, sockets, turn) = match &self.backend {
            Backend::Single {
                pool,
                sockets,
                turn,
            } => (pool, sockets, turn),
            Backend::Cluster(link) => {
                return link.connection().await.map(Link::Cluster).map_err(|err| {
                    self.errors.add(ErrorKind::of(&err));
                    Error::from(err)
                });
            }
        };
        let at = match key {
            Some(key) => socket_of(key),
            None => turn.fetch_add(1, Ordering::Relaxed) % SOCKETS,
        };
        let socket = &sockets[at];
        {
            let mut pooled = socket.pooled.lock().unwrap_or_else(PoisonError::into_inner);
            match pooled.as_ref() {
                Some(conn) if !conn.broken.load(Ordering::Relaxed) => {
                    return Ok(Link::Single((**conn).clone()))
                }
                // Handing it back to the pool closes it (has_broken).
                Some(_) => drop(pooled.take()),
                None => {}
            }
        }
        let fresh = loop {
            let fresh = pool.get_owned().await.map_err(|err| {
                self.errors.add(match &err {
                    bb8::RunError::User(err) => ErrorKind::of(err),
                    bb8::RunError::TimedOut => ErrorKind::Timeout,
                });
                Error::from(err)
            })?;
            if !fresh.broken.load(Ordering::Relaxed) {
                break fresh;
            }
        };
        let conn = (*fresh).clone();
        let mut pooled = socket.pooled.lock().unwrap_or_else(PoisonError::into_inner);
        // Another call may have filled the socket meanwhile; keep the one already there
        // and give this one back (the call still uses it; it is idle in the pool after).
        if pooled.is_none() {
            *pooled = Some(fresh);
        }
        Ok(Link::Single(conn))
    }

    /// Runs one script invocation (EVALSHA, loading the script on NOSCRIPT) with the
    /// Redis timeout; a connection error marks the socket broken. With
    /// `--redis-wait-replicas`, a script that writes answers only once that many
    /// replicas confirmed it (see [`Redis::wait_replicas`]).
    pub async fn invoke<T: redis::FromRedisValue>(&self, invocation: &Invocation<'_>) -> Result<T> {
        self.invoke_on(None, invocation).await
    }

    /// [`Redis::invoke`] on `key`'s socket: after every earlier call keyed the same.
    pub async fn invoke_keyed<T: redis::FromRedisValue>(
        &self,
        key: &str,
        invocation: &Invocation<'_>,
    ) -> Result<T> {
        self.invoke_on(Some(key), invocation).await
    }

    async fn invoke_on<T: redis::FromRedisValue>(
        &self,
        key: Option<&str>,
        invocation: &Invocation<'_>,
    ) -> Result<T> {
        let mut conn = self.conn(key).await?;
        let wait = self.wait.filter(|_| invocation.script.confirms);
        let reply = run_script(&mut conn, invocation, wait.as_ref()).await;
        // A script's error names its line in the assembled script: name ours instead.
        let (value, confirmed) = self.finish(&conn, reply).map_err(|err| match err {
            Error::Internal(why) => Error::Internal(invocation.script.source.explain(&why)),
            err => err,
        })?;
        if let Some(wait) = wait {
            wait.check(confirmed.unwrap_or(0))?;
        }
        // A reply of the wrong shape is counted like any other failed command.
        let decoded = T::from_redis_value(value).map_err(redis::RedisError::from);
        self.finish(&conn, decoded)
    }

    /// Runs one plain command with the Redis timeout.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn(None).await?;
        let reply = cmd.query_async(&mut conn).await;
        self.finish(&conn, reply)
    }

    /// Runs a pipeline of plain writes whose replies are ignored, with the Redis
    /// timeout; confirmed by replicas like a script's writes (`--redis-wait-replicas`).
    pub async fn query_pipe(&self, pipe: &redis::Pipeline) -> Result<()> {
        let mut conn = self.conn(None).await?;
        let reply = match &conn {
            Link::Cluster(cluster) => cluster::query_split(cluster, pipe, self.wait.as_ref()).await,
            Link::Single(_) => match &self.wait {
                None => pipe.query_async(&mut conn).await.map(|()| None),
                Some(wait) => {
                    let mut pipe = pipe.clone();
                    pipe.add_command(wait.command());
                    pipe.query_async::<Vec<redis::Value>>(&mut conn)
                        .await
                        .map(|replies| replies.last().and_then(Wait::confirmed))
                }
            },
        };
        let confirmed = self.finish(&conn, reply)?;
        match &self.wait {
            Some(wait) => wait.check(confirmed.unwrap_or(0)),
            None => Ok(()),
        }
    }

    /// `SCRIPT LOAD`s every script, so the first request runs by SHA at once.
    pub async fn load_scripts(&self, scripts: &[&Script]) -> Result<()> {
        for script in scripts {
            let mut conn = self.conn(None).await?;
            let reply = script.inner.prepare_invoke().load_async(&mut conn).await;
            self.finish(&conn, reply)?;
        }
        Ok(())
    }

    /// Checks that Redis is new enough for our scripts and commands (see
    /// [`check_version`]); UNAVAILABLE if it does not answer, INTERNAL if too old.
    pub async fn check_version(&self) -> Result<()> {
        // One reply from one Redis; from a cluster, a map of every primary's reply.
        let reply: redis::Value = self.query(redis::cmd("INFO").arg("server")).await?;
        let texts = match reply {
            redis::Value::Map(nodes) => nodes.into_iter().map(|(_, info)| info).collect(),
            one => vec![one],
        };
        for text in texts {
            let info: String = redis::from_redis_value(text)
                .map_err(|err| Error::Internal(format!("INFO server: {err}")))?;
            check_version(&info)?;
        }
        Ok(())
    }

    /// Turns a reply on `conn` into our result: a failure is counted by kind; on one
    /// Redis, connection trouble flags the socket (a socket that stopped answering may
    /// be half-open: a fresh one is taken); the cluster client reconnects by itself.
    /// The connections' own response timeout (`--redis-timeout`) bounds every command.
    fn finish<T>(&self, conn: &Link, reply: redis::RedisResult<T>) -> Result<T> {
        reply.map_err(|err| {
            self.errors.add(ErrorKind::of(&err));
            if let Link::Single(conn) = conn {
                if breaks_socket(&err) {
                    conn.broken.store(true, Ordering::Relaxed);
                }
            }
            if err.is_timeout() {
                Error::Unavailable(format!("redis did not answer within {:?}", self.timeout))
            } else {
                err.into()
            }
        })
    }

    /// PING, for the readiness probe.
    pub async fn ping(&self) -> Result<()> {
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(())
    }
}
