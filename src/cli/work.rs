//! `turnstile work QUEUE -- CMD`: a worker for any program. It `Subscribe`s with a
//! worker_id and runs CMD once per task, at most `--concurrency` at once, with the
//! payload on stdin and `TURNSTILE_QUEUE`, `TURNSTILE_TASK_ID`, `TURNSTILE_ATTEMPT` in
//! its environment. Exit 0 acks; any other end nacks, due again after an exponential
//! backoff (1 s, 2 s, 4 s, … up to `--max-backoff`). A running task's lease is
//! extended every visibility/3, so CMD may run longer than `--visibility`.
//!
//! A stream the server cuts (a GOAWAY, a replica's shutdown) is re-opened with the
//! same worker_id: the server sends its unacked tasks again, which are already running
//! here and are not started twice. SIGTERM or SIGINT stops taking tasks: the stream
//! is closed (its tasks stay leased to the worker_id for the server's
//! --reattach-grace), the running ones are extended every second until they finish
//! and are acked or nacked, and the exit status is 0.

use std::{collections::HashSet, process::Stdio, sync::Arc, time::Duration};

use clap::Args;
use serde_json::json;
use tokio::{io::AsyncWriteExt, sync::watch, task::JoinSet};
use tokio_stream::StreamExt;
use turnstile::{
    config::parse_duration,
    pb::{self, subscribe_response::Event},
};

use super::{
    client::{hostname, ClientArgs, Outcome},
    lock::duration,
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
    /// Each delivery's lease, extended every visibility/3 while CMD runs.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub visibility: Duration,
    /// The Subscribe worker_id (default: host-pid): a re-opened stream gets this
    /// worker's unacked tasks back.
    #[arg(long)]
    pub worker_id: Option<String>,
    /// The longest wait before a failed task is due again.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub max_backoff: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// What every task runner needs.
struct Shared {
    args: WorkArgs,
    queues: pb::queue_service_client::QueueServiceClient<super::client::Authed>,
    /// True once a stop was asked for: leases are then extended every second, since
    /// the closed stream left them with the server's re-attach grace.
    draining: watch::Receiver<bool>,
}

pub async fn run(args: WorkArgs) -> Outcome {
    let client = args.client.connect()?;
    let request = pb::SubscribeRequest {
        queue: args.queue.clone(),
        max_in_flight: args.concurrency,
        visibility: Some(duration(args.visibility)),
        worker_id: args
            .worker_id
            .clone()
            .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id())),
    };
    let (drain, draining) = watch::channel(false);
    let shared = Arc::new(Shared {
        args,
        queues: client.queues.clone(),
        draining,
    });
    let mut queues = client.queues;
    let mut stops = StopSignals::install()?;
    let mut running: HashSet<String> = HashSet::new();
    let mut runners: JoinSet<String> = JoinSet::new();
    let mut pause = Duration::from_millis(50);
    'serve: loop {
        let opened = tokio::select! {
            opened = queues.subscribe(request.clone()) => opened,
            _ = stops.next() => break 'serve,
        };
        let mut stream = match opened {
            Ok(response) => response.into_inner(),
            Err(status) if retryable(&status) => {
                tracing::warn!(cause = %status, "subscribe failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = stops.next() => break 'serve,
                }
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(status) => {
                // Not worth retrying (bad queue name, no permission): stop, letting
                // what runs finish first.
                drain_all(&mut runners, &drain).await;
                return Err(status.into());
            }
        };
        loop {
            tokio::select! {
                message = stream.next() => match message {
                    Some(Ok(pb::SubscribeResponse { event: Some(Event::Task(task)) })) => {
                        pause = Duration::from_millis(50);
                        // A re-attached stream sends our unacked tasks again.
                        if running.insert(task.receipt.clone()) {
                            runners.spawn(run_task(shared.clone(), task));
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(status)) if retryable(&status) => {
                        tracing::warn!(cause = %status, "subscribe stream ended; re-opening");
                        continue 'serve;
                    }
                    Some(Err(status)) => {
                        drain_all(&mut runners, &drain).await;
                        return Err(status.into());
                    }
                    None => continue 'serve,
                },
                Some(done) = runners.join_next() => {
                    if let Ok(receipt) = done {
                        running.remove(&receipt);
                    }
                }
                _ = stops.next() => break 'serve,
            }
        }
    }
    drain_all(&mut runners, &drain).await;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Stops taking tasks and waits for the running ones.
async fn drain_all(runners: &mut JoinSet<String>, drain: &watch::Sender<bool>) {
    let _ = drain.send(true);
    if !runners.is_empty() {
        eprintln!(
            "turnstile: draining: waiting for {} running task(s)",
            runners.len()
        );
    }
    while runners.join_next().await.is_some() {}
}

/// A stream cut by the server or the network (a broken connection reads as UNKNOWN
/// in tonic's client): re-open it. Anything else is the caller's to fix.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown
    )
}

/// How one task ended, for the log line.
enum Finished {
    Acked,
    Requeued(Duration),
    Dead,
    /// The receipt was stale (the lease ran out): the task is someone else's now.
    Stale,
    /// Ack or Nack failed past retries: the lease's end gives the task back.
    Unreported(String),
}

/// Runs CMD for one task, keeps its lease, then acks or nacks; the task's receipt.
async fn run_task(shared: Arc<Shared>, task: pb::Task) -> String {
    let args = &shared.args;
    let mut queues = shared.queues.clone();
    let mut command = run::command(&args.command);
    command
        .env("TURNSTILE_QUEUE", &args.queue)
        .env("TURNSTILE_TASK_ID", &task.id)
        .env("TURNSTILE_ATTEMPT", task.attempt.to_string())
        .stdin(Stdio::piped());
    let exit = match run::spawn(&mut command, &args.command[0]) {
        Ok(mut child) => {
            if let Some(mut stdin) = child.stdin.take() {
                let payload = task.payload.clone();
                // A command that does not read its stdin must not block the worker.
                tokio::spawn(async move {
                    let _ = stdin.write_all(&payload).await;
                });
            }
            keep_leased(&shared, &mut queues, &task, &mut child).await
        }
        Err(failure) => {
            eprintln!("turnstile: {}", failure.message);
            failure.code
        }
    };
    let finished = report(&mut queues, args, &task, exit).await;
    log(args, &task, exit, &finished);
    task.receipt
}

/// Waits for the command, extending the lease while it runs; its exit status.
async fn keep_leased(
    shared: &Shared,
    queues: &mut pb::queue_service_client::QueueServiceClient<super::client::Authed>,
    task: &pb::Task,
    child: &mut tokio::process::Child,
) -> u8 {
    let mut draining = shared.draining.clone();
    loop {
        let every = if *draining.borrow() {
            (shared.args.visibility / 3).min(Duration::from_secs(1))
        } else {
            shared.args.visibility / 3
        };
        tokio::select! {
            status = child.wait() => {
                return status.map(run::exit_code).unwrap_or(1);
            }
            // The drain starts: extend at once, the stream's end cut the lease short.
            _ = draining.changed(), if !*draining.borrow() => {}
            () = tokio::time::sleep(every) => {}
        }
        let extended = queues
            .extend_lease(pb::ExtendLeaseRequest {
                queue: shared.args.queue.clone(),
                receipt: task.receipt.clone(),
                visibility: Some(duration(shared.args.visibility)),
            })
            .await;
        match extended {
            Ok(answer) if !answer.get_ref().extended => {
                tracing::warn!(task_id = task.id, "lease lost while the command runs");
            }
            Ok(_) => {}
            Err(status) => {
                tracing::warn!(task_id = task.id, cause = %status, "lease not extended")
            }
        }
    }
}

/// Acks (exit 0) or nacks with backoff, retrying a failed call a few times.
async fn report(
    queues: &mut pb::queue_service_client::QueueServiceClient<super::client::Authed>,
    args: &WorkArgs,
    task: &pb::Task,
    exit: u8,
) -> Finished {
    let backoff = backoff(task.attempt, args.max_backoff);
    let mut last = String::new();
    for attempt in 0..5u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100) * 2u32.pow(attempt)).await;
        }
        if exit == 0 {
            match queues
                .ack(pb::AckRequest {
                    queue: args.queue.clone(),
                    receipts: vec![task.receipt.clone()],
                })
                .await
            {
                Ok(answer) if answer.get_ref().acked.first() == Some(&true) => {
                    return Finished::Acked
                }
                Ok(_) => return Finished::Stale,
                Err(status) => last = status.to_string(),
            }
        } else {
            match queues
                .nack(pb::NackRequest {
                    queue: args.queue.clone(),
                    receipt: task.receipt.clone(),
                    delay: Some(duration(backoff)),
                })
                .await
            {
                Ok(answer) if answer.get_ref().dead => return Finished::Dead,
                Ok(answer) if answer.get_ref().requeued => return Finished::Requeued(backoff),
                Ok(_) => return Finished::Stale,
                Err(status) => last = status.to_string(),
            }
        }
    }
    Finished::Unreported(last)
}

/// 1 s after the first failed attempt, doubling, at most `max`.
fn backoff(attempt: u32, max: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    Duration::from_secs(1)
        .saturating_mul(1u32 << doublings)
        .min(max)
}

fn log(args: &WorkArgs, task: &pb::Task, exit: u8, finished: &Finished) {
    let (outcome, detail) = match finished {
        Finished::Acked => ("acked", String::new()),
        Finished::Requeued(after) => ("requeued", format!(", due again in {after:?}")),
        Finished::Dead => ("dead", ", out of attempts".to_owned()),
        Finished::Stale => ("stale", ", its lease had run out".to_owned()),
        Finished::Unreported(why) => ("unreported", format!(": {why}")),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_the_cap() {
        let cap = Duration::from_secs(300);
        let waits: Vec<u64> = (1..=10).map(|a| backoff(a, cap).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(backoff(u32::MAX, cap), cap);
    }
}
