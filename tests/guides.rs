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
    // Done before, from the protos as they are now (stubs made from older protos
    // would lack new fields).
    if fresh(&dir.join(done)) {
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

/// Whether `made` exists and is newer than every file of `proto/`.
fn fresh(made: &Path) -> bool {
    let Ok(made) = std::fs::metadata(made).and_then(|m| m.modified()) else {
        return false;
    };
    let protos = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/turnstile/v1");
    std::fs::read_dir(protos)
        .expect("proto dir")
        .filter_map(|entry| entry.ok()?.metadata().ok()?.modified().ok())
        .all(|changed| changed <= made)
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

/// Runs one `sh` block with bash in `dir`, the built binary first on `PATH`; with
/// `until`, stops it once its output (stdout and stderr) has a line containing that.
/// Returns everything it printed.
async fn run_shell(
    dir: &Path,
    (line, code): (usize, &str),
    server: &str,
    until: Option<&str>,
) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, BufReader as AsyncBufReader};
    let bin_dir = Path::new(common::BIN)
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = tokio::process::Command::new("bash")
        .args(["-eo", "pipefail", "-c", code])
        .current_dir(dir)
        .env("PATH", path)
        .env("TURNSTILE_SERVER", server)
        .env_remove("TURNSTILE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    for pipe in [
        Box::new(out) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(err),
    ] {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = AsyncBufReader::new(pipe).lines();
            while let Ok(Some(printed)) = lines.next_line().await {
                let _ = tx.send(printed);
            }
        });
    }
    drop(tx);
    let mut printed = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(text) = rx.recv().await {
            let found = until.is_some_and(|wanted| text.contains(wanted));
            printed.push(text);
            if found {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    match until {
        Some(wanted) => {
            assert!(
                ended,
                "README line {line}: never printed {wanted:?}: {printed:?}"
            );
            let _ = child.kill().await;
        }
        None => {
            let status = child.wait().await.expect("bash ran");
            assert!(
                status.success(),
                "README line {line} failed ({status}): {printed:?}"
            );
        }
    }
    printed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_shell_blocks_run_as_printed() -> TestResult {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))?;
    // The guides' set-up blocks are run by the guide tests above.
    let setups = [
        setup_block(&readme, "### From Python"),
        setup_block(&readme, "### From Node"),
    ];
    let blocks: Vec<(usize, String)> = blocks(&readme, "sh")
        .into_iter()
        .filter(|(_, code)| !setups.contains(code))
        .collect();
    assert!(blocks.len() >= 4, "the README's shell blocks went missing");
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let dir = common::TempDir::new("readme-sh");
    let mut all = Vec::new();
    for (line, code) in &blocks {
        // `turnstile work` serves until stopped: until it has acked a task.
        let until = code.contains("turnstile work").then_some(", acked");
        let printed = run_shell(
            &dir.0,
            (*line, code),
            &format!("http://{}", server.addr),
            until,
        )
        .await;
        all.push((code.clone(), printed));
    }
    let output = |needle: &str| -> Vec<String> {
        all.iter()
            .find(|(code, _)| code.contains(needle))
            .map(|(_, printed)| printed.clone())
            .unwrap_or_else(|| panic!("no block with {needle:?}"))
    };
    // The token recipe prints a SHA-256 in hex.
    let hash = output("sha256sum");
    assert!(
        hash.len() == 1 && hash[0].len() == 64 && hash[0].bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash:?}"
    );
    // The queue block: the ids, the table, the delayed task as JSON, the cancel.
    let queue = output("turnstile enqueue").join("\n");
    for wanted in ["welcome-42", "welcome-43", "QUEUE", "\"state\":\"DELAYED\""] {
        assert!(queue.contains(wanted), "no {wanted:?} in {queue}");
    }
    let lock = output("turnstile lock").join("\n");
    assert!(
        lock.contains("one machine reports, with fencing token 1"),
        "{lock}"
    );
    let work = output("turnstile work").join("\n");
    assert!(
        work.contains("sending welcome-42: {\"to\": \"ada@example.com\"}"),
        "{work}"
    );
    Ok(())
}
