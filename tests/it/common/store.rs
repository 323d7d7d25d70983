//! What a test's servers keep their state in, so that one test body runs on one
//! `redis-server` and on a Redis Cluster (`on_each_store!`).
//!
//! Starting a cluster takes seconds, so the cluster tests of one test binary share
//! one, each under a key prefix of its own. A test that counts Redis' commands or
//! pauses Redis asks for a cluster of its own, since other tests' traffic would be in
//! its counts and its pause would stall them.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        OnceLock,
    },
    time::Duration,
};

use redis::{aio::ConnectionLike, cluster_async::ClusterConnection};
use turnstile::config::Config;

use super::{cluster::TestCluster, eventually, TestRedis, WAIT};

/// Generates the tests `$name::on_one_redis` and `$name::on_a_cluster`, each calling
/// the body `async fn $name(redis: TestStore) -> TestResult` with its store.
/// `own cluster` gives the cluster test a cluster of its own (see the module's doc).
#[macro_export]
macro_rules! on_each_store {
    ($name:ident) => {
        $crate::on_each_store!($name, $crate::common::TestStore::shared_cluster());
    };
    ($name:ident, own cluster) => {
        $crate::on_each_store!($name, $crate::common::TestStore::own_cluster().await);
    };
    ($name:ident, $cluster:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_one_redis() -> $crate::common::TestResult {
                let store = $crate::common::TestStore::one_redis().await;
                $crate::common::store::bounded(super::$name(store)).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_a_cluster() -> $crate::common::TestResult {
                $crate::common::store::bounded(super::$name($cluster)).await
            }
        }
    };
}

/// The longest a test body may run: one that hangs fails instead of holding the whole
/// suite (and CI) until its own time limit.
pub const TEST_LIMIT: Duration = Duration::from_secs(180);

/// Runs a test body, failing it after [`TEST_LIMIT`].
pub async fn bounded(
    body: impl std::future::Future<Output = super::TestResult>,
) -> super::TestResult {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test ran over {TEST_LIMIT:?}"))
}

/// Anything a test server can keep its state in.
pub trait Store {
    /// A server's settings pointing at it (before the test's own changes).
    fn config(&self) -> Config;

    /// How many server replicas a [`super::TestServer`] on it runs.
    fn replicas(&self) -> usize {
        1
    }
}

impl Store for TestRedis {
    fn config(&self) -> Config {
        Config::for_redis(self.url())
    }
}

impl Store for TestCluster {
    fn config(&self) -> Config {
        let mut config = Config::for_redis(self.url());
        config.redis_cluster = true;
        config
    }
}

/// One `redis-server` of the test's own, or a Redis Cluster under a key prefix of the
/// test's own.
pub enum TestStore {
    Single(Box<TestRedis>),
    Cluster { nodes: Nodes, prefix: String },
}

/// The nodes of a cluster store.
pub enum Nodes {
    /// Shared by every cluster test of this binary; lives as long as the process.
    Shared(&'static TestCluster),
    /// The test's own, stopped with it.
    Own(TestCluster),
}

impl std::ops::Deref for Nodes {
    type Target = TestCluster;

    fn deref(&self) -> &TestCluster {
        match self {
            Nodes::Shared(cluster) => cluster,
            Nodes::Own(cluster) => cluster,
        }
    }
}

impl TestStore {
    pub async fn one_redis() -> Self {
        Self::Single(Box::new(TestRedis::start().await))
    }

    /// This binary's shared cluster (started by the first test that asks), under a
    /// fresh key prefix.
    pub fn shared_cluster() -> Self {
        Self::Cluster {
            nodes: Nodes::Shared(shared()),
            prefix: fresh_prefix(),
        }
    }

    /// A cluster of the test's own.
    pub async fn own_cluster() -> Self {
        Self::Cluster {
            nodes: Nodes::Own(TestCluster::start_steady().await),
            prefix: fresh_prefix(),
        }
    }

    /// The key prefix its servers use (`--key-prefix`).
    pub fn prefix(&self) -> &str {
        match self {
            Self::Single(_) => "turnstile",
            Self::Cluster { prefix, .. } => prefix,
        }
    }

    /// A key under the prefix: `key("lock:{room}")` is the lock `room`'s key.
    pub fn key(&self, rest: &str) -> String {
        format!("{}:{rest}", self.prefix())
    }

    /// The `serve` arguments that point a server process at it.
    pub fn serve_args(&self) -> Vec<String> {
        match self {
            Self::Single(redis) => vec!["--redis-url".into(), redis.url()],
            Self::Cluster { nodes, prefix } => vec![
                "--redis-cluster".into(),
                "--redis-url".into(),
                nodes.url(),
                "--key-prefix".into(),
                prefix.clone(),
            ],
        }
    }

    /// A connection for the test's own commands (routed by key on a cluster).
    pub async fn conn(&self) -> TestConn {
        match self {
            Self::Single(redis) => TestConn::Single(redis.conn().await),
            Self::Cluster { nodes, .. } => TestConn::Cluster(nodes.conn().await),
        }
    }

    /// How many times `command` ran (summed over the nodes of a cluster).
    pub async fn command_calls(&self, command: &str) -> u64 {
        match self {
            Self::Single(redis) => redis.command_calls(command).await,
            Self::Cluster { nodes, .. } => own(nodes).command_calls(command),
        }
    }

    /// Waits (at most 10 s) until `command` has run more than `calls` times.
    pub async fn wait_command_calls_above(&self, command: &str, calls: u64) {
        eventually(&format!("{command} runs"), WAIT, || async {
            self.command_calls(command).await > calls
        })
        .await;
    }

    /// Every command the servers sent so far (on a cluster: to its primaries, without
    /// the replicas' replication traffic).
    pub async fn total_commands(&self) -> u64 {
        match self {
            Self::Single(redis) => redis.total_commands().await,
            Self::Cluster { nodes, .. } => own(nodes).client_commands(),
        }
    }

    /// Waits (within [`WAIT`]) for a 2 s window in which the servers sent Redis fewer
    /// than 20 commands: only the test's INFO and the health probe's PINGs (one a
    /// second). A server that polls never gives such a window. `what` names the
    /// setting in the failure.
    pub async fn wait_quiet(&self, what: &str) {
        super::eventually_explained("a quiet 2 s", WAIT, || async {
            let before = self.total_commands().await;
            // The measured window: what is checked is that nothing happens in it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let spent = self.total_commands().await - before;
            if spent < 20 {
                return Ok(());
            }
            Err(format!("{spent} commands in 2 s with {what}"))
        })
        .await;
    }

    /// Loses every write the servers made, as the worst crash would: `FLUSHALL` on one
    /// Redis, every key under the test's prefix on a cluster (shared with other tests).
    pub async fn lose_every_write(&self) {
        let mut conn = self.conn().await;
        match self {
            Self::Single(_) => {
                let _: () = redis::cmd("FLUSHALL")
                    .query_async(&mut conn)
                    .await
                    .expect("FLUSHALL");
            }
            Self::Cluster { nodes, prefix } => {
                for key in nodes.keys(&format!("{prefix}:*")) {
                    let _: () = redis::cmd("DEL")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .expect("DEL");
                }
            }
        }
    }

    /// Holds every write for `pause` (on every primary of a cluster).
    pub async fn pause_writes(&self, pause: Duration) {
        match self {
            Self::Single(redis) => redis.pause_writes(pause).await,
            Self::Cluster { nodes, .. } => own(nodes).pause_writes(pause),
        }
    }

    /// Ends a pause of [`Self::pause_writes`] now.
    pub async fn resume_writes(&self) {
        match self {
            Self::Single(redis) => redis.resume_writes().await,
            Self::Cluster { nodes, .. } => own(nodes).resume_writes(),
        }
    }
}

impl Store for TestStore {
    /// Three on a cluster: every test body runs once on one Redis under one server,
    /// and once on a cluster under three, its clients spread over them.
    fn replicas(&self) -> usize {
        match self {
            Self::Single(_) => 1,
            Self::Cluster { .. } => 3,
        }
    }

    fn config(&self) -> Config {
        match self {
            Self::Single(redis) => redis.config(),
            Self::Cluster { nodes, prefix } => {
                let mut config = nodes.config();
                config.key_prefix = prefix.clone();
                config
            }
        }
    }
}

/// The cluster of a test that counts or pauses: it must be its own.
fn own(nodes: &Nodes) -> &TestCluster {
    match nodes {
        Nodes::Own(cluster) => cluster,
        Nodes::Shared(_) => {
            panic!("counting or pausing Redis needs a cluster of the test's own: `own cluster`")
        }
    }
}

/// A prefix no other test of this binary uses.
fn fresh_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("test{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The shared cluster. Its nodes are started from a thread that lives as long as the
/// process and die with it (`PR_SET_PDEATHSIG` fires when the thread that forked
/// them exits), since a static is never dropped.
fn shared() -> &'static TestCluster {
    static SHARED: OnceLock<TestCluster> = OnceLock::new();
    SHARED.get_or_init(|| {
        let (started, cluster) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("shared-cluster".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                let _ = started.send(runtime.block_on(TestCluster::start_for_process()));
                loop {
                    std::thread::park();
                }
            })
            .expect("a thread for the shared cluster");
        cluster.recv().expect("the shared cluster started")
    })
}

/// A connection of a test's own: to one Redis, or to a cluster.
#[derive(Clone)]
pub enum TestConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for TestConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            TestConn::Single(conn) => conn.req_packed_command(cmd),
            TestConn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            TestConn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            TestConn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            TestConn::Single(conn) => conn.get_db(),
            TestConn::Cluster(conn) => conn.get_db(),
        }
    }
}
