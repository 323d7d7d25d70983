//! `turnstile-bench`: measures the server against its physical floors in one run. It
//! starts its own Redis and `turnstile serve` children (or measures `--server`), runs
//! the chosen scenarios, shows a progress line on stderr, and prints a table (or one
//! JSON object per scenario with `--json`). Speed is judged here, never by timed
//! assertions in tests.
//!
//! It is its own binary, as `redis-benchmark` stands beside `redis-server`: the product
//! binary carries no bench code. It reaches the library only through its public
//! surface: the generated gRPC types and clients, the Rust client library, the embedded
//! Redis, and the Redis handle for the floors.

mod compare;
mod cost;
mod dashboard;
mod groups;
mod idle;
mod limits;
mod locks;
mod noop;
mod queues;
mod redis_cost;
mod report;
mod sample;
mod scale;
mod schedules;
mod semaphore;
mod target;
mod watch;
mod worker;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use clap::{Parser, ValueEnum};

use report::Report;
use target::Target;
use turnstile::config::parse_duration;

/// A failed RPC as one line.
fn failed(status: tonic::Status) -> String {
    format!("{}: {}", status.code(), status.message())
}

/// How long a set-up or clean-up call outside the timed part is retried through
/// UNAVAILABLE.
const RIDE_OUT: Duration = Duration::from_secs(30);

/// Runs a call outside the timed part, retrying UNAVAILABLE (a loaded machine's slow
/// moment of Redis) for up to [`RIDE_OUT`], as any client would: such a moment must
/// cost a figure, not the run. Only for calls that are safe to repeat.
async fn ride_out<T, Call, Answer>(mut call: Call) -> Result<T, String>
where
    Call: FnMut() -> Answer,
    Answer: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        match call().await {
            Ok(reply) => return Ok(reply.into_inner()),
            Err(status)
                if status.code() == tonic::Code::Unavailable && started.elapsed() < RIDE_OUT =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(status) => return Err(failed(status)),
        }
    }
}

/// One scenario of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// N clients Acquire+Release distinct names (with Redis and transport floors).
    Lock,
    /// Clients queued on one name: Release → next Acquire latency.
    Handoff,
    /// A `Watch` stream on one name: from an Acquire or Release sent to the watcher's
    /// event.
    Watch,
    /// 32 clients share 8 permits of one semaphore (one or two each): grants/s and
    /// the wait in line.
    Semaphore,
    /// Producers and Subscribe workers end to end, one Ack per task and batched.
    Queue,
    /// Enqueue → push to an idle subscriber, one task every 5 ms.
    Pickup,
    /// 2,000 tasks due over 5 s: lateness.
    Delayed,
    /// 5,000 idle streams and 5,000 waiting Acquires: Redis commands/s, server RSS
    /// (before seckill, whose burst leaves the server's memory at its peak).
    Idle,
    /// 10,000 buyers, 100 in stock, one lock.
    Seckill,
    /// The web dashboard: the overview of 1,000 queues and DEAD pages of 100,000 tasks
    /// (time to first byte and whole page), Redis commands/s with 20 live tabs
    /// against 1.
    Dashboard,
    /// Flow control: deliveries/s with 1, 1,000 and 100,000 groups against the
    /// ungrouped rate, a quiet group's pickup behind a million READY tasks, a 1,000/s
    /// rate limit over 10 s, a paused queue's Redis commands/s.
    Groups,
    /// 10,000 schedules every second over three replicas for a minute: fires against
    /// fire times, duplicates, lateness at a subscriber, Redis commands and server CPU
    /// per fire; their idle cost.
    Schedules,
    /// The Rust client library's no-op worker against a raw Subscribe loop, 20,000
    /// tasks each at concurrency 8, two rounds.
    Worker,
    /// How long one script holds Redis at sizes a big deployment reaches (a million
    /// tasks, 100,000 groups, windows and DEAD tasks, 10,000 schedules and locks of one
    /// owner), from Redis' slow log. Not in the default set: filling takes minutes.
    Limits,
    /// `limits` on a Redis Cluster of three primaries started here (whatever --server
    /// says), every node's slow log. Not in the default set.
    LimitsCluster,
    /// Instructions per operation of the server and of Redis under valgrind's callgrind
    /// (a figure noise cannot move): 2,000 lock cycles, 2,000 tasks with one Ack,
    /// 2,000 grouped tasks. Not in the default set: valgrind runs them 50× slower.
    Cost,
    /// `lock` and a queue run over 6 queues on one Redis and on a 3-primary Redis
    /// Cluster, each under 1 and 3 server replicas, and on a Redis with a replica
    /// under --redis-wait-replicas 1: started here whatever --server says.
    Scale,
}

/// turnstile-bench: measure a turnstile server against its physical floors (starts its
/// own Redis and server unless given --server).
#[derive(Clone, Debug, Parser)]
#[command(version, about)]
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
    /// Also run every scenario against this other `turnstile` binary (an older build),
    /// on the same Redis, alternating the two in rounds; print each figure for both
    /// with the ratio this / against and its spread over the rounds.
    #[arg(long, value_name = "PATH")]
    pub against: Option<PathBuf>,
    /// Rounds of `--against` (each runs every scenario on both builds).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The `turnstile` binary whose servers are measured (default: the one beside this
    /// binary, where cargo builds both).
    #[arg(long, env = "TURNSTILE_BIN", value_name = "PATH")]
    pub turnstile: Option<PathBuf>,
    /// `limits` at this fraction of its sizes (the smoke test runs a hundredth).
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub limits_fraction: f64,
    /// Operations of each `cost` workload (the smoke test runs fewer).
    #[arg(long, default_value_t = 2_000, hide = true)]
    pub cost_ops: u64,
    /// Keep `cost`'s callgrind dumps in this directory (for `callgrind_annotate`).
    #[arg(long, value_name = "DIR")]
    pub cost_keep: Option<PathBuf>,
    /// Serve the no-op gRPC lock server (the transport floor) instead: how the bench
    /// starts its own child.
    #[arg(long, hide = true)]
    pub serve_noop: bool,
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("turnstile-bench: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        if args.serve_noop {
            noop::serve().await
        } else {
            run(args).await
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("turnstile-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The `turnstile` binary to start: `--turnstile`, else the one beside this binary.
fn server_binary(args: &BenchArgs) -> Result<PathBuf, String> {
    let bin = match &args.turnstile {
        Some(bin) => bin.clone(),
        None => std::env::current_exe()
            .map_err(|err| format!("cannot find this binary: {err}"))?
            .with_file_name("turnstile"),
    };
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "no turnstile binary at {} (build it with `cargo build --release`, or pass --turnstile PATH)",
            bin.display()
        ))
    }
}

/// Runs the bench; an error is one line (a scenario failed, or a check such as
/// seckill's sales did not hold).
async fn run(args: BenchArgs) -> Result<(), String> {
    let bin = server_binary(&args)?;
    let scenarios = if args.scenarios.is_empty() {
        Scenario::value_variants()
            .iter()
            .copied()
            .filter(|scenario| {
                ![Scenario::Limits, Scenario::LimitsCluster, Scenario::Cost].contains(scenario)
            })
            .collect()
    } else {
        args.scenarios.clone()
    };
    if let Some(other) = &args.against {
        return against(&args, &scenarios, &bin, other).await;
    }
    let target = Target::start(&bin, args.server.clone(), args.redis_url.clone()).await?;
    let result = run_scenarios(&target, &args, &scenarios).await;
    target.stop().await;
    let reports = result?;
    if !args.json {
        print!("{}", report::table(&reports));
        print!("{}", report::goals_table(&reports));
    }
    Ok(())
}

/// `--against`: this build and `other` on one Redis, in alternating rounds.
async fn against(
    args: &BenchArgs,
    scenarios: &[Scenario],
    bin: &Path,
    other: &Path,
) -> Result<(), String> {
    if args.server.is_some() {
        return Err("--against starts both servers itself: leave out --server".into());
    }
    if scenarios.contains(&Scenario::Scale) || scenarios.contains(&Scenario::LimitsCluster) {
        return Err(
            "--against does not take `scale` or `limits-cluster`, which start their own stores"
                .into(),
        );
    }
    let this = Target::start(bin, None, args.redis_url.clone()).await?;
    let redis_url = this.redis_url.clone().unwrap_or_default();
    let that = match Target::other_build(&redis_url, other).await {
        Ok(that) => that,
        Err(err) => {
            this.stop().await;
            return Err(err);
        }
    };
    let result = against_rounds(args, scenarios, (&this, &that)).await;
    that.stop().await;
    this.stop().await;
    let all = result?;
    if args.json {
        for rounds in &all {
            println!("{}", rounds.to_json());
        }
    } else {
        print!("{}", compare::table(&all));
    }
    Ok(())
}

/// Whether a scenario failed because the build has no such RPC (UNIMPLEMENTED: an
/// older build than the scenario).
fn lacks(result: &Result<Vec<Report>, String>) -> bool {
    result
        .as_ref()
        .is_err_and(|err| err.starts_with(&tonic::Code::Unimplemented.to_string()))
}

/// Every scenario on both builds, round after round, the order of the two swapped in
/// every other round.
async fn against_rounds(
    args: &BenchArgs,
    scenarios: &[Scenario],
    (this, that): (&Target, &Target),
) -> Result<Vec<compare::Rounds>, String> {
    let mut all: Vec<compare::Rounds> = Vec::new();
    // Scenarios of a service the other build does not have (an older build before it).
    let mut missing: Vec<Scenario> = Vec::new();
    for round in 0..args.rounds {
        for scenario in scenarios {
            if missing.contains(scenario) {
                continue;
            }
            eprintln!("round {} of {}: {scenario:?}", round + 1, args.rounds);
            let this_first = round % 2 == 0;
            let (first, second) = if this_first {
                (this, that)
            } else {
                (that, this)
            };
            let a = one_scenario(first, args, *scenario).await;
            let (mine, theirs) = if !this_first && lacks(&a) {
                (Ok(Vec::new()), a)
            } else {
                let b = one_scenario(second, args, *scenario).await;
                if this_first {
                    (a, b)
                } else {
                    (b, a)
                }
            };
            if lacks(&theirs) {
                eprintln!("{scenario:?}: the other build does not have it; left out");
                missing.push(*scenario);
                continue;
            }
            let (mine, theirs) = (mine?, theirs?);
            for (mine, theirs) in mine.into_iter().zip(theirs) {
                match all.iter_mut().find(|r| r.scenario == mine.scenario) {
                    Some(rounds) => rounds.pairs.push((mine, theirs)),
                    None => all.push(compare::Rounds {
                        scenario: mine.scenario,
                        pairs: vec![(mine, theirs)],
                    }),
                }
            }
        }
    }
    Ok(all)
}

async fn run_scenarios(
    target: &Target,
    args: &BenchArgs,
    scenarios: &[Scenario],
) -> Result<Vec<Report>, String> {
    let mut reports = Vec::new();
    for scenario in scenarios {
        for report in one_scenario(target, args, *scenario).await? {
            if args.json {
                println!("{}", report.to_json());
            }
            reports.push(report);
        }
    }
    Ok(reports)
}

/// One scenario's reports (`queue` has two).
async fn one_scenario(
    target: &Target,
    args: &BenchArgs,
    scenario: Scenario,
) -> Result<Vec<Report>, String> {
    Ok({
        match scenario {
            Scenario::Lock => vec![locks::lock(target, args.concurrency, args.duration).await?],
            Scenario::Handoff => vec![locks::handoff(target, args.duration).await?],
            Scenario::Watch => vec![watch::watch(target, args.duration).await?],
            Scenario::Semaphore => vec![semaphore::semaphore(target, args.duration).await?],
            Scenario::Queue => vec![
                queues::queue(target, args.duration, false).await?,
                queues::queue(target, args.duration, true).await?,
            ],
            Scenario::Pickup => vec![queues::pickup(target, args.duration).await?],
            Scenario::Delayed => vec![queues::delayed(target).await?],
            Scenario::Seckill => vec![locks::seckill(target).await?],
            Scenario::Groups => vec![groups::groups(target, args.duration).await?],
            Scenario::Dashboard => vec![dashboard::dashboard(target).await?],
            Scenario::Idle => vec![idle::idle(target).await?],
            Scenario::Schedules => vec![schedules::schedules(target).await?],
            Scenario::Worker => vec![worker::worker(target).await?],
            Scenario::Limits => vec![limits::limits(target, args.limits_fraction).await?],
            Scenario::LimitsCluster => {
                vec![limits::limits_cluster(target.bin(), args.limits_fraction).await?]
            }
            Scenario::Cost => {
                vec![cost::cost(target, args.cost_ops, args.cost_keep.as_deref()).await?]
            }
            Scenario::Scale => scale::scale(target.bin(), args.concurrency, args.duration).await?,
        }
    })
}
