//! One task's story: `turnstile task` (the task and its delivery history) and
//! `turnstile wait` (until it is done; the result on stdout), and how `enqueue --wait`
//! ends. Exit statuses of a wait, as the contract's command-line table gives them: 0
//! COMPLETED, 1 DEAD, 3 CANCELLED, 4 not done when the timeout passed.

use std::{io::Write, process::ExitCode, time::Duration};

use clap::Args;
use serde_json::json;
use turnstile::{config::parse_duration, pb};

use super::{
    client::{ClientArgs, Failure, Outcome},
    output::{payload_json, payload_preview, rfc3339, table},
};

/// `turnstile task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The queue.
    pub queue: String,
    /// The task id.
    pub id: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `turnstile wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The queue.
    pub queue: String,
    /// The task id.
    pub id: String,
    /// How long to wait (at most 1h).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub timeout: Duration,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// A state's name as the command line prints it (`DEAD`, `COMPLETED`).
pub(super) fn state_name(state: i32) -> String {
    pb::TaskState::try_from(state)
        .map(|s| s.as_str_name().trim_start_matches("TASK_STATE_").to_owned())
        .unwrap_or_else(|_| state.to_string())
}

fn outcome_name(outcome: i32) -> String {
    pb::AttemptOutcome::try_from(outcome)
        .map(|o| {
            o.as_str_name()
                .trim_start_matches("ATTEMPT_OUTCOME_")
                .to_owned()
        })
        .unwrap_or_else(|_| outcome.to_string())
}

pub async fn task(args: TaskArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let task = client
        .queues
        .get_task(pb::GetTaskRequest {
            queue: args.queue,
            id: args.id,
        })
        .await?
        .into_inner();
    if args.client.json {
        println!("{}", task_json(&task));
        return Ok(ExitCode::SUCCESS);
    }
    let fields = [
        ("id", task.id.clone()),
        ("state", state_name(task.state)),
        (
            "attempt",
            format!("{} of {}", task.attempt, task.max_attempts),
        ),
        ("group", task.group.clone()),
        ("priority", task.priority.to_string()),
        ("enqueued_at", rfc3339(task.enqueued_at.as_ref())),
        ("due_at", rfc3339(task.due_at.as_ref())),
        ("payload", payload_preview(&task.payload)),
        ("last_error", task.last_error.clone()),
        ("progress", payload_preview(&task.progress)),
        ("result", payload_preview(&task.result)),
    ];
    let mut out = String::new();
    for (name, value) in fields {
        out.push_str(&format!("{name:<12}{value}\n"));
    }
    if !task.history.is_empty() {
        let rows: Vec<Vec<String>> = task
            .history
            .iter()
            .map(|attempt| {
                vec![
                    attempt.number.to_string(),
                    outcome_name(attempt.outcome),
                    attempt.worker_id.clone(),
                    rfc3339(attempt.leased_at.as_ref()),
                    rfc3339(attempt.ended_at.as_ref()),
                    payload_preview(attempt.error.as_bytes()),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &[
                "ATTEMPT",
                "OUTCOME",
                "WORKER",
                "LEASED_AT",
                "ENDED_AT",
                "ERROR",
            ],
            &rows,
        ));
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// A task as one JSON object, with its history.
fn task_json(task: &pb::Task) -> serde_json::Value {
    let (key, payload) = payload_json(&task.payload);
    let (result_key, result) = payload_json(&task.result);
    let history: Vec<serde_json::Value> = task
        .history
        .iter()
        .map(|attempt| {
            json!({
                "number": attempt.number,
                "outcome": outcome_name(attempt.outcome),
                "worker_id": attempt.worker_id,
                "leased_at": rfc3339(attempt.leased_at.as_ref()),
                "ended_at": rfc3339(attempt.ended_at.as_ref()),
                "error": attempt.error,
            })
        })
        .collect();
    let mut object = json!({
        "id": task.id,
        "state": state_name(task.state),
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        "group": task.group,
        "priority": task.priority,
        "enqueued_at": rfc3339(task.enqueued_at.as_ref()),
        "due_at": rfc3339(task.due_at.as_ref()),
        "last_error": task.last_error,
        "history": history,
    });
    object[key] = payload;
    // "result", or "result_base64" for bytes that are not UTF-8, as the payload's.
    object[result_key.replacen("payload", "result", 1)] = result;
    object
}

pub async fn wait(args: WaitArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let timeout = prost_types::Duration::try_from(args.timeout)
        .map_err(|_| Failure::other("--timeout: too long"))?;
    let answer = client
        .queues
        .wait(pb::WaitRequest {
            queue: args.queue,
            id: args.id,
            timeout: Some(timeout),
        })
        .await?
        .into_inner();
    ended(answer.done, answer.task.as_ref(), args.client.json)
}

/// How a wait ends: the result on stdout (raw bytes, or with `--json` the task), and
/// the exit status of its state.
pub fn ended(done: bool, task: Option<&pb::Task>, json: bool) -> Outcome {
    let state = task.map(|task| task.state()).unwrap_or_default();
    if json {
        let mut object = task.map(task_json).unwrap_or_else(|| json!({}));
        object["done"] = json!(done);
        println!("{object}");
    } else if let (true, Some(task)) = (done, task) {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(&task.result)
            .and_then(|()| stdout.flush())
            .map_err(|err| Failure::other(format!("writing the result: {err}")))?;
        if state != pb::TaskState::Completed && !task.last_error.is_empty() {
            eprintln!("turnstile: {}: {}", state_name(task.state), task.last_error);
        }
    }
    Ok(ExitCode::from(match (done, state) {
        (false, _) => 4,
        (true, pb::TaskState::Completed) => 0,
        (true, pb::TaskState::Cancelled) => 3,
        (true, _) => 1,
    }))
}
