//! The benchmark as a user runs it: `turnstile-bench` against the `turnstile` binary
//! cargo built beside it (the root package's, which `cargo test` at the top builds
//! first), on its own Redis and server; each scenario's JSON carries its figures, a
//! comparison of two builds names both, and the fixed-length scenarios measure what
//! they promise. Figures are checked to be there and sane, never to be fast.

use std::{path::PathBuf, process::Command};

use turnstile::embedded::{Bind, EmbeddedOptions, EmbeddedRedis};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The bench binary, with no Redis of the environment's.
fn bench() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile-bench"));
    command.env_remove("TURNSTILE_REDIS_URL");
    command.env_remove("TURNSTILE_BIN");
    command
}

/// The `turnstile` binary beside the bench's, which the bench starts by default.
fn server_binary() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_turnstile-bench")).with_file_name("turnstile");
    assert!(
        bin.is_file(),
        "no {} (run `cargo test` at the top: it builds the server too)",
        bin.display()
    );
    bin
}

/// A Redis of the test's own, in a fresh directory, on a unix socket.
struct TestRedis {
    redis: EmbeddedRedis,
    dir: PathBuf,
}

impl TestRedis {
    async fn start() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("turnstile-bench-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let redis = EmbeddedRedis::start(&EmbeddedOptions {
            dir: dir.clone(),
            bind: Bind::UnixSocket,
            append_only: false,
            fsync_always: false,
        })
        .await?;
        Ok(Self { redis, dir })
    }

    fn url(&self) -> &str {
        self.redis.url()
    }

    async fn stop(self) {
        self.redis.stop().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `turnstile-bench` with `args` on its own Redis and server; the JSON lines, each
/// checked to name the scenario `reported` expects there and carry the common fields.
fn bench_json(args: &[&str], scenarios: &[&str], reported: &[&str]) -> Vec<serde_json::Value> {
    let output = bench()
        .args(scenarios)
        .args(args)
        .arg("--json")
        .env_remove("TURNSTILE_REDIS_URL")
        .output()
        .expect("run bench");
    let lines = json_lines(&output);
    assert_eq!(lines.len(), reported.len(), "{lines:?}");
    for (line, scenario) in lines.iter().zip(reported) {
        assert_eq!(line["scenario"], *scenario, "{line}");
        // `limits` and `cost` have no rate: their figures are the longest script runs
        // and instructions per operation.
        if !["limits", "limits_cluster", "cost"].contains(scenario) {
            assert_fields(line, &["ops_per_s"]);
        }
        // `idle`, `worker` and `limits` time nothing: their figures are Redis commands per
        // second and RSS, and tasks per second.
        if !["idle", "worker", "limits", "limits_cluster", "cost"].contains(scenario) {
            assert_fields(line, &["p50_ms", "p99_ms", "max_ms"]);
        }
    }
    lines
}

/// The JSON objects a successful bench printed, one a line.
fn json_lines(output: &std::process::Output) -> Vec<serde_json::Value> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}

/// Each field is there and a positive, finite number: a 0, a `null` (NaN) or a missing
/// figure is a broken measurement.
fn assert_fields(line: &serde_json::Value, fields: &[&str]) {
    for field in fields {
        let value = line[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} is not a number in {line}"));
        assert!(
            value.is_finite() && value > 0.0,
            "{field} is {value} in {line}"
        );
    }
}

#[test]
fn bench_runs_its_scenarios_and_reports_json() {
    let lines = bench_json(
        &["--duration", "300ms", "--concurrency", "8"],
        &[
            "lock",
            "handoff",
            "queue",
            "pickup",
            "seckill",
            "watch",
            "semaphore",
        ],
        &[
            "lock",
            "handoff",
            "queue",
            "queue_batched",
            "pickup",
            "seckill",
            "watch",
            "semaphore",
        ],
    );
    let floor = ["floor_ops_per_s", "ratio_to_floor"];
    // What the run cost Redis, from INFO (the bench started the Redis, so it knows it),
    // and the server, from its process' CPU time.
    let cost = [
        "redis_cpu_pct",
        "redis_us_per_op",
        "scripts_per_op",
        "server_us_per_op",
    ];
    // `lock` also says what its floors cost: the no-op gRPC server's CPU per cycle and
    // this process' CPU per cycle of the stores straight on Redis.
    let floor_cost = [
        "transport_floor_server_us_per_op",
        "redis_floor_client_us_per_op",
    ];
    assert_fields(
        &lines[0],
        &[&floor[..], &cost[..], &floor_cost[..]].concat(),
    );
    // `queue` reports one Ack per task, then batched acks with their Redis floor.
    assert_eq!(lines[2]["acks"], "one per task", "{}", lines[2]);
    assert_fields(&lines[2], &cost);
    assert_fields(
        &lines[3],
        &[&floor[..], &cost[..], &["floor_redis_us_per_op"]].concat(),
    );
    assert_eq!(lines[5]["sales"], 100, "{}", lines[5]);
    assert_eq!(lines[5]["stock"], 100, "{}", lines[5]);
    // Every scenario reports the server's CPU per operation; a short run of a light
    // scenario may stay within one tick of the process clock, so only lock and queue
    // (above) must be positive.
    for line in &lines {
        let per_op = line["server_us_per_op"].as_f64();
        assert!(per_op.is_some_and(|v| v.is_finite() && v >= 0.0), "{line}");
    }
    // Each scenario says which of its goals the run met: seckill's always is.
    for line in &lines {
        let goals = line["goals"].as_array().expect("goals");
        assert!(!goals.is_empty(), "{line}");
        assert!(goals.iter().all(|goal| goal["met"].is_boolean()), "{line}");
    }
    assert_eq!(lines[5]["goals"][0]["met"], true, "{}", lines[5]);
    // The semaphore's grants never saw more than its 8 permits in use.
    assert!(
        lines[7]["grants"].as_u64().is_some_and(|n| n > 0),
        "{}",
        lines[7]
    );
    assert_eq!(lines[7]["goals"][0]["met"], true, "{}", lines[7]);
}

#[test]
fn bench_scale_measures_each_topology_with_its_floors() {
    let reported = ["scale_lock", "scale_queue"].repeat(5);
    let lines = bench_json(
        &["--duration", "300ms", "--concurrency", "8"],
        &["scale"],
        &reported,
    );
    let topologies: Vec<&str> = lines
        .iter()
        .step_by(2)
        .map(|line| line["topology"].as_str().expect("topology"))
        .collect();
    assert_eq!(
        topologies,
        [
            "1 redis, 1 server",
            "1 redis, 3 servers",
            "cluster of 3, 1 server",
            "cluster of 3, 3 servers",
            "1 redis + replica, wait 1"
        ]
    );
    for line in &lines {
        // Floors from the same topology, and what it cost Redis (all its primaries).
        assert_fields(
            line,
            &[
                "floor_ops_per_s",
                "ratio_to_floor",
                "redis_us_per_op",
                "servers",
            ],
        );
    }
    assert_eq!(lines[3]["servers"], 3, "{}", lines[3]);
    assert_eq!(lines[1]["queues"], 6, "{}", lines[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_against_compares_two_builds_figure_by_figure() -> TestResult {
    // This build against itself, on a Redis of the test's: both servers must have run
    // (each under its own key prefix), round after round.
    let redis = TestRedis::start().await?;
    let url = redis.url().to_owned();
    let server = server_binary();
    let output = tokio::task::spawn_blocking(move || {
        bench()
            .args(["lock", "pickup", "--rounds", "2", "--against"])
            .arg(&server)
            .args(["--duration", "300ms", "--concurrency", "8", "--json"])
            .args(["--redis-url", &url])
            .env_remove("TURNSTILE_REDIS_URL")
            .output()
    })
    .await??;
    let lines = json_lines(&output);
    let scenarios: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["scenario"].as_str())
        .collect();
    assert_eq!(scenarios, ["lock", "pickup"], "{lines:?}");
    for line in &lines {
        assert_eq!(line["rounds"], 2, "{line}");
        for figure in ["ops_per_s", "p99_ms"] {
            let compared = &line["figures"][figure];
            assert_fields(
                compared,
                &["this", "against", "ratio", "ratio_min", "ratio_max"],
            );
            assert_eq!(compared["this_rounds"].as_array().map(Vec::len), Some(2));
            assert_eq!(compared["against_rounds"].as_array().map(Vec::len), Some(2));
            let (low, ratio, high) = (
                compared["ratio_min"].as_f64().unwrap(),
                compared["ratio"].as_f64().unwrap(),
                compared["ratio_max"].as_f64().unwrap(),
            );
            assert!(low <= ratio && ratio <= high, "{compared}");
        }
    }
    // The lock's fence keys outlive its leases: both builds' servers wrote theirs.
    let mut conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    for prefix in ["turnstile:", "turnstile-against:"] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut conn)
            .await?;
        assert!(!keys.is_empty(), "no keys under {prefix}");
    }
    // Refused: a server to measure, or `scale`.
    for args in [&["--server", "127.0.0.1:1"][..], &["scale"][..]] {
        let refused = bench()
            .arg("--against")
            .arg(server_binary())
            .args(args)
            .output()?;
        assert!(!refused.status.success(), "{args:?}");
    }
    redis.stop().await;
    Ok(())
}

#[test]
fn bench_runs_the_fixed_length_scenarios() {
    // `delayed` spreads 2,000 tasks over 5 s, `idle` watches for 10 s and `worker`
    // drains 80,000 tasks, by definition.
    let lines = bench_json(
        &[],
        &["delayed", "idle", "worker"],
        &["delayed", "idle", "worker"],
    );
    // The Rust library's worker against the raw loop.
    assert_fields(&lines[2], &["raw_tasks_per_s", "library_over_raw"]);
    assert_eq!(lines[0]["early"], 0, "{}", lines[0]);
    assert_fields(
        &lines[1],
        &[
            "redis_commands_per_s",
            "server_rss_mb",
            "server_peak_rss_mb",
        ],
    );
    // Memory per stream and per waiter, and what stays after they left: RSS deltas,
    // which an allocator reusing freed pages may make zero or negative.
    for field in [
        "server_kb_per_stream",
        "server_kb_per_waiter",
        "server_kb_per_waiter_paced",
        "server_rss_kept_mb",
    ] {
        let value = lines[1][field].as_f64();
        assert!(value.is_some_and(f64::is_finite), "{field} in {}", lines[1]);
    }
}

#[test]
fn bench_measures_the_dashboard_at_a_thousand_queues_and_a_hundred_thousand_dead_tasks() {
    let lines = bench_json(&[], &["dashboard"], &["dashboard"]);
    assert_fields(
        &lines[0],
        &[
            "overview_ttfb_p50_ms",
            "overview_p50_ms",
            "dead_page_1_p50_ms",
            "dead_page_500_p50_ms",
            "redis_cmds_per_s_1_tab",
            "redis_cmds_per_s_20_tabs",
            "tabs_20_over_1",
        ],
    );
    assert_eq!(lines[0]["overview_queues"], 1000, "{}", lines[0]);
    assert_eq!(lines[0]["dead_tasks"], 100_000, "{}", lines[0]);
}

#[test]
fn bench_limits_reads_each_script_s_longest_run_from_the_slow_log() {
    // A hundredth of the sizes: the smoke test checks the scenario runs and reports,
    // not the figure (the full run is in docs/performance.md).
    let lines = bench_json(&["--limits-fraction", "0.01"], &["limits"], &["limits"]);
    let line = &lines[0];
    let longest = line["longest_script_ms"].as_f64();
    assert!(
        longest.is_some_and(|ms| ms.is_finite() && ms >= 0.0),
        "{line}"
    );
    assert!(line["scripts_over_5_ms"].as_u64().is_some(), "{line}");
    assert!(line["longest_runs_ms"].is_string(), "{line}");
    // The rewrites wait until the run is over: no fork's copy-on-write in the figures.
    assert_eq!(line["forks_during_run"], 0, "{line}");
}

#[test]
fn bench_limits_cluster_reads_every_node_s_slow_log() {
    let lines = bench_json(
        &["--limits-fraction", "0.01"],
        &["limits-cluster"],
        &["limits_cluster"],
    );
    let line = &lines[0];
    // Queues' keys land on different primaries: each one's slow log is read.
    assert_eq!(line["redis_nodes"], 3, "{line}");
    assert!(line["longest_runs_ms"].is_string(), "{line}");
    assert_eq!(line["forks_during_run"], 0, "{line}");
}

#[test]
fn bench_cost_counts_each_operation_s_instructions_under_callgrind() {
    if std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run bench cost: valgrind is not installed"
        );
        eprintln!("SKIPPED bench cost: valgrind is not installed (apt install valgrind)");
        return;
    }
    // A tenth of the operations: the smoke test checks the counts come back and are
    // sane, not their size (the full run is in docs/performance.md).
    let lines = bench_json(&["--cost-ops", "200"], &["cost"], &["cost"]);
    let line = &lines[0];
    for workload in ["lock", "queue", "grouped"] {
        for process in ["server", "redis"] {
            let instructions = line[format!("{workload}_{process}_instr")].as_f64();
            // Every operation runs thousands of instructions in each process.
            assert!(
                instructions.is_some_and(|n| n > 1_000.0 && n < 100_000_000.0),
                "{workload} {process}: {line}"
            );
        }
        let ratio = line[format!("{workload}_server_per_redis")].as_f64();
        assert!(ratio.is_some_and(f64::is_finite), "{line}");
    }
}
