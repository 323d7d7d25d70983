//! Flags and `TURNSTILE_*` environment variables, parsed once at the edge into a
//! validated [`Config`] that is passed by value into [`crate::server::run`]. Nothing
//! else in the crate reads the environment.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

use crate::grpc::connections::ConnectionAge;

/// The most open `Hold`/`Subscribe` streams by default (`--max-streams`).
pub const DEFAULT_MAX_STREAMS: usize = 10_000;
/// The most waiting `Acquire`/`Hold` calls by default (`--max-waiters`).
pub const DEFAULT_MAX_WAITERS: usize = 100_000;
/// The largest request message by default (`--max-message-size`): gRPC's usual 4 MiB,
/// which also bounds a reply (see `queue::REPLY_BUDGET_BYTES`).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// The most open client connections by default (`--max-connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// How the server logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `turnstile serve` settings. Every flag has an environment variable of the same name.
#[derive(Clone, Debug, Args)]
pub struct Config {
    /// Address the gRPC server listens on.
    #[arg(long, env = "TURNSTILE_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// Redis to use (redis://host:port/db or unix:///path). Unset: start an embedded
    /// redis-server child with its data in --data-dir, append-only file on.
    #[arg(long, env = "TURNSTILE_REDIS_URL")]
    pub redis_url: Option<String>,

    /// --redis-url is a comma-separated list of seed nodes of a Redis Cluster.
    #[arg(long, env = "TURNSTILE_REDIS_CLUSTER", requires = "redis_url")]
    pub redis_cluster: bool,

    /// Every call that writes answers only once this many replicas of its Redis
    /// primary confirmed the write (`WAIT`); UNAVAILABLE if they do not within half of
    /// --redis-timeout. 0: off (replication stays asynchronous, and a failover can lose
    /// the last writes a client was told of).
    #[arg(
        long,
        env = "TURNSTILE_REDIS_WAIT_REPLICAS",
        default_value_t = 0,
        requires = "redis_url"
    )]
    pub redis_wait_replicas: u32,

    /// Where the embedded redis-server keeps its data.
    #[arg(long, env = "TURNSTILE_DATA_DIR", default_value = "./turnstile-data")]
    pub data_dir: PathBuf,

    /// First component of every Redis key (no `{`, `}` or control characters).
    #[arg(long, env = "TURNSTILE_KEY_PREFIX", default_value = "turnstile", value_parser = parse_key_prefix)]
    pub key_prefix: String,

    /// Address of the Prometheus endpoint (`GET /metrics`).
    #[arg(
        long,
        env = "TURNSTILE_METRICS_LISTEN",
        default_value = "127.0.0.1:9464"
    )]
    pub metrics_listen: SocketAddr,

    /// Address of the web dashboard, or `off`. Without --auth-file it must be a
    /// loopback address (as --listen), unless --insecure-no-auth.
    #[arg(
        long,
        env = "TURNSTILE_DASHBOARD_LISTEN",
        default_value = "127.0.0.1:8080",
        value_parser = parse_dashboard_listen
    )]
    pub dashboard_listen: DashboardListen,

    /// An idle stream carries a Heartbeat at least this often.
    #[arg(long, env = "TURNSTILE_STREAM_HEARTBEAT", default_value = "15s", value_parser = parse_duration)]
    pub stream_heartbeat: Duration,

    /// How long a closed Subscribe stream's tasks stay leased to its worker_id.
    #[arg(long, env = "TURNSTILE_REATTACH_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub reattach_grace: Duration,

    /// A Redis command slower than this fails the RPC with UNAVAILABLE.
    #[arg(long, env = "TURNSTILE_REDIS_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub redis_timeout: Duration,

    /// How long a shutdown (SIGTERM, SIGINT) waits for calls, streams and connections
    /// to finish before it closes what is left and exits.
    #[arg(long, env = "TURNSTILE_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// The most open Hold and Subscribe streams; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "TURNSTILE_MAX_STREAMS", default_value_t = DEFAULT_MAX_STREAMS)]
    pub max_streams: usize,

    /// The most Acquire/Hold calls waiting on a held lock; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "TURNSTILE_MAX_WAITERS", default_value_t = DEFAULT_MAX_WAITERS)]
    pub max_waiters: usize,

    /// The largest request message, in bytes; a larger one gets RESOURCE_EXHAUSTED
    /// before it is read. Raise it for Enqueue batches whose payloads add up to more.
    #[arg(long, env = "TURNSTILE_MAX_MESSAGE_SIZE", default_value_t = DEFAULT_MAX_MESSAGE_BYTES,
        value_parser = parse_message_size)]
    pub max_message_size: usize,

    /// The most open client connections; one more is closed as soon as it is accepted
    /// (its client sees UNAVAILABLE). The process's open-file limit must allow it.
    #[arg(long, env = "TURNSTILE_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// Send GOAWAY to a connection this old, so its client's next calls open a new
    /// connection (and a load balancer or mesh can pick another replica); its open
    /// streams end with UNAVAILABLE after --max-connection-age-grace more (a Hold keeps
    /// its lease for re-attach by token; a Subscribe with a worker_id keeps its tasks
    /// for --reattach-grace). 0: connections never age out.
    #[arg(long, env = "TURNSTILE_MAX_CONNECTION_AGE", default_value = "0", value_parser = parse_duration)]
    pub max_connection_age: Duration,

    /// How long an aged-out connection's streams and calls may go on after its GOAWAY;
    /// then the streams end and the connection is closed.
    #[arg(long, env = "TURNSTILE_MAX_CONNECTION_AGE_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub max_connection_age_grace: Duration,

    /// Ping a client connection after this long without a frame from it, so a client
    /// that vanished without closing (a cut network, a dead host) is noticed and its
    /// Hold released. 0: no pings.
    #[arg(long, env = "TURNSTILE_KEEPALIVE_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub keepalive_interval: Duration,

    /// Close a connection whose ping is not answered within this.
    #[arg(long, env = "TURNSTILE_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub keepalive_timeout: Duration,

    /// Bearer tokens (TOML: the SHA-256 of each token, its tenant and permissions),
    /// re-read on SIGHUP. Unset: every caller is the tenant `default` with every
    /// permission, which is allowed only on a loopback --listen address.
    #[arg(long, env = "TURNSTILE_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,

    /// Serve without --auth-file on a non-loopback address: anyone who can reach the
    /// port may take, release and read every lock and queue.
    #[arg(long, env = "TURNSTILE_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,

    /// Serve gRPC over TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "TURNSTILE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "TURNSTILE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by this CA (PEM); needs --tls-cert.
    #[arg(long, env = "TURNSTILE_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// Trust this CA (PEM) for a `rediss://` --redis-url instead of the system's roots.
    #[arg(long, env = "TURNSTILE_REDIS_CA")]
    pub redis_ca: Option<PathBuf>,

    /// Threads that run the server's work (calls, Redis replies, timers). 0: one per
    /// CPU. 1 spends about 15% less CPU per call (a lock cycle, a task) for up to 6%
    /// fewer calls a second on a machine it shares with Redis (`bench --against`, see
    /// docs/performance.md): for replicas that scale out rather than up.
    #[arg(long, env = "TURNSTILE_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Log format.
    #[arg(long, env = "TURNSTILE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Config {
    /// The defaults of every flag, with the given Redis (what tests start from).
    pub fn for_redis(redis_url: impl Into<String>) -> Self {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            config: Config,
        }
        let matches = <Only as clap::CommandFactory>::command()
            .no_binary_name(true)
            .try_get_matches_from(["--redis-url", &redis_url.into()])
            .expect("the defaults parse");
        Only::from_arg_matches(&matches)
            .expect("the defaults parse")
            .config
    }
}

impl Config {
    /// When connections age out, if they do.
    pub fn connection_age(&self) -> Option<ConnectionAge> {
        (!self.max_connection_age.is_zero()).then_some(ConnectionAge {
            age: self.max_connection_age,
            grace: self.max_connection_age_grace,
        })
    }

    /// Refuses to serve everyone on a reachable address by accident: without an auth
    /// file, --listen must be a loopback address unless --insecure-no-auth says so.
    pub fn check_exposure(&self) -> Result<(), String> {
        if self.auth_file.is_some() {
            return Ok(());
        }
        // The gRPC port, then the dashboard (the same rule: it shows and steers the
        // same things).
        let exposed = [Some(self.listen), self.dashboard_listen.0]
            .into_iter()
            .flatten()
            .find(|addr| !addr.ip().is_loopback());
        let Some(exposed) = exposed else {
            return Ok(());
        };
        if self.insecure_no_auth {
            tracing::warn!(
                listen = %exposed,
                "serving without --auth-file on a non-loopback address: anyone who can reach it may use every lock and queue"
            );
            return Ok(());
        }
        Err(format!(
            "refusing to listen on {exposed} without --auth-file: anyone who could reach it could use every lock and queue; \
             give --auth-file, listen on a loopback address, or pass --insecure-no-auth"
        ))
    }
}

/// `--dashboard-listen`: an address, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DashboardListen(pub Option<SocketAddr>);

fn parse_dashboard_listen(value: &str) -> Result<DashboardListen, String> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(DashboardListen(None));
    }
    value
        .parse()
        .map(|addr| DashboardListen(Some(addr)))
        .map_err(|err| format!("{value:?}: {err} (an address like 127.0.0.1:8080, or off)"))
}

/// Parses `--max-message-size`: bytes, from 1 KiB (a smaller ceiling would refuse
/// ordinary calls) to 4 GiB (gRPC's length prefix is 32 bits).
fn parse_message_size(text: &str) -> Result<usize, String> {
    let bytes: u64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    if !(1024..=u64::from(u32::MAX)).contains(&bytes) {
        return Err(format!("{bytes} must be from 1024 to {}", u32::MAX));
    }
    Ok(bytes as usize)
}

/// Parses `500ms`, `1s`, `2m`, `1h`, `250us` (a number and a unit; `0` alone is zero).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| format!("`{text}` needs a unit: ms, s, m or h (like 500ms, 2s)"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let seconds = match unit {
        "us" | "µs" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("`{unit}` is not a unit: use us, ms, s, m or h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|err| format!("`{text}`: {err}"))
}

fn parse_key_prefix(text: &str) -> Result<String, String> {
    if text.is_empty() || text.chars().any(|c| c == '{' || c == '}' || c.is_control()) {
        return Err("must be non-empty, without `{`, `}` or control characters".into());
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("1d").is_err());
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let config = Config::for_redis("redis://127.0.0.1:1");
        assert_eq!(config.listen.to_string(), "127.0.0.1:50051");
        assert_eq!(config.key_prefix, "turnstile");
        assert_eq!(config.stream_heartbeat, Duration::from_secs(15));
        assert_eq!(config.reattach_grace, Duration::from_secs(10));
        assert_eq!(config.redis_timeout, Duration::from_secs(2));
        assert_eq!(config.shutdown_grace, Duration::from_secs(10));
        assert_eq!(config.max_streams, 10_000);
        assert_eq!(config.max_waiters, 100_000);
        assert_eq!(config.worker_threads, 0);
        assert_eq!(config.auth_file, None);
        assert!(!config.insecure_no_auth);
        assert_eq!(config.max_connection_age, Duration::ZERO);
        assert_eq!(config.max_connection_age_grace, Duration::from_secs(30));
        assert_eq!(config.keepalive_interval, Duration::from_secs(60));
        assert_eq!(config.keepalive_timeout, Duration::from_secs(20));
        assert_eq!(config.redis_wait_replicas, 0);
        assert!(!config.redis_cluster);
    }

    #[test]
    fn without_an_auth_file_only_loopback_is_served_unless_told_otherwise() {
        let mut config = Config::for_redis("redis://127.0.0.1:1");
        assert_eq!(config.check_exposure(), Ok(()));
        config.listen = "[::1]:50051".parse().unwrap();
        assert_eq!(config.check_exposure(), Ok(()));
        config.listen = "0.0.0.0:50051".parse().unwrap();
        let refused = config.check_exposure().unwrap_err();
        assert!(refused.contains("--auth-file"), "{refused}");
        assert!(refused.contains("--insecure-no-auth"), "{refused}");
        config.insecure_no_auth = true;
        assert_eq!(config.check_exposure(), Ok(()));
        config.insecure_no_auth = false;
        config.auth_file = Some("tokens.toml".into());
        assert_eq!(config.check_exposure(), Ok(()));
    }

    #[test]
    fn the_dashboard_is_off_or_loopback_without_an_auth_file() {
        let mut config = Config::for_redis("redis://127.0.0.1:1");
        assert_eq!(
            config.dashboard_listen,
            DashboardListen(Some("127.0.0.1:8080".parse().unwrap()))
        );
        assert_eq!(parse_dashboard_listen("off"), Ok(DashboardListen(None)));
        assert!(parse_dashboard_listen("8080").is_err());
        config.dashboard_listen = DashboardListen(Some("0.0.0.0:8080".parse().unwrap()));
        let refused = config.check_exposure().unwrap_err();
        assert!(refused.contains("0.0.0.0:8080"), "{refused}");
        config.dashboard_listen = DashboardListen(None);
        assert_eq!(config.check_exposure(), Ok(()));
        config.dashboard_listen = DashboardListen(Some("0.0.0.0:8080".parse().unwrap()));
        config.auth_file = Some("tokens.toml".into());
        assert_eq!(config.check_exposure(), Ok(()));
    }
}
