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

pub mod batch;
pub mod cluster;
pub mod embedded;
pub mod events;
pub mod keys;
pub mod reply;
pub mod script;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::Duration,
};

use bb8_redis::RedisConnectionManager;
use redis::aio::MultiplexedConnection;

use crate::error::{Error, Result};
pub use keys::Keys;
pub use script::{Invocation, Script};

/// Parses `url` (`redis://`, `rediss://`, `unix://`, with an ACL user and password
/// if given) into what every connection is made from. For `rediss://`, `ca` (PEM) is
/// the one CA to trust; `None` trusts the system's roots. Errors never quote the URL,
/// which may hold a password.
pub fn connection_info(url: &str, ca: Option<Vec<u8>>) -> Result<redis::ConnectionInfo> {
    let invalid =
        |err: redis::RedisError| Error::invalid("redis_url", format!("{}: {err}", redact(url)));
    let info = match ca {
        None => redis::IntoConnectionInfo::into_connection_info(url).map_err(invalid)?,
        Some(root_cert) => {
            let certificates = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            };
            redis::Client::build_with_tls(url, certificates)
                .map_err(invalid)?
                .get_connection_info()
                .clone()
        }
    };
    Ok(info)
}

/// `url` with its password (if any) replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            let password = if rest[..at].contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{password}{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// Sockets the commands are spread over (each carries many pipelined commands).
pub const SOCKETS: usize = 4;
/// bb8's limit: the working sockets plus room to replace broken ones while the old
/// ones are still being handed back.
const POOL_SIZE: u32 = 2 * SOCKETS as u32;

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
    backend: Backend,
    /// `--redis-timeout`: the longest any one command may take.
    timeout: Duration,
    /// The key layout.
    pub keys: Keys,
    /// Where Redis is (address, TLS, ACL user), for the dedicated pub/sub connection.
    info: redis::ConnectionInfo,
    /// Failed commands by kind, for `turnstile_redis_errors_total`.
    pub errors: ErrorCounts,
    /// `--redis-wait-replicas`, when on.
    wait: Option<Wait>,
}

/// `--redis-wait-replicas`: how many replicas must confirm a write before its call
/// answers. Redis replicates asynchronously, so a primary that fails right after a
/// write may take it with it; `WAIT` after the write, on the same connection (it
/// counts that connection's writes), makes a confirmed write survive the failover of
/// its primary to a replica that confirmed it.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    replicas: u32,
    /// How long `WAIT` may block: half the Redis timeout, so its answer (too few)
    /// arrives before the connection gives up on it.
    timeout: Duration,
}

impl Wait {
    fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(self.timeout.as_millis() as u64);
        cmd
    }

    /// The number of replicas in a `WAIT` reply.
    fn confirmed(reply: &redis::Value) -> Option<i64> {
        match reply {
            redis::Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// UNAVAILABLE when fewer replicas confirmed than asked: the write happened on the
    /// primary, but a failover could lose it, so the caller is not told it is stored
    /// (every write can be retried: ids, request ids and receipts make retries safe).
    fn check(&self, confirmed: i64) -> Result<()> {
        if confirmed >= i64::from(self.replicas) {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "the write was confirmed by {confirmed} of the {} replicas --redis-wait-replicas \
             asks for within {:?}; a failover may lose it, retry",
            self.replicas, self.timeout
        )))
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

/// How a Redis command failed, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No answer within `--redis-timeout` (or no connection from the pool in time).
    Timeout,
    /// Refused, dropped or broken connections.
    Connection,
    /// Redis answered that it cannot serve now (loading, busy script, failover, read-only).
    Busy,
    /// Anything else (a script error, an unexpected reply).
    Other,
}

impl ErrorKind {
    /// Every kind, in the metrics' order.
    pub const ALL: [ErrorKind; 4] = [Self::Timeout, Self::Connection, Self::Busy, Self::Other];

    /// The `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Busy => "busy",
            Self::Other => "other",
        }
    }

    fn of(err: &redis::RedisError) -> Self {
        if err.is_timeout() {
            Self::Timeout
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
        {
            Self::Connection
        } else if matches!(Error::from(err.clone()), Error::Unavailable(_)) {
            Self::Busy
        } else {
            Self::Other
        }
    }
}

/// Failed commands by [`ErrorKind`], shared by every clone of a [`Redis`].
#[derive(Clone, Debug, Default)]
pub struct ErrorCounts(Arc<[AtomicUsize; 4]>);

impl ErrorCounts {
    fn add(&self, kind: ErrorKind) {
        self.0[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Failures of `kind` since start.
    pub fn get(&self, kind: ErrorKind) -> usize {
        self.0[kind as usize].load(Ordering::Relaxed)
    }
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

/// One of the sockets in use: empty until first used or after it broke.
#[derive(Default)]
struct Socket {
    /// Kept checked out, so bb8 counts it as in use and hands it back (to be closed)
    /// only when it is replaced.
    pooled: Mutex<Option<bb8::PooledConnection<'static, Manager>>>,
}

impl Redis {
    /// A pool for `url`. Connects lazily, so the server starts (NOT_SERVING) even
    /// while Redis is down.
    pub fn new(url: &str, timeout: Duration, keys: Keys) -> Result<Self> {
        Self::with_info(connection_info(url, None)?, timeout, keys)
    }

    /// [`Redis::new`] from a parsed [`connection_info`].
    pub fn with_info(info: redis::ConnectionInfo, timeout: Duration, keys: Keys) -> Result<Self> {
        let inner = RedisConnectionManager::new(info.clone())
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
            info,
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
        let info = seeds
            .first()
            .cloned()
            .ok_or_else(|| Error::invalid("redis_url", "no seed node"))?;
        let link = cluster::ClusterLink::new(seeds, ca, timeout)
            .map_err(|err| Error::invalid("redis_url", err.to_string()))?;
        Ok(Self {
            backend: Backend::Cluster(Arc::new(link)),
            timeout,
            keys,
            info,
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
    pub fn tenant(&self, tenant: &crate::auth::Tenant) -> Self {
        let mut redis = self.clone();
        redis.keys = self.keys.tenant(tenant);
        redis
    }

    /// Where this handle connects to.
    pub fn connection_info(&self) -> &redis::ConnectionInfo {
        &self.info
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
        let wait = self.wait.filter(|_| invocation.script.writes);
        let reply = run_script(&mut conn, invocation, wait.as_ref()).await;
        let (value, confirmed) = self.finish(&conn, reply)?;
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
                if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
                {
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

/// The oldest Redis the scripts run on: `PEXPIREAT … NX/GT` (owner index), `ZADD GT`
/// and `SET … KEEPTTL` need 7.0. On an older one every Acquire fails.
pub const MIN_REDIS_VERSION: (u32, u32) = (7, 0);

/// Checks the `redis_version` of an `INFO server` reply against
/// [`MIN_REDIS_VERSION`]; the error says which version was found and what is needed.
pub fn check_version(info: &str) -> Result<()> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(str::trim)
        .ok_or_else(|| Error::Internal("INFO server has no redis_version".into()))?;
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    let found = match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => {
            return Err(Error::Internal(format!(
                "cannot read redis_version {version:?}"
            )))
        }
    };
    if found < MIN_REDIS_VERSION {
        let (major, minor) = MIN_REDIS_VERSION;
        return Err(Error::Internal(format!(
            "redis {version} is too old: turnstile needs Redis {major}.{minor} or newer"
        )));
    }
    Ok(())
}

/// The socket a key's calls use (FNV-1a: stable and cheap; any spread will do).
fn socket_of(key: &str) -> usize {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % SOCKETS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::{check_version, socket_of, SOCKETS};

    #[test]
    fn redis_7_or_newer_passes_and_older_is_refused_with_its_version() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n");
        assert!(check_version(&info("7.0.15")).is_ok());
        assert!(check_version(&info("7.2.4")).is_ok());
        assert!(check_version(&info("8.0.0")).is_ok());
        let old = check_version(&info("6.2.14")).unwrap_err().to_string();
        assert!(old.contains("6.2.14") && old.contains("7.0"), "{old}");
        assert!(check_version(&info("5.0.7")).is_err());
        assert!(check_version("# Server\r\n").is_err());
        assert!(check_version(&info("x.y")).is_err());
    }

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
