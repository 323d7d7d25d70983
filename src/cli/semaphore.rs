//! `turnstile semaphore NAME --limit N [--permits P] -- CMD`: run CMD while holding
//! permits of a semaphore, held by `SemaphoreService.Hold` and run exactly as
//! `turnstile lock` runs (the same exit statuses; the fencing token in
//! `TURNSTILE_FENCING_TOKEN`).

use std::time::Duration;

use clap::Args;
use turnstile::config::parse_duration;

use super::{
    client::{ClientArgs, Outcome},
    lock::run_holding,
};

/// `turnstile semaphore`.
#[derive(Debug, Args)]
pub struct SemaphoreArgs {
    /// The semaphore.
    pub name: String,
    /// The most permits held at once; every caller states the same limit.
    #[arg(long)]
    pub limit: u32,
    /// How many permits this command takes.
    #[arg(long, default_value_t = 1)]
    pub permits: u32,
    /// The lease, renewed while CMD runs.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub ttl: Duration,
    /// How long to wait in line (0: try once).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    pub wait: Duration,
    /// Who holds the permits, as Describe shows (default: host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn run(args: SemaphoreArgs) -> Outcome {
    let client = args.client.connect()?;
    let mut call = client
        .lib
        .semaphore(&args.name, args.limit, args.ttl)
        .permits(args.permits)
        .wait(args.wait);
    if let Some(owner) = &args.owner {
        call = call.owner(owner);
    }
    let what = format!("semaphore {}", args.name);
    run_holding(call.await, &what, "TURNSTILE_SEMAPHORE", &args.command).await
}
