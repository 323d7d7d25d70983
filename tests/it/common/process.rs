//! The built binary as a child process: `turnstile serve` on free ports, its ready
//! line, and a server whose log lines a test reads.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::Duration,
};

use tonic::transport::Channel;
use turnstile::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient,
};

use super::{eventually_blocking, TestRedis, TestStore};

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
        "--dashboard-listen",
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

    /// A server with these `serve` arguments.
    pub fn start_args(args: &[String]) -> Self {
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

/// The command line, pointed at `server` (no token or CA from this process' own
/// environment), killed if the test drops it.
pub fn cli_of(server: &super::TestServer) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BIN);
    command
        .env("TURNSTILE_SERVER", format!("http://{}", server.addr))
        .env_remove("TURNSTILE_TOKEN")
        .env_remove("TURNSTILE_CA_CERT")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Sends `signal` to a running child.
pub fn send_signal(child: &tokio::process::Child, signal: libc::c_int) {
    let pid = child.id().expect("still running") as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}
