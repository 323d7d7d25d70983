//! Test harness: a real `redis-server` per test on a free loopback port (own temp dir,
//! killed on drop), the real server in-process on `127.0.0.1:0`, and gRPC clients.

#![allow(dead_code)]

pub mod cluster;
pub mod store;

pub use store::{Store, TestStore};

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU32, Ordering},
        Once,
    },
    time::Duration,
};

use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::{Channel, ClientTlsConfig};
use turnstile::{
    config::Config,
    pb::{lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient},
    redis::embedded::{free_port, Bind, EmbeddedOptions, EmbeddedRedis},
};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Logs once per test binary, through the test writer (shown for failing tests).
pub fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// A fresh, empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("ts-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A real redis-server of this test's own, on a loopback port.
pub struct TestRedis {
    pub redis: Option<EmbeddedRedis>,
    pub port: u16,
    options: EmbeddedOptions,
    pub dir: TempDir,
}

impl TestRedis {
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// With `append_only`, restarts keep the data (for crash tests).
    pub async fn start_with(append_only: bool) -> Self {
        Self::start_with_options(append_only, false).await
    }

    /// With `appendfsync always` too: a SIGKILL loses no write Redis answered.
    pub async fn start_durable() -> Self {
        Self::start_with_options(true, true).await
    }

    async fn start_with_options(append_only: bool, fsync_always: bool) -> Self {
        init_tracing();
        let dir = TempDir::new("redis");
        for _ in 0..5 {
            let port = free_port().expect("free port");
            let options = EmbeddedOptions {
                dir: dir.0.clone(),
                bind: Bind::Port(port),
                append_only,
                fsync_always,
            };
            if let Ok(redis) = EmbeddedRedis::start(&options).await {
                return Self {
                    redis: Some(redis),
                    port,
                    options,
                    dir,
                };
            }
        }
        panic!("could not start redis-server on a free port");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("redis url")
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection")
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub async fn kill(&mut self) {
        if let Some(redis) = self.redis.take() {
            redis.kill().await;
        }
    }

    /// Starts it again on the same port and directory.
    pub async fn restart(&mut self) {
        self.kill().await;
        let redis = EmbeddedRedis::start(&self.options)
            .await
            .expect("redis restart");
        self.redis = Some(redis);
    }

    /// Holds every write (scripts included) for `pause`: once this returns, Redis
    /// queues the server's scripts until the pause ends, so a test can make a call's
    /// script run after its caller gave up, without sleeping to get the order right.
    pub async fn pause_writes(&self, pause: Duration) {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(pause.as_millis() as u64)
            .arg("WRITE")
            .query_async(&mut self.conn().await)
            .await
            .expect("CLIENT PAUSE");
    }

    /// Waits (at most 10 s) until `command` has run more than `calls` times: how a
    /// test knows that a call reached Redis (a long poll made its first look, a feed
    /// ran its detach) instead of sleeping.
    pub async fn wait_command_calls_above(&self, command: &str, calls: u64) {
        eventually(&format!("{command} runs"), WAIT, || async {
            self.command_calls(command).await > calls
        })
        .await;
    }

    /// How many times `command` ran (from INFO commandstats, e.g. "evalsha").
    pub async fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Every command Redis ran so far.
    pub async fn total_commands(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// The real server, in-process, on a free port; shut down on drop. On a store that
/// asks for several replicas (a cluster [`TestStore`]), the other replicas are its
/// `peers`: clients are spread over all of them in turn, and metrics are summed.
pub struct TestServer {
    pub addr: SocketAddr,
    /// Its Prometheus endpoint.
    pub metrics: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), String>>>,
    /// How clients reach a TLS server; `None` for plaintext.
    client_tls: Option<ClientTlsConfig>,
    /// The other replicas on the same store.
    peers: Vec<TestServer>,
    /// Which replica the next channel goes to.
    turn: AtomicU32,
}

impl TestServer {
    pub async fn start(redis: &impl Store) -> Self {
        Self::start_with(redis, |_| {}).await
    }

    /// With changed settings (heartbeat, limits, ...).
    pub async fn start_with(redis: &impl Store, change: impl Fn(&mut Config)) -> Self {
        Self::start_tls(redis, change, None).await
    }

    /// With changed settings that turn TLS on; clients connect with `client_tls`.
    pub async fn start_tls(
        redis: &impl Store,
        change: impl Fn(&mut Config),
        client_tls: Option<ClientTlsConfig>,
    ) -> Self {
        let mut server = Self::start_one(redis, &change, client_tls.clone()).await;
        for _ in 1..redis.replicas() {
            let peer = Self::start_one(redis, &change, client_tls.clone()).await;
            server.peers.push(peer);
        }
        server
    }

    /// One replica.
    async fn start_one(
        redis: &impl Store,
        change: &impl Fn(&mut Config),
        client_tls: Option<ClientTlsConfig>,
    ) -> Self {
        // The metrics port is picked free a moment before the server binds it: a start
        // that lost it to another process fails at once and is tried again.
        for _ in 0..5 {
            let mut config = redis.config();
            let port = free_port().expect("free port");
            config.metrics_listen = SocketAddr::from(([127, 0, 0, 1], port));
            change(&mut config);
            let metrics = config.metrics_listen;
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(turnstile::server::run(config, listener, async move {
                let _ = stopped.await;
            }));
            let mut server = Self {
                addr,
                metrics,
                stop: Some(stop),
                task: Some(task),
                client_tls: client_tls.clone(),
                peers: Vec::new(),
                turn: AtomicU32::new(0),
            };
            if server.wait_ready().await {
                return server;
            }
            if let Some(task) = server.task.take() {
                eprintln!("server did not start: {:?}", task.await);
            }
        }
        panic!("the server did not start in 5 tries");
    }

    /// Waits until health says SERVING (Redis answered the first probe); false if the
    /// server stopped (a port was taken).
    async fn wait_ready(&self) -> bool {
        let mut health = tonic_health::pb::health_client::HealthClient::new(self.channel().await);
        for _ in 0..500 {
            if self.task.as_ref().is_some_and(JoinHandle::is_finished) {
                return false;
            }
            let request = tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            };
            if let Ok(reply) = health.check(request).await {
                if reply.into_inner().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("server never became ready");
    }

    /// The body of a scrape of `/metrics`.
    pub async fn scrape(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut socket = tokio::net::TcpStream::connect(self.metrics)
            .await
            .expect("metrics connect");
        socket
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .expect("metrics request");
        let mut body = String::new();
        socket
            .read_to_string(&mut body)
            .await
            .expect("metrics reply");
        body
    }

    /// The value of a metric (`name` with its labels, as the scrape spells them),
    /// summed over the replicas.
    pub async fn metric(&self, name: &str) -> f64 {
        let body = self.scrape().await;
        let own: f64 = body
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in {body}"));
        let mut sum = own;
        for peer in &self.peers {
            sum += Box::pin(peer.metric(name)).await;
        }
        sum
    }

    /// How many replicas clients are spread over.
    pub fn replicas(&self) -> usize {
        1 + self.peers.len()
    }

    /// Waits (at most 10 s) until `metric` reads `value`: how tests know that calls
    /// are waiting, instead of sleeping.
    pub async fn wait_metric(&self, name: &str, value: f64) {
        eventually(&format!("{name} reads {value}"), WAIT, || async {
            self.metric(name).await == value
        })
        .await;
    }

    /// A channel to the next replica in turn.
    pub async fn channel(&self) -> Channel {
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) as usize % self.replicas();
        let replica = if turn == 0 {
            self
        } else {
            &self.peers[turn - 1]
        };
        replica
            .try_channel(replica.client_tls.clone())
            .await
            .expect("connect")
    }

    /// A channel with `tls` (`None`: plaintext), or why it could not connect.
    pub async fn try_channel(
        &self,
        tls: Option<ClientTlsConfig>,
    ) -> Result<Channel, tonic::transport::Error> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Channel::from_shared(format!("{scheme}://{}", self.addr)).unwrap();
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls)?;
        }
        endpoint.connect().await
    }

    pub async fn locks(&self) -> LockServiceClient<Channel> {
        LockServiceClient::new(self.channel().await)
    }

    pub async fn queues(&self) -> QueueServiceClient<Channel> {
        QueueServiceClient::new(self.channel().await)
    }

    /// Triggers graceful shutdown of every replica and waits for their `run`s to return.
    pub async fn shutdown(mut self) -> Result<(), String> {
        for peer in std::mem::take(&mut self.peers) {
            Box::pin(peer.shutdown()).await?;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .map_err(|_| "shutdown took over 20 s".to_owned())?
                .map_err(|err| err.to_string())?,
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A protobuf duration of `ms` milliseconds.
pub fn ms(ms: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

/// Unix milliseconds of an optional timestamp.
pub fn unix_ms(ts: &Option<prost_types::Timestamp>) -> i64 {
    ts.as_ref()
        .map(turnstile::time::ms_from_timestamp)
        .unwrap_or(0)
}

/// A request with a gRPC deadline.
pub fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// The server binary of this build.
pub const BIN: &str = env!("CARGO_BIN_EXE_turnstile");

/// `turnstile serve` on free loopback ports (gRPC and metrics).
pub fn serve_command() -> Command {
    let mut command = Command::new(BIN);
    command.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    command
}

/// Reads stderr lines until one contains `ready`; returns it (a thread keeps draining).
pub fn ready_line(child: &mut Child) -> String {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a ready line within 30 s");
        if line.contains("\"ready\"") || line.contains(" ready ") {
            return line;
        }
    }
}

/// The value of `"key":"value"` in a JSON log line.
pub fn json_field(line: &str, key: &str) -> String {
    let start = line
        .find(&format!("\"{key}\":\""))
        .unwrap_or_else(|| panic!("{key} in {line}"))
        + key.len()
        + 4;
    line[start..].split('"').next().unwrap().to_owned()
}

/// The real binary serving on a free port against `redis`; SIGKILLed on drop.
pub struct ServerProcess {
    pub child: Child,
    pub addr: String,
}

impl ServerProcess {
    pub fn start(redis: &TestRedis) -> Self {
        Self::start_args(&["--redis-url".to_owned(), redis.url()])
    }

    /// A server on `store`.
    pub fn start_on(store: &TestStore) -> Self {
        Self::start_args(&store.serve_args())
    }

    fn start_args(args: &[String]) -> Self {
        let mut child = serve_command()
            .args(["--log-format", "json"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn turnstile");
        let line = ready_line(&mut child);
        let addr = json_field(&line, "addr");
        Self { child, addr }
    }

    pub async fn queues(&self) -> QueueServiceClient<Channel> {
        QueueServiceClient::connect(format!("http://{}", self.addr))
            .await
            .expect("connect")
    }

    /// SIGKILL, as a crash would, and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The status a waiting call gets when its deadline passes: DEADLINE_EXCEEDED answered
/// by the server itself (a client-side timeout would be CANCELLED), and in time.
pub fn assert_server_deadline(status: &tonic::Status, started: std::time::Instant) {
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().contains("deadline exceeded while waiting"),
        "{status:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A queue's Stats shows nothing left in any state.
pub fn assert_drained(stats: &turnstile::pb::StatsResponse) {
    assert_eq!(
        (stats.ready, stats.delayed, stats.in_flight, stats.dead),
        (0, 0, 0, 0),
        "{stats:?}"
    );
}

/// How long a test waits for something it can observe before it fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// Redis' clock (`TIME`) in Unix ms: the clock the scripts use.
pub async fn redis_now_ms(conn: &mut impl redis::aio::ConnectionLike) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(conn)
        .await
        .expect("redis TIME");
    secs * 1000 + micros / 1000
}

/// Waits (through [`eventually`]) until Redis' clock reads at least `at` (Unix ms): how
/// a test knows that a lease ran out or a task fell due, as the scripts see it.
pub async fn wait_redis_time(conn: &(impl redis::aio::ConnectionLike + Clone), at: i64) {
    eventually(&format!("redis time {at}"), WAIT, || {
        let mut conn = conn.clone();
        async move { redis_now_ms(&mut conn).await >= at }
    })
    .await;
}

/// Checks `done` every 10 ms until it holds, failing after `within`: how tests wait
/// for something observable (a gauge, a count, a state), never a fixed sleep standing
/// in for "it has happened by now".
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_explained(what, within, || {
        let done = done();
        async move { done.await.then_some(()).ok_or_else(String::new) }
    })
    .await;
}

/// [`eventually`] for a check that says what it saw when it does not hold yet: the
/// last such answer is in the failure, so a timeout on a loaded machine can be told
/// from a real fault (a cluster that never formed, not one that was slow to).
pub async fn eventually_explained<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = std::time::Instant::now();
    while let Err(seen) = check().await {
        let seen = if seen.is_empty() {
            seen
        } else {
            format!("; last seen: {seen}")
        };
        assert!(
            started.elapsed() < within,
            "{what}: not within {within:?}{seen}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`eventually`] for tests that watch processes from a plain thread.
pub fn eventually_blocking(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client's pause after a failed call before it tries again, so that a retry loop
/// does not spin while Redis or a server is down.
pub async fn backoff() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// Calls `call` until it answers, as a client retries UNAVAILABLE (right after a
/// Redis restart each of the server's pooled sockets fails its first call before it
/// is replaced); any other error, or no answer within [`WAIT`], fails the test.
pub async fn retry_unavailable<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let started = std::time::Instant::now();
    loop {
        match call().await {
            Ok(answer) => return answer,
            Err(status) => {
                assert_eq!(
                    status.code(),
                    tonic::Code::Unavailable,
                    "{what}: {status:?}"
                );
                assert!(started.elapsed() < WAIT, "{what}: {status:?}");
            }
        }
    }
}

/// What clients were told about the tasks of one queue, to check afterwards that
/// nothing confirmed was lost (used by the fault and chaos runs).
#[derive(Default)]
pub struct Ledger {
    /// Ids whose Enqueue answered.
    enqueued: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Ids delivered at least once.
    delivered: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Ids whose Ack answered true. An Ack whose answer was lost (Redis or the server
    /// died after running it) may have finished its tasks too, so this is reported,
    /// not required: the queue is checked empty instead.
    acked: std::sync::Mutex<std::collections::HashSet<String>>,
    deliveries: std::sync::atomic::AtomicUsize,
    /// Deliveries of an id after its Ack was confirmed: must stay 0.
    after_ack: std::sync::atomic::AtomicUsize,
}

impl Ledger {
    /// An Enqueue answered for these ids.
    pub fn enqueued(&self, ids: impl IntoIterator<Item = String>) {
        self.enqueued.lock().unwrap().extend(ids);
    }

    /// These tasks were delivered.
    pub fn delivered(&self, tasks: &[turnstile::pb::Task]) {
        use std::sync::atomic::Ordering;
        self.deliveries.fetch_add(tasks.len(), Ordering::SeqCst);
        let acked = self.acked.lock().unwrap();
        let mut delivered = self.delivered.lock().unwrap();
        for task in tasks {
            if acked.contains(&task.id) {
                self.after_ack.fetch_add(1, Ordering::SeqCst);
            }
            delivered.insert(task.id.clone());
        }
    }

    /// An Ack of `tasks` answered `flags`.
    pub fn acked(&self, tasks: &[turnstile::pb::Task], flags: &[bool]) {
        let mut acked = self.acked.lock().unwrap();
        for (task, &done) in tasks.iter().zip(flags) {
            if done {
                acked.insert(task.id.clone());
            }
        }
    }

    /// How many ids an Enqueue confirmed.
    pub fn confirmed(&self) -> usize {
        self.enqueued.lock().unwrap().len()
    }

    /// Confirmed ids not delivered yet (about: ids delivered without a confirmed
    /// enqueue count too), cheap enough for a producer to pace itself by.
    pub fn backlog(&self) -> usize {
        let delivered = self.delivered.lock().unwrap().len();
        self.confirmed().saturating_sub(delivered)
    }

    /// Confirmed ids never delivered.
    pub fn undelivered(&self) -> usize {
        let delivered = self.delivered.lock().unwrap();
        self.enqueued.lock().unwrap().difference(&delivered).count()
    }

    /// Deliveries of an id after its Ack was confirmed.
    pub fn deliveries_after_ack(&self) -> usize {
        self.after_ack.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until every confirmed task was delivered and `queue` holds nothing in any
    /// state (deliveries whose Ack failed come back at their lease end and are acked
    /// then). A call may meet a socket a Redis restart broke: it is simply tried again.
    pub async fn wait_drained(
        &self,
        queues: &mut QueueServiceClient<Channel>,
        queue: &str,
        within: Duration,
    ) {
        let request = || {
            with_timeout(
                turnstile::pb::StatsRequest {
                    queue: queue.into(),
                },
                Duration::from_secs(2),
            )
        };
        eventually(
            "every confirmed task delivered and the queue drained",
            within,
            || {
                let mut queues = queues.clone();
                async move {
                    let Ok(stats) = queues.stats(request()).await else {
                        return false;
                    };
                    let stats = stats.into_inner();
                    self.undelivered() == 0
                        && stats.ready + stats.delayed + stats.in_flight + stats.dead == 0
                }
            },
        )
        .await;
    }

    /// The figures, for the test's output.
    pub fn summary(&self) -> String {
        let confirmed = self.confirmed();
        let deliveries = self.deliveries.load(std::sync::atomic::Ordering::SeqCst);
        format!(
            "tasks confirmed {confirmed}, deliveries {deliveries} ({} duplicates), acks \
             answered {}, deliveries after a confirmed ack {}",
            deliveries.saturating_sub(confirmed),
            self.acked.lock().unwrap().len(),
            self.deliveries_after_ack()
        )
    }
}

/// splitmix64: a small seeded generator, so a randomised run (chaos, model) replays
/// from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed for a randomised run: `var` from the environment (to replay a failure),
/// or the clock.
pub fn seed_from(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| turnstile::time::now_ms() as u64)
}

/// The real binary, its stderr (JSON, debug level) kept line by line.
pub struct LoggedServer {
    pub child: std::process::Child,
    pub addr: String,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl LoggedServer {
    /// On `redis`, with `extra` arguments.
    pub fn start(redis: &TestRedis, extra: &[&str]) -> Self {
        Self::start_with(&redis.url(), extra)
    }

    /// On the Redis at `url`, with `extra` arguments.
    pub fn start_with(url: &str, extra: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = serve_command()
            .args(["--log-format", "json", "--redis-url", url])
            .args(extra)
            .env("TURNSTILE_LOG", "debug")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn turnstile");
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                kept.lock().unwrap().push(line);
            }
        });
        let mut server = Self {
            child,
            addr: String::new(),
            lines,
        };
        let ready = server.wait_line("\"ready\"");
        server.addr = json_field(&ready, "addr");
        server
    }

    /// The first line (from the start) containing `text`, waiting up to 30 s.
    pub fn wait_line(&self, text: &str) -> String {
        let mut found = None;
        eventually_blocking(
            &format!("a log line with {text}"),
            Duration::from_secs(30),
            || {
                found = self
                    .lines
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|l| l.contains(text))
                    .cloned();
                found.is_some()
            },
        );
        found.expect("found")
    }

    pub fn count(&self, text: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(text))
            .count()
    }

    pub fn hangup(&self) {
        self.signal(libc::SIGHUP);
    }

    /// Sends `signal` to the server.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill {signal}");
    }

    /// Waits (up to 30 s) for the server to exit; its status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut status = None;
        eventually_blocking("the server exits", Duration::from_secs(30), || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }

    pub async fn locks(&self) -> LockServiceClient<Channel> {
        LockServiceClient::new(self.channel().await)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
