//! `turnstile semaphore NAME --limit N [--permits P] -- CMD`: run CMD while holding
//! permits of a semaphore, held by `SemaphoreService.Hold` and run exactly as
//! `turnstile lock` runs (the same exit statuses; the fencing token in
//! `TURNSTILE_FENCING_TOKEN`).

use std::time::Duration;

use clap::Args;
use turnstile::{config::parse_duration, pb};

use super::{
    client::{ClientArgs, Outcome},
    lock::{default_owner, duration, run_holding, Target},
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
    /// The lease, renewed every ttl/3 while CMD runs.
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
    let target = Target::Semaphore(pb::SemaphoreServiceHoldRequest {
        name: args.name.clone(),
        owner: args.owner.clone().unwrap_or_else(default_owner),
        limit: args.limit,
        permits: args.permits,
        ttl: Some(duration(args.ttl)),
        wait: Some(duration(args.wait)),
        token: String::new(),
    });
    run_holding(client, target, &args.command).await
}
