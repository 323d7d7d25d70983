//! The embedded Redis: a `redis-server` child process with its data in a directory of
//! ours (append-only file on), bound to a unix socket or a loopback port, started and
//! waited for at boot and shut down (with a final AOF fsync) on exit. The tests use the
//! same code to get a real Redis of their own.

use std::{
    io::ErrorKind,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

/// How long `redis-server` may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest unix socket path the kernel takes (108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 100;

/// Where the child listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bind {
    /// A unix socket in the data directory (the server's default).
    UnixSocket,
    /// A TCP port on 127.0.0.1 (the tests', so a restart can reuse it).
    Port(u16),
}

/// How to start the child.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// Its working directory: AOF, log and socket live here.
    pub dir: PathBuf,
    /// Where it listens.
    pub bind: Bind,
    /// Append-only file on (durable) or off (faster tests).
    pub append_only: bool,
}

/// A running `redis-server` child; killed if dropped without `stop`.
#[derive(Debug)]
pub struct EmbeddedRedis {
    /// The child process (kill_on_drop).
    child: Child,
    url: String,
    dir: PathBuf,
}

impl EmbeddedRedis {
    /// Starts `redis-server` from PATH and waits until it answers PING.
    pub async fn start(options: &EmbeddedOptions) -> Result<Self, String> {
        std::fs::create_dir_all(&options.dir)
            .map_err(|err| format!("cannot create data dir {}: {err}", options.dir.display()))?;
        let dir = std::fs::canonicalize(&options.dir)
            .map_err(|err| format!("data dir {}: {err}", options.dir.display()))?;
        let mut command = Command::new("redis-server");
        command
            .current_dir(&dir)
            .args([
                "--bind",
                "127.0.0.1",
                "--protected-mode",
                "yes",
                "--daemonize",
                "no",
            ])
            .args([
                "--save",
                "",
                "--logfile",
                "redis.log",
                "--loglevel",
                "warning",
            ])
            .args([
                "--appendonly",
                if options.append_only { "yes" } else { "no" },
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let socket = dir.join("redis.sock");
        let use_socket =
            options.bind == Bind::UnixSocket && socket.as_os_str().len() <= MAX_SOCKET_PATH;
        let url = match options.bind {
            Bind::Port(port) => {
                command.args(["--port", &port.to_string()]);
                format!("redis://127.0.0.1:{port}")
            }
            Bind::UnixSocket if use_socket => {
                let path = socket.to_str().ok_or("data dir path is not UTF-8")?;
                command.args([
                    "--port",
                    "0",
                    "--unixsocket",
                    path,
                    "--unixsocketperm",
                    "700",
                ]);
                format!("unix://{path}")
            }
            Bind::UnixSocket => {
                // The data dir's path is too long for a socket: a loopback port instead.
                let port = free_port().map_err(|err| format!("no free loopback port: {err}"))?;
                command.args(["--port", &port.to_string()]);
                format!("redis://127.0.0.1:{port}")
            }
        };
        let child = command.spawn().map_err(|err| match err.kind() {
            ErrorKind::NotFound => {
                "redis-server was not found on PATH: install it (Debian/Ubuntu: \
                 `apt-get install redis-server`) or pass --redis-url"
                    .to_owned()
            }
            _ => format!("cannot start redis-server: {err}"),
        })?;
        let mut redis = Self { child, url, dir };
        redis.wait_until_ready().await?;
        Ok(redis)
    }

    /// The URL clients connect with.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn wait_until_ready(&mut self) -> Result<(), String> {
        let client = redis::Client::open(self.url.as_str()).map_err(|err| err.to_string())?;
        let started = tokio::time::Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server exited at start ({status}): {}",
                    self.log_tail()
                ));
            }
            if let Ok(Ok(mut conn)) = tokio::time::timeout(
                Duration::from_millis(500),
                client.get_multiplexed_async_connection(),
            )
            .await
            {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                if pong.is_ok() {
                    return Ok(());
                }
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "redis-server did not answer within {START_TIMEOUT:?}: {}",
                    self.log_tail()
                ));
            }
            // Start-up only: a short poll until the child accepts connections.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// Stops the child: `SHUTDOWN` (which fsyncs the AOF), then a kill if it lingers.
    pub async fn stop(mut self) {
        if let Ok(client) = redis::Client::open(self.url.as_str()) {
            if let Ok(Ok(mut conn)) = tokio::time::timeout(
                Duration::from_secs(1),
                client.get_multiplexed_async_connection(),
            )
            .await
            {
                // The connection drops as the server exits; the reply is not expected.
                let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query_async(&mut conn).await;
            }
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// Kills the child at once (SIGKILL), as a crash would, and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// The directory the child runs in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
