//! `scale`: lock and queue throughput on the topologies a deployment grows through:
//! one Redis under one and under three server replicas, a three-primary Redis Cluster
//! under one and under three, and one Redis with a replica under
//! `--redis-wait-replicas 1` (what the durability knob costs). Each topology's Redis
//! processes and servers are started here on loopback ports and stopped before the
//! next, and each figure comes with its floors measured on the same topology in the
//! same run (the lock scenario's transport and Redis floors; the queue's Redis floor).
//! Every Redis runs as in production: append-only file, fsync every second.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

use super::{
    locks, queues,
    report::{Extra, Report},
    target::Target,
};
use turnstile::embedded::free_port;

/// Queues the queue run spreads its work over: enough that a cluster's three primaries
/// each get some (a queue lives on one slot, so one queue cannot use more than one).
const QUEUES: usize = 6;
/// Redis Cluster's slot count.
const SLOTS: u32 = 16_384;
/// How long a node may take to answer, or a cluster to form.
const STARTUP: Duration = Duration::from_secs(20);

/// What the servers keep their state in.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Store {
    /// One Redis.
    One,
    /// Three primaries, no replicas (`--redis-cluster`).
    Cluster,
    /// One Redis and its replica, every write confirmed by it.
    Replicated,
}

/// One measured topology.
struct Topology {
    name: &'static str,
    store: Store,
    replicas: usize,
}

const TOPOLOGIES: [Topology; 5] = [
    Topology {
        name: "1 redis, 1 server",
        store: Store::One,
        replicas: 1,
    },
    Topology {
        name: "1 redis, 3 servers",
        store: Store::One,
        replicas: 3,
    },
    Topology {
        name: "cluster of 3, 1 server",
        store: Store::Cluster,
        replicas: 1,
    },
    Topology {
        name: "cluster of 3, 3 servers",
        store: Store::Cluster,
        replicas: 3,
    },
    Topology {
        name: "1 redis + replica, wait 1",
        store: Store::Replicated,
        replicas: 1,
    },
];

/// Runs every topology: a `scale_lock` and a `scale_queue` report each, named by its
/// `topology` figure.
pub async fn scale(bin: &Path, clients: usize, duration: Duration) -> Result<Vec<Report>, String> {
    let dir = std::env::temp_dir().join(format!("turnstile-scale-{}", std::process::id()));
    let mut reports = Vec::new();
    for topology in &TOPOLOGIES {
        let _ = std::fs::remove_dir_all(&dir);
        let measured = measure(bin, topology, &dir, clients, duration).await;
        let _ = std::fs::remove_dir_all(&dir);
        reports.extend(measured?);
    }
    Ok(reports)
}

async fn measure(
    bin: &Path,
    topology: &Topology,
    dir: &Path,
    clients: usize,
    duration: Duration,
) -> Result<Vec<Report>, String> {
    let (url, args, nodes) = start_store(topology.store, dir).await?;
    let target = Target::replicas(bin, &url, &args, topology.replicas, nodes).await?;
    let servers = target.servers.len() as u64;
    let measured = async {
        let lock = locks::lock(&target, clients, duration).await?;
        let queue = queues::queue_over(&target, "scale_queue", QUEUES, duration, true).await?;
        Ok::<_, String>([
            Report {
                scenario: "scale_lock",
                ..lock
            },
            queue,
        ])
    }
    .await;
    target.stop().await;
    Ok(measured?
        .into_iter()
        .map(|report| {
            report
                .extra("topology", Extra::Text(topology.name.into()))
                .extra("servers", Extra::Count(servers))
        })
        .collect())
}

/// Starts `store`'s Redis processes: the `--redis-url` to give the servers, their other
/// arguments, and the processes (killed when dropped).
pub(crate) async fn start_store(
    store: Store,
    dir: &Path,
) -> Result<(String, Vec<&'static str>, Vec<Child>), String> {
    match store {
        Store::One => {
            let (node, port) = node(dir, &[]).await?;
            Ok((url(port), vec![], vec![node]))
        }
        Store::Replicated => {
            let (primary, port) = node(dir, &[]).await?;
            let (replica, replica_port) =
                node(dir, &["--replicaof", "127.0.0.1", &port.to_string()]).await?;
            wait_for(
                replica_port,
                &["INFO", "replication"],
                "master_link_status:up",
            )
            .await?;
            // WAIT gives up at half of --redis-timeout (1 s by default), and an
            // unconfirmed write is UNAVAILABLE, which ends a bench run. On a loaded
            // machine a replica's ack has come later than 500 ms (a CI run of the
            // tests); the longer timeout keeps a slow ack a slow sample, not a failure.
            Ok((
                url(port),
                vec!["--redis-wait-replicas", "1", "--redis-timeout", "10s"],
                vec![primary, replica],
            ))
        }
        Store::Cluster => {
            let mut nodes = Vec::new();
            let mut ports = Vec::new();
            while nodes.len() < 3 {
                let (node, port) = node(dir, &["--cluster-enabled", "yes"]).await?;
                nodes.push(node);
                ports.push(port);
            }
            form_cluster(&ports).await?;
            let seeds: Vec<String> = ports.iter().map(|port| url(*port)).collect();
            Ok((seeds.join(","), vec!["--redis-cluster"], nodes))
        }
    }
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// A `redis-server` on a free loopback port whose cluster bus port (+10000) is free too,
/// in its own directory under `dir`, answering PING.
async fn node(dir: &Path, extra: &[&str]) -> Result<(Child, u16), String> {
    let port = loop {
        let port = free_port().map_err(|err| format!("no free port: {err}"))?;
        if port <= 55_535 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            break port;
        }
    };
    let node_dir: PathBuf = dir.join(port.to_string());
    std::fs::create_dir_all(&node_dir).map_err(|err| format!("{}: {err}", node_dir.display()))?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ])
        .arg("--dir")
        .arg(&node_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("cannot start redis-server: {err}"))?;
    wait_for(port, &["PING"], "PONG").await?;
    Ok((child, port))
}

/// Gives each of the nodes on `ports` a third of the slots, joins them, and waits until
/// every one says the cluster is ok.
async fn form_cluster(ports: &[u16]) -> Result<(), String> {
    let share = SLOTS / ports.len() as u32;
    for (n, port) in ports.iter().enumerate() {
        let first = n as u32 * share;
        let last = if n + 1 == ports.len() {
            SLOTS - 1
        } else {
            first + share - 1
        };
        command(
            *port,
            &[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ],
        )
        .await?;
    }
    for port in &ports[1..] {
        command(
            ports[0],
            &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()],
        )
        .await?;
    }
    for port in ports {
        wait_for(*port, &["CLUSTER", "INFO"], "cluster_state:ok").await?;
    }
    Ok(())
}

/// Runs `args` on the Redis on `port`: its reply as text.
async fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let client = redis::Client::open(url(port)).map_err(|err| err.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    let reply: redis::Value = cmd
        .query_async(&mut conn)
        .await
        .map_err(|err| err.to_string())?;
    Ok(match reply {
        redis::Value::SimpleString(text) => text,
        other => redis::from_redis_value::<String>(other).unwrap_or_default(),
    })
}

/// Waits until the reply to `args` on `port` contains `expected`.
async fn wait_for(port: u16, args: &[&str], expected: &str) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    loop {
        match command(port, args).await {
            Ok(reply) if reply.contains(expected) => return Ok(()),
            outcome if started.elapsed() > STARTUP => {
                return Err(format!(
                    "redis on port {port}: no `{expected}` in {args:?} after {STARTUP:?} \
                     ({outcome:?})"
                ))
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
