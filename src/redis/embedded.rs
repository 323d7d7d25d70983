//! The embedded Redis: a `redis-server` child process with its data in a directory of
//! ours (append-only file on), bound to a unix socket or a loopback port, started and
//! waited for at boot and shut down (with a final AOF fsync) on exit. The tests use the
//! same code to get a real Redis of their own.
//!
//! Two Redis processes on one append-only directory can lose data, so:
//! - the child dies with its parent: `PR_SET_PDEATHSIG` sends it SIGTERM (Redis then
//!   fsyncs its AOF and exits) when the server is killed, even by SIGKILL;
//! - the data directory is locked (`flock` on `turnstile.lock`), and the child inherits
//!   the lock, so it stays held while either process lives. A second start waits a
//!   little for a dying child to exit, then refuses with a clear message.

use std::{
    fs::File,
    io::ErrorKind,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

/// How long `redis-server` may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest unix socket path the kernel takes (108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 100;
/// The data directory's lock file, held by the server and its redis-server.
pub const LOCK_FILE: &str = "turnstile.lock";
/// The redis-server's pid file in the data directory.
pub const PID_FILE: &str = "redis.pid";
/// How long a start waits for the redis-server of a server that just died (it exits
/// on SIGTERM after an AOF fsync) before refusing the data directory.
const LOCK_WAIT: Duration = Duration::from_secs(5);

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
    /// With the append-only file: fsync every write (`appendfsync always`) instead of
    /// once a second, so nothing a client was told is lost to a crash of Redis.
    pub fsync_always: bool,
}

/// A running `redis-server` child; killed if dropped without `stop`.
#[derive(Debug)]
pub struct EmbeddedRedis {
    /// The child process (kill_on_drop).
    child: Child,
    /// Our handle on the data directory's lock (the child has its own).
    _lock: File,
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
        let lock = lock_dir(&dir).await?;
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
                "--pidfile",
                PID_FILE,
            ])
            .args([
                "--appendonly",
                if options.append_only { "yes" } else { "no" },
                "--appendfsync",
                if options.fsync_always {
                    "always"
                } else {
                    "everysec"
                },
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
        let parent = std::process::id();
        let lock_fd = lock.as_raw_fd();
        // SAFETY: between fork and exec the closure only makes async-signal-safe calls
        // (prctl, getppid, fcntl) and allocates nothing.
        unsafe {
            command.pre_exec(move || {
                // PDEATHSIG fires when the thread that forked us exits: the server and
                // the tests start Redis from their runtime's main (block_on) thread,
                // which lives as long as they do.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl: then nobody would stop us.
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::other("the server exited"));
                }
                // Keep the data directory's lock across exec (clear FD_CLOEXEC).
                if libc::fcntl(lock_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|err| match err.kind() {
            ErrorKind::NotFound => {
                "redis-server was not found on PATH: install it (Debian/Ubuntu: \
                 `apt-get install redis-server`) or pass --redis-url"
                    .to_owned()
            }
            _ => format!("cannot start redis-server: {err}"),
        })?;
        let mut redis = Self {
            child,
            _lock: lock,
            url,
            dir,
        };
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

/// Takes the data directory's lock, waiting up to [`LOCK_WAIT`] for a redis-server
/// that is exiting (its server just died); a live one keeps the directory refused.
async fn lock_dir(dir: &Path) -> Result<File, String> {
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
    let started = tokio::time::Instant::now();
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::WouldBlock {
            return Err(format!("cannot lock {}: {err}", path.display()));
        }
        if started.elapsed() >= LOCK_WAIT {
            let pid = std::fs::read_to_string(dir.join(PID_FILE)).unwrap_or_default();
            return Err(format!(
                "data dir {} is in use by another redis-server (pid {}): a turnstile \
                 server still running there, or the Redis of one that was killed. Stop \
                 it, or give this server another --data-dir",
                dir.display(),
                pid.trim()
            ));
        }
        // Start-up only: a dying redis-server usually exits within a second.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
