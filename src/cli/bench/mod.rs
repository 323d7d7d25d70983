//! `turnstile bench`: measures the server against its physical floors in one run. It
//! starts its own Redis and server (or measures `--server`), runs the chosen scenarios,
//! shows a progress line on stderr, and prints a table (or one JSON object per
//! scenario with `--json`). Speed is judged here, never by timed assertions in tests.

mod idle;
mod locks;
pub mod noop;
mod queues;
mod redis_cost;
mod report;
mod sample;
mod scale;
mod target;

use std::time::Duration;

use clap::{Args, ValueEnum};

use report::Report;
use target::Target;
use turnstile::config::parse_duration;

/// A failed RPC as one line.
fn failed(status: tonic::Status) -> String {
    format!("{}: {}", status.code(), status.message())
}

/// One scenario of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// N clients Acquire+Release distinct names (with Redis and transport floors).
    Lock,
    /// Clients queued on one name: Release → next Acquire latency.
    Handoff,
    /// Producers and Subscribe workers end to end, one Ack per task and batched.
    Queue,
    /// Enqueue → push to an idle subscriber, one task every 5 ms.
    Pickup,
    /// 2,000 tasks due over 5 s: lateness.
    Delayed,
    /// 1,000 idle streams and 1,000 waiting Acquires: Redis commands/s, server RSS
    /// (before seckill, whose burst leaves the server's memory at its peak).
    Idle,
    /// 10,000 buyers, 100 in stock, one lock.
    Seckill,
    /// `lock` and a queue run over 6 queues on one Redis and on a 3-primary Redis
    /// Cluster, each under 1 and 3 server replicas, and on a Redis with a replica
    /// under --redis-wait-replicas 1: started here whatever --server says.
    Scale,
}

/// `turnstile bench` settings.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// Scenarios to run, in order (default: all).
    #[arg(value_enum)]
    pub scenarios: Vec<Scenario>,
    /// A running server to measure (host:port or URL); default: start Redis and a
    /// server here on free loopback ports.
    #[arg(long)]
    pub server: Option<String>,
    /// The Redis to use (without --server) or the one --server uses (for the Redis
    /// floors and the idle command count).
    #[arg(long)]
    pub redis_url: Option<String>,
    /// How long each timed run lasts (`lock`, `handoff`, `queue`, `pickup`).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Concurrent clients of the `lock` scenario and its floors.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Print one JSON object per scenario instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the bench; an error is one line (a scenario failed, or a check such as
/// seckill's sales did not hold).
pub async fn run(args: BenchArgs) -> Result<(), String> {
    let scenarios = if args.scenarios.is_empty() {
        Scenario::value_variants().to_vec()
    } else {
        args.scenarios.clone()
    };
    let target = Target::start(args.server.clone(), args.redis_url.clone()).await?;
    let result = run_scenarios(&target, &args, &scenarios).await;
    target.stop().await;
    let reports = result?;
    if !args.json {
        print!("{}", report::table(&reports));
    }
    Ok(())
}

async fn run_scenarios(
    target: &Target,
    args: &BenchArgs,
    scenarios: &[Scenario],
) -> Result<Vec<Report>, String> {
    let mut reports = Vec::new();
    for scenario in scenarios {
        let done = match scenario {
            Scenario::Lock => vec![locks::lock(target, args.concurrency, args.duration).await?],
            Scenario::Handoff => vec![locks::handoff(target, args.duration).await?],
            Scenario::Queue => vec![
                queues::queue(target, args.duration, false).await?,
                queues::queue(target, args.duration, true).await?,
            ],
            Scenario::Pickup => vec![queues::pickup(target, args.duration).await?],
            Scenario::Delayed => vec![queues::delayed(target).await?],
            Scenario::Seckill => vec![locks::seckill(target).await?],
            Scenario::Idle => vec![idle::idle(target).await?],
            Scenario::Scale => scale::scale(args.concurrency, args.duration).await?,
        };
        for report in done {
            if args.json {
                println!("{}", report.to_json());
            }
            reports.push(report);
        }
    }
    Ok(reports)
}
