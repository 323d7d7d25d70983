//! The `turnstile` binary: parse the command line, set up logging, bind, and hand the
//! listener and the signal future to the library; or run a client-side command from
//! `cli/`. Nothing else lives here.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cli::ClientCommand;
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
    Serve(Config),
    /// The client commands (lock, work, enqueue, stats, peek, cancel, redrive).
    #[command(flatten)]
    Client(ClientCommand),
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
        _ => LogFormat::Text,
    };
    let default_filter = match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    init_tracing(format, default_filter);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Command::Serve(config) = &cli.command {
        if config.worker_threads > 0 {
            builder.worker_threads(config.worker_threads);
        }
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("turnstile: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let result = match cli.command {
            Command::Serve(config) => serve(config).await,
            // A client command's exit status is its own (its command's, 75, 70, …).
            Command::Client(command) => return command.run().await,
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(cause = %err, "turnstile stopped");
                eprintln!("turnstile: {err}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn serve(config: Config) -> Result<(), String> {
    // The handlers are installed before anything else, so that a SIGTERM or SIGINT sent
    // once the ready line is out always drains: a handler installed by the future's
    // first poll would come after the line, and a signal in between would kill the
    // process at once.
    let stop = stop_signal();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|err| format!("cannot listen on {}: {err}", config.listen))?;
    turnstile::server::run(config, listener, stop).await
}

/// Installs the SIGTERM and SIGINT handlers now; the future completes on either.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::warn!("cannot install signal handlers; stop with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
            _ = int.recv() => tracing::info!(signal = "SIGINT", "signal received"),
        }
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
