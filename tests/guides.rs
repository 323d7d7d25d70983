//! The README's Python guide, run exactly as printed: its set-up commands (a virtual
//! environment, stubs generated into their own directory) in a scratch directory, then
//! every Python example against a real server. Examples that loop forever (a worker, a
//! leader holding its lock) run until they print what shows they work, then stop.
//! Skipped, saying why, only where Python's venv or PyPI cannot be had.

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

/// The README's Python set-up block: the first `sh` block after the Python heading.
fn python_setup(readme: &str) -> String {
    let from = readme
        .find("### From Python")
        .expect("a Python section in the README");
    blocks(&readme[from..], "sh")
        .into_iter()
        .next()
        .expect("a set-up block")
        .1
}

/// Runs the set-up commands in `dir` (with `proto/` linked in); false, printing why,
/// when a tool they need is not there.
fn set_up(dir: &Path, setup: &str) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    let proto = dir.join("proto");
    if !proto.exists() {
        std::os::unix::fs::symlink(Path::new(env!("CARGO_MANIFEST_DIR")).join("proto"), &proto)
            .unwrap();
    }
    if dir.join(".venv/bin/python").exists() && dir.join("gen/turnstile").exists() {
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
        if why.contains("Could not find a version") || why.contains("NewConnectionError") {
            println!("skipped: PyPI is not reachable: {why}");
            return false;
        }
        panic!("the README's Python set-up failed:\n{why}");
    }
    true
}

/// Runs one example; with `until`, stops it once it printed a line containing that.
fn run_example(dir: &Path, line: usize, code: &str, addr: &str, until: Option<&str>) {
    let file = dir.join(format!("example_{line}.py"));
    std::fs::write(&file, code).unwrap();
    let mut child = Command::new(dir.join(".venv/bin/python"))
        .arg(&file)
        .env("PYTHONPATH", dir.join("gen"))
        .env("TURNSTILE_ADDR", addr)
        .env("PYTHONUNBUFFERED", "1")
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
    let output = child.wait_with_output().expect("python ran");
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_python_examples_run_as_printed() -> TestResult {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-guide");
    let setup = python_setup(&readme);
    let ready = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || set_up(&dir, &setup)
    })
    .await?;
    if !ready {
        return Ok(());
    }
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.addr.to_string();
    // Something for the Subscribe worker to send.
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
        .await?;
    let examples = blocks(&readme, "python");
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
        let dir = dir.clone();
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || run_example(&dir, line, &code, &addr, until)).await?;
    }
    Ok(())
}
