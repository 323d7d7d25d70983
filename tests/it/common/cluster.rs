//! A local Redis Cluster for tests: six `redis-server` processes on free loopback
//! ports (three primaries, three replicas) joined with `redis-cli --cluster create`,
//! each in its own temp dir, killed on drop.

use std::{
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    time::Duration,
};

use redis::cluster_async::ClusterConnection;

use turnstile::embedded::free_port;

use super::{eventually, eventually_explained, TempDir};

/// A running three-primary, three-replica cluster.
pub struct TestCluster {
    pub ports: Vec<u16>,
    nodes: Vec<Child>,
    dir: TempDir,
}

/// How long a node may go unheard before its peers fail it over, for tests that kill
/// nodes: short, so a failover takes seconds.
const FAST_FAILOVER: &str = "2000";
/// The same for clusters whose nodes are never killed: long, so that a node starved of
/// CPU on a loaded machine is not failed over in the middle of other tests.
const NO_FAILOVER: &str = "30000";

impl TestCluster {
    /// A cluster for failover tests: a silent primary is replaced within seconds.
    pub async fn start() -> Self {
        Self::start_with(false, FAST_FAILOVER).await
    }

    /// A cluster whose nodes are never killed (a test store).
    pub async fn start_steady() -> Self {
        Self::start_with(false, NO_FAILOVER).await
    }

    /// A steady cluster whose nodes die with this process (`PR_SET_PDEATHSIG`, fired
    /// when the calling thread exits): for one that is never dropped.
    pub async fn start_for_process() -> Self {
        Self::start_with(true, NO_FAILOVER).await
    }

    async fn start_with(die_with_thread: bool, node_timeout: &'static str) -> Self {
        if die_with_thread {
            // Formed on this thread: its nodes die with it, so not on a spawned task's.
            return Self::form(true, node_timeout).await;
        }
        // A cluster whose gossip never settled (seen in a loaded CI run: a node knowing
        // five nodes for 90 s, with no port missing from its view) is dropped, its
        // nodes killed, and a fresh one formed: the test needs a cluster, not that one.
        for attempt in 1.. {
            match tokio::spawn(Self::form(false, node_timeout)).await {
                Ok(cluster) => return cluster,
                Err(err) if err.is_panic() && attempt < 3 => {
                    eprintln!("a test cluster did not form (try {attempt}); forming a fresh one");
                }
                Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
                Err(err) => panic!("forming a test cluster: {err}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// Starts six nodes, forms them into a cluster and waits until it is ok; panics
    /// (killing the nodes) when it does not become ok in time.
    async fn form(die_with_thread: bool, node_timeout: &'static str) -> Self {
        super::init_tracing();
        let dir = TempDir::new("cluster");
        let mut ports = Vec::new();
        let mut nodes = Vec::new();
        while nodes.len() < 6 {
            let port = free_node_port();
            let node_dir = dir.0.join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let child = spawn_node(&node_dir, port, NO_FAILOVER, die_with_thread);
            nodes.push(child);
            ports.push(port);
        }
        let mut cluster = Self { ports, nodes, dir };
        for port in cluster.ports.clone() {
            eventually(
                "a cluster node answers",
                Duration::from_secs(30),
                || async move {
                    cluster_cli(port, &["ping"]).is_some_and(|reply| reply.trim() == "PONG")
                },
            )
            .await;
        }
        let addresses: Vec<String> = cluster
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        cluster.wait_ok().await;
        if node_timeout != NO_FAILOVER {
            for port in cluster.ports.clone() {
                let set = cluster_cli(
                    port,
                    &["config", "set", "cluster-node-timeout", node_timeout],
                );
                assert!(
                    set.as_deref().is_some_and(|reply| reply.trim() == "OK"),
                    "node {port}: {set:?}"
                );
            }
        }
        cluster
    }

    /// Waits until every node says the cluster is ok, knows all six nodes and sees
    /// three of them as replicas (gossip about the roles has settled), and every
    /// replica has synced with its primary (one that has not cannot take over).
    pub async fn wait_ok(&mut self) {
        // Generous: two loaded cores may be forming other tests' clusters at once.
        let all = self.ports.clone();
        for port in self.ports.clone() {
            let all = &all;
            let waiting_since = std::time::Instant::now();
            let last_meet = std::sync::Mutex::new(None::<std::time::Instant>);
            let last_meet = &last_meet;
            eventually_explained(
                &format!("the cluster is ok on node {port}"),
                Duration::from_secs(90),
                || async move {
                    let info = cluster_cli(port, &["cluster", "info"]).unwrap_or_default();
                    let nodes = cluster_cli(port, &["cluster", "nodes"]).unwrap_or_default();
                    // A handshake a loaded machine dropped is never tried again by
                    // gossip (seen in loaded CI runs despite the long node timeout:
                    // cluster_known_nodes:5 for 60 s, even after one MEET of all the
                    // others). While a node stays short of the others after 15 s, it is
                    // introduced again, every 10 s, to the ports it does not know yet,
                    // and only to those: a MEET of a node it already knows adds a
                    // handshake entry of its own (seen: cluster_known_nodes:9).
                    let missing = missing_ports(&nodes, all);
                    if !missing.is_empty() && waiting_since.elapsed() > Duration::from_secs(15) {
                        let mut last = last_meet.lock().expect("meet clock");
                        if last.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                            *last = Some(std::time::Instant::now());
                            for other in &missing {
                                let _ = cluster_cli(
                                    port,
                                    &["cluster", "meet", "127.0.0.1", &other.to_string()],
                                );
                            }
                        }
                    }
                    let replication =
                        cluster_cli(port, &["info", "replication"]).unwrap_or_default();
                    let synced = replication.contains("role:master")
                        || replication.contains("master_link_status:up");
                    let replicas = nodes.lines().filter(|line| line.contains("slave")).count();
                    if info.contains("cluster_state:ok")
                        && info.contains("cluster_known_nodes:6")
                        && replicas == 3
                        && synced
                    {
                        return Ok(());
                    }
                    let fields = |text: &str, names: &[&str]| {
                        text.lines()
                            .filter(|line| names.iter().any(|name| line.starts_with(name)))
                            .map(str::trim)
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    Err(format!(
                        "{} replicas_seen:{replicas} {} missing:{missing:?}",
                        fields(&info, &["cluster_state", "cluster_known_nodes"]),
                        fields(&replication, &["role", "master_link_status"])
                    ))
                },
            )
            .await;
        }
    }

    /// SIGKILLs the node on `port`, as a crash would.
    pub fn kill(&mut self, port: u16) {
        let at = self
            .ports
            .iter()
            .position(|p| *p == port)
            .expect("a node's port");
        let _ = self.nodes[at].kill();
        let _ = self.nodes[at].wait();
    }

    /// A failover as a crash of the primary on `port` makes it: SIGKILLs it, waits
    /// until its replica serves its slots, then starts it again (empty: it rejoins as
    /// the new primary's replica) and waits until it has synced, so the shard has a
    /// replica again (for `--redis-wait-replicas` and the next failover).
    pub async fn fail_over(&mut self, port: u16) {
        let nodes = cluster_cli_answer(self.ports[0], &["cluster", "nodes"]);
        let slot = nodes
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|fields| fields.len() > 8 && node_port(fields[1]) == Some(port))
            .and_then(|fields| fields[8].split('-').next()?.parse::<u16>().ok())
            .expect("a slot of the primary");
        self.kill(port);
        self.wait_slot_moved(port, slot).await;
        let at = self
            .ports
            .iter()
            .position(|p| *p == port)
            .expect("a node's port");
        self.nodes[at] = spawn_node(
            &self.dir.0.join(port.to_string()),
            port,
            FAST_FAILOVER,
            false,
        );
        self.wait_ok().await;
    }

    /// Sends `signal` to the node on `port` (SIGSTOP freezes it: it neither answers nor
    /// replicates until SIGCONT).
    pub fn signal(&self, port: u16, signal: libc::c_int) {
        let at = self
            .ports
            .iter()
            .position(|p| *p == port)
            .expect("a node's port");
        // SAFETY: kill(2) on our own child's pid.
        let sent = unsafe { libc::kill(self.nodes[at].id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill({signal})");
    }

    /// Closes the replication links of the primary on `primary` (its replicas connect
    /// again by themselves, unless frozen).
    pub fn cut_replicas(&self, primary: u16) {
        let reply = cluster_cli(primary, &["client", "kill", "type", "replica"]);
        assert!(
            reply.is_some_and(|n| n.trim().parse::<u32>().is_ok_and(|n| n > 0)),
            "CLIENT KILL TYPE replica"
        );
    }

    /// The ports of the nodes (still running) that have a client with a pattern
    /// subscription: where a server's pub/sub connection is.
    pub fn subscribed_nodes(&self, alive: impl Fn(u16) -> bool) -> Vec<u16> {
        self.ports
            .iter()
            .copied()
            .filter(|port| alive(*port))
            .filter(|port| {
                let clients = cluster_cli(*port, &["client", "list"]).unwrap_or_default();
                clients.split_whitespace().any(|field| {
                    field
                        .strip_prefix("psub=")
                        .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n > 0))
                })
            })
            .collect()
    }

    /// The port of the replica of the primary on `primary`.
    pub fn replica_of(&self, primary: u16) -> u16 {
        let nodes = cluster_cli(self.ports[0], &["cluster", "nodes"]).unwrap_or_default();
        let fields =
            |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
        let primary_id = nodes
            .lines()
            .map(fields)
            .find(|f| f.len() > 2 && node_port(&f[1]) == Some(primary))
            .map(|f| f[0].clone())
            .expect("the primary in CLUSTER NODES");
        nodes
            .lines()
            .map(fields)
            .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == primary_id)
            .and_then(|f| node_port(&f[1]))
            .expect("a replica of the primary")
    }

    /// Waits until every node still running says the cluster is ok again and that
    /// `key`'s slot is served by another primary than `port` (its replica took over).
    pub async fn wait_failover(&self, port: u16, key: &str) {
        let alive = self
            .ports
            .iter()
            .copied()
            .find(|p| *p != port)
            .expect("a live node");
        let slot: u16 = cluster_cli(alive, &["cluster", "keyslot", key])
            .and_then(|reply| reply.trim().parse().ok())
            .expect("CLUSTER KEYSLOT");
        self.wait_slot_moved(port, slot).await;
    }

    /// Waits until every node but `port` says the cluster is ok and that `slot` is
    /// served by another primary than `port`.
    async fn wait_slot_moved(&self, port: u16, slot: u16) {
        let alive: Vec<u16> = self.ports.iter().copied().filter(|p| *p != port).collect();
        for node in alive {
            eventually_explained(
                &format!("the replica took over, as node {node} sees it"),
                Duration::from_secs(60),
                || async move {
                    let info = cluster_cli(node, &["cluster", "info"]).unwrap_or_default();
                    let nodes = cluster_cli(node, &["cluster", "nodes"]).unwrap_or_default();
                    let primary = primary_for_slot(&nodes, slot);
                    if info.contains("cluster_state:ok") && primary.is_some_and(|p| p != port) {
                        return Ok(());
                    }
                    let state = info.lines().find(|line| line.starts_with("cluster_state"));
                    Err(format!("{state:?}, slot {slot} served by {primary:?}"))
                },
            )
            .await;
        }
    }

    /// `--redis-url` for `--redis-cluster`: every node as a seed.
    pub fn url(&self) -> String {
        self.ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A connection of the test's own, routed by key.
    pub async fn conn(&self) -> ClusterConnection {
        let seeds: Vec<String> = self.url().split(',').map(str::to_owned).collect();
        redis::cluster::ClusterClient::new(seeds)
            .expect("cluster seeds")
            .get_async_connection()
            .await
            .expect("cluster connection")
    }

    /// How many times `command` ran, summed over every node (a replica runs none of
    /// the scripts: it gets their effects).
    pub fn command_calls(&self, command: &str) -> u64 {
        self.ports
            .iter()
            .map(|port| command_stats(*port).get(command).copied().unwrap_or(0))
            .sum()
    }

    /// Every command clients sent to the primaries: all but the replicas' `REPLCONF`
    /// and the harness' own `INFO` and `CLUSTER NODES`.
    pub fn client_commands(&self) -> u64 {
        self.primaries()
            .into_iter()
            .flat_map(command_stats)
            .filter(|(command, _)| {
                !["replconf", "info", "cluster|nodes"].contains(&command.as_str())
            })
            .map(|(_, calls)| calls)
            .sum()
    }

    /// The keys matching `pattern`, from every primary.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.primaries()
            .into_iter()
            .flat_map(|port| {
                let keys = cluster_cli_answer(port, &["--scan", "--pattern", pattern]);
                keys.lines().map(str::to_owned).collect::<Vec<_>>()
            })
            .collect()
    }

    /// Holds every client's writes on every primary for `pause`.
    pub fn pause_writes(&self, pause: Duration) {
        let millis = pause.as_millis().to_string();
        for port in self.primaries() {
            let reply = cluster_cli(port, &["client", "pause", &millis, "write"]);
            assert_eq!(reply.as_deref().map(str::trim), Some("OK"), "CLIENT PAUSE");
        }
    }

    /// Ends a pause of [`Self::pause_writes`] on every primary now.
    pub fn resume_writes(&self) {
        for port in self.primaries() {
            let reply = cluster_cli(port, &["client", "unpause"]);
            assert_eq!(
                reply.as_deref().map(str::trim),
                Some("OK"),
                "CLIENT UNPAUSE"
            );
        }
    }

    /// The ports of the primaries.
    pub fn primaries(&self) -> Vec<u16> {
        let nodes = cluster_cli_answer(self.ports[0], &["cluster", "nodes"]);
        nodes
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // `fail?` is one node's suspicion on a loaded machine, not a failure.
                let flags: Vec<&str> = fields.get(2)?.split(',').collect();
                // A primary serves slots (listed from the ninth field on): a node that
                // gossip still shows as a primary without slots is a replica whose
                // new role has not reached this node yet. Counting its replicated
                // commands, then not, would make a command count go backwards (the
                // likely cause of one that did, under load).
                let primary =
                    flags.contains(&"master") && !flags.contains(&"fail") && fields.len() > 8;
                primary.then(|| node_port(fields[1]))?
            })
            .collect()
    }

    /// The port of the primary serving `key`'s slot.
    pub fn primary_of(&self, key: &str) -> u16 {
        let slot: u16 = cluster_cli(self.ports[0], &["cluster", "keyslot", key])
            .and_then(|reply| reply.trim().parse().ok())
            .expect("CLUSTER KEYSLOT");
        let nodes = cluster_cli(self.ports[0], &["cluster", "nodes"]).unwrap_or_default();
        primary_for_slot(&nodes, slot).expect("a primary for the slot")
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.kill();
            let _ = node.wait();
        }
    }
}

/// Starts the `redis-server` of one node on `port` in `node_dir`, with no persistence:
/// a node restarted there comes back empty and, from its `nodes.conf`, rejoins as a
/// replica of whoever took its slots over.
fn spawn_node(
    node_dir: &std::path::Path,
    port: u16,
    node_timeout: &str,
    die_with_thread: bool,
) -> Child {
    let mut command = Command::new("redis-server");
    if die_with_thread {
        // SAFETY: the closure runs between fork and exec and only calls prctl,
        // which is async-signal-safe and allocates nothing.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // Formed with the long timeout: a handshake that a loaded machine slows
        // past a 2 s timeout is dropped, and one node then never learned
        // another (seen: cluster_known_nodes:5 for 60 s). A failover cluster
        // gets its short timeout once formed.
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            node_timeout,
        ])
        // A replica takes over however long ago it last heard its primary.
        .args(["--cluster-replica-validity-factor", "0"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(node_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server")
}

/// A free loopback port for a cluster node whose bus port (the port + 10000) is free
/// too.
pub fn free_node_port() -> u16 {
    loop {
        let port = free_port().expect("free port");
        if port <= 55535 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// [`cluster_cli`] where the node must answer: what a count or a key list is built
/// from, which must not come out short because one node's answer was missing.
fn cluster_cli_answer(port: u16, args: &[&str]) -> String {
    cluster_cli(port, args).unwrap_or_else(|| panic!("redis-cli -p {port} {args:?} did not answer"))
}

/// `redis-cli -p port ARGS…`'s output, if it ran.
fn cluster_cli(port: u16, args: &[&str]) -> Option<String> {
    let output = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// From `CLUSTER NODES` (`<id> <ip:port@bus> <flags> … <slot ranges>`), the port of
/// the primary that serves `slot`.
fn primary_for_slot(nodes: &str, slot: u16) -> Option<u16> {
    nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            return None;
        }
        let serves = fields[8..].iter().any(|range| {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            match (start.parse::<u16>(), end.parse::<u16>()) {
                (Ok(start), Ok(end)) => (start..=end).contains(&slot),
                _ => false,
            }
        });
        serves.then(|| node_port(fields[1]))?
    })
}

/// From `CLUSTER NODES`, the ports of `all` that the node does not know yet: neither
/// as a member nor itself (an entry still in handshake does not count as known). None
/// when the node did not answer.
fn missing_ports(nodes: &str, all: &[u16]) -> Vec<u16> {
    if nodes.trim().is_empty() {
        return Vec::new();
    }
    let known: Vec<u16> = nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if flags.contains("handshake") || flags.contains("noaddr") {
                return None;
            }
            node_port(fields.get(1)?)
        })
        .collect();
    all.iter()
        .copied()
        .filter(|port| !known.contains(port))
        .collect()
}

/// The port of `ip:port@bus` (a `CLUSTER NODES` address).
fn node_port(address: &str) -> Option<u16> {
    address.split('@').next()?.rsplit(':').next()?.parse().ok()
}

/// `INFO commandstats` of the node on `port`: calls by command name.
fn command_stats(port: u16) -> std::collections::HashMap<String, u64> {
    let info = cluster_cli_answer(port, &["info", "commandstats"]);
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}
