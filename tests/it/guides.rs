//! The guides, run exactly as printed: every `sh`, `python`, `ts`, `js`, `go`, `java` and `rust` block
//! of the README and of the pages in `docs/` (a `rust` block is one of the crate's
//! examples word for word, which `cargo test` builds). The Python and Node set-up commands (a virtual
//! environment and stubs generated into their own directory; npm packages) run in a
//! scratch directory under `target/tmp`, then every example against a real server.
//! Examples that loop forever (a worker, a leader holding its lock) run until they
//! print what shows they work, then stop. Skipped, saying why, only where the
//! language's tools or registry cannot be had, and never under CI (`CI` set).

use crate::common;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use common::{TestRedis, TestResult, TestServer};
use turnstile::pb::{EnqueueRequest, TaskSpec};

/// A fenced code block of a page.
#[derive(Clone, Debug, PartialEq)]
struct Block {
    /// Where it starts, as `page:line` (`docs/cli.md:12`).
    at: String,
    code: String,
}

/// The pages whose blocks run, in order: the README, then `docs/*.md` by name, then
/// the client libraries' `docs/sdk/*.md` by name.
fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages_in = |dir: &str| {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|err| panic!("{dir}/: {err}"))
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".md"))
            .map(|name| format!("{dir}/{name}"))
            .collect();
        names.sort();
        names
    };
    let mut names = vec!["README.md".to_owned()];
    names.extend(pages_in("docs"));
    names.extend(pages_in("docs/sdk"));
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root.join(&name))
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            (name, text)
        })
        .collect()
}

/// Every fenced block of `language` on every page, in page order.
fn blocks(language: &str) -> Vec<Block> {
    let mut out = Vec::new();
    for (page, text) in pages() {
        let mut lines = text.lines().enumerate();
        while let Some((at, line)) = lines.next() {
            if line.trim() == format!("```{language}") {
                let body: Vec<&str> = lines
                    .by_ref()
                    .map(|(_, l)| l)
                    .take_while(|l| l.trim() != "```")
                    .collect();
                out.push(Block {
                    at: format!("{page}:{}", at + 1),
                    code: body.join("\n") + "\n",
                });
            }
        }
    }
    out
}

/// A guide's set-up block: the first `sh` block that contains `needle`.
fn setup_block(needle: &str) -> Block {
    blocks("sh")
        .into_iter()
        .find(|block| block.code.contains(needle))
        .unwrap_or_else(|| panic!("no set-up block with {needle:?} in the guides"))
}

/// Runs the set-up commands in `dir` (with `proto/` and `sdk/` linked in) unless
/// `done` exists there already; false, printing why, when a tool or registry they need
/// is not there.
fn set_up(dir: &Path, setup: &str, done: &str) -> bool {
    // Done before, from the protos and the library as they are now (stubs made from
    // older protos would lack new fields).
    if fresh(&dir.join(done)) {
        return true;
    }
    // Else from scratch, as on a new machine (`go mod init` refuses an existing module).
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for linked in ["proto", "sdk"] {
        std::os::unix::fs::symlink(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(linked),
            dir.join(linked),
        )
        .unwrap();
    }
    let output = Command::new("bash")
        .args(["-euc", setup])
        .current_dir(dir)
        .output()
        .expect("bash");
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr);
        // Under CI every tool and registry is there: a set-up that fails, fails.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the guides' examples; their set-up failed:\n{why}"
        );
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

/// Whether `made` exists and is newer than every file of `proto/` and of the Python
/// library's sources.
fn fresh(made: &Path) -> bool {
    let Ok(made) = std::fs::metadata(made).and_then(|m| m.modified()) else {
        return false;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        "proto/turnstile/v1",
        "sdk/python",
        "sdk/python/turnstile_client",
        "sdk/typescript",
        "sdk/typescript/src",
        "sdk/go",
        "sdk/java/src/main/java/dev/turnstile/client",
    ]
    .iter()
    .flat_map(|dir| std::fs::read_dir(root.join(dir)).expect("a source dir"))
    .filter_map(|entry| entry.ok()?.metadata().ok()?.modified().ok())
    .all(|changed| changed <= made)
}

/// Runs one example, `command` given its file (written into `dir` as `example_<line>`
/// plus `extension`); with `until`, stops it once it printed a line containing that.
/// Returns what it printed.
fn run_example(
    mut command: Command,
    dir: &Path,
    block: &Block,
    extension: &str,
    addr: &str,
    until: Option<&str>,
) -> Vec<String> {
    let name = block.at.replace(['/', ':', '.'], "_");
    let file = dir.join(format!("example_{name}.{extension}"));
    std::fs::write(&file, &block.code).unwrap();
    let mut child = command
        .arg(&file)
        .current_dir(dir)
        .env("TURNSTILE_ADDR", addr)
        .env("TURNSTILE_SERVER", format!("http://{addr}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example's command");
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
    // An example that should end but hangs (a docs race) is killed after 120 s, failing
    // the test instead of holding CI until its limit: a watchdog waits for its end.
    let ended = if until.is_some() {
        let _ = child.kill();
        None
    } else {
        let pid = child.id() as libc::pid_t;
        let (ended, end) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if end.recv_timeout(Duration::from_secs(120)).is_err() {
                // SAFETY: kill(2) on our child, not yet reaped (we are waiting on it).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        Some(ended)
    };
    let output = child.wait_with_output().expect("the example ran");
    if let Some(ended) = ended {
        let _ = ended.send(());
    }
    if until.is_none() {
        // Everything it printed (the reader ends with its stdout).
        printed.extend(rx.iter());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    match until {
        Some(wanted) => assert!(
            seen,
            "{}: never printed {wanted:?}; printed {printed:?}\n{stderr}",
            block.at
        ),
        None => assert!(
            output.status.success(),
            "{} failed: {printed:?}\n{stderr}",
            block.at
        ),
    }
    printed
}

/// A guide set up and a server for its examples.
struct Guide {
    dir: PathBuf,
    server: TestServer,
    _redis: TestRedis,
}

/// Sets up a guide from the set-up blocks containing `needles`, in that order, in
/// `target/tmp/<name>` (unless `done` exists there from an earlier run) and starts a
/// server; `None` when the guide's tools are missing.
async fn prepare(needles: &[&str], name: &str, done: &'static str) -> Option<Guide> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let setup: String = needles.iter().map(|n| setup_block(n).code).collect();
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
    let server = TestServer::start(&redis).await;
    Some(Guide {
        dir,
        server,
        _redis: redis,
    })
}

/// The Python set-up block (a venv with the library), found by this command.
const PYTHON_SETUP: &str = "python3 -m venv";
/// The set-up block of the raw Python stubs, found by this command.
const PYTHON_STUBS_SETUP: &str = "grpc_tools.protoc";
/// The TypeScript library's set-up block, found by this argument.
const TYPESCRIPT_SETUP: &str = "./sdk/typescript";
/// The Node set-up block, found by this command.
const NODE_SETUP: &str = "npm install";
/// The Go library's set-up block (a module with a `replace` of it), found by this.
const GO_SETUP: &str = "=./sdk/go";
/// The Java library's set-up block (`mvn install`, a project depending on it), found
/// by this.
const JAVA_SETUP: &str = "-f sdk/java/pom.xml install";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_examples_run_as_printed() -> TestResult {
    let Some(guide) = prepare(
        &[PYTHON_SETUP, PYTHON_STUBS_SETUP],
        "python-guide",
        "gen/turnstile/v1/semaphore_pb2_grpc.py",
    )
    .await
    else {
        return Ok(());
    };
    let examples = blocks("python");
    assert!(
        examples.len() >= 4,
        "the guides' Python examples went missing: {examples:?}"
    );
    for block in examples {
        // What shows that an example which never ends works.
        let until = if block.code.contains("locks.Hold(") {
            Some("leader with fencing token")
        } else if block.code.contains("client.campaign(") {
            Some("leading with fencing token")
        } else if block.code.contains(".worker(") && block.code.contains(".run()") {
            // A library worker serves until stopped: until it has handled a task that
            // the page enqueued.
            [
                ("welcome-42", "sending welcome-42"),
                ("\"signups\"", "sending welcome-ada"),
                ("\"images\"", "resizing cat.png"),
            ]
            .iter()
            .find(|(queue, _)| block.code.contains(queue))
            .map(|(_, wanted)| *wanted)
        } else if block.code.contains("queues.Subscribe(") {
            // A task for it to send, enqueued now: a polling worker run before it
            // would have taken one enqueued earlier.
            guide
                .server
                .queues()
                .await
                .enqueue(EnqueueRequest {
                    queue: "emails".into(),
                    tasks: vec![TaskSpec {
                        id: "hello-1".into(),
                        payload: b"hi".to_vec().into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await?;
            Some("sending hello-1")
        } else if block.code.contains("queues.Lease(") && block.code.contains("welcome-42") {
            Some("sending welcome-42")
        } else {
            None
        };
        let dir = guide.dir.clone();
        let addr = guide.server.addr.to_string();
        let fencing = block.code.contains("CheckFence(");
        let flow = block.code.contains("group_max_in_flight=1");
        let schedule = block.code.contains("PutSchedule(");
        let call = block.code.contains(".call({");
        let watch = block.code.contains("locks.Watch(");
        let semaphore = block.code.contains("semaphores.Acquire(");
        let printed = tokio::task::spawn_blocking(move || {
            let mut python = Command::new(dir.join(".venv/bin/python"));
            python
                .env("PYTHONPATH", dir.join("gen"))
                .env("PYTHONUNBUFFERED", "1");
            run_example(python, &dir, &block, "py", &addr, until)
        })
        .await?
        .join("\n");
        // The storage that checks fences refuses the late write and keeps the new one.
        if fencing {
            for wanted in [
                "refused: stale fencing token",
                "held by b",
                "stored: from b",
            ] {
                assert!(printed.contains(wanted), "no {wanted:?} in {printed}");
            }
        }
        // The watcher saw no leader, then db-2, then no leader again.
        if watch {
            assert!(
                printed.contains("no leader")
                    && printed.contains("leader: db-2 with fencing token"),
                "{printed}"
            );
        }
        // Eight orders through two permits: never more than two at once, all given back.
        if semaphore {
            for wanted in [
                "8 orders charged, at most ",
                "calls to the provider at once; within the limit: True",
                "in use now: 0 of 2 waiting: 0",
            ] {
                assert!(printed.contains(wanted), "no {wanted:?} in {printed}");
            }
        }
        // A remote call through the queue: the worker's result came back.
        if call {
            assert!(
                printed.contains("the worker answered {\"square\":144}"),
                "{printed}"
            );
        }
        // The schedule was stored and answers its next fire time.
        if schedule {
            assert!(printed.contains("next digest at 20"), "{printed}");
        }
        // One group at a time: the second task of each group waits for the first.
        if flow {
            for wanted in [
                "one at a time per group: True rate: 50 per 1 s",
                "leased: ['acme-0', 'bolt-0']",
                "acme waits with: ['acme-1', 'acme-2']",
            ] {
                assert!(printed.contains(wanted), "no {wanted:?} in {printed}");
            }
        }
    }
    Ok(())
}

/// A client library's guide: the set-up block that installs it, and the bash script
/// that runs one of its examples (the example's file as `$1`).
struct LibraryGuide {
    language: &'static str,
    setup: &'static str,
    dir: &'static str,
    /// A file the set-up makes, newer than the sources when it is current.
    done: &'static str,
    script: String,
    /// What the graceful-shutdown example prints.
    drained: &'static str,
}

/// Runs every example of a library's guide against a real server; the ones that run on
/// (the leader, the worker until SIGTERM) until they printed what shows they work.
async fn run_library_guide(library: LibraryGuide) -> TestResult {
    let Some(guide) = prepare(&[library.setup], library.dir, library.done).await else {
        return Ok(());
    };
    let examples = blocks(library.language);
    assert!(
        examples.len() >= 5,
        "the {} examples went missing: {examples:?}",
        library.language
    );
    let mut all = Vec::new();
    for block in examples {
        let until = if block.code.to_lowercase().contains("client.campaign(") {
            Some("leader now:")
        } else if block.code.contains("// until SIGTERM") {
            Some("sending welcome-ada")
        } else {
            None
        };
        let dir = guide.dir.clone();
        let addr = guide.server.addr.to_string();
        let script = library.script.clone();
        let extension = library.language;
        let printed = tokio::task::spawn_blocking(move || {
            let mut command = Command::new("bash");
            command.args(["-c", &script, "example"]);
            run_example(command, &dir, &block, extension, &addr, until)
        })
        .await?;
        all.extend(printed);
    }
    printed_all(
        &all,
        &[
            &LIBRARY_GUIDE[..],
            &[library.drained, "the worker answered {\"square\":144}"],
        ]
        .concat(),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_examples_run_as_printed() -> TestResult {
    // Each example compiled as printed, with the library's own TypeScript, then run.
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk/typescript/node_modules");
    run_library_guide(LibraryGuide {
        language: "ts",
        setup: TYPESCRIPT_SETUP,
        dir: "typescript-guide",
        done: "node_modules/@turnstile/client/dist/index.js",
        script: format!(
            "set -e; node {tsc} --module nodenext --moduleResolution nodenext --target es2022 \\
             --strict --skipLibCheck --types node --typeRoots {types} --outDir out \"$1\"; \\
             exec node \"out/$(basename \"$1\" .ts).js\"",
            tsc = sdk.join("typescript/bin/tsc").display(),
            types = sdk.join("@types").display(),
        ),
        drained: "drained after [ 'thumb-0', 'thumb-1', 'thumb-2' ]",
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_examples_run_as_printed() -> TestResult {
    // Each example is a main package of its own, built alone and then run (exec'd, so
    // that stopping an example that runs on stops it, not a `go run` parent).
    run_library_guide(LibraryGuide {
        language: "go",
        setup: GO_SETUP,
        dir: "go-guide",
        done: "go.sum",
        script: "set -e; go build -o \"out/$(basename \"$1\" .go)\" \"$1\"; \\
                 exec \"out/$(basename \"$1\" .go)\""
            .to_owned(),
        drained: "drained after [thumb-0 thumb-1 thumb-2]",
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_java_examples_run_as_printed() -> TestResult {
    // Each example is a single-file program, run from source on the project's
    // classpath as the page says.
    run_library_guide(LibraryGuide {
        language: "java",
        setup: JAVA_SETUP,
        dir: "java-guide",
        done: "classpath.txt",
        script: "exec java -cp \"$(cat classpath.txt)\" \"$1\"".to_owned(),
        drained: "drained after [thumb-0, thumb-1, thumb-2]",
    })
    .await
}

/// What every library's guide prints, in any language: its lock, election, producer
/// and errors sections.
const LIBRARY_GUIDE: [&str; 6] = [
    "selling one phone under fencing token",
    "free again: true",
    "leader now: node-a",
    "enqueued welcome-ada created true",
    "refused: queue",
    "someone else is reporting",
];

/// Asserts that the examples printed each of `wanted`.
fn printed_all(printed: &[String], wanted: &[&str]) {
    let printed = printed.join("\n");
    for wanted in wanted {
        assert!(printed.contains(wanted), "no {wanted:?} in {printed}");
    }
}

/// The example a Rust block is, named by its first line (`// cargo run --example X`).
fn rust_example(block: &Block) -> String {
    block
        .code
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("// cargo run --example "))
        .unwrap_or_else(|| {
            panic!(
                "{}: a Rust block opens with `// cargo run --example NAME`",
                block.at
            )
        })
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_examples_run_as_printed() -> TestResult {
    // Each block is an example of this crate, word for word: `cargo test` compiled it
    // (into target/<profile>/examples, beside this test's own deps/ directory).
    let examples = blocks("rust");
    assert!(
        examples.len() >= 5,
        "the Rust examples went missing: {examples:?}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("examples");
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rust-guide");
    std::fs::create_dir_all(&dir)?;
    let mut all = Vec::new();
    for block in examples {
        let name = rust_example(&block);
        let source = root.join("examples").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&source)
            .unwrap_or_else(|err| panic!("{}: {}: {err}", block.at, source.display()));
        assert_eq!(
            text, block.code,
            "{}: not examples/{name}.rs word for word",
            block.at
        );
        let binary = built.join(&name);
        let stale = |binary: &Path| -> Option<bool> {
            Some(
                std::fs::metadata(binary).ok()?.modified().ok()?
                    < std::fs::metadata(&source).ok()?.modified().ok()?,
            )
        };
        assert_eq!(
            stale(&binary),
            Some(false),
            "{}: examples/{name} is not built from its source: run `cargo test` (it builds the examples)",
            block.at
        );
        let until = match name.as_str() {
            "sdk_election" => Some("leader now:"),
            "sdk_worker" => Some("sending welcome-ada"),
            _ => None,
        };
        let (dir, addr) = (dir.clone(), server.addr.to_string());
        let printed = tokio::task::spawn_blocking(move || {
            run_example(Command::new(binary), &dir, &block, "rs", &addr, until)
        })
        .await?;
        all.extend(printed);
    }
    let drained = "drained after [\"thumb-0\", \"thumb-1\", \"thumb-2\"]";
    let raw = "raw stub acquired fencing token";
    let call = "the worker answered {\"square\":144}";
    printed_all(&all, &[&LIBRARY_GUIDE[..], &[drained, raw, call]].concat());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_runs_as_printed() -> TestResult {
    let Some(guide) = prepare(
        &[NODE_SETUP],
        "node-guide",
        "node_modules/@grpc/proto-loader/package.json",
    )
    .await
    else {
        return Ok(());
    };
    let examples = blocks("js");
    assert_eq!(examples.len(), 1, "the guides' Node example went missing");
    let block = examples.into_iter().next().unwrap();
    let (dir, addr) = (guide.dir.clone(), guide.server.addr.to_string());
    let printed = tokio::task::spawn_blocking(move || {
        run_example(Command::new("node"), &dir, &block, "js", &addr, None)
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
async fn run_shell(dir: &Path, block: &Block, server: &str, until: Option<&str>) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, BufReader as AsyncBufReader};
    let bin_dir = Path::new(common::BIN)
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Both streams into one pipe, so lines arrive in the order they were written: read
    // from two pipes, a `turnstile work` log line ("acked", stderr) could be read before
    // the handler's own output that came first (its stdout), and the block stop there.
    let code = format!("exec 2>&1\n{}", block.code);
    let mut child = tokio::process::Command::new("bash")
        .args(["-eo", "pipefail", "-c", &code])
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
            assert!(ended, "{}: never printed {wanted:?}: {printed:?}", block.at);
            let _ = child.kill().await;
        }
        None => {
            let status = child.wait().await.expect("bash ran");
            assert!(
                status.success(),
                "{} failed ({status}): {printed:?}",
                block.at
            );
        }
    }
    printed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_blocks_run_as_printed() -> TestResult {
    // The guides' set-up blocks are run by the guide tests above.
    let setups = [
        setup_block(PYTHON_SETUP),
        setup_block(PYTHON_STUBS_SETUP),
        setup_block(NODE_SETUP),
        setup_block(TYPESCRIPT_SETUP),
        setup_block(GO_SETUP),
        setup_block(JAVA_SETUP),
    ];
    let blocks: Vec<Block> = blocks("sh")
        .into_iter()
        .filter(|block| !setups.contains(block))
        .collect();
    assert!(
        blocks.len() >= 7,
        "the guides' shell blocks went missing: {blocks:?}"
    );
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let dir = common::TempDir::new("guides-sh");
    let mut all = Vec::new();
    for block in &blocks {
        // `turnstile work` serves until stopped: until it has acked a task.
        let until = block.code.contains("turnstile work").then_some(", acked");
        let printed = run_shell(&dir.0, block, &format!("http://{}", server.addr), until).await;
        all.push((block.code.clone(), printed.join("\n")));
    }
    let output = |needle: &str| -> String {
        all.iter()
            .find(|(code, _)| code.contains(needle))
            .map(|(_, printed)| printed.clone())
            .unwrap_or_else(|| panic!("no block with {needle:?}"))
    };
    let expect = |needle: &str, wanted: &[&str]| {
        let printed = output(needle);
        for wanted in wanted {
            assert!(printed.contains(wanted), "no {wanted:?} in {printed}");
        }
    };
    // The token recipe prints a SHA-256 in hex.
    let hash = output("sha256sum");
    assert!(
        hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash:?}"
    );
    // The README's queue block: the id and the table.
    expect("turnstile enqueue emails", &["welcome-42", "QUEUE"]);
    // The command line's: both ids, the delayed task as JSON, the cancel.
    expect(
        "turnstile enqueue newsletters",
        &["issue-7", "issue-8", "QUEUE", "\"state\":\"DELAYED\""],
    );
    expect(
        "turnstile lock nightly-report",
        &["one machine reports, with fencing token 1"],
    );
    expect(
        "turnstile semaphore payment-provider",
        &["charging with fencing token "],
    );
    expect(
        "turnstile locks --prefix deploy",
        &["LOCK", "deploy", "ci-7"],
    );
    expect(
        "turnstile lock weekly-digest",
        &["one machine writes the digest, with fencing token 1"],
    );
    expect(
        "turnstile work emails",
        &["sending welcome-42: {\"to\": \"ada@example.com\"}"],
    );
    expect(
        "turnstile work newsletters",
        &["sending issue-7: {\"to\": \"ada@example.com\"}"],
    );
    // The schedules: the next fire printed, then listed; a trigger's id, the JSON
    // listing and the deletion.
    expect(
        "turnstile schedule put nightly-report",
        &[
            "nightly-report: next fire 20",
            "NEXT_FIRE",
            "cron */5 * * * * Europe/Paris",
        ],
    );
    expect(
        "turnstile schedule put weekly-digest",
        &[
            "weekly-digest@20",
            "\"name\":\"weekly-digest\"",
            "weekly-digest: deleted",
        ],
    );
    Ok(())
}
