//! What every client command shares: where the server is (`--server`), the bearer
//! token (`--token`), machine output (`--json`), the connection, and how a failed
//! call is reported (the gRPC status name and message on stderr, exit 1).

use std::{path::PathBuf, process::ExitCode};

use clap::Args;
use tonic::Status;
use turnstile::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient,
    schedule_service_client::ScheduleServiceClient,
};

/// The flags of every client command.
#[derive(Clone, Debug, Args)]
pub struct ClientArgs {
    /// The server (`http://host:port`, or `https://` for TLS; several replicas as
    /// `http://a:1,b:2`) [default: $TURNSTILE_SERVER, else http://127.0.0.1:50051].
    #[arg(long)]
    pub server: Option<String>,

    /// The bearer token, when the server has an --auth-file [default:
    /// $TURNSTILE_TOKEN].
    #[arg(long)]
    pub token: Option<String>,

    /// Trust this CA (PEM) for an `https://` server [default: $TURNSTILE_CA_CERT].
    #[arg(long)]
    pub ca_cert: Option<PathBuf>,

    /// Machine output: JSON (one object per line) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// A connected channel, with the token on every call.
pub use turnstile::client::Authed;

/// The services on one connection, as raw stubs and as the client library.
pub struct Client {
    /// The client library on the same channel.
    pub lib: turnstile::client::Client,
    /// `turnstile.v1.LockService`.
    pub locks: LockServiceClient<Authed>,
    /// `turnstile.v1.QueueService`.
    pub queues: QueueServiceClient<Authed>,
    /// `turnstile.v1.ScheduleService`.
    pub schedules: ScheduleServiceClient<Authed>,
}

/// A failed command: what to print and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// The line for stderr.
    pub message: String,
    /// 1 for a failed call.
    pub code: u8,
}

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure {
            message: format!(
                "{}: {}",
                turnstile::method::code_name(status.code() as i32),
                status.message()
            ),
            code: 1,
        }
    }
}

impl Failure {
    /// A failure that is not a gRPC status (a bad flag value, a file not readable).
    pub fn other(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }
}

/// What a client command returns.
pub type Outcome = Result<ExitCode, Failure>;

/// Prints a failure as the contract says: the status name and message, exit 1.
pub fn finish(outcome: Outcome) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("turnstile: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

impl ClientArgs {
    /// A client of `--server`. The connection is made on the first call (and again
    /// after it breaks), so a server that is down is reported as the call's
    /// UNAVAILABLE, like any other failed call.
    pub fn connect(&self) -> Result<Client, Failure> {
        // The client library reads the TURNSTILE_* variables, so the command line and
        // every Rust program using it read them the same way.
        let options = turnstile::client::Options {
            server: self.server.clone(),
            token: self.token.clone(),
            ca_cert: self.ca_cert.clone(),
        };
        let lib = turnstile::client::Client::new(options.or_env())?;
        Ok(Client {
            locks: lib.raw_locks(),
            queues: lib.raw_queues(),
            schedules: lib.raw_schedules(),
            lib,
        })
    }
}

impl From<turnstile::client::Error> for Failure {
    fn from(err: turnstile::client::Error) -> Self {
        Failure::other(err.to_string())
    }
}
