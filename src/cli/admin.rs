//! The operator commands: `enqueue`, `stats` (with `--watch`), `peek`, `cancel` and
//! `redrive`. Each is one call (or one per queue), printed as a table or, with
//! `--json`, as one JSON object per line.

use std::{io::Read, process::ExitCode, time::Duration};

use clap::{Args, ValueEnum};
use serde_json::json;
use turnstile::{
    config::parse_duration,
    pb::{self, task_spec::Schedule},
};

use super::{
    client::{ClientArgs, Failure, Outcome},
    flow::{config_cells, config_json},
    output::{parse_rfc3339, payload_json, payload_preview, rfc3339, table},
    run::StopSignals,
};

/// `turnstile enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The queue.
    pub queue: String,
    /// The payload; `-` or none reads it from stdin.
    pub payload: Option<String>,
    /// The task id (a duplicate is refused); none: the server makes one.
    #[arg(long)]
    pub id: Option<String>,
    /// Due this long from now (like 30s, 5m).
    #[arg(long, value_parser = parse_duration, conflicts_with = "at")]
    pub delay: Option<Duration>,
    /// Due at this instant (RFC 3339, like 2026-11-23T19:10:44Z).
    #[arg(long, value_parser = parse_rfc3339)]
    pub at: Option<prost_types::Timestamp>,
    /// Its group (groups take turns; none: the queue's ungrouped tasks).
    #[arg(long, default_value = "")]
    pub group: String,
    /// 0-9: higher is delivered first within its group.
    #[arg(long, default_value_t = 0)]
    pub priority: u32,
    /// Deliveries before the task goes DEAD; 0: the server's default (25).
    #[arg(long, default_value_t = 0)]
    pub max_attempts: u32,
    /// After the task is acked or cancelled its id stays reserved this long (like 1h).
    #[arg(long, value_parser = parse_duration)]
    pub dedupe_window: Option<Duration>,
    /// What an id already in the queue gets: keep it, or replace its payload and
    /// schedule (a DELAYED, READY or DEAD task).
    #[arg(long, value_enum, default_value_t = OnDuplicate::Keep)]
    pub on_duplicate: OnDuplicate,
    /// Wait this long (at most 1h) for the task to be done and print its result, as
    /// `turnstile wait` does (exit 0 completed, 1 dead, 3 cancelled, 4 not done).
    #[arg(long, value_parser = parse_duration)]
    pub wait: Option<Duration>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `enqueue --on-duplicate`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OnDuplicate {
    Keep,
    Replace,
}

/// A payload argument: the text given, or stdin for `-` or none.
pub fn read_payload(arg: Option<&str>) -> Result<Vec<u8>, Failure> {
    Ok(match arg {
        Some("-") | None => {
            let mut payload = Vec::new();
            std::io::stdin()
                .read_to_end(&mut payload)
                .map_err(|err| Failure::other(format!("reading the payload from stdin: {err}")))?;
            payload
        }
        Some(text) => text.as_bytes().to_vec(),
    })
}

pub async fn enqueue(args: EnqueueArgs) -> Outcome {
    let payload = read_payload(args.payload.as_deref())?;
    let schedule = match (args.delay, args.at) {
        (Some(delay), _) => Some(Schedule::Delay(
            prost_types::Duration::try_from(delay)
                .map_err(|_| Failure::other("--delay: too long"))?,
        )),
        (None, Some(at)) => Some(Schedule::DueAt(at)),
        (None, None) => None,
    };
    let mut client = args.client.connect()?;
    let answer = client
        .queues
        .enqueue(pb::EnqueueRequest {
            queue: args.queue,
            tasks: vec![pb::TaskSpec {
                id: args.id.unwrap_or_default(),
                payload: payload.into(),
                schedule,
                group: args.group,
                priority: args.priority,
                max_attempts: args.max_attempts,
                dedupe_window: args
                    .dedupe_window
                    .and_then(|window| prost_types::Duration::try_from(window).ok()),
                on_duplicate: match args.on_duplicate {
                    OnDuplicate::Keep => pb::DuplicatePolicy::Keep,
                    OnDuplicate::Replace => pb::DuplicatePolicy::Replace,
                } as i32,
            }],
            wait: args
                .wait
                .map(prost_types::Duration::try_from)
                .transpose()
                .map_err(|_| Failure::other("--wait: too long"))?,
        })
        .await?
        .into_inner();
    let result = answer
        .results
        .into_iter()
        .next()
        .ok_or_else(|| Failure::other("the server answered no result"))?;
    if args.wait.is_some() {
        return super::tasks::ended(result.done, result.task.as_ref(), args.client.json);
    }
    if args.client.json {
        println!(
            "{}",
            json!({
                "id": result.id,
                "created": result.created,
                "replaced": result.replaced,
                "due_at": rfc3339(result.due_at.as_ref()),
            })
        );
    } else {
        println!("{}", result.id);
        if !result.created && !result.replaced {
            eprintln!("turnstile: not created: a task with this id is already in the queue (or its id is held by a dedupe window)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `turnstile stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The queues.
    #[arg(required = true)]
    pub queues: Vec<String>,
    /// Redraw every --interval until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// How often --watch redraws.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn stats(args: StatsArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let mut first = true;
    // Installed before the first draw: SIGINT or SIGTERM ends --watch with status 0.
    let mut stops = match args.watch {
        true => Some(StopSignals::install()?),
        false => None,
    };
    loop {
        let mut rows = Vec::new();
        for queue in &args.queues {
            let stats = client
                .queues
                .stats(pb::StatsRequest {
                    queue: queue.clone(),
                })
                .await?
                .into_inner();
            if args.client.json {
                println!(
                    "{}",
                    json!({
                        "queue": queue,
                        "ready": stats.ready,
                        "delayed": stats.delayed,
                        "in_flight": stats.in_flight,
                        "dead": stats.dead,
                        "oldest_ready_at": stats.oldest_ready_at.as_ref().map(|t| rfc3339(Some(t))),
                        "next_due_at": stats.next_due_at.as_ref().map(|t| rfc3339(Some(t))),
                        "config": config_json(stats.config.as_ref()),
                    })
                );
            }
            let mut row = vec![
                queue.clone(),
                stats.ready.to_string(),
                stats.delayed.to_string(),
                stats.in_flight.to_string(),
                stats.dead.to_string(),
                rfc3339(stats.oldest_ready_at.as_ref()),
                rfc3339(stats.next_due_at.as_ref()),
            ];
            row.extend(config_cells(stats.config.as_ref()));
            rows.push(row);
        }
        if !args.client.json {
            let text = table(
                &[
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
                    "GROUP_RATE",
                ],
                &rows,
            );
            if args.watch {
                // Home, the table, then clear what an older, longer table left below.
                let clear = if first { "\x1b[2J" } else { "" };
                print!("{clear}\x1b[H{text}\x1b[J");
                use std::io::Write;
                let _ = std::io::stdout().flush();
            } else {
                print!("{text}");
            }
        }
        if !args.watch {
            return Ok(ExitCode::SUCCESS);
        }
        first = false;
        let Some(stops) = stops.as_mut() else {
            return Ok(ExitCode::SUCCESS);
        };
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = stops.next() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// A task state, as `peek --state` takes it.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StateArg {
    /// Due later.
    Delayed,
    /// Due now.
    Ready,
    /// Leased to a worker.
    InFlight,
    /// Out of attempts.
    Dead,
}

impl From<StateArg> for pb::TaskState {
    fn from(state: StateArg) -> Self {
        match state {
            StateArg::Delayed => pb::TaskState::Delayed,
            StateArg::Ready => pb::TaskState::Ready,
            StateArg::InFlight => pb::TaskState::InFlight,
            StateArg::Dead => pb::TaskState::Dead,
        }
    }
}

/// `turnstile peek`.
#[derive(Debug, Args)]
pub struct PeekArgs {
    /// The queue.
    pub queue: String,
    /// Which tasks.
    #[arg(long, value_enum, default_value = "ready")]
    pub state: StateArg,
    /// At most this many (the server's default is 10, at most 1000).
    #[arg(long, default_value_t = 10)]
    pub limit: u32,
    /// Only this group's READY tasks, in its delivery order.
    #[arg(long)]
    pub group: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn peek(args: PeekArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let tasks = client
        .queues
        .peek(pb::PeekRequest {
            queue: args.queue,
            state: pb::TaskState::from(args.state) as i32,
            limit: args.limit,
            group: args.group,
        })
        .await?
        .into_inner()
        .tasks;
    let state_name = |task: &pb::Task| super::tasks::state_name(task.state);
    if args.client.json {
        for task in &tasks {
            let (key, payload) = payload_json(&task.payload);
            let mut object = json!({
                "id": task.id,
                "state": state_name(task),
                "due_at": rfc3339(task.due_at.as_ref()),
                "enqueued_at": rfc3339(task.enqueued_at.as_ref()),
                "attempt": task.attempt,
                "max_attempts": task.max_attempts,
                "group": task.group,
                "priority": task.priority,
                "last_error": task.last_error,
            });
            object[key] = payload;
            println!("{object}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|task| {
            vec![
                task.id.clone(),
                state_name(task),
                task.group.clone(),
                task.priority.to_string(),
                rfc3339(task.due_at.as_ref()),
                format!("{}/{}", task.attempt, task.max_attempts),
                payload_preview(&task.payload),
                payload_preview(task.last_error.as_bytes()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "STATE",
                "GROUP",
                "PRIORITY",
                "DUE_AT",
                "ATTEMPTS",
                "PAYLOAD",
                "LAST_ERROR",
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// `turnstile cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The queue.
    pub queue: String,
    /// The tasks to remove (not in flight, unless --running).
    #[arg(required = true)]
    pub ids: Vec<String>,
    /// Cancel tasks in flight too: their workers are told to stop, and they end as
    /// CANCELLED.
    #[arg(long)]
    pub running: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn cancel(args: CancelArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let cancelled = client
        .queues
        .cancel(pb::CancelRequest {
            queue: args.queue,
            ids: args.ids,
            running: args.running,
        })
        .await?
        .into_inner()
        .cancelled;
    if args.client.json {
        println!("{}", json!({ "cancelled": cancelled }));
    } else {
        for id in &cancelled {
            println!("{id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `turnstile redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// The queue.
    pub queue: String,
    /// The DEAD tasks to bring back; none: all of them.
    pub ids: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn redrive(args: RedriveArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let redriven = client
        .queues
        .redrive(pb::RedriveRequest {
            queue: args.queue,
            ids: args.ids,
        })
        .await?
        .into_inner()
        .redriven;
    if args.client.json {
        println!("{}", json!({ "redriven": redriven }));
    } else {
        println!("{redriven}");
    }
    Ok(ExitCode::SUCCESS)
}
