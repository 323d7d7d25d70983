//! The `turnstile` binary: parse the command line, set up logging, bind, and hand the
//! listener and the signal future to the library. Nothing else lives here.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Command::Serve(config) = cli.command;
    init_tracing(config.log_format);
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
    match runtime.block_on(serve(config)) {
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

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
