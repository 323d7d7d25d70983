//! What the bench measures: its own embedded Redis and a `turnstile serve` child on free
//! loopback ports (or a running server given with `--server`), plus a no-op gRPC server
//! child for the transport floor. Children are separate processes, as in production, so
//! the bench's own client work does not share their runtime.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};
use tonic::transport::Channel;

use turnstile::embedded::{Bind, EmbeddedOptions, EmbeddedRedis};

/// The servers under test.
pub struct Target {
    /// The turnstile servers' addresses (`http://…`): one, or the replicas of the
    /// `scale` scenario, which clients are spread over.
    pub servers: Vec<String>,
    /// Its Redis, when known: for the Redis floors and command counts.
    pub redis_url: Option<String>,
    /// The server child's pid, for its RSS (None with `--server`).
    pub server_pid: Option<u32>,
    /// Every server child's pid, for their CPU time.
    pub server_pids: Vec<u32>,
    /// The no-op gRPC server's address, for the transport floor.
    pub noop: String,
    /// The no-op gRPC server child's pid, for its CPU time.
    pub noop_pid: Option<u32>,
    /// The first server's dashboard (`host:port`), when it serves one (a build
    /// before the dashboard does not).
    pub dashboard: Option<String>,
    /// The `turnstile` binary whose `serve` children this target starts.
    bin: PathBuf,
    /// Children, killed on drop.
    children: Vec<Child>,
    embedded: Option<EmbeddedRedis>,
    dir: Option<PathBuf>,
}

impl Target {
    /// An empty target whose servers will be `bin serve` children on `redis_url`.
    fn empty(bin: &Path, redis_url: Option<String>, children: Vec<Child>) -> Self {
        Self {
            servers: Vec::new(),
            redis_url,
            server_pid: None,
            server_pids: Vec::new(),
            noop: String::new(),
            noop_pid: None,
            dashboard: None,
            bin: bin.to_owned(),
            children,
            embedded: None,
            dir: None,
        }
    }

    /// Starts what `server`/`redis_url` do not name, with `bin` as the server.
    pub async fn start(
        bin: &Path,
        server: Option<String>,
        redis_url: Option<String>,
    ) -> Result<Self, String> {
        let mut target = Self::empty(bin, redis_url, Vec::new());
        match server {
            Some(server) => {
                target.servers.push(if server.contains("://") {
                    server
                } else {
                    format!("http://{server}")
                });
            }
            None => {
                if target.redis_url.is_none() {
                    let dir = std::env::temp_dir()
                        .join(format!("turnstile-bench-{}", std::process::id()));
                    let _ = std::fs::remove_dir_all(&dir);
                    let redis = EmbeddedRedis::start(&EmbeddedOptions {
                        dir: dir.clone(),
                        bind: Bind::UnixSocket,
                        append_only: true,
                        fsync_always: false,
                    })
                    .await?;
                    target.redis_url = Some(redis.url().to_owned());
                    target.embedded = Some(redis);
                    target.dir = Some(dir);
                }
                let url = target.redis_url.clone().unwrap_or_default();
                target.add_server(&url, &[]).await?;
            }
        }
        target.add_noop().await?;
        Ok(target)
    }

    /// The server of another build, `bin`, on the Redis at `redis_url` (for `--against`),
    /// under its own key prefix so that its keys never meet this build's; the no-op
    /// server is this bench's.
    pub async fn other_build(redis_url: &str, bin: &Path) -> Result<Self, String> {
        let mut target = Self::empty(bin, Some(redis_url.to_owned()), Vec::new());
        target
            .add_server(redis_url, &["--key-prefix", "turnstile-against"])
            .await?;
        target.add_noop().await?;
        Ok(target)
    }

    /// `replicas` `turnstile serve` children on the Redis at `redis_url` (started by
    /// the caller, whose `nodes` are stopped with the target), each also given
    /// `serve_args`.
    pub async fn replicas(
        bin: &Path,
        redis_url: &str,
        serve_args: &[&str],
        replicas: usize,
        nodes: Vec<Child>,
    ) -> Result<Self, String> {
        let mut target = Self::empty(bin, Some(redis_url.to_owned()), nodes);
        for _ in 0..replicas {
            target.add_server(redis_url, serve_args).await?;
        }
        target.add_noop().await?;
        Ok(target)
    }

    /// Starts a `turnstile serve` child on `redis_url` with `serve_args`; the first
    /// one's pid is the one whose memory is read.
    async fn add_server(&mut self, redis_url: &str, serve_args: &[&str]) -> Result<(), String> {
        let mut args = vec![
            "serve",
            "--redis-url",
            redis_url,
            "--metrics-listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ];
        args.extend_from_slice(serve_args);
        let (child, addr, dashboard) = spawn(&self.bin, &args).await?;
        self.dashboard = self.dashboard.take().or(dashboard);
        self.server_pid = self.server_pid.or(child.id());
        self.server_pids.extend(child.id());
        self.servers.push(format!("http://{addr}"));
        self.children.push(child);
        Ok(())
    }

    /// Starts the no-op gRPC server child (the transport floor).
    async fn add_noop(&mut self) -> Result<(), String> {
        let exe =
            std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?;
        let (child, addr, _) = spawn(&exe, &["--serve-noop"]).await?;
        self.noop = format!("http://{addr}");
        self.noop_pid = child.id();
        self.children.push(child);
        Ok(())
    }

    /// The `turnstile` binary this target's servers run.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `count` connections to the turnstile servers, spread over them in turn.
    pub async fn server_channels(&self, count: usize) -> Result<Vec<Channel>, String> {
        let mut out = Vec::with_capacity(count);
        for n in 0..count.max(1) {
            out.extend(channels(&self.servers[n % self.servers.len()], 1).await?);
        }
        Ok(out)
    }

    /// `count` connections to the no-op server.
    pub async fn noop_channels(&self, count: usize) -> Result<Vec<Channel>, String> {
        channels(&self.noop, count).await
    }

    /// Stops the children and the embedded Redis.
    pub async fn stop(mut self) {
        for child in &mut self.children {
            let _ = child.kill().await;
        }
        if let Some(redis) = self.embedded.take() {
            redis.stop().await;
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Separate HTTP/2 connections (one connection is one hyper task on each side, so
/// several spread the work over both cores as many clients would).
async fn channels(url: &str, count: usize) -> Result<Vec<Channel>, String> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let channel = Channel::from_shared(url.to_owned())
            .map_err(|err| err.to_string())?
            .connect()
            .await
            .map_err(|err| format!("cannot connect to {url}: {err}"))?;
        out.push(channel);
    }
    Ok(out)
}

/// Runs `exe` with `args` (which make it listen on a free loopback port); waits for its
/// JSON ready line and returns the child, the address it serves on and the dashboard's
/// `host:port` when the line names one. Its stderr keeps being drained.
async fn spawn(exe: &Path, args: &[&str]) -> Result<(Child, String, Option<String>), String> {
    let mut child = Command::new(exe)
        .args(args)
        .env("TURNSTILE_LOG", "info")
        // Servers started side by side must not all take the dashboard's fixed port:
        // each its own (the `dashboard` scenario uses the first one's; an older build
        // ignores the variable).
        .env("TURNSTILE_DASHBOARD_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("cannot start {} {args:?}: {err}", exe.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("\"ready\"") {
                return Some(line);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or_else(|| format!("{args:?} did not get ready"))?;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let addr = ready
        .split("\"addr\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or_else(|| format!("no addr in {ready}"))?
        .to_owned();
    let dashboard = ready
        .split("\"dashboard\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|url| url.split("://").nth(1))
        .map(|rest| rest.trim_end_matches('/').to_owned());
    Ok((child, addr, dashboard))
}
