//! The built binary as a user runs it: the embedded Redis default, the ready line, the
//! metrics endpoint, SIGTERM draining to exit 0, and the error without redis-server.

mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::{TempDir, TestResult};
use tokio_stream::StreamExt;
use turnstile::pb::{hold_response::Event, lock_service_client::LockServiceClient, HoldRequest};

const BIN: &str = env!("CARGO_BIN_EXE_turnstile");

/// Reads stderr lines until one contains `ready`; returns it (a thread keeps draining).
fn ready_line(child: &mut Child) -> String {
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
fn json_field(line: &str, key: &str) -> String {
    let start = line
        .find(&format!("\"{key}\":\""))
        .unwrap_or_else(|| panic!("{key} in {line}"))
        + key.len()
        + 4;
    line[start..].split('"').next().unwrap().to_owned()
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(started.elapsed() < within, "did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_embedded_redis_logs_ready_and_drains_on_sigterm() -> TestResult {
    let dir = TempDir::new("proc");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .env_remove("TURNSTILE_REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let line = ready_line(&mut child);
    let addr = json_field(&line, "addr");
    let metrics = json_field(&line, "metrics");

    // The embedded Redis keeps an append-only file in the data dir.
    assert!(
        dir.0.join("data").join("redis.sock").exists(),
        "no unix socket in the data dir"
    );

    let mut locks = LockServiceClient::connect(format!("http://{addr}")).await?;
    let hold = HoldRequest {
        name: "proc".into(),
        owner: "alice".into(),
        ttl: None,
        wait: None,
    };
    let mut stream = locks.hold(hold).await?.into_inner();
    let first = stream.next().await.expect("an event")?;
    assert!(matches!(first.event, Some(Event::Acquired(_))));

    let mut scrape = std::net::TcpStream::connect(&metrics)?;
    scrape.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")?;
    let mut body = String::new();
    scrape.read_to_string(&mut body)?;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("turnstile_open_streams 1"), "{body}");

    sigterm(&child);
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await? {
            Some(Ok(_)) => continue,
            Some(Err(status)) => break status,
            None => panic!("the Hold stream ended without UNAVAILABLE"),
        }
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let exit = wait_exit(&mut child, Duration::from_secs(20));
    assert!(exit.success(), "exit status {exit}");
    assert!(
        !dir.0.join("data").join("redis.sock").exists(),
        "embedded redis still running"
    );
    let aof = std::fs::read_dir(dir.0.join("data").join("appendonlydir"))?.count();
    assert!(aof > 0, "no append-only file");
    Ok(())
}

#[test]
fn serve_without_redis_server_on_path_says_how_to_fix_it() {
    let dir = TempDir::new("nopath");
    let output = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .env("PATH", dir.0.as_os_str())
        .env_remove("TURNSTILE_REDIS_URL")
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("redis-server") && last.contains("--redis-url"),
        "{stderr}"
    );
    assert!(last.contains("apt-get install redis-server"), "{stderr}");
}
