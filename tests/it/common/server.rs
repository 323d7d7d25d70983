//! The real server in-process on `127.0.0.1:0` (and its replicas on a cluster store),
//! its gRPC clients and its metrics scrape.

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::{Channel, ClientTlsConfig};
use turnstile::{
    config::Config,
    embedded::free_port,
    pb::{lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient},
};

use super::{eventually, Store, WAIT};

/// The real server, in-process, on a free port; shut down on drop. On a store that
/// asks for several replicas (a cluster [`TestStore`]), the other replicas are its
/// `peers`: clients are spread over all of them in turn, and metrics are summed.
pub struct TestServer {
    pub addr: SocketAddr,
    /// Its Prometheus endpoint.
    pub metrics: SocketAddr,
    /// Its web dashboard (`None` when a test turned it off).
    pub dashboard: Option<SocketAddr>,
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
        let mut server = Self::start_one(redis, &change, client_tls.clone(), None).await;
        for _ in 1..redis.replicas() {
            let peer = Self::start_one(redis, &change, client_tls.clone(), None).await;
            server.peers.push(peer);
        }
        server
    }

    /// One replica (of a store with one) on `addr`: how a test restarts a replica it
    /// shut down, on the address its clients know.
    pub async fn start_at(redis: &impl Store, addr: SocketAddr) -> Self {
        Self::start_one(redis, &|_| {}, None, Some(addr)).await
    }

    /// One replica, on `bind` or a free port.
    async fn start_one(
        redis: &impl Store,
        change: &impl Fn(&mut Config),
        client_tls: Option<ClientTlsConfig>,
        bind: Option<SocketAddr>,
    ) -> Self {
        // The metrics port is picked free a moment before the server binds it: a start
        // that lost it to another process fails at once and is tried again.
        for _ in 0..5 {
            let mut config = redis.config();
            let port = free_port().expect("free port");
            config.metrics_listen = SocketAddr::from(([127, 0, 0, 1], port));
            let port = free_port().expect("free port");
            config.dashboard_listen =
                turnstile::config::DashboardListen(Some(SocketAddr::from(([127, 0, 0, 1], port))));
            change(&mut config);
            let metrics = config.metrics_listen;
            let dashboard = config.dashboard_listen.0;
            let listener = match bind {
                Some(addr) => TcpListener::bind(addr)
                    .await
                    .expect("bind the same address"),
                None => TcpListener::bind("127.0.0.1:0").await.expect("bind"),
            };
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(turnstile::server::run(config, listener, async move {
                let _ = stopped.await;
            }));
            let mut server = Self {
                addr,
                metrics,
                dashboard,
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

    /// The values of a metric on the replicas that report it (per-queue families
    /// appear only on the replicas some call of that queue reached).
    pub async fn metric_values(&self, name: &str) -> Vec<f64> {
        let mut values = Vec::new();
        for replica in std::iter::once(self).chain(&self.peers) {
            let body = replica.scrape().await;
            values.extend(
                body.lines()
                    .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                    .and_then(|value| value.trim().parse::<f64>().ok()),
            );
        }
        values
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

    pub async fn semaphores(
        &self,
    ) -> turnstile::pb::semaphore_service_client::SemaphoreServiceClient<Channel> {
        turnstile::pb::semaphore_service_client::SemaphoreServiceClient::new(self.channel().await)
    }

    pub async fn schedules(
        &self,
    ) -> turnstile::pb::schedule_service_client::ScheduleServiceClient<Channel> {
        turnstile::pb::schedule_service_client::ScheduleServiceClient::new(self.channel().await)
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
