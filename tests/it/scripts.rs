//! The Lua scripts run directly against a real Redis, for the edge cases of their own
//! branches (the integration tests go through gRPC): how they are assembled and
//! flagged, what Redis says when one fails, and the branches a gRPC test reaches only
//! by luck of timing.

use crate::common;

use std::time::Duration;

use common::{TestRedis, TestResult};
use redis::AsyncCommands;
use tokio_stream::StreamExt;
use turnstile::testing::{Error, Keys, LockScripts, QueueScripts, Redis, Script, NO_WRITES};

fn lock_script(scripts: &LockScripts, name: &str) -> &'static turnstile::testing::Source {
    scripts
        .all()
        .into_iter()
        .find(|script| script.source.name == name)
        .unwrap_or_else(|| panic!("no lock script {name}"))
        .source
}

fn queue_script<'a>(scripts: &'a QueueScripts, name: &str) -> &'a Script {
    scripts
        .all()
        .into_iter()
        .find(|script| script.source.name == name)
        .unwrap_or_else(|| panic!("no queue script {name}"))
}

/// Every script of the four areas.
fn all_scripts() -> Vec<&'static turnstile::testing::Source> {
    let (locks, queues, schedules, semaphores) = (
        LockScripts::new(),
        QueueScripts::new(),
        turnstile::testing::ScheduleScripts::new(),
        turnstile::testing::SemaphoreScripts::new(),
    );
    locks
        .all()
        .into_iter()
        .chain(queues.all())
        .chain(schedules.all())
        .chain(semaphores.all())
        .map(|script| script.source)
        .collect()
}

/// The names a helper defines at its top level (`local function f`, `local a, b =`).
fn defined_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in code.lines() {
        let Some(rest) = line.strip_prefix("local ") else {
            continue;
        };
        let rest = rest.strip_prefix("function ").unwrap_or(rest);
        let declared = rest.split(['=', '(']).next().unwrap_or("");
        names.extend(
            declared
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned),
        );
    }
    names
}

/// Whether `code` uses the name `name` (as a whole word).
fn mentions(code: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[test]
fn no_script_carries_a_helper_it_never_calls() {
    let mut checked = 0;
    for source in all_scripts() {
        // Each file's code (comments dropped: a header may name a helper it does not
        // use), by file.
        let mut by_file: Vec<(&str, String)> = Vec::new();
        for (n, line) in source.text.lines().enumerate() {
            let (file, _) = source.locate(n + 1).unwrap();
            let code = line.split("--").next().unwrap();
            match by_file.iter_mut().find(|(f, _)| *f == file) {
                Some((_, text)) => text.push_str(code),
                None => by_file.push((file, code.to_owned())),
            }
            by_file
                .iter_mut()
                .find(|(f, _)| *f == file)
                .unwrap()
                .1
                .push('\n');
        }
        let own = source.parts.last().unwrap().1;
        for (file, text) in &by_file {
            if *file == own {
                continue;
            }
            checked += 1;
            let names = defined_names(text);
            let used = by_file
                .iter()
                .filter(|(other, _)| other != file)
                .any(|(_, code)| names.iter().any(|name| mentions(code, name)));
            assert!(
                used,
                "{} carries {file} and uses none of {names:?}",
                source.name
            );
        }
    }
    assert!(checked > 50, "only {checked} helpers looked at");
}

#[test]
fn every_script_carries_only_the_helpers_it_names_and_no_bare_keys() {
    let (locks, queues, schedules, semaphores) = (
        LockScripts::new(),
        QueueScripts::new(),
        turnstile::testing::ScheduleScripts::new(),
        turnstile::testing::SemaphoreScripts::new(),
    );
    let all: Vec<&Script> = locks
        .all()
        .into_iter()
        .chain(queues.all())
        .chain(schedules.all())
        .chain(semaphores.all())
        .collect();
    assert_eq!(all.len(), 35);
    for script in &all {
        let source = script.source;
        // Read only exactly when it says so on its first line, which Redis enforces.
        assert_eq!(
            script.writes,
            !source.text.starts_with(NO_WRITES),
            "{}",
            source.name
        );
        // Its own file comes last; every part names a file of the tree.
        let (_, own, _) = source.parts.last().unwrap();
        assert!(own.ends_with(source.name), "{}: {own}", source.name);
        for (_, file, _) in source.parts {
            assert!(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(file)
                    .exists(),
                "{file}"
            );
        }
        // Keys are named once, in keys.lua or at the top of a lock script; the code
        // after that uses the names.
        for (n, line) in source.text.lines().enumerate() {
            let code = line.split("--").next().unwrap();
            if code.contains("KEYS[") {
                let (file, _) = source.locate(n + 1).unwrap();
                assert!(
                    code.trim_start().starts_with("local ")
                        || (file.ends_with("keys.lua") && code.trim_start().starts_with("KEYS[")),
                    "{}: a bare key in {file}: {line}",
                    source.name
                );
            }
        }
    }
    // A script carries only what it includes: describe needs the lease, not the
    // release's wake-up.
    let describe = lock_script(&locks, "describe.lua");
    assert!(describe.text.contains("local function unpack_lease"));
    assert!(!describe.text.contains("free_lock"));
    assert!(describe.text.starts_with(NO_WRITES));
    // Watch's writes are marks, and Wait's its registration. Peek, Stats, ListGroups
    // and ListTasks return expired leases first, which is a write: not read only; but
    // their answers tell nobody that something was stored, so they alone of the
    // scripts that write do not wait for replicas.
    for script in &all {
        let answers_only = [
            "peek.lua",
            "stats.lua",
            "list_groups.lua",
            "watch.lua",
            "wait.lua",
            "list_tasks.lua",
        ]
        .contains(&script.source.name);
        assert_eq!(
            script.confirms,
            script.writes && !answers_only,
            "{}",
            script.source.name
        );
    }
    assert!(queue_script(&queues, "peek.lua").writes);
    assert!(queue_script(&queues, "stats.lua").writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refuses_a_write_from_a_script_that_declares_no_writes() -> TestResult {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let refused: redis::RedisResult<()> = redis::cmd("EVAL")
        .arg(format!(
            "{NO_WRITES}\nreturn redis.call('SET', KEYS[1], 'x')"
        ))
        .arg(1)
        .arg("k")
        .query_async(&mut conn)
        .await;
    let err = refused.expect_err("a write from a no-writes script");
    assert!(err.to_string().contains("read-only scripts"), "{err}");
    assert!(!conn.exists::<_, bool>("k").await?);
    // The one read-only script runs as Redis runs a read-only script: EVAL_RO takes it.
    let locks = LockScripts::new();
    let describe = lock_script(&locks, "describe.lua");
    let free: Vec<i64> = redis::cmd("EVAL_RO")
        .arg(describe.text)
        .arg(1)
        .arg("lock")
        .arg("")
        .query_async(&mut conn)
        .await?;
    assert_eq!(free, [0]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_script_names_the_file_and_line_of_ours_that_failed() -> TestResult {
    let redis = TestRedis::start().await;
    let handle = Redis::with_info(
        turnstile::testing::connection_info(&redis.url(), None)?,
        Duration::from_secs(2),
        Keys::new("t"),
    )?;
    let locks = LockScripts::new();
    let release = locks
        .all()
        .into_iter()
        .find(|script| script.source.name == "release.lua")
        .unwrap();
    // A lock key holding something that is not a lease: unpack_lease fails.
    let mut conn = redis.conn().await;
    let () = conn.set("broken", "x").await?;
    let mut call = release.key("broken");
    call.key("index")
        .arg("token")
        .arg("channel")
        .arg("")
        .arg("broken");
    let err = handle
        .invoke::<i64>(&call)
        .await
        .expect_err("a script error");
    let Error::Internal(why) = err else {
        panic!("{err:?}")
    };
    let lease = "src/lock/lua/include/lease.lua:";
    assert!(why.contains(lease), "{why}");
    assert!(!why.contains("user_script:"), "{why}");
    // The line named is the unpack in lease.lua.
    let line: usize = why[why.find(lease).unwrap() + lease.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()?;
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lock/lua/include/lease.lua"),
    )?;
    // The line of the call, or the statement it continues.
    let failed: Vec<&str> = text.lines().skip(line - 1).take(2).collect();
    assert!(
        failed.iter().any(|l| l.contains("struct.unpack")),
        "line {line}: {failed:?}"
    );
    Ok(())
}

/// Runs `script` (EVAL of its text) on `keys` with `args`.
async fn eval<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &Script,
    keys: &[String],
    args: &[&str],
) -> redis::RedisResult<T> {
    redis::cmd("EVAL")
        .arg(script.source.text)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query_async(conn)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_scripts_release_only_their_own_lease_and_a_takeover_locks_out_the_old_stream(
) -> TestResult {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let locks = LockScripts::new();
    let by = |name: &str| {
        locks
            .all()
            .into_iter()
            .find(|script| script.source.name == name)
            .unwrap()
    };
    let keys = [
        "lock".to_owned(),
        "fence".to_owned(),
        "watched".to_owned(),
        "index".to_owned(),
    ];
    let won: Vec<redis::Value> = eval(
        &mut conn,
        by("acquire.lua"),
        &keys,
        &["tok-a", "ada", "60000", "r1", "1", "ch", "n"],
    )
    .await?;
    assert_eq!(won[0], redis::Value::Int(1));
    // The same owner and request id get the same lease back; another owner does not.
    let again: Vec<redis::Value> = eval(
        &mut conn,
        by("acquire.lua"),
        &keys,
        &["tok-b", "ada", "60000", "r1", "0", "ch", "n"],
    )
    .await?;
    assert_eq!(again[1], won[1]);
    let other: Vec<redis::Value> = eval(
        &mut conn,
        by("acquire.lua"),
        &keys,
        &["tok-c", "bob", "60000", "", "1", "ch", "n"],
    )
    .await?;
    assert_eq!(other[0], redis::Value::Int(0));
    // Release and ReleaseAll of someone else change nothing.
    let lock = &[keys[0].clone(), keys[3].clone()];
    let listed: Vec<String> = conn.zrange("index", 0, -1).await?;
    assert_eq!(listed, ["n"], "the win is in the index of held locks");
    let released: i64 = eval(
        &mut conn,
        by("release.lua"),
        lock,
        &["tok-c", "ch", "", "n"],
    )
    .await?;
    assert_eq!(released, 0);
    let released: i64 = eval(
        &mut conn,
        by("release_owner.lua"),
        lock,
        &["bob", "ch", "n"],
    )
    .await?;
    assert_eq!(released, 0);
    assert!(conn.exists::<_, bool>("lock").await?);
    // A take-over (a Hold re-attaching) moves the generation: the old stream's
    // generation may neither renew nor release.
    let taken: Vec<redis::Value> = eval(
        &mut conn,
        by("extend.lua"),
        lock,
        &["tok-a", "60000", "", "1", "n"],
    )
    .await?;
    assert_eq!(
        (&taken[0], &taken[4]),
        (&redis::Value::Int(1), &redis::Value::Int(1))
    );
    let stale: Vec<i64> = eval(
        &mut conn,
        by("extend.lua"),
        lock,
        &["tok-a", "60000", "0", "0", "n"],
    )
    .await?;
    assert_eq!(stale, [2]);
    let released: i64 = eval(
        &mut conn,
        by("release.lua"),
        lock,
        &["tok-a", "ch", "0", "n"],
    )
    .await?;
    assert_eq!(released, 0);
    // The holder's own release frees it, and wakes the waiter bob marked it for.
    let mut pubsub = redis.client().get_async_pubsub().await?;
    pubsub.subscribe("ch").await?;
    let released: i64 = eval(
        &mut conn,
        by("release.lua"),
        lock,
        &["tok-a", "ch", "1", "n"],
    )
    .await?;
    assert_eq!(released, 1);
    assert!(!conn.exists::<_, bool>("lock").await?);
    assert!(
        !conn.exists::<_, bool>("index").await?,
        "the release left the index"
    );
    let message = tokio::time::timeout(common::WAIT, pubsub.on_message().next())
        .await?
        .expect("a wake-up");
    assert_eq!(message.get_payload::<String>()?, "lock");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_with_no_task_behind_them_are_dropped_a_bounded_run_at_a_time() -> TestResult
{
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let queues = QueueScripts::new();
    let keys = Keys::new("t").queue("q").all.to_vec();
    // 150 in-flight members whose leases ended long ago and whose tasks are gone.
    let mut pipe = redis::pipe();
    for n in 0..150 {
        pipe.zadd(&keys[1], format!("{n:015}:gone-{n}"), 1).ignore();
    }
    let () = pipe.query_async(&mut conn).await?;
    let stats = queue_script(&queues, "stats.lua");
    // The first run returns 100 of them (RECLAIM_PER_RUN) and answers AGAIN, doing
    // nothing else.
    let first: redis::Value = eval(&mut conn, stats, &keys, &[]).await?;
    assert_eq!(first, redis::Value::SimpleString("AGAIN".into()));
    assert_eq!(conn.zcard::<_, usize>(&keys[1]).await?, 50);
    // The next returns the rest and answers.
    let second: Vec<redis::Value> = eval(&mut conn, stats, &keys, &[]).await?;
    assert_eq!(second[..4], [0, 0, 0, 0].map(redis::Value::Int));
    assert_eq!(conn.zcard::<_, usize>(&keys[1]).await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_returns_one_task_over_budget_and_cancel_leaves_a_task_in_flight() -> TestResult {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let queues = QueueScripts::new();
    let keys = Keys::new("t").queue("q").all.to_vec();
    let big = "x".repeat(10_000);
    let enqueued: Vec<u8> = eval(
        &mut conn,
        queue_script(&queues, "enqueue.lua"),
        &keys,
        &[
            "ch", "msg", "9", "a", &big, "n", "0", "k", "25", "0", "0", "", "b", &big, "n", "0",
            "k", "25", "0", "0", "",
        ],
    )
    .await?;
    let enqueued = added(&enqueued);
    assert_eq!(
        enqueued.iter().map(|&(c, r, _)| (c, r)).collect::<Vec<_>>(),
        [(1, 0), (1, 0)]
    );
    // A budget smaller than one payload still returns the first task, and only it.
    let rows: Vec<redis::Value> = eval(
        &mut conn,
        queue_script(&queues, "peek.lua"),
        &keys,
        &["ready", "10", "1", "0", ""],
    )
    .await?;
    assert_eq!(rows.len(), 3);
    assert_eq!(row_texts(&rows[0])[0], "a");
    // Lease one, then cancel both: the one in flight stays.
    let leased: Vec<redis::Value> = eval(
        &mut conn,
        queue_script(&queues, "lease.lua"),
        &keys,
        &["1", "60000", "0", "4194304", "p"],
    )
    .await?;
    assert_eq!(row_texts(&leased[2])[0], "a");
    let cancelled: Vec<String> = eval(
        &mut conn,
        queue_script(&queues, "cancel.lua"),
        &keys,
        &["ch", "msg", "0", "freed", "a", "b"],
    )
    .await?;
    assert_eq!(cancelled, ["b"]);
    // A stale receipt acks nothing; the live one does.
    let acked: String = eval(
        &mut conn,
        queue_script(&queues, "ack.lua"),
        &keys,
        &["freed", "ch", "msg", "0", "other:a", "p:a"],
    )
    .await?;
    assert_eq!(acked, "01");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_dedupe_windows_go_a_bounded_run_at_a_time_and_hold_nothing_meanwhile() -> TestResult
{
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let queues = QueueScripts::new();
    let keys = Keys::new("t").queue("q").all.to_vec();
    let reserved = &keys[5];
    // 5,000 windows that ended long ago, "ended-0" among them, and one still running.
    let mut pipe = redis::pipe();
    for n in 0..5_000 {
        pipe.zadd(reserved, format!("ended-{n}"), 1).ignore();
    }
    pipe.zadd(reserved, "running", i64::MAX / 4).ignore();
    let () = pipe.query_async(&mut conn).await?;
    let enqueue = queue_script(&queues, "enqueue.lua");
    let task = |id: &'static str| [id, "p", "n", "0", "k", "25", "0"];
    let args: Vec<&str> = ["ch", "msg", "7"]
        .into_iter()
        .chain(task("ended-4999"))
        .chain(task("running"))
        .collect();
    let answered: Vec<u8> = eval(&mut conn, enqueue, &keys, &args).await?;
    let answered = added(&answered);
    // The ended window holds nothing, though this run could not remove it yet; the
    // running one refuses its id.
    assert_eq!((answered[0].0, answered[1].0), (1, 0), "{answered:?}");
    assert_eq!(conn.zcard::<_, usize>(reserved).await?, 5_001 - 1_000);
    assert!(conn
        .zscore::<_, _, Option<f64>>(reserved, "ended-4999")
        .await?
        .is_some());
    Ok(())
}

/// `cmdstat_publish` calls so far (commands a script runs are counted too).
async fn publishes(conn: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_publish:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_that_leases_every_task_it_stored_wakes_nobody_and_one_that_leaves_one_does(
) -> TestResult {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let queues = QueueScripts::new();
    let keys = Keys::new("t").queue("q").all.to_vec();
    let script = queue_script(&queues, "enqueue_and_dispatch.lua");
    // One stream with one slot; then the tasks.
    let head = [
        "ch", "msg", "7", "p", "4194304", "1", "s:a", "x", "1", "60000",
    ];
    let task = |id: &'static str| [id, "body", "n", "0", "k", "25", "0"];
    let before = publishes(&mut conn).await?;
    let args: Vec<&str> = head.into_iter().chain(task("a")).collect();
    let reply: Vec<redis::Value> = eval(&mut conn, script, &keys, &args).await?;
    let [redis::Value::BulkString(enqueued), redis::Value::Array(dispatched)] = &reply[..] else {
        panic!("{reply:?}");
    };
    assert_eq!((added(enqueued)[0].0, added(enqueued)[0].1), (1, 0));
    // now, next pending (none), next lease end, held back, the stream's deliveries, then
    // one row: the stream's index and the task.
    assert_eq!(dispatched[1], redis::Value::Int(-1));
    assert_eq!(dispatched[4], redis::Value::Int(1));
    assert_eq!(dispatched[5], redis::Value::Int(1));
    assert_eq!(row_texts(&dispatched[6])[0], "a");
    assert_eq!(publishes(&mut conn).await?, before, "leased all it stored");
    // The slot is taken: "b" waits, and the run says so.
    let args: Vec<&str> = head.into_iter().chain(task("b")).collect();
    let reply: Vec<redis::Value> = eval(&mut conn, script, &keys, &args).await?;
    let [_, redis::Value::Array(dispatched)] = &reply[..] else {
        panic!("{reply:?}");
    };
    assert_eq!(dispatched.len(), 5, "no row: {dispatched:?}");
    assert_eq!(publishes(&mut conn).await?, before + 1, "b waits");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_refills_the_streams_it_was_given_and_tells_only_the_others_their_slots_freed(
) -> TestResult {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let queues = QueueScripts::new();
    let keys = Keys::new("t").queue("q").all.to_vec();
    // Two streams with one slot each take "a" and "b"; "c" waits.
    let head = [
        "ch", "msg", "7", "p", "4194304", "2", "s:a", "x", "1", "60000", "s:b", "y", "1", "60000",
    ];
    let task = |id: &'static str| [id, "body", "n", "0", "k", "25", "0"];
    let args: Vec<&str> = head
        .into_iter()
        .chain(task("a"))
        .chain(task("b"))
        .chain(task("c"))
        .collect();
    let script = queue_script(&queues, "enqueue_and_dispatch.lua");
    let reply: Vec<redis::Value> = eval(&mut conn, script, &keys, &args).await?;
    let [_, redis::Value::Array(dispatched)] = &reply[..] else {
        panic!("{reply:?}");
    };
    // The head (now, next pending, next lease end, held back, two held counts), then
    // rows of 4: the stream's index, then the task's row (its receipt the third text).
    let receipts: Vec<String> = dispatched[6..]
        .chunks(4)
        .map(|row| row_texts(&row[1])[2].clone())
        .collect();
    assert_eq!(receipts.len(), 2);
    // Both acked in a run given only the stream "s:a".
    let script = queue_script(&queues, "ack_and_dispatch.lua");
    let before = publishes(&mut conn).await?;
    let mut args = vec![
        "freed", "ch", "msg", "p2", "4194304", "1", "s:a", "x", "1", "60000",
    ];
    args.extend(receipts.iter().map(String::as_str));
    let reply: Vec<redis::Value> = eval(&mut conn, script, &keys, &args).await?;
    let [redis::Value::BulkString(acked), redis::Value::Array(chosen), redis::Value::Array(dispatched)] =
        &reply[..]
    else {
        panic!("{reply:?}");
    };
    assert_eq!(acked, b"11");
    assert_eq!(chosen[..], [redis::Value::Int(1)]);
    // "c" went to "s:a" in the same run.
    assert_eq!(dispatched[4], redis::Value::Int(1));
    assert_eq!(row_texts(&dispatched[6])[0], "c");
    assert_eq!(
        publishes(&mut conn).await?,
        before + 1,
        "slot-freed for s:b only"
    );
    Ok(())
}

/// `lua/include/pack_added.lua`'s reply: per task created, replaced (a byte each) and
/// due (a little-endian double).
fn added(packed: &[u8]) -> Vec<(u8, u8, f64)> {
    assert_eq!(packed.len() % 10, 0, "{packed:?}");
    packed
        .chunks(10)
        .map(|r| (r[0], r[1], f64::from_le_bytes(r[2..].try_into().unwrap())))
        .collect()
}

/// The texts of a task row's packed value (`lua/include/push_row.lua`): its id, state
/// name, receipt, group and last error, after six doubles and their five lengths.
fn row_texts(packed: &redis::Value) -> Vec<String> {
    let redis::Value::BulkString(packed) = packed else {
        panic!("not a packed row: {packed:?}");
    };
    let mut at = 6 * 8 + 5 * 4;
    (0..5)
        .map(|n| {
            let from = 6 * 8 + n * 4;
            let len = u32::from_le_bytes(packed[from..from + 4].try_into().unwrap()) as usize;
            let text = String::from_utf8(packed[at..at + len].to_vec()).unwrap();
            at += len;
            text
        })
        .collect()
}
