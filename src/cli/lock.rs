//! `turnstile lock NAME -- CMD`: run CMD while holding NAME, like `flock(1)` across
//! machines. The lock is held by a `Hold` stream (renewed every ttl/3 while CMD runs)
//! and released when CMD ends. A stream cut by the server (a GOAWAY, a replica's
//! shutdown) re-attaches by token within the lease, so CMD never notices; a lease that
//! is really lost sends CMD SIGTERM and exits 70. Not acquired within `--wait`: 75.
//! `turnstile semaphore` runs the same way on a semaphore's permits ([`Target`]).

use std::{pin::Pin, time::Duration};

use clap::Args;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Status};
use turnstile::{
    config::parse_duration,
    pb::{self, hold_response::Event, semaphore_service_hold_response as semaphore_hold},
};

use super::{
    client::{hostname, Client, ClientArgs, Failure, Outcome},
    output::unix_ms,
    run::{self, StopSignals},
};

/// CMD's status when the lock could not be taken within `--wait` (EX_TEMPFAIL).
pub const NOT_ACQUIRED: u8 = 75;
/// The status when the lock was lost while CMD ran (EX_SOFTWARE).
pub const LOST: u8 = 70;

/// `turnstile lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock.
    pub name: String,
    /// The lease, renewed every ttl/3 while CMD runs.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub ttl: Duration,
    /// How long to wait for a held lock (0: try once).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    pub wait: Duration,
    /// Who holds it, as Describe shows (default: host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// How the lease ended while CMD ran.
enum Held {
    /// Still held (CMD ended first).
    Kept,
    /// Lost, with why.
    Lost(String),
}

pub async fn run(args: LockArgs) -> Outcome {
    let client = args.client.connect()?;
    let target = Target::Lock(pb::HoldRequest {
        name: args.name.clone(),
        owner: args.owner.clone().unwrap_or_else(default_owner),
        ttl: Some(duration(args.ttl)),
        wait: Some(duration(args.wait)),
        token: String::new(),
    });
    run_holding(client, target, &args.command).await
}

/// Who holds it when `--owner` is not given: host:pid.
pub fn default_owner() -> String {
    format!("{}:{}", hostname(), std::process::id())
}

/// What is held while CMD runs: a lock, or a semaphore's permits. Both Hold streams
/// carry the same events.
pub enum Target {
    /// `LockService.Hold`.
    Lock(pb::HoldRequest),
    /// `SemaphoreService.Hold`.
    Semaphore(pb::SemaphoreServiceHoldRequest),
}

/// The events of either Hold stream.
type Events = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;

impl Target {
    /// "lock NAME" or "semaphore NAME", for messages.
    fn what(&self) -> String {
        match self {
            Target::Lock(request) => format!("lock {}", request.name),
            Target::Semaphore(request) => format!("semaphore {}", request.name),
        }
    }

    fn name(&self) -> &str {
        match self {
            Target::Lock(request) => &request.name,
            Target::Semaphore(request) => &request.name,
        }
    }

    /// Opens the Hold stream (re-attaching with `token` unless it is empty).
    async fn open(&self, client: &mut Client, token: &str) -> Result<Events, Status> {
        Ok(match self {
            Target::Lock(request) => {
                let request = pb::HoldRequest {
                    token: token.to_owned(),
                    ..request.clone()
                };
                let stream = client.locks.hold(request).await?.into_inner();
                Box::pin(stream.filter_map(|message| message.map(|m| m.event).transpose()))
            }
            Target::Semaphore(request) => {
                let request = pb::SemaphoreServiceHoldRequest {
                    token: token.to_owned(),
                    ..request.clone()
                };
                let stream = client.semaphores.hold(request).await?.into_inner();
                Box::pin(stream.filter_map(|message| {
                    message.map(|m| m.event.map(semaphore_event)).transpose()
                }))
            }
        })
    }

    async fn release(&self, client: &mut Client, token: &str) {
        let released = match self {
            Target::Lock(request) => client
                .locks
                .release(pb::ReleaseRequest {
                    name: request.name.clone(),
                    token: token.to_owned(),
                })
                .await
                .map(drop),
            Target::Semaphore(request) => client
                .semaphores
                .release(pb::SemaphoreServiceReleaseRequest {
                    name: request.name.clone(),
                    token: token.to_owned(),
                })
                .await
                .map(drop),
        };
        if let Err(status) = released {
            eprintln!(
                "turnstile: {} not released ({}); it ends with its ttl",
                self.what(),
                status.message()
            );
        }
    }
}

/// A semaphore Hold event as the lock's (the same messages).
fn semaphore_event(event: semaphore_hold::Event) -> Event {
    match event {
        semaphore_hold::Event::Acquired(acquired) => Event::Acquired(acquired),
        semaphore_hold::Event::Renewed(renewed) => Event::Renewed(renewed),
        semaphore_hold::Event::Lost(lost) => Event::Lost(lost),
        semaphore_hold::Event::Heartbeat(beat) => Event::Heartbeat(beat),
    }
}

/// Holds `target` and runs `command` while it is held (the module's doc says how).
pub async fn run_holding(mut client: Client, target: Target, command_line: &[String]) -> Outcome {
    let mut stream = target.open(&mut client, "").await?;
    let acquired = loop {
        match stream.next().await.transpose()? {
            Some(Event::Acquired(acquired)) => break acquired,
            Some(Event::Lost(lost)) => {
                eprintln!("turnstile: {} not acquired: {}", target.what(), lost.reason);
                return Ok(run::exit(NOT_ACQUIRED));
            }
            Some(_) => continue,
            None => return Err(Failure::other("the Hold stream ended before Acquired")),
        }
    };
    let mut expires_at = acquired.expires_at.as_ref().map(unix_ms).unwrap_or(0);
    let mut command = run::command(command_line);
    let variable = match target {
        Target::Lock(_) => "TURNSTILE_LOCK",
        Target::Semaphore(_) => "TURNSTILE_SEMAPHORE",
    };
    command.env(variable, target.name()).env(
        "TURNSTILE_FENCING_TOKEN",
        acquired.fencing_token.to_string(),
    );
    let mut child = match run::spawn(&mut command, &command_line[0]) {
        Ok(child) => child,
        Err(failure) => {
            target.release(&mut client, &acquired.token).await;
            return Err(failure);
        }
    };
    let mut stops = StopSignals::install()?;
    let mut held = Held::Kept;
    let status = loop {
        tokio::select! {
            status = child.wait() => {
                break status.map_err(|err| Failure::other(format!("waiting for the command: {err}")))?;
            }
            signal = stops.next() => run::signal_child(&child, signal),
            event = stream.next(), if matches!(held, Held::Kept) => match event {
                Some(Ok(Event::Renewed(renewed))) => {
                    expires_at = renewed.expires_at.as_ref().map(unix_ms).unwrap_or(expires_at);
                }
                Some(Ok(Event::Lost(lost))) => {
                    held = Held::Lost(lost.reason);
                    run::signal_child(&child, libc::SIGTERM);
                }
                Some(Ok(_)) => {}
                // Cut by the server (shutdown, connection age) or the network: the
                // lease lasts until `expires_at`; take it over on a new stream.
                Some(Err(status)) if status.code() == Code::Unavailable || status.code() == Code::Unknown => {
                    match reattach(&mut client, &target, &acquired.token, expires_at).await {
                        Ok(again) => stream = again,
                        Err(why) => {
                            held = Held::Lost(why);
                            run::signal_child(&child, libc::SIGTERM);
                        }
                    }
                }
                Some(Err(status)) => {
                    held = Held::Lost(format!("{}: {}", turnstile::method::code_name(status.code() as i32), status.message()));
                    run::signal_child(&child, libc::SIGTERM);
                }
                None => {
                    held = Held::Lost("the Hold stream ended".into());
                    run::signal_child(&child, libc::SIGTERM);
                }
            },
        }
    };
    match held {
        Held::Kept => {
            // An explicit Release: the stream's cancel may not reach the server before
            // this process exits.
            target.release(&mut client, &acquired.token).await;
            Ok(run::exit(run::exit_code(status)))
        }
        Held::Lost(why) => {
            eprintln!(
                "turnstile: {} lost while the command ran: {why}",
                target.what()
            );
            Ok(run::exit(LOST))
        }
    }
}

/// Re-opens Hold with the lease's token until it is taken over or the lease ends.
async fn reattach(
    client: &mut Client,
    target: &Target,
    token: &str,
    expires_at: i64,
) -> Result<Events, String> {
    let mut pause = Duration::from_millis(20);
    loop {
        if turnstile::time::now_ms() >= expires_at {
            return Err("the lease ended before the stream could be re-attached".into());
        }
        let attempt = async {
            let mut stream = target.open(client, token).await?;
            loop {
                match stream.next().await.transpose()? {
                    Some(Event::Acquired(_)) => return Ok(Ok(stream)),
                    Some(Event::Lost(lost)) => return Ok(Err(lost.reason)),
                    Some(_) => continue,
                    None => return Ok(Err("the re-attached stream ended".to_owned())),
                }
            }
        };
        match attempt.await {
            Ok(result) => return result,
            Err(status) => {
                let status: tonic::Status = status;
                tracing::debug!(cause = %status, "hold re-attach failed; retrying");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// A duration as the proto spells it (the flags are far below its limits).
pub fn duration(value: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(value).unwrap_or_default()
}
