//! A bounded chaos run, seeded so that a failure replays (`CHAOS_SEED=<n> cargo test
//! --test it chaos::`), on each store: while a producer enqueues, workers lease and ack
//! from a plain queue, a capped and rate-limited one and a schedule's queue, lockers
//! contend for one lock and admitters for a semaphore's permits, all through a changing
//! set of server processes, it deals faults, each once the clients have made progress
//! since the last one: a SIGKILL of a server (then replaced), and on one Redis a SIGKILL
//! of Redis (append only, fsync always, then restarted), on a Cluster a SIGKILL of a
//! primary (its replica takes over; `--redis-wait-replicas 1`). Workers drop calls
//! mid-flight and now and then "crash" before acking.
//!
//! At the end: every confirmed task was delivered and every queue drained, no acked
//! task came back, no two lock holders were ever inside at once and fencing tokens rose
//! in the order the lock was won, the semaphore never had more permits out than its
//! limit, the capped queue never had more tasks in flight than its cap nor started more
//! deliveries than its rate allows (both read on Redis' clock, from each task's lease
//! end), the schedule enqueued each fire time once and missed none, and a server that
//! lived through it all is back near its start memory.

use crate::common;

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use common::{
    backoff, cluster::TestCluster, eventually, ms, seed_from, unix_ms, with_timeout, Ledger, Rng,
    ServerProcess, TestRedis, TestResult,
};
use tonic::transport::Channel;
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};
use turnstile::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient, schedule,
    schedule_service_client::ScheduleServiceClient,
    semaphore_service_client::SemaphoreServiceClient, AckRequest, AcquireRequest,
    ConfigureQueueRequest, DeleteScheduleRequest, EnqueueRequest, LeaseRequest, PutScheduleRequest,
    RateLimit, ReleaseRequest, Schedule, SemaphoreServiceAcquireRequest,
    SemaphoreServiceReleaseRequest, TaskSpec,
};

/// The lock, the semaphore and the schedule: named apart, so that on a cluster they
/// (and the queues) spread over the primaries a failover may hit.
const LOCK: &str = "chaos-lock";
const SEMAPHORE: &str = "chaos-permits";
const SCHEDULE: &str = "chaos-tick";
/// The semaphore's limit.
const PERMITS: u32 = 3;
/// The capped queue's `max_in_flight`, and its rate limit: `RATE` starts a second with
/// a burst of `BURST`.
const CAP: u32 = 3;
const RATE: u32 = 40;
const BURST: u32 = 5;
/// The schedule fires every this many milliseconds.
const TICK_MS: i64 = 1_000;

/// Calls never wait longer than this on a dead server or Redis.
const CALL: Duration = Duration::from_secs(2);
/// The most the clients may take to make progress after a fault.
const RECOVER: Duration = Duration::from_secs(60);

/// The lock and semaphore sides of the run, and the switches of the clients.
#[derive(Default)]
struct Record {
    /// Lock holders inside the critical section now, and the most ever at once.
    inside: AtomicI64,
    most_inside: AtomicI64,
    /// Fencing tokens in the order the lock was won (under the lock, so in order).
    fencing: Mutex<Vec<u64>>,
    /// Semaphore permits held now by the admitters, the most ever at once, and how
    /// many grants they had.
    permits_out: AtomicI64,
    most_permits_out: AtomicI64,
    grants: AtomicU64,
    dropped_calls: AtomicU64,
    /// The producer stops first; the workers and lockers once the queues are drained.
    producing: AtomicBool,
    stop: AtomicBool,
}

impl Record {
    fn locks_won(&self) -> usize {
        self.fencing.lock().unwrap().len()
    }
}

/// One queue of the run, what its clients were told, and when its deliveries were
/// held.
struct Line {
    queue: &'static str,
    ledger: Ledger,
    /// Each delivery's time in flight as the worker saw it, in Redis milliseconds:
    /// from its start (its lease end less the visibility) to the first of its lease
    /// end and the moment the worker acked or dropped it. Inside the server's own time
    /// in flight, so the server's cap bounds how many overlap.
    held: Mutex<Vec<(i64, i64)>>,
    /// The due times of the tasks delivered (for the schedule's queue: its fire times).
    due: Mutex<BTreeSet<i64>>,
}

impl Line {
    fn new(queue: &'static str) -> Arc<Self> {
        Arc::new(Self {
            queue,
            ledger: Ledger::default(),
            held: Mutex::default(),
            due: Mutex::default(),
        })
    }
}

/// The lease visibility of every worker.
const VISIBILITY_MS: i64 = 1_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// The live servers' addresses; clients pick one per call.
#[derive(Default)]
struct Servers(Mutex<Vec<String>>);

impl Servers {
    /// A connection to a live server picked at random, or `None` after a pause when
    /// none answers (a client then tries again).
    async fn connect(&self, rng: &mut Rng) -> Option<Channel> {
        let addr = {
            let live = self.0.lock().unwrap();
            (!live.is_empty()).then(|| live[rng.below(live.len() as u64) as usize].clone())
        };
        let channel = match addr {
            Some(addr) => channel(&addr).await,
            None => None,
        };
        if channel.is_none() {
            backoff().await;
        }
        channel
    }
}

async fn channel(addr: &str) -> Option<Channel> {
    Channel::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(CALL)
        .connect()
        .await
        .ok()
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

/// Enqueues batches into the plain queue and, one batch in four, the capped one,
/// paced by the workers: a flood would only slow two shared cores down.
async fn produce(record: Arc<Record>, lines: [Arc<Line>; 2], servers: Arc<Servers>, seed: u64) {
    let mut rng = Rng(seed);
    let mut batch = 0u64;
    while record.producing.load(Ordering::SeqCst) {
        let (line, most) = match rng.below(4) {
            0 => (&lines[1], 40),
            _ => (&lines[0], 200),
        };
        if line.ledger.backlog() > most {
            eventually("the workers catch up", RECOVER, || async {
                line.ledger.backlog() <= most / 2
            })
            .await;
        }
        let Some(channel) = servers.connect(&mut rng).await else {
            continue;
        };
        let mut queues = QueueServiceClient::new(channel);
        batch += 1;
        let tasks = (0..1 + rng.below(5))
            .map(|k| TaskSpec {
                id: format!("c{seed}-{batch}-{k}"),
                payload: b"x".to_vec().into(),
                ..Default::default()
            })
            .collect();
        let request = EnqueueRequest {
            queue: line.queue.into(),
            tasks,
            ..Default::default()
        };
        match queues.enqueue(with_timeout(request, CALL)).await {
            Ok(reply) => line
                .ledger
                .enqueued(reply.into_inner().results.into_iter().map(|r| r.id)),
            Err(_) => backoff().await,
        }
    }
}

async fn work(record: Arc<Record>, line: Arc<Line>, servers: Arc<Servers>, seed: u64) {
    let mut rng = Rng(seed);
    while !record.stop.load(Ordering::SeqCst) {
        let Some(channel) = servers.connect(&mut rng).await else {
            continue;
        };
        let mut queues = QueueServiceClient::new(channel);
        let request = LeaseRequest {
            queue: line.queue.into(),
            max_tasks: 1 + rng.below(10) as u32,
            visibility: ms(VISIBILITY_MS),
            wait: ms(200),
            auto_ack: false,
        };
        // Now and then the client goes away mid-call: what it leased must come back.
        let lease = queues.lease(with_timeout(request, CALL));
        let answer = if rng.below(10) == 0 {
            let cut = Duration::from_millis(rng.below(50));
            match tokio::time::timeout(cut, lease).await {
                Ok(answer) => answer,
                Err(_) => {
                    record.dropped_calls.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
            }
        } else {
            lease.await
        };
        let Ok(reply) = answer else {
            backoff().await;
            continue;
        };
        let tasks = reply.into_inner().tasks;
        line.ledger.delivered(&tasks);
        line.due
            .lock()
            .unwrap()
            .extend(tasks.iter().map(|task| unix_ms(&task.due_at)));
        for _ in 0..rng.below(10) {
            tokio::task::yield_now().await;
        }
        // Held until now: the ack goes next, or the worker "crashes" before acking
        // (then the lease must expire).
        let now = now_ms();
        line.held.lock().unwrap().extend(tasks.iter().map(|task| {
            let end = unix_ms(&task.lease_expires_at);
            (end - VISIBILITY_MS, now.min(end))
        }));
        if tasks.is_empty() || rng.below(20) == 0 {
            continue;
        }
        let request = AckRequest {
            queue: line.queue.into(),
            receipts: tasks.iter().map(|t| t.receipt.clone()).collect(),
            ..Default::default()
        };
        if let Ok(reply) = queues.ack(with_timeout(request, CALL)).await {
            line.ledger.acked(&tasks, &reply.into_inner().acked);
        }
    }
}

async fn contend(record: Arc<Record>, servers: Arc<Servers>, seed: u64) {
    let mut rng = Rng(seed);
    while !record.stop.load(Ordering::SeqCst) {
        let Some(channel) = servers.connect(&mut rng).await else {
            continue;
        };
        let mut locks = LockServiceClient::new(channel);
        let request = AcquireRequest {
            name: LOCK.into(),
            owner: format!("locker{seed}"),
            ttl: ms(3_000),
            wait: ms(500),
            request_id: String::new(),
        };
        let won = match locks.acquire(with_timeout(request, CALL)).await {
            Ok(won) => won.into_inner(),
            Err(_) => {
                backoff().await;
                continue;
            }
        };
        if !won.acquired {
            continue;
        }
        let now = record.inside.fetch_add(1, Ordering::SeqCst) + 1;
        record.most_inside.fetch_max(now, Ordering::SeqCst);
        record.fencing.lock().unwrap().push(won.fencing_token);
        // Inside for a few turns of the scheduler, so another holder would be seen
        // (well inside the 3 s lease, which no fault here can cut short).
        for _ in 0..rng.below(10) {
            tokio::task::yield_now().await;
        }
        record.inside.fetch_sub(1, Ordering::SeqCst);
        // A release lost to a fault is sent again, through another server if need be;
        // one never sent leaves the lock to its TTL: slower, never unsafe.
        for _ in 0..3 {
            let request = ReleaseRequest {
                name: LOCK.into(),
                token: won.token.clone(),
            };
            if locks.release(with_timeout(request, CALL)).await.is_ok() {
                break;
            }
            let Some(channel) = servers.connect(&mut rng).await else {
                continue;
            };
            locks = LockServiceClient::new(channel);
        }
    }
}

/// Takes one or two of the semaphore's permits, holds them for a few turns, gives them
/// back; as `contend`, a release lost to a fault is sent again.
async fn admit(record: Arc<Record>, servers: Arc<Servers>, seed: u64) {
    let mut rng = Rng(seed);
    while !record.stop.load(Ordering::SeqCst) {
        let Some(channel) = servers.connect(&mut rng).await else {
            continue;
        };
        let mut semaphores = SemaphoreServiceClient::new(channel);
        let permits = 1 + rng.below(2) as u32;
        let request = SemaphoreServiceAcquireRequest {
            name: SEMAPHORE.into(),
            owner: format!("admitter{seed}"),
            limit: PERMITS,
            permits,
            ttl: ms(3_000),
            wait: ms(500),
            request_id: String::new(),
        };
        let won = match semaphores.acquire(with_timeout(request, CALL)).await {
            Ok(won) => won.into_inner(),
            Err(_) => {
                backoff().await;
                continue;
            }
        };
        if !won.acquired {
            continue;
        }
        let now = record
            .permits_out
            .fetch_add(i64::from(permits), Ordering::SeqCst)
            + i64::from(permits);
        record.most_permits_out.fetch_max(now, Ordering::SeqCst);
        record.grants.fetch_add(1, Ordering::SeqCst);
        for _ in 0..rng.below(10) {
            tokio::task::yield_now().await;
        }
        record
            .permits_out
            .fetch_sub(i64::from(permits), Ordering::SeqCst);
        for _ in 0..3 {
            let request = SemaphoreServiceReleaseRequest {
                name: SEMAPHORE.into(),
                token: won.token.clone(),
            };
            if semaphores
                .release(with_timeout(request, CALL))
                .await
                .is_ok()
            {
                break;
            }
            let Some(channel) = servers.connect(&mut rng).await else {
                continue;
            };
            semaphores = SemaphoreServiceClient::new(channel);
        }
    }
}

/// Whether the server at `addr` says it is ready (a call that fails counts as not).
async fn serving(addr: &str) -> bool {
    let Some(channel) = channel(addr).await else {
        return false;
    };
    let request = HealthCheckRequest {
        service: String::new(),
    };
    HealthClient::new(channel)
        .check(with_timeout(request, CALL))
        .await
        .is_ok_and(|reply| reply.into_inner().status == ServingStatus::Serving as i32)
}

/// The most deliveries held at one moment: an end at the same millisecond as a start
/// comes first (the server frees a slot before it fills it again).
fn most_at_once(held: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = held
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end.max(start), -1)])
        .collect();
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The first run of delivery starts (Redis milliseconds) that the rate limit forbids:
/// in any interval of length t at most `BURST + RATE * t / 1 s` start, and timestamps
/// cut to the millisecond make the interval up to 1 ms longer than it reads.
fn over_rate(held: &[(i64, i64)]) -> Option<String> {
    let mut starts: Vec<i64> = held.iter().map(|&(start, _)| start).collect();
    starts.sort();
    for last in 0..starts.len() {
        for first in 0..=last {
            let span = starts[last] - starts[first] + 1;
            let allowed = f64::from(BURST) + f64::from(RATE) * span as f64 / 1_000.0;
            let count = last - first + 1;
            if count as f64 > allowed {
                return Some(format!(
                    "{count} deliveries started within {span} ms (at most {allowed:.1})"
                ));
            }
        }
    }
    None
}

/// Fire times missing between the first and the last one delivered.
fn missed_fires(due: &BTreeSet<i64>) -> Vec<i64> {
    let (Some(&first), Some(&last)) = (due.first(), due.last()) else {
        return Vec::new();
    };
    (0..=(last - first) / TICK_MS)
        .map(|k| first + k * TICK_MS)
        .filter(|time| !due.contains(time))
        .collect()
}

/// What the servers keep their state in, and the fault it can be dealt.
enum Backing {
    /// One `redis-server`, append only with fsync always: killed and restarted.
    OneRedis(Box<TestRedis>),
    /// A three-primary cluster: a primary is killed and its replica takes over; every
    /// write waits for a replica (`--redis-wait-replicas 1`), so none a client was told
    /// of is lost.
    Cluster(TestCluster),
}

impl Backing {
    fn serve_args(&self) -> Vec<String> {
        match self {
            Self::OneRedis(redis) => vec!["--redis-url".into(), redis.url()],
            Self::Cluster(cluster) => vec![
                "--redis-cluster".into(),
                "--redis-url".into(),
                cluster.url(),
                "--redis-wait-replicas".into(),
                "1".into(),
            ],
        }
    }

    /// Deals the store's fault and waits until the store is whole again.
    async fn fault(&mut self, rng: &mut Rng, stable: &str) {
        match self {
            Self::OneRedis(redis) => {
                // Down until the servers see it (readiness drops), then back.
                redis.kill().await;
                eventually("NOT_SERVING while Redis is down", RECOVER, || async {
                    !serving(stable).await
                })
                .await;
                redis.restart().await;
            }
            Self::Cluster(cluster) => {
                let primaries = cluster.primaries();
                let victim = primaries[rng.below(primaries.len() as u64) as usize];
                cluster.fail_over(victim).await;
            }
        }
    }

    fn fault_name(&self) -> &'static str {
        match self {
            Self::OneRedis(_) => "Redis restarts",
            Self::Cluster(_) => "failovers",
        }
    }
}

/// Puts the schedule (every `TICK_MS` into the fires' queue, catching up for ten
/// minutes: far longer than any fault here) and caps the capped queue, through the
/// stable server, retrying what a loaded start may refuse.
async fn set_up(stable: &str, capped: &str, fires: &str) {
    let channel = channel(stable).await.expect("stable server");
    let schedules = ScheduleServiceClient::new(channel.clone());
    let queues = QueueServiceClient::new(channel);
    common::retry_unavailable("put the schedule", || {
        let request = PutScheduleRequest {
            schedule: Some(Schedule {
                name: SCHEDULE.into(),
                queue: fires.into(),
                spec: Some(schedule::Spec::Every(ms(TICK_MS).expect("a duration"))),
                catch_up_window: ms(600_000),
                ..Default::default()
            }),
        };
        let mut schedules = schedules.clone();
        async move { schedules.put_schedule(with_timeout(request, CALL)).await }
    })
    .await;
    common::retry_unavailable("cap the capped queue", || {
        let request = ConfigureQueueRequest {
            queue: capped.into(),
            max_in_flight: Some(CAP),
            rate_limit: Some(RateLimit {
                limit: RATE,
                period: ms(1_000),
                burst: BURST,
            }),
            ..Default::default()
        };
        let mut queues = queues.clone();
        async move { queues.configure_queue(with_timeout(request, CALL)).await }
    })
    .await;
}

/// Deletes the schedule (its last fires still come, and are drained).
async fn stop_schedule(stable: &str) {
    let schedules = ScheduleServiceClient::new(channel(stable).await.expect("stable server"));
    common::retry_unavailable("delete the schedule", || {
        let mut schedules = schedules.clone();
        let request = DeleteScheduleRequest {
            name: SCHEDULE.into(),
        };
        async move { schedules.delete_schedule(with_timeout(request, CALL)).await }
    })
    .await;
}

async fn chaos(mut backing: Backing, faults: usize) -> TestResult {
    let seed = seed_from("CHAOS_SEED");
    println!("chaos seed {seed} (replay with CHAOS_SEED={seed})");
    let mut rng = Rng(seed);
    let args = backing.serve_args();
    // The stable server lives through everything (its memory is checked); the others
    // are killed and replaced.
    let stable = ServerProcess::start_args(&args);
    let mut doomed = vec![
        ServerProcess::start_args(&args),
        ServerProcess::start_args(&args),
    ];
    let servers = Arc::new(Servers::default());
    servers.0.lock().unwrap().push(stable.addr.clone());
    servers
        .0
        .lock()
        .unwrap()
        .extend(doomed.iter().map(|s| s.addr.clone()));
    let (plain, capped, fires) = (
        Line::new("chaos"),
        Line::new("chaos-capped"),
        Line::new("chaos-fires"),
    );
    set_up(&stable.addr, capped.queue, fires.queue).await;
    let record = Arc::new(Record::default());
    record.producing.store(true, Ordering::SeqCst);

    let mut clients = tokio::task::JoinSet::new();
    clients.spawn(produce(
        record.clone(),
        [plain.clone(), capped.clone()],
        servers.clone(),
        rng.next(),
    ));
    for line in [&plain, &plain, &plain, &capped, &capped, &fires] {
        clients.spawn(work(
            record.clone(),
            line.clone(),
            servers.clone(),
            rng.next(),
        ));
    }
    for _ in 0..3 {
        clients.spawn(contend(record.clone(), servers.clone(), rng.next()));
        clients.spawn(admit(record.clone(), servers.clone(), rng.next()));
    }
    // Every kind of client has made progress: note the stable server's memory.
    let progress = || {
        (
            plain.ledger.confirmed(),
            record.locks_won(),
            record.grants.load(Ordering::SeqCst),
            capped.ledger.deliveries(),
            fires.due.lock().unwrap().len(),
        )
    };
    eventually("first progress", RECOVER, || async {
        let (confirmed, locks, grants, capped, fired) = progress();
        confirmed >= 100 && locks >= 5 && grants >= 5 && capped >= 5 && fired >= 1
    })
    .await;
    let start_rss = rss_kb(stable.child.id());

    let (mut store_faults, mut server_kills) = (0, 0);
    let started = Instant::now();
    for _ in 0..faults {
        match rng.below(2) {
            0 => {
                backing.fault(&mut rng, &stable.addr).await;
                store_faults += 1;
            }
            _ => {
                let at = rng.below(doomed.len() as u64) as usize;
                let mut victim = doomed.swap_remove(at);
                servers
                    .0
                    .lock()
                    .unwrap()
                    .retain(|addr| *addr != victim.addr);
                victim.kill();
                let fresh = ServerProcess::start_args(&args);
                servers.0.lock().unwrap().push(fresh.addr.clone());
                doomed.push(fresh);
                server_kills += 1;
            }
        }
        // The next fault comes once every kind of client got work done since this one.
        let before = progress();
        let more = 20 + rng.below(80) as usize;
        eventually("progress after a fault", RECOVER, || async {
            let now = progress();
            now.0 >= before.0 + more
                && now.1 > before.1
                && now.2 > before.2
                && now.3 > before.3
                && now.4 > before.4
        })
        .await;
    }

    // Calm: stop producing and firing, let the workers drain the queues: every
    // confirmed task delivered, and nothing left in any (every delivery acked in the
    // end).
    record.producing.store(false, Ordering::SeqCst);
    stop_schedule(&stable.addr).await;
    let mut queues = QueueServiceClient::new(channel(&stable.addr).await.expect("stable server"));
    for line in [&plain, &capped, &fires] {
        line.ledger
            .wait_drained(&mut queues, line.queue, Duration::from_secs(60))
            .await;
    }
    record.stop.store(true, Ordering::SeqCst);
    while let Some(client) = clients.join_next().await {
        client?;
    }

    let fencing = record.fencing.lock().unwrap().clone();
    let capped_held = capped.held.lock().unwrap().clone();
    let fired = fires.due.lock().unwrap().clone();
    let end_rss = rss_kb(stable.child.id());
    println!(
        "seed {seed}: {store_faults} {}, {server_kills} server kills in {:?}, {} dropped \
         calls; plain queue: {}; capped queue: {}, at most {} of {CAP} in flight; {} fire \
         times delivered; {} locks won; {} semaphore grants, at most {} of {PERMITS} \
         permits out; stable server RSS {} -> {} MB",
        backing.fault_name(),
        started.elapsed(),
        record.dropped_calls.load(Ordering::SeqCst),
        plain.ledger.summary(),
        capped.ledger.summary(),
        most_at_once(&capped_held),
        fired.len(),
        fencing.len(),
        record.grants.load(Ordering::SeqCst),
        record.most_permits_out.load(Ordering::SeqCst),
        start_rss / 1024,
        end_rss / 1024
    );
    for line in [&plain, &capped] {
        assert_eq!(
            line.ledger.deliveries_after_ack(),
            0,
            "seed {seed}: an acked task of {} came back",
            line.queue
        );
    }
    assert_eq!(
        fires.ledger.deliveries_after_ack(),
        0,
        "seed {seed}: a fire time was enqueued again after its task was acked"
    );
    let missed = missed_fires(&fired);
    assert!(
        missed.is_empty(),
        "seed {seed}: fire times missed: {missed:?}"
    );
    assert_eq!(
        record.most_inside.load(Ordering::SeqCst),
        1,
        "seed {seed}: two lock holders at once"
    );
    assert!(
        fencing.windows(2).all(|pair| pair[0] < pair[1]),
        "seed {seed}: fencing tokens out of order"
    );
    assert!(
        record.most_permits_out.load(Ordering::SeqCst) <= i64::from(PERMITS),
        "seed {seed}: more semaphore permits out than its limit"
    );
    assert!(
        most_at_once(&capped_held) <= CAP as usize,
        "seed {seed}: more tasks of the capped queue in flight than its cap"
    );
    if let Some(overrun) = over_rate(&capped_held) {
        panic!("seed {seed}: the capped queue's rate limit overrun: {overrun}");
    }
    // Back near its start: streams, waiters and batches of the chaos were all freed.
    assert!(
        end_rss < start_rss + 32 * 1024,
        "seed {seed}: stable server grew from {start_rss} kB to {end_rss} kB"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_keeps_every_guarantee_through_server_kills_and_redis_restarts() -> TestResult {
    chaos(
        Backing::OneRedis(Box::new(TestRedis::start_durable().await)),
        12,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_keeps_every_guarantee_through_server_kills_and_cluster_failovers() -> TestResult {
    chaos(Backing::Cluster(TestCluster::start().await), 8).await
}
