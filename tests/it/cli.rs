//! The command line as a person or a shell script uses it: the real `turnstile`
//! binary against a real server. `lock` runs a command under a lock (its status, 75,
//! 70, a re-attach across a cut stream), `work` runs one per task (ack, nack with
//! backoff, the drain on SIGTERM), and the operator commands print tables and JSON.
//! Errors print the gRPC status name and exit 1; usage errors exit 2.

use crate::common;

use std::{
    path::Path,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{eventually, json_field, ms, TempDir, TestRedis, TestResult, TestServer, BIN, WAIT};
use redis::AsyncCommands;
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    process::{Child, Command},
};
use turnstile::pb::{self, TaskState};

/// The binary, pointed at `server`.
fn cli(server: &TestServer) -> Command {
    common::cli_of(server)
}

/// Runs to the end (bounded); its status, stdout and stderr.
async fn output(command: &mut Command) -> (ExitStatus, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the command ends within 60 s")
        .expect("run turnstile");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Lines a running child writes, kept as they come.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn follow(pipe: impl AsyncRead + Unpin + Send + 'static) -> Self {
        let lines = Self::default();
        let kept = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                kept.0.lock().unwrap().push(line);
            }
        });
        lines
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        eventually(what, WAIT, || {
            let seen = done(&self.all());
            async move { seen }
        })
        .await;
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    common::send_signal(child, signal);
}

async fn wait_file(path: &Path) {
    eventually(&format!("{} exists", path.display()), WAIT, || async {
        path.exists()
    })
    .await;
}

async fn enqueue(server: &TestServer, queue: &str, specs: Vec<pb::TaskSpec>) -> TestResult {
    server
        .queues()
        .await
        .enqueue(pb::EnqueueRequest {
            queue: queue.into(),
            tasks: specs,
            ..Default::default()
        })
        .await?;
    Ok(())
}

fn task(id: &str, payload: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        id: id.into(),
        payload: payload.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

async fn stats(server: &TestServer, queue: &str) -> Result<pb::StatsResponse, tonic::Status> {
    Ok(server
        .queues()
        .await
        .stats(pb::StatsRequest {
            queue: queue.into(),
        })
        .await?
        .into_inner())
}

async fn peek(
    server: &TestServer,
    queue: &str,
    state: TaskState,
) -> Result<Vec<pb::Task>, tonic::Status> {
    Ok(server
        .queues()
        .await
        .peek(pb::PeekRequest {
            queue: queue.into(),
            state: state as i32,
            limit: 100,
            group: None,
        })
        .await?
        .into_inner()
        .tasks)
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|err| panic!("{line:?} is not JSON: {err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_sets_attempts_replaces_duplicates_and_keeps_a_dedupe_window() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let (status, _, _) = output(cli(&server).args([
        "enqueue",
        "mail",
        "--id",
        "m",
        "--max-attempts",
        "3",
        "first",
    ]))
    .await;
    assert!(status.success());
    let ready = peek(&server, "mail", TaskState::Ready).await?;
    assert_eq!(ready[0].max_attempts, 3);
    // --on-duplicate replace: the READY task takes the new payload.
    let (status, out, _) = output(cli(&server).args([
        "enqueue",
        "mail",
        "--id",
        "m",
        "--on-duplicate",
        "replace",
        "--max-attempts",
        "3",
        "--json",
        "second",
    ]))
    .await;
    assert!(status.success());
    assert_eq!(json(out.trim())["replaced"], true);
    let ready = peek(&server, "mail", TaskState::Ready).await?;
    assert_eq!(ready[0].payload.as_ref(), b"second");
    // --dedupe-window: after a cancel the id stays reserved.
    output(cli(&server).args(["enqueue", "mail", "--id", "d", "--dedupe-window", "1h", "x"])).await;
    output(cli(&server).args(["cancel", "mail", "d"])).await;
    let (status, out, _) =
        output(cli(&server).args(["enqueue", "mail", "--id", "d", "--json", "x"])).await;
    assert!(status.success());
    assert_eq!(
        json(out.trim())["created"],
        false,
        "the window holds the id"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_prints_the_id_taking_the_payload_from_the_argument_or_stdin() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let (status, out, _) =
        output(cli(&server).args(["enqueue", "jobs", "--id", "a", "hello"])).await;
    assert!(status.success());
    assert_eq!(out, "a\n");
    // From stdin (binary is fine), the id made by the server.
    let mut piped = cli(&server);
    piped
        .args(["enqueue", "jobs", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = piped.spawn()?;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&[0xff, 0x00, 0x01]).await?;
    }
    let made = child.wait_with_output().await?;
    assert!(made.status.success());
    let made_id = String::from_utf8(made.stdout)?.trim().to_owned();
    assert_eq!(made_id.len(), 32, "{made_id}");
    // --delay makes it DELAYED; --at in the past READY at once; --json says so.
    let (_, out, _) =
        output(cli(&server).args(["enqueue", "jobs", "--id", "later", "--delay", "1h", "x"])).await;
    assert_eq!(out, "later\n");
    let (status, out, _) = output(cli(&server).args([
        "enqueue",
        "jobs",
        "--id",
        "past",
        "--at",
        "2020-01-02T03:04:05Z",
        "--json",
        "y",
    ]))
    .await;
    assert!(status.success());
    let line = json(out.trim());
    assert_eq!(line["id"], "past");
    assert_eq!(line["created"], true);
    assert_eq!(line["due_at"], "2020-01-02T03:04:05.000Z");
    let ready = peek(&server, "jobs", TaskState::Ready).await?;
    let ids: Vec<&str> = ready.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["past", "a", made_id.as_str()]);
    assert_eq!(ready[1].payload.as_ref(), b"hello");
    assert_eq!(ready[2].payload.as_ref(), [0xff, 0x00, 0x01]);
    let delayed = peek(&server, "jobs", TaskState::Delayed).await?;
    assert_eq!(delayed.len(), 1);
    assert_eq!(delayed[0].id, "later");
    // A duplicate is not created: still the id, and a note on stderr.
    let (status, out, err) =
        output(cli(&server).args(["enqueue", "jobs", "--id", "a", "again"])).await;
    assert!(status.success());
    assert_eq!(out, "a\n");
    assert!(err.contains("not created"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_peek_cancel_and_redrive_print_tables_and_json() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    enqueue(
        &server,
        "orders",
        vec![task("o1", "first"), task("o2", "second")],
    )
    .await?;
    enqueue(
        &server,
        "orders",
        vec![pb::TaskSpec {
            schedule: Some(pb::task_spec::Schedule::Delay(ms(3_600_000).unwrap())),
            ..task("o3", "later")
        }],
    )
    .await?;
    // One task dies: one attempt, nacked.
    enqueue(
        &server,
        "mail",
        vec![pb::TaskSpec {
            max_attempts: 1,
            ..task("m1", "bounce")
        }],
    )
    .await?;
    let mut queues = server.queues().await;
    let leased = queues
        .lease(pb::LeaseRequest {
            queue: "mail".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    queues
        .nack(pb::NackRequest {
            queue: "mail".into(),
            receipt: leased.tasks[0].receipt.clone(),
            delay: None,
            ..Default::default()
        })
        .await?;

    let (status, out, _) = output(cli(&server).args(["stats", "orders", "mail"])).await;
    assert!(status.success());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let columns = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        columns(lines[0]),
        [
            "QUEUE",
            "READY",
            "DELAYED",
            "IN_FLIGHT",
            "DEAD",
            "OLDEST_READY",
            "NEXT_DUE",
            "PAUSED",
            "MAX_IN_FLIGHT",
            "RATE",
            "GROUP_MAX_IN_FLIGHT",
            "GROUP_RATE"
        ]
    );
    assert_eq!(columns(lines[1])[..5], ["orders", "2", "1", "0", "0"]);
    assert_eq!(columns(lines[2])[..5], ["mail", "0", "0", "0", "1"]);
    // Aligned: every column starts at the same offset on every line.
    let starts = |line: &str| {
        let mut at = Vec::new();
        let bytes = line.as_bytes();
        for i in 0..bytes.len() {
            if bytes[i] != b' ' && (i == 0 || bytes[i - 1] == b' ') {
                at.push(i);
            }
        }
        at
    };
    assert_eq!(starts(lines[0])[..5], starts(lines[1])[..5]);
    assert_eq!(starts(lines[0])[..5], starts(lines[2])[..5]);
    let (_, out, _) = output(cli(&server).args(["stats", "--json", "orders"])).await;
    let line = json(out.trim());
    assert_eq!(
        (line["ready"].as_u64(), line["delayed"].as_u64()),
        (Some(2), Some(1))
    );

    // peek: in delivery order, with --state and --limit.
    let (_, out, _) = output(cli(&server).args(["peek", "orders", "--json"])).await;
    let ids: Vec<String> = out
        .lines()
        .map(|l| json(l)["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["o1", "o2"]);
    assert_eq!(json(out.lines().next().unwrap())["payload"], "first");
    let (_, out, _) = output(cli(&server).args(["peek", "orders", "--state", "delayed"])).await;
    assert!(out.lines().nth(1).unwrap().starts_with("o3 "), "{out}");
    let (_, out, _) = output(cli(&server).args(["peek", "orders", "--limit", "1"])).await;
    assert_eq!(out.lines().count(), 2, "{out}");

    // cancel prints what it removed; redrive how many came back.
    let (status, out, _) = output(cli(&server).args(["cancel", "orders", "o2", "nope"])).await;
    assert!(status.success());
    assert_eq!(out, "o2\n");
    let (status, out, _) = output(cli(&server).args(["redrive", "mail"])).await;
    assert!(status.success());
    assert_eq!(out, "1\n");
    let mail = stats(&server, "mail").await?;
    assert_eq!((mail.ready, mail.dead), (1, 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_pause_resume_limit_and_enqueue_into_groups_with_priorities() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let run = |args: &[&str]| {
        let mut command = cli(&server);
        command.args(args);
        command
    };
    for (id, group, priority) in [
        ("a1", "acme", "0"),
        ("a2", "acme", "7"),
        ("b1", "bolt", "0"),
    ] {
        let (status, out, _) = output(&mut run(&[
            "enqueue",
            "orders",
            id,
            "--id",
            id,
            "--group",
            group,
            "--priority",
            priority,
        ]))
        .await;
        assert!(status.success(), "{out}");
    }
    // peek --group: the group's order, with its group and priority.
    let (_, out, _) = output(&mut run(&["peek", "orders", "--group", "acme", "--json"])).await;
    let tasks: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert_eq!(tasks.len(), 2, "{out}");
    assert_eq!(
        (&tasks[0]["id"], &tasks[0]["priority"]),
        (&"a2".into(), &7.into())
    );
    assert_eq!(tasks[1]["group"], "acme");
    // pause, limit: stats and queues show the config.
    let (status, out, _) = output(&mut run(&["pause", "orders"])).await;
    assert!(status.success());
    assert_eq!(out, "orders: paused\n");
    let (status, out, _) = output(&mut run(&[
        "limit",
        "orders",
        "--rate",
        "10/1s",
        "--max-in-flight",
        "5",
        "--group-max-in-flight",
        "1",
    ]))
    .await;
    assert!(status.success(), "{out}");
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row, ["orders", "yes", "5", "10/1s", "1", "-"]);
    let (_, out, _) = output(&mut run(&["queues"])).await;
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row,
        ["orders", "3", "0", "0", "0", "yes", "5", "10/1s", "1", "-"],
        "{out}"
    );
    let (_, out, _) = output(&mut run(&["stats", "orders", "--json"])).await;
    let config = &json(out.trim())["config"];
    assert_eq!(
        (&config["paused"], &config["rate_limit"]),
        (&true.into(), &"10/1s".into())
    );
    // A paused group, then resume and `--rate off`.
    let (_, out, _) = output(&mut run(&["pause", "orders", "--group", "bolt"])).await;
    assert_eq!(out, "group \"bolt\" of orders: paused\n");
    output(&mut run(&["resume", "orders"])).await;
    output(&mut run(&["limit", "orders", "--rate", "off"])).await;
    let got = stats(&server, "orders").await?.config.unwrap();
    assert!(!got.paused && got.rate_limit.is_none() && got.max_in_flight == 5);
    // With bolt paused and acme one at a time, a Lease of all finds a2 only.
    let leased = server
        .queues()
        .await
        .lease(pb::LeaseRequest {
            queue: "orders".into(),
            max_tasks: 10,
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    assert_eq!(
        leased.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["a2"]
    );
    let (status, _, err) = output(&mut run(&["limit", "orders", "--rate", "ten"])).await;
    assert_eq!(status.code(), Some(2), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_redraws_in_place_as_the_queue_changes() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut child = cli(&server)
        .args(["stats", "watched", "--watch", "--interval", "50ms"])
        .stdout(Stdio::piped())
        .spawn()?;
    let screen = Lines::follow(child.stdout.take().unwrap());
    let row = |lines: &[String], ready: &str| {
        lines.iter().any(|l| {
            l.contains("watched")
                && l.split_whitespace().nth(1) == Some(ready)
                && !l.contains("\x1b[H")
        })
    };
    screen
        .wait_for("a first table", |lines| row(lines, "0"))
        .await;
    enqueue(&server, "watched", vec![task("w1", "x")]).await?;
    screen
        .wait_for("the redrawn table", |lines| row(lines, "1"))
        .await;
    // Redrawn in place: each table starts by moving the cursor home.
    let homes = screen.all().iter().filter(|l| l.contains("\x1b[H")).count();
    assert!(homes >= 2, "{:?}", screen.all());
    signal(&child, libc::SIGINT);
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_print_the_status_name_and_exit_1_and_usage_errors_exit_2() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let (status, out, err) = output(cli(&server).args(["stats", ""])).await;
    assert_eq!(status.code(), Some(1));
    assert_eq!(out, "");
    assert!(err.contains("INVALID_ARGUMENT: queue:"), "{err}");
    let (status, _, err) = output(
        cli(&server)
            .args(["peek", "q"])
            .env("TURNSTILE_SERVER", "http://127.0.0.1:1"),
    )
    .await;
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("UNAVAILABLE"), "{err}");
    let (status, _, _) = output(cli(&server).args(["lock", "name-without-a-command"])).await;
    assert_eq!(status.code(), Some(2));
    let (status, _, _) = output(cli(&server).args(["enqueue", "q", "--delay", "soon", "x"])).await;
    assert_eq!(status.code(), Some(2));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_runs_the_command_holding_the_lock_and_exits_with_its_status() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    // Inside, the lock is held: a second `turnstile lock` is not acquired (75), and
    // the command sees its fencing token.
    let script = format!(
        "{BIN} lock nightly -- true; echo inner=$?; echo fence=$TURNSTILE_FENCING_TOKEN; exit 3"
    );
    let (status, out, _) =
        output(cli(&server).args(["lock", "nightly", "--", "sh", "-c", &script])).await;
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(out.contains("inner=75"), "{out}");
    let fence: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("fence="))
        .expect("a fence line")
        .parse()?;
    assert!(fence > 0);
    // Released at once when the command ended (its 15 s ttl has not run out).
    let held = server
        .locks()
        .await
        .describe(pb::DescribeRequest {
            name: "nightly".into(),
            token: String::new(),
        })
        .await?
        .into_inner()
        .held;
    assert!(!held, "the lock outlived the command");
    // A command killed by a signal: 128 + its number, as a shell says.
    let (status, _, _) =
        output(cli(&server).args(["lock", "n2", "--", "sh", "-c", "kill -9 $$"])).await;
    assert_eq!(status.code(), Some(128 + 9));
    // A command that does not exist: 127, and the lock is given back.
    let (status, _, err) =
        output(cli(&server).args(["lock", "n3", "--", "/no/such/program"])).await;
    assert_eq!(status.code(), Some(127), "{err}");
    let (status, _, _) = output(cli(&server).args(["lock", "n3", "--", "true"])).await;
    assert!(status.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_runs_the_command_holding_permits_and_exits_as_lock_does() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    // Inside, two of three permits are held: one more fits, two more do not (75).
    let script = format!(
        "{BIN} semaphore pay --limit 3 -- true; echo one=$?; \
         {BIN} semaphore pay --limit 3 --permits 2 -- true; echo two=$?; \
         echo fence=$TURNSTILE_FENCING_TOKEN; echo name=$TURNSTILE_SEMAPHORE; exit 4"
    );
    let (status, out, err) = output(cli(&server).args([
        "semaphore",
        "pay",
        "--limit",
        "3",
        "--permits",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ]))
    .await;
    assert_eq!(status.code(), Some(4), "{out} {err}");
    assert!(out.contains("one=0") && out.contains("two=75"), "{out}");
    assert!(out.contains("name=pay"), "{out}");
    let fence: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("fence="))
        .expect("a fence line")
        .parse()?;
    assert!(fence > 0);
    // Given back at once when the command ended.
    let seen = server
        .semaphores()
        .await
        .describe(pb::SemaphoreServiceDescribeRequest { name: "pay".into() })
        .await?
        .into_inner();
    assert_eq!((seen.in_use, seen.limit), (0, 3));
    // Bad input is the server's INVALID_ARGUMENT, exit 1.
    let (status, _, err) = output(cli(&server).args([
        "semaphore",
        "pay",
        "--limit",
        "1",
        "--permits",
        "2",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("INVALID_ARGUMENT: permits:"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_lists_the_held_locks_as_a_table_or_json() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut locks = server.locks().await;
    for name in ["db-migrate", "db-backup", "cron"] {
        locks
            .acquire(pb::AcquireRequest {
                name: name.into(),
                owner: format!("{name}-owner"),
                ttl: ms(60_000),
                ..Default::default()
            })
            .await?;
    }
    let (status, out, err) = output(cli(&server).args(["locks", "--prefix", "db-"])).await;
    assert!(status.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("LOCK") && lines[0].contains("FENCING_TOKEN"),
        "{out}"
    );
    assert!(lines[1].starts_with("db-backup") && lines[1].contains("db-backup-owner"));
    assert!(lines[2].starts_with("db-migrate"), "{out}");
    let (status, out, _) = output(cli(&server).args(["locks", "--json"])).await;
    assert!(status.success());
    let names: Vec<String> = out.lines().map(|line| json_field(line, "name")).collect();
    assert_eq!(names, ["cron", "db-backup", "db-migrate"]);
    assert!(out.contains("\"fencing_token\":"), "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_not_acquired_within_wait_exits_75_without_running_the_command() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    server
        .locks()
        .await
        .acquire(pb::AcquireRequest {
            name: "busy".into(),
            owner: "someone".into(),
            ttl: ms(60_000),
            ..Default::default()
        })
        .await?;
    let dir = TempDir::new("cli-lock");
    let marker = dir.0.join("ran");
    let (status, _, err) = output(cli(&server).args([
        "lock",
        "busy",
        "--wait",
        "200ms",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(status.code(), Some(75), "{err}");
    assert!(err.contains("not acquired"), "{err}");
    assert!(!marker.exists(), "the command ran without the lock");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_lost_while_the_command_runs_sends_it_sigterm_and_exits_70() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let dir = TempDir::new("cli-lost");
    let (started, termed) = (dir.0.join("started"), dir.0.join("termed"));
    let script = format!(
        "trap 'touch {}; exit 0' TERM; touch {}; n=0; while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done",
        termed.display(),
        started.display()
    );
    let mut child = cli(&server)
        .args([
            "lock", "stolen", "--ttl", "600ms", "--", "sh", "-c", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()?;
    wait_file(&started).await;
    // An operator deletes the lease; someone else takes the lock.
    let _: () = redis.conn().await.del("turnstile:lock:{stolen}").await?;
    let mut locks = server.locks().await;
    let taken = locks
        .acquire(pb::AcquireRequest {
            name: "stolen".into(),
            owner: "thief".into(),
            ttl: ms(60_000),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(taken.acquired);
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert_eq!(status.code(), Some(70));
    assert!(termed.exists(), "the command was not sent SIGTERM");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_keeps_its_lease_across_a_stream_cut_by_connection_age() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start_with(&redis, |c| {
        c.max_connection_age = Duration::from_millis(300);
        c.max_connection_age_grace = Duration::from_millis(200);
    })
    .await;
    let dir = TempDir::new("cli-cut");
    let (release, marker) = (dir.0.join("release"), dir.0.join("done"));
    // The command runs until two Hold streams were cut by their connection's age (the
    // server counts each as a Hold ended UNAVAILABLE); the CLI re-attaches by token
    // each time, so the command is never told the lock was lost. Bounded, so a failing
    // test leaves no process behind.
    let script = format!(
        "n=0; while [ ! -e {} ] && [ $n -lt 1000 ]; do sleep 0.02; n=$((n+1)); done; touch {}",
        release.display(),
        marker.display()
    );
    let running = cli(&server)
        .args(["lock", "cut", "--ttl", "900ms", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()?;
    let cut = "turnstile_rpc_requests_total{method=\"Hold\",code=\"UNAVAILABLE\"}";
    eventually("two Hold streams cut", WAIT, || async {
        server.scrape().await.lines().any(|line| {
            line.strip_prefix(cut)
                .and_then(|value| value.trim().parse::<f64>().ok())
                .is_some_and(|cuts| cuts >= 2.0)
        })
    })
    .await;
    std::fs::write(&release, "")?;
    let out = tokio::time::timeout(WAIT, running.wait_with_output()).await??;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(marker.exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_runs_the_command_per_task_acks_success_and_nacks_failure_with_backoff() -> TestResult
{
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    enqueue(
        &server,
        "jobs",
        vec![task("ok-1", "ok"), task("bad", "fail"), task("ok-2", "ok")],
    )
    .await?;
    let dir = TempDir::new("cli-work");
    let log = dir.0.join("log");
    let script = format!(
        "p=$(cat); echo \"$TURNSTILE_QUEUE $TURNSTILE_TASK_ID $TURNSTILE_ATTEMPT $p\" >> {}; [ \"$p\" = ok ]",
        log.display()
    );
    let mut child = cli(&server)
        .args([
            "work",
            "jobs",
            "--concurrency",
            "2",
            "--json",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let lines = Lines::follow(child.stdout.take().unwrap());
    lines.wait_for("three tasks done", |l| l.len() >= 3).await;
    let mut outcomes: Vec<(String, String)> = lines
        .all()
        .iter()
        .map(|l| {
            let v = json(l);
            (
                v["id"].as_str().unwrap().to_owned(),
                v["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            ("bad".into(), "requeued".into()),
            ("ok-1".into(), "acked".into()),
            ("ok-2".into(), "acked".into())
        ]
    );
    // The payload came on stdin, the ids and attempt in the environment.
    let seen = std::fs::read_to_string(&log)?;
    assert!(seen.contains("jobs ok-1 1 ok"), "{seen}");
    assert!(seen.contains("jobs bad 1 fail"), "{seen}");
    // The failure is due again after its backoff (1 s for a first attempt).
    let delayed = peek(&server, "jobs", TaskState::Delayed).await?;
    assert_eq!(delayed.len(), 1);
    assert_eq!(delayed[0].id, "bad");
    lines
        .wait_for("the failed task retried", |l| l.len() >= 4)
        .await;
    let retried = json(&lines.all()[3]);
    assert_eq!(
        (retried["id"].as_str(), retried["attempt"].as_u64()),
        (Some("bad"), Some(2))
    );
    signal(&child, libc::SIGTERM);
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_drains_on_sigterm_letting_the_running_task_finish_and_ack() -> TestResult {
    let redis = TestRedis::start().await;
    // A short re-attach grace (the default is 10 s): the drain must keep the task
    // leased past it (the stream stays open until the running tasks finished).
    let server = TestServer::start_with(&redis, |c| {
        c.reattach_grace = Duration::from_millis(1_500);
    })
    .await;
    enqueue(&server, "slow", vec![task("long", "x")]).await?;
    let dir = TempDir::new("cli-drain");
    let (started, release) = (dir.0.join("started"), dir.0.join("release"));
    let script = format!(
        // Bounded, so a failing test leaves no process behind holding its pipes.
        "touch {}; n=0; while [ ! -e {} ] && [ $n -lt 1000 ]; do sleep 0.02; n=$((n+1)); done",
        started.display(),
        release.display()
    );
    let mut child = cli(&server)
        .args([
            "work",
            "slow",
            "--visibility",
            "30s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()?;
    let err = Lines::follow(child.stderr.take().unwrap());
    wait_file(&started).await;
    signal(&child, libc::SIGTERM);
    err.wait_for("the drain line", |l| {
        l.iter().any(|l| l.contains("draining"))
    })
    .await;
    // Past the re-attach grace, the task is still leased to this worker, by Redis'
    // clock.
    let in_flight = peek(&server, "slow", TaskState::InFlight).await?;
    assert_eq!(in_flight.len(), 1);
    let mut conn = redis.conn().await;
    let ended = common::redis_now_ms(&mut conn).await;
    common::wait_redis_time(&conn, ended + 1_500 + 500).await;
    let in_flight = peek(&server, "slow", TaskState::InFlight).await?;
    assert_eq!(in_flight.len(), 1, "the task went back while it still ran");
    assert!(
        child.try_wait()?.is_none(),
        "exited before the task finished"
    );
    std::fs::write(&release, "")?;
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert!(status.success(), "{status}");
    let after = stats(&server, "slow").await?;
    assert_eq!(
        (after.ready, after.delayed, after.in_flight, after.dead),
        (0, 0, 0, 0),
        "not acked: {:?}",
        err.all()
    );
    assert!(err
        .all()
        .iter()
        .any(|l| l.contains("task long attempt 1: exit 0, acked")));
    server
        .wait_metric("turnstile_streams_open{kind=\"subscribe\"}", 0.0)
        .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_past_its_drain_timeout_stops_the_command_and_gives_the_task_back() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    enqueue(&server, "stuck", vec![task("forever", "x")]).await?;
    let dir = TempDir::new("cli-drain-timeout");
    let (started, termed) = (dir.0.join("started"), dir.0.join("termed"));
    // Runs until told to stop (bounded, so a failing test leaves no process behind).
    let script = format!(
        "trap 'touch {}; exit 143' TERM; touch {}; n=0; while [ $n -lt 1000 ]; do sleep 0.02; n=$((n+1)); done",
        termed.display(),
        started.display()
    );
    let mut child = cli(&server)
        .args([
            "work",
            "stuck",
            "--drain-timeout",
            "300ms",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()?;
    wait_file(&started).await;
    signal(&child, libc::SIGTERM);
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert!(status.success(), "{status}");
    // The command was sent SIGTERM (its trap runs after its current `sleep`).
    wait_file(&termed).await;
    // Given back at once (not acked, not left to its lease): READY for its next try.
    let after = stats(&server, "stuck").await?;
    assert_eq!(
        (after.ready, after.delayed, after.in_flight, after.dead),
        (1, 0, 0, 0)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_put_ls_pause_resume_trigger_and_rm() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let run = |args: &[&str]| {
        let mut command = cli(&server);
        command.args(args);
        command
    };
    let (status, out, err) = output(&mut run(&[
        "schedule",
        "put",
        "nightly",
        "reports",
        "build it",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Asia/Kolkata",
        "--overlap",
        "skip",
        "--json",
    ]))
    .await;
    assert!(status.success(), "{out}{err}");
    let put = json(out.trim());
    assert_eq!(put["spec"], "cron 0 3 * * * Asia/Kolkata");
    // 03:00 in Kolkata is 21:30 UTC.
    assert!(
        put["next_fire_at"]
            .as_str()
            .unwrap()
            .ends_with("T21:30:00.000Z"),
        "{put}"
    );
    let (status, _, err) = output(&mut run(&[
        "schedule", "put", "tick", "ticks", "x", "--every", "1h",
    ]))
    .await;
    assert!(status.success(), "{err}");
    // Both, by name, in a table with their next and last fire times.
    let (status, out, _) = output(&mut run(&["schedule", "ls"])).await;
    assert!(status.success());
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("NEXT_FIRE"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("nightly") && lines[1].contains("skip"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("tick") && lines[2].contains("every 3600s"),
        "{out}"
    );
    // Pause: no next fire; trigger still enqueues; resume fires again.
    let (status, out, _) = output(&mut run(&["schedule", "pause", "tick", "--json"])).await;
    assert!(status.success());
    assert_eq!(json(out.trim())["paused"], true);
    assert!(json(out.trim())["next_fire_at"].is_null());
    let (status, out, _) = output(&mut run(&["schedule", "trigger", "tick"])).await;
    assert!(status.success());
    let id = out.trim().to_owned();
    assert!(id.starts_with("tick@"), "{id}");
    assert_eq!(
        peek(&server, "ticks", TaskState::Ready).await?[0].id,
        id,
        "the triggered task"
    );
    let (_, out, _) = output(&mut run(&["schedule", "resume", "tick", "--json"])).await;
    assert_eq!(json(out.trim())["paused"], false);
    // rm: gone, and a second rm says so; a bad cron names the field, exit 1.
    let (status, out, _) = output(&mut run(&["schedule", "rm", "tick"])).await;
    assert!(status.success() && out.contains("deleted"), "{out}");
    let (_, out, _) = output(&mut run(&["schedule", "rm", "tick"])).await;
    assert!(out.contains("no such schedule"), "{out}");
    let (status, _, err) = output(&mut run(&[
        "schedule",
        "put",
        "bad",
        "q",
        "x",
        "--cron",
        "61 * * * *",
    ]))
    .await;
    assert_eq!(status.code(), Some(1));
    assert!(
        err.contains("INVALID_ARGUMENT") && err.contains("cron"),
        "{err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_holder_now_and_each_change_as_json() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut child = cli(&server)
        .args(["watch", "primary", "--json"])
        .stdout(Stdio::piped())
        .spawn()?;
    let lines = Lines::follow(child.stdout.take().unwrap());
    lines
        .wait_for("free at first", |lines| lines.len() == 1)
        .await;
    let mut locks = server.locks().await;
    let won = locks
        .acquire(pb::AcquireRequest {
            name: "primary".into(),
            owner: "db-1".into(),
            ttl: common::ms(60_000),
            ..Default::default()
        })
        .await?
        .into_inner();
    lines.wait_for("the holder", |lines| lines.len() == 2).await;
    locks
        .release(pb::ReleaseRequest {
            name: "primary".into(),
            token: won.token,
        })
        .await?;
    lines.wait_for("free again", |lines| lines.len() == 3).await;
    let events: Vec<serde_json::Value> = lines.all().iter().map(|l| json(l)).collect();
    assert_eq!(events[0]["event"], "free");
    assert_eq!(events[1]["event"], "held");
    assert_eq!(events[1]["owner"], "db-1");
    assert_eq!(events[1]["fencing_token"], won.fencing_token);
    assert_eq!(events[2]["event"], "free");
    assert_eq!(events[2]["fencing_token"], won.fencing_token);
    // The contract's table: it runs until SIGINT/SIGTERM, then exits 0.
    signal(&child, libc::SIGINT);
    assert_eq!(
        child.wait().await?.code(),
        Some(0),
        "exit status after SIGINT"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_with_status_zero_on_sigterm() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut child = cli(&server)
        .args(["watch", "primary"])
        .stdout(Stdio::piped())
        .spawn()?;
    let lines = Lines::follow(child.stdout.take().unwrap());
    lines
        .wait_for("the state now", |lines| lines.len() == 1)
        .await;
    signal(&child, libc::SIGTERM);
    assert_eq!(
        child.wait().await?.code(),
        Some(0),
        "exit status after SIGTERM"
    );
    Ok(())
}

/// Every long-running command ends as the contract's table says on SIGINT and on
/// SIGTERM: `watch`, `stats --watch` and `work` with status 0 (work after its drain),
/// `lock` and `semaphore` with their command's status (the signal is passed on to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_long_running_command_ends_as_its_contract_says_on_sigint_and_sigterm() -> TestResult
{
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let dir = TempDir::new("cli-signals");
    for (n, sig) in [libc::SIGINT, libc::SIGTERM].into_iter().enumerate() {
        let started = dir.0.join(format!("started-{n}"));
        // A command that ends with 7 when told to stop (bounded, so a failing test
        // leaves no process behind).
        let held = format!(
            "trap 'exit 7' INT TERM; touch {}; n=0; while [ $n -lt 1000 ]; do sleep 0.02; n=$((n+1)); done",
            started.display()
        );
        let commands: [(&[&str], i32); 5] = [
            (&["watch", "signalled"], 0),
            (&["stats", "signalled", "--watch", "--interval", "50ms"], 0),
            (&["work", "signalled", "--", "true"], 0),
            (&["lock", "signalled", "--", "sh", "-c", &held], 7),
            (
                &[
                    "semaphore",
                    "signalled",
                    "--limit",
                    "2",
                    "--",
                    "sh",
                    "-c",
                    &held,
                ],
                7,
            ),
        ];
        for (args, wanted) in commands {
            let _ = std::fs::remove_file(&started);
            let mut child = cli(&server).args(args).stdout(Stdio::piped()).spawn()?;
            // Running: printed its first line, opened its stream, or started CMD.
            match args[0] {
                "watch" | "stats" => {
                    Lines::follow(child.stdout.take().unwrap())
                        .wait_for("a first line", |lines| !lines.is_empty())
                        .await
                }
                "work" => {
                    server
                        .wait_metric("turnstile_streams_open{kind=\"subscribe\"}", 1.0)
                        .await
                }
                _ => wait_file(&started).await,
            }
            signal(&child, sig);
            let status = tokio::time::timeout(WAIT, child.wait())
                .await
                .unwrap_or_else(|_| panic!("{args:?} still runs {WAIT:?} after signal {sig}"))?;
            assert_eq!(status.code(), Some(wanted), "{args:?} after signal {sig}");
            if args[0] == "work" {
                server
                    .wait_metric("turnstile_streams_open{kind=\"subscribe\"}", 0.0)
                    .await;
            }
        }
    }
    Ok(())
}

/// `turnstile work` sends the end of a failed command's stderr as its Nack's error
/// (and still passes the stderr on): the task's last error says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_sends_the_end_of_a_failed_command_s_stderr_as_the_task_s_last_error() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut dies = task("once", "x");
    dies.max_attempts = 1;
    enqueue(&server, "failing", vec![dies]).await?;
    // Over 4 KiB of noise, then the reason: the reason is what is kept.
    let script = "head -c 6000 /dev/zero | tr '\\0' 'x' >&2; echo >&2; echo 'cannot reach the mail server' >&2; exit 3";
    let mut child = cli(&server)
        .args(["work", "failing", "--", "sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()?;
    let err = Lines::follow(child.stderr.take().unwrap());
    err.wait_for("the task died", |l| l.iter().any(|l| l.contains("dead")))
        .await;
    // Passed on to our stderr as the command wrote it.
    assert!(err
        .all()
        .iter()
        .any(|l| l == "cannot reach the mail server"));
    let dead = peek(&server, "failing", TaskState::Dead).await?;
    let error = &dead[0].last_error;
    assert!(error.starts_with("exit 3: "), "{error}");
    assert!(
        error.trim_end().ends_with("cannot reach the mail server"),
        "{error}"
    );
    assert!(error.len() <= 4096, "{}", error.len());
    // `peek` shows it too.
    let (status, out, _) =
        output(cli(&server).args(["peek", "failing", "--state", "dead", "--json"])).await;
    assert!(status.success());
    assert_eq!(json(out.trim())["last_error"], error.as_str());
    signal(&child, libc::SIGTERM);
    assert!(tokio::time::timeout(WAIT, child.wait()).await??.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_wait_prints_the_worker_s_result_and_wait_and_task_tell_the_story() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    // A remote call: the worker answers the one delivery it is given.
    let call = tokio::spawn(
        cli(&server)
            .args([
                "enqueue",
                "jobs",
                "--id",
                "j-1",
                "--wait",
                "30s",
                "{\"n\": 6}",
            ])
            .output(),
    );
    let leased = peek_lease(&mut queues).await?;
    assert_eq!(leased.payload.as_ref(), b"{\"n\": 6}");
    queues
        .ack(pb::AckRequest {
            queue: "jobs".into(),
            receipts: vec![leased.receipt.clone()],
            results: [(leased.receipt.clone(), b"36".to_vec())].into(),
        })
        .await?;
    let out = call.await??;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"36");
    // A task given up: `wait` exits 1 and says why; `task` prints the history.
    enqueue(&server, "jobs", vec![task("j-2", "x")]).await?;
    let leased = peek_lease(&mut queues).await?;
    queues
        .nack(pb::NackRequest {
            queue: "jobs".into(),
            receipt: leased.receipt,
            error: "no such file".into(),
            give_up: true,
            ..Default::default()
        })
        .await?;
    let (status, _, err) =
        output(cli(&server).args(["wait", "jobs", "j-2", "--timeout", "5s"])).await;
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("no such file"), "{err}");
    let (status, out, _) = output(cli(&server).args(["task", "jobs", "j-2"])).await;
    assert!(status.success());
    assert!(
        out.contains("DEAD") && out.contains("GAVE_UP") && out.contains("no such file"),
        "{out}"
    );
    let (_, out, _) = output(cli(&server).args(["task", "jobs", "j-2", "--json"])).await;
    assert_eq!(json(out.trim())["history"][0]["outcome"], "GAVE_UP");
    // Not done within the timeout: exit 4.
    enqueue(&server, "jobs", vec![task("j-3", "x")]).await?;
    let (status, _, _) =
        output(cli(&server).args(["wait", "jobs", "j-3", "--timeout", "100ms"])).await;
    assert_eq!(status.code(), Some(4));
    // Cancelled (and kept, so a wait after the fact sees it): exit 3.
    queues
        .configure_queue(pb::ConfigureQueueRequest {
            queue: "jobs".into(),
            keep_completed: Some(pb::Retention {
                age: None,
                count: 10,
            }),
            ..Default::default()
        })
        .await?;
    output(cli(&server).args(["cancel", "jobs", "j-3"])).await;
    let (status, _, _) =
        output(cli(&server).args(["wait", "jobs", "j-3", "--timeout", "5s"])).await;
    assert_eq!(status.code(), Some(3));
    Ok(())
}

/// Leases the one READY task of `jobs`.
async fn peek_lease(
    queues: &mut pb::queue_service_client::QueueServiceClient<tonic::transport::Channel>,
) -> Result<pb::Task, tonic::Status> {
    let tasks = queues
        .lease(pb::LeaseRequest {
            queue: "jobs".into(),
            max_tasks: 1,
            visibility: ms(60_000),
            wait: ms(10_000),
            auto_ack: false,
        })
        .await?
        .into_inner()
        .tasks;
    Ok(tasks.into_iter().next().expect("a task"))
}
