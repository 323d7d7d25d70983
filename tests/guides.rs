//! The README's Python and Node guides, run exactly as printed: each one's set-up
//! commands (Python: a virtual environment and stubs generated into their own
//! directory; Node: npm packages) in a scratch directory under `target/tmp`, then every
//! example against a real server. Examples that loop forever (a worker, a leader holding
//! its lock) run until they print what shows they work, then stop. Skipped, saying why,
//! only where the language's tools or registry cannot be had.

mod common;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use common::{TestRedis, TestResult, TestServer};
use turnstile::pb::{EnqueueRequest, TaskSpec};

/// The fenced blocks of `language` in the README after `heading`, up to the next `##`
/// heading of the same or a higher level.
fn blocks(readme: &str, language: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = readme.lines().enumerate();
    while let Some((at, line)) = lines.next() {
        if line.trim() == format!("```{language}") {
            let body: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| l.trim() != "```")
                .collect();
            out.push((at + 1, body.join("\n") + "\n"));
        }
    }
    out
}

/// A guide's set-up block: the first `sh` block after its `heading`.
fn setup_block(readme: &str, heading: &str) -> String {
    let from = readme
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"));
    blocks(&readme[from..], "sh")
        .into_iter()
        .next()
        .expect("a set-up block")
        .1
}

/// Runs the set-up commands in `dir` (with `proto/` linked in) unless `done` exists
/// there already; false, printing why, when a tool or registry they need is not there.
fn set_up(dir: &Path, setup: &str, done: &str) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    let proto = dir.join("proto");
    if !proto.exists() {
        std::os::unix::fs::symlink(Path::new(env!("CARGO_MANIFEST_DIR")).join("proto"), &proto)
            .unwrap();
    }
    if dir.join(done).exists() {
        return true;
    }
    let output = Command::new("bash")
        .args(["-euc", setup])
        .current_dir(dir)
        .output()
        .expect("bash");
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr);
        if why.contains("ensurepip") || why.contains("No module named venv") {
            println!("skipped: Python's venv is not installed here: {why}");
            return false;
        }
        if why.contains("command not found") {
            println!("skipped: a tool of the set-up is not installed here: {why}");
            return false;
        }
        if [
            "Could not find a version",
            "NewConnectionError",
            "ENOTFOUND",
            "EAI_AGAIN",
        ]
        .iter()
        .any(|offline| why.contains(offline))
        {
            println!("skipped: the package registry is not reachable: {why}");
            return false;
        }
        panic!("the README's set-up failed:\n{why}");
    }
    true
}

/// Runs one example, `command` given its file (written into `dir` as `example_<line>`
/// plus `extension`); with `until`, stops it once it printed a line containing that.
/// Returns what it printed.
fn run_example(
    mut command: Command,
    dir: &Path,
    (line, code): (usize, &str),
    extension: &str,
    addr: &str,
    until: Option<&str>,
) -> Vec<String> {
    let file = dir.join(format!("example_{line}.{extension}"));
    std::fs::write(&file, code).unwrap();
    let mut child = command
        .arg(&file)
        .current_dir(dir)
        .env("TURNSTILE_ADDR", addr)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for printed in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(printed);
        }
    });
    let mut printed = Vec::new();
    let seen = match until {
        Some(wanted) => loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(text) => {
                    let found = text.contains(wanted);
                    printed.push(text);
                    if found {
                        break true;
                    }
                }
                Err(_) => break false,
            }
        },
        None => true,
    };
    if until.is_some() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().expect("the example ran");
    if until.is_none() {
        // Everything it printed (the reader ends with its stdout).
        printed.extend(rx.iter());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    match until {
        Some(wanted) => assert!(
            seen,
            "README line {line}: never printed {wanted:?}; printed {printed:?}\n{stderr}"
        ),
        None => assert!(
            output.status.success(),
            "README line {line} failed: {printed:?}\n{stderr}"
        ),
    }
    printed
}

/// A test server with a task for the Subscribe example to send.
async fn server_for_guides(redis: &TestRedis) -> TestServer {
    let server = TestServer::start(redis).await;
    server
        .queues()
        .await
        .enqueue(EnqueueRequest {
            queue: "emails".into(),
            tasks: vec![TaskSpec {
                id: "hello-1".into(),
                payload: b"hi".to_vec().into(),
                ..Default::default()
            }],
        })
        .await
        .expect("enqueue");
    server
}

/// A guide set up and a server for its examples.
struct Guide {
    readme: String,
    dir: PathBuf,
    addr: String,
    _server: TestServer,
    _redis: TestRedis,
}

/// Sets up the guide under `heading` in `target/tmp/<name>` (unless `done` exists there
/// from an earlier run) and starts a server; `None` when the guide's tools are missing.
async fn prepare(heading: &str, name: &str, done: &'static str) -> Option<Guide> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let setup = setup_block(&readme, heading);
    let ready = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || set_up(&dir, &setup, done)
    })
    .await
    .expect("set-up ran");
    if !ready {
        return None;
    }
    let redis = TestRedis::start().await;
    let server = server_for_guides(&redis).await;
    Some(Guide {
        readme,
        dir,
        addr: server.addr.to_string(),
        _server: server,
        _redis: redis,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_python_examples_run_as_printed() -> TestResult {
    let Some(guide) = prepare(
        "### From Python",
        "python-guide",
        "gen/turnstile/v1/queue_pb2_grpc.py",
    )
    .await
    else {
        return Ok(());
    };
    let examples = blocks(&guide.readme, "python");
    assert!(
        examples.len() >= 3,
        "the README's Python examples went missing"
    );
    for (line, code) in examples {
        // What shows that an example which never ends works.
        let until = if code.contains("locks.Hold(") {
            Some("leader with fencing token")
        } else if code.contains("queues.Subscribe(") {
            Some("sending hello-1")
        } else if code.contains("queues.Lease(") {
            Some("sending welcome-42")
        } else {
            None
        };
        let dir = guide.dir.clone();
        let addr = guide.addr.clone();
        tokio::task::spawn_blocking(move || {
            let mut python = Command::new(dir.join(".venv/bin/python"));
            python
                .env("PYTHONPATH", dir.join("gen"))
                .env("PYTHONUNBUFFERED", "1");
            run_example(python, &dir, (line, &code), "py", &addr, until)
        })
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_node_example_runs_as_printed() -> TestResult {
    let Some(guide) = prepare(
        "### From Node",
        "node-guide",
        "node_modules/@grpc/proto-loader/package.json",
    )
    .await
    else {
        return Ok(());
    };
    let examples = blocks(&guide.readme, "js");
    assert_eq!(examples.len(), 1, "the README's Node example went missing");
    let (line, code) = examples.into_iter().next().unwrap();
    let (dir, addr) = (guide.dir.clone(), guide.addr.clone());
    let printed = tokio::task::spawn_blocking(move || {
        run_example(Command::new("node"), &dir, (line, &code), "js", &addr, None)
    })
    .await?
    .join("\n");
    // snake_case fields arrive (max_attempts 3, not the default 25), the payload is the
    // bytes sent, enums read as names and 64-bit fencing tokens as strings.
    for wanted in [
        "acquired true fencing token ",
        "enqueued report-7 created true",
        "leased report-7 {\"user\":7} max_attempts 3 state TASK_STATE_IN_FLIGHT",
        "acked true",
        "released true",
    ] {
        assert!(printed.contains(wanted), "no {wanted:?} in {printed}");
    }
    Ok(())
}
