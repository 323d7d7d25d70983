//! `turnstile lock NAME -- CMD`: run CMD while holding NAME, like `flock(1)` across
//! machines. Built on the client library's [`Lease`]: held by a `Hold` stream (renewed
//! while CMD runs), re-attached by token after a cut (a GOAWAY, a replica's shutdown)
//! so CMD never notices, and released when CMD ends. A lease that is really lost sends
//! CMD SIGTERM and exits 70. Not acquired within `--wait`: 75. `turnstile semaphore`
//! runs the same way on a semaphore's permits.

use std::time::Duration;

use clap::Args;
use turnstile::{
    client::{Error, Lease},
    config::parse_duration,
};

use super::{
    client::{ClientArgs, Failure, Outcome},
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
    /// The lease, renewed while CMD runs.
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

pub async fn run(args: LockArgs) -> Outcome {
    let client = args.client.connect()?;
    let mut call = client.lib.lock(&args.name, args.ttl).wait(args.wait);
    if let Some(owner) = &args.owner {
        call = call.owner(owner);
    }
    let what = format!("lock {}", args.name);
    run_holding(call.await, &what, "TURNSTILE_LOCK", &args.command).await
}

/// Runs `command` while `lease` is held (the module's doc says how); `variable` names
/// the lock or semaphore in CMD's environment.
pub async fn run_holding(
    lease: Result<Lease, Error>,
    what: &str,
    variable: &str,
    command_line: &[String],
) -> Outcome {
    let lease = match lease {
        Ok(lease) => lease,
        Err(Error::NotAcquired { .. }) => {
            eprintln!("turnstile: {what} not acquired");
            return Ok(run::exit(NOT_ACQUIRED));
        }
        Err(err) => return Err(err.into()),
    };
    let mut command = run::command(command_line);
    command
        .env(variable, lease.name())
        .env("TURNSTILE_FENCING_TOKEN", lease.fencing_token().to_string());
    // Installed before CMD starts: a SIGINT or SIGTERM sent once CMD runs is passed on
    // to it. Installed after, one sent in between killed this process and left CMD
    // running unheld (seen under load in the signals test).
    let started = StopSignals::install()
        .and_then(|stops| Ok((stops, run::spawn(&mut command, &command_line[0])?)));
    let (mut stops, mut child) = match started {
        Ok(started) => started,
        Err(failure) => {
            release(&lease, what).await;
            return Err(failure);
        }
    };
    let lost = lease.lost();
    let mut told = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => {
                break status.map_err(|err| Failure::other(format!("waiting for the command: {err}")))?;
            }
            signal = stops.next() => run::signal_child(&child, signal),
            () = lost.cancelled(), if !told => {
                told = true;
                run::signal_child(&child, libc::SIGTERM);
            }
        }
    };
    match lease.lost_reason() {
        None => {
            // An explicit Release: the stream's close may not reach the server before
            // this process exits.
            release(&lease, what).await;
            Ok(run::exit(run::exit_code(status)))
        }
        Some(why) => {
            eprintln!("turnstile: {what} lost while the command ran: {why}");
            Ok(run::exit(LOST))
        }
    }
}

async fn release(lease: &Lease, what: &str) {
    if let Err(err) = lease.release().await {
        eprintln!("turnstile: {what} not released ({err}); it ends with its ttl");
    }
}
