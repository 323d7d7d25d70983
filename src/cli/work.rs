//! `turnstile work QUEUE -- CMD`: a worker for any program, built on the client
//! library's [`Worker`]. It runs CMD once per task, at most `--concurrency` at once,
//! with the payload on stdin and `TURNSTILE_QUEUE`, `TURNSTILE_TASK_ID`,
//! `TURNSTILE_ATTEMPT` in its environment. Exit 0 acks; any other end nacks, due again
//! after an exponential backoff (1 s, 2 s, 4 s, … up to `--max-backoff`). The library
//! extends a running task's lease at two thirds of `--visibility`, re-attaches a cut
//! stream with the same worker_id (its unacked tasks are not started twice), and
//! drains on SIGTERM or SIGINT: nothing new starts, running commands finish (within
//! `--drain-timeout` if one is given; past it they get SIGTERM and their tasks go
//! back), their acks and nacks are sent once the stream is closed, and the exit status
//! is 0.

use std::{
    collections::HashMap,
    process::{ExitCode, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use clap::Args;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use turnstile::{
    client::{Backoff, Hooks, Task, TaskError},
    config::parse_duration,
};

use super::{
    client::{ClientArgs, Outcome},
    run::{self, StopSignals},
};

/// `turnstile work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
    /// The queue.
    pub queue: String,
    /// How many tasks run at once (Subscribe's max_in_flight).
    #[arg(long, default_value_t = 1)]
    pub concurrency: u32,
    /// Each delivery's lease, extended at two thirds of it while CMD runs.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub visibility: Duration,
    /// The Subscribe worker_id (default: host-pid-random): a re-opened stream gets
    /// this worker's unacked tasks back.
    #[arg(long)]
    pub worker_id: Option<String>,
    /// The longest wait before a failed task is due again.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub max_backoff: Duration,
    /// How long a stop lets running commands finish before they get SIGTERM and their
    /// tasks go back (0: as long as they take).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    pub drain_timeout: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Each running task's command exit status, by receipt, for its log line.
type Exits = Arc<Mutex<HashMap<String, u8>>>;

pub async fn run(args: WorkArgs) -> Outcome {
    let client = args.client.connect()?;
    let args = Arc::new(args);
    let exits: Exits = Arc::default();
    let handler = {
        let (args, exits) = (args.clone(), exits.clone());
        move |task: Task| run_command(args.clone(), exits.clone(), task)
    };
    let drain_timeout = match args.drain_timeout {
        Duration::ZERO => Duration::MAX,
        timeout => timeout,
    };
    let mut worker = client
        .lib
        .worker(&args.queue, handler)
        .concurrency(args.concurrency)
        .visibility(args.visibility)
        .backoff(Backoff {
            max: args.max_backoff,
            jitter: 0.0,
            ..Backoff::default()
        })
        .drain_timeout(drain_timeout)
        .hooks(log_hooks(&args, &exits))
        .handle_signals(false);
    if let Some(id) = &args.worker_id {
        worker = worker.worker_id(id);
    }
    let stop = worker.stop_token();
    let mut stops = StopSignals::install()?;
    tokio::spawn(async move {
        stops.next().await;
        eprintln!("turnstile: draining: running tasks finish, nothing new starts");
        stop.cancel();
    });
    worker.run().await?;
    Ok(ExitCode::SUCCESS)
}

/// Sends SIGTERM to a command that still runs when its task's future is dropped.
struct TermOnDrop(Option<tokio::process::Child>);

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &self.0 {
            run::signal_child(child, libc::SIGTERM);
        }
    }
}

/// Runs CMD for one task: Ok on exit 0. Past the drain's end (or when the lease is
/// lost) the library drops this future, and CMD gets SIGTERM.
async fn run_command(args: Arc<WorkArgs>, exits: Exits, task: Task) -> Result<(), TaskError> {
    let mut command = run::command(&args.command);
    command
        .env("TURNSTILE_QUEUE", &args.queue)
        .env("TURNSTILE_TASK_ID", &task.id)
        .env("TURNSTILE_ATTEMPT", task.attempt.to_string())
        .stdin(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tail = None;
    let exit = match run::spawn(&mut command, &args.command[0]) {
        Ok(mut child) => {
            if let Some(mut stdin) = child.stdin.take() {
                let payload = task.payload.clone();
                // A command that does not read its stdin must not block the worker.
                tokio::spawn(async move {
                    let _ = stdin.write_all(&payload).await;
                });
            }
            tail = child
                .stderr
                .take()
                .map(|stderr| tokio::spawn(pass_on(stderr)));
            let mut running = TermOnDrop(Some(child));
            let exit = match &mut running.0 {
                Some(child) => child.wait().await.map(run::exit_code).unwrap_or(1),
                None => 1,
            };
            running.0 = None;
            exit
        }
        Err(failure) => {
            eprintln!("turnstile: {}", failure.message);
            failure.code
        }
    };
    exits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(task.receipt().to_owned(), exit);
    // The command ended: its stderr reaches its end too (a grandchild holding it open
    // must not hold the task, so only briefly).
    let said = match tail {
        Some(tail) => tokio::time::timeout(Duration::from_secs(1), tail)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default(),
        None => String::new(),
    };
    match (exit, said.trim()) {
        (0, _) => Ok(()),
        (code, "") => Err(TaskError::msg(format!("exit {code}"))),
        (code, said) => Err(TaskError::msg(format!("exit {code}: {said}"))),
    }
}

/// The most of a command's stderr kept for its Nack's error: its end, which is where
/// a failing program says why.
const STDERR_TAIL: usize = 4000;

/// Copies a command's stderr to ours as it comes, keeping its last [`STDERR_TAIL`]
/// bytes (cut at a UTF-8 boundary): the error of a failed task's Nack.
async fn pass_on(mut stderr: tokio::process::ChildStderr) -> String {
    use tokio::io::AsyncReadExt;
    let mut kept: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(read) = stderr.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        // Our own stderr, unbuffered: a chunk at a time, as the command wrote it.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), &chunk[..read]);
        kept.extend_from_slice(&chunk[..read]);
        if kept.len() > 2 * STDERR_TAIL {
            kept.drain(..kept.len() - STDERR_TAIL);
        }
    }
    let from = kept.len().saturating_sub(STDERR_TAIL);
    let text = String::from_utf8_lossy(&kept[from..]);
    // A cut in the middle of a character shows as U+FFFD at the start: drop it.
    text.trim_start_matches('\u{fffd}').to_owned()
}

/// One line per finished task: on stderr, or as JSON on stdout with `--json`.
fn log_hooks(args: &Arc<WorkArgs>, exits: &Exits) -> Hooks {
    let line = {
        let (args, exits) = (args.clone(), exits.clone());
        move |task: &Task, outcome: &str, detail: String| {
            let exit = exits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(task.receipt())
                .unwrap_or(1);
            if args.client.json {
                println!(
                    "{}",
                    json!({
                        "queue": args.queue,
                        "id": task.id,
                        "attempt": task.attempt,
                        "exit": exit,
                        "outcome": outcome,
                    })
                );
            } else {
                eprintln!(
                    "turnstile: task {} attempt {}: exit {exit}, {outcome}{detail}",
                    task.id, task.attempt
                );
            }
        }
    };
    let line = Arc::new(line);
    let (acked, requeued, dead) = (line.clone(), line.clone(), line);
    Hooks {
        on_success: Some(Arc::new(move |task, ()| {
            acked(task, "acked", String::new())
        })),
        on_retry: Some(Arc::new(move |task, after: Duration| {
            requeued(task, "requeued", format!(", due again in {after:?}"))
        })),
        on_dead: Some(Arc::new(move |task, _| {
            dead(task, "dead", ", out of attempts".to_owned())
        })),
        ..Hooks::default()
    }
}
