//! The `turnstile` binary: parse the command line, set up logging, bind, and hand the
//! listener and the signal future to the library; or run a client-side command from
//! `cli/`. Nothing else lives here.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cli::{
    admin::{CancelArgs, EnqueueArgs, PeekArgs, RedriveArgs, StatsArgs},
    bench::{self, noop::NoopArgs, BenchArgs},
    client::{finish, Outcome},
    lock::LockArgs,
    work::WorkArgs,
};
use tokio::signal::unix::{signal, SignalKind};
use turnstile::config::{Config, LogFormat};

/// turnstile: distributed locks and task queues over gRPC, kept in Redis.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(Box<Config>),
    /// Measure the server against its physical floors (starts its own Redis and server
    /// unless given --server).
    Bench(BenchArgs),
    /// The bench's no-op gRPC lock server (its transport floor).
    #[command(hide = true)]
    BenchNoop(NoopArgs),
    /// Run a command while holding a lock (exit: the command's status; 75 not
    /// acquired within --wait; 70 lost while it ran).
    Lock(LockArgs),
    /// Run a command once per task of a queue: payload on stdin, exit 0 acks,
    /// anything else nacks with backoff; SIGTERM drains.
    Work(WorkArgs),
    /// Enqueue one task; prints its id.
    Enqueue(EnqueueArgs),
    /// Queue depths (--watch redraws).
    Stats(StatsArgs),
    /// Look at a queue's tasks without taking them.
    Peek(PeekArgs),
    /// Remove tasks that are not in flight; prints the ids removed.
    Cancel(CancelArgs),
    /// Bring DEAD tasks back to READY (all of them without ids); prints how many.
    Redrive(RedriveArgs),
}

impl Command {
    /// A client command's future, or the command back when it is not one.
    async fn client(self) -> Result<Outcome, Self> {
        Ok(match self {
            Command::Lock(args) => cli::lock::run(args).await,
            Command::Work(args) => cli::work::run(args).await,
            Command::Enqueue(args) => cli::admin::enqueue(args).await,
            Command::Stats(args) => cli::admin::stats(args).await,
            Command::Peek(args) => cli::admin::peek(args).await,
            Command::Cancel(args) => cli::admin::cancel(args).await,
            Command::Redrive(args) => cli::admin::redrive(args).await,
            other => return Err(other),
        })
    }
}

/// mimalloc instead of glibc's malloc: perf put glibc malloc/free at about 17% of the
/// server's CPU under the lock bench (h2 frames, protobuf messages and Redis replies are
/// many short-lived allocations).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Serve(config) => config.log_format,
        Command::BenchNoop(args) => args.log_format,
        _ => LogFormat::Text,
    };
    let default_filter = match cli.command {
        Command::Serve(_) | Command::BenchNoop(_) => "info",
        _ => "warn",
    };
    init_tracing(format, default_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("turnstile: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command.client().await {
            Ok(outcome) => Err(finish(outcome)),
            Err(Command::Serve(config)) => Ok(serve(*config).await),
            Err(Command::Bench(args)) => Ok(bench::run(args).await),
            Err(Command::BenchNoop(args)) => Ok(bench::noop::serve(args).await),
            Err(_) => unreachable!("client commands are run above"),
        }
    });
    // A client command's exit status is its own; the server's is success or failure.
    let result = match result {
        Ok(result) => result,
        Err(code) => return code,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(cause = %err, "turnstile stopped");
            eprintln!("turnstile: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|err| format!("cannot listen on {}: {err}", config.listen))?;
    turnstile::server::run(config, listener, stop_signal()).await
}

/// Completes on SIGTERM or SIGINT.
async fn stop_signal() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "signal received"),
    }
}

fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colour only for a person at a terminal: a file or a pipe gets plain text, and
    // NO_COLOR (set and not empty) turns it off everywhere.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
