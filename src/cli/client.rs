//! What every client command shares: where the server is (`--server`), the bearer
//! token (`--token`), machine output (`--json`), the connection, and how a failed
//! call is reported (the gRPC status name and message on stderr, exit 1).

use std::{path::PathBuf, process::ExitCode};

use clap::Args;
use tonic::{
    metadata::AsciiMetadataValue,
    service::interceptor::InterceptedService,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint},
    Request, Status,
};
use turnstile::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient,
    schedule_service_client::ScheduleServiceClient,
    semaphore_service_client::SemaphoreServiceClient,
};

/// The flags of every client command.
#[derive(Clone, Debug, Args)]
pub struct ClientArgs {
    /// The server (`http://host:port`, or `https://` for TLS).
    #[arg(
        long,
        env = "TURNSTILE_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    pub server: String,

    /// The bearer token, when the server has an --auth-file.
    #[arg(long, env = "TURNSTILE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Trust this CA (PEM) for an `https://` server instead of none.
    #[arg(long, env = "TURNSTILE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,

    /// Machine output: JSON (one object per line) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Adds `authorization: Bearer <token>` to every call, when there is a token.
#[derive(Clone)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A connected channel, with the token on every call.
pub type Authed = InterceptedService<Channel, Bearer>;

/// The two services on one connection.
pub struct Client {
    /// `turnstile.v1.LockService`.
    pub locks: LockServiceClient<Authed>,
    /// `turnstile.v1.QueueService`.
    pub queues: QueueServiceClient<Authed>,
    /// `turnstile.v1.ScheduleService`.
    pub schedules: ScheduleServiceClient<Authed>,
    /// `turnstile.v1.SemaphoreService`.
    pub semaphores: SemaphoreServiceClient<Authed>,
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
        let server = if self.server.contains("://") {
            self.server.clone()
        } else {
            format!("http://{}", self.server)
        };
        let mut endpoint = Endpoint::from_shared(server.clone())
            .map_err(|err| Failure::other(format!("--server {server}: {err}")))?;
        if server.starts_with("https://") {
            let mut tls = ClientTlsConfig::new();
            if let Some(path) = &self.ca_cert {
                let pem = std::fs::read(path).map_err(|err| {
                    Failure::other(format!("--ca-cert {}: {err}", path.display()))
                })?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|err| Failure::other(format!("--server {server}: {err}")))?;
        }
        let bearer = match &self.token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| Failure::other("--token: not a valid header value"))?,
            ),
            None => None,
        };
        let channel = endpoint.connect_lazy();
        Ok(Client {
            locks: LockServiceClient::with_interceptor(channel.clone(), Bearer(bearer.clone())),
            queues: QueueServiceClient::with_interceptor(channel.clone(), Bearer(bearer.clone())),
            schedules: ScheduleServiceClient::with_interceptor(
                channel.clone(),
                Bearer(bearer.clone()),
            ),
            semaphores: SemaphoreServiceClient::with_interceptor(channel, Bearer(bearer)),
        })
    }
}

/// This machine's name, for default owners and worker ids.
pub fn hostname() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `len` bytes into the buffer we own.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    match std::str::from_utf8(&name[..end]) {
        Ok(host) if ok && !host.is_empty() => host.to_owned(),
        _ => "localhost".to_owned(),
    }
}
