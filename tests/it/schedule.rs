//! Schedules over real gRPC against a real Redis (contract: "Schedules"): fires arrive
//! in order with their ids and due times, once per fire time over replicas, restarts
//! and puts; catch-up after an outage; overlap SKIP; pause, resume and trigger;
//! delete keeps the tasks; nothing polls Redis between fires.

use crate::common;

use std::{collections::BTreeSet, time::Duration};

use common::{ms, next_task, unix_ms, TestResult, TestServer, TestStore};
use tonic::{transport::Channel, Streaming};
use turnstile::pb::{
    queue_service_client::QueueServiceClient, schedule,
    schedule_service_client::ScheduleServiceClient, AckRequest, DeleteScheduleRequest,
    GetScheduleRequest, ListSchedulesRequest, OverlapPolicy, PeekRequest, PutScheduleRequest,
    Schedule, ScheduledTask, SubscribeRequest, SubscribeResponse, TaskState,
    TriggerScheduleRequest,
};

type Schedules = ScheduleServiceClient<Channel>;

/// A schedule of `name` into `queue` firing every `every_ms`.
fn every(name: &str, queue: &str, every_ms: i64) -> Schedule {
    Schedule {
        name: name.into(),
        queue: queue.into(),
        spec: Some(schedule::Spec::Every(ms(every_ms).unwrap())),
        task: Some(ScheduledTask {
            payload: name.as_bytes().to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn put(schedules: &mut Schedules, schedule: Schedule) -> Result<Schedule, tonic::Status> {
    Ok(schedules
        .put_schedule(PutScheduleRequest {
            schedule: Some(schedule),
        })
        .await?
        .into_inner()
        .schedule
        .unwrap_or_default())
}

async fn get(schedules: &mut Schedules, name: &str) -> Result<Schedule, tonic::Status> {
    Ok(schedules
        .get_schedule(GetScheduleRequest { name: name.into() })
        .await?
        .into_inner()
        .schedule
        .unwrap_or_default())
}

async fn subscribe(
    queues: &mut QueueServiceClient<Channel>,
    queue: &str,
) -> Result<Streaming<SubscribeResponse>, tonic::Status> {
    Ok(queues
        .subscribe(SubscribeRequest {
            queue: queue.into(),
            max_in_flight: 100,
            visibility: ms(60_000),
            worker_id: String::new(),
        })
        .await?
        .into_inner())
}

/// The fire time a task's id names (`<name>@<RFC 3339>`), Unix ms.
fn fire_time(id: &str) -> i64 {
    let (_, at) = id.rsplit_once('@').expect("a fire id");
    at.parse::<jiff::Timestamp>()
        .expect("RFC 3339")
        .as_millisecond()
}

/// Every task id in `queue` in `state`.
async fn ids_in(
    queues: &mut QueueServiceClient<Channel>,
    queue: &str,
    state: TaskState,
) -> Result<Vec<String>, tonic::Status> {
    Ok(queues
        .peek(PeekRequest {
            queue: queue.into(),
            state: state as i32,
            limit: 1000,
            group: None,
        })
        .await?
        .into_inner()
        .tasks
        .into_iter()
        .map(|t| t.id)
        .collect())
}

on_each_store!(every_second_fires_arrive_in_order_with_their_ids_and_due_times);
async fn every_second_fires_arrive_in_order_with_their_ids_and_due_times(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut schedules = server.schedules().await;
    let mut stream = subscribe(&mut queues, "ticks").await?;
    let stored = put(&mut schedules, every("tick", "ticks", 1000)).await?;
    let next = unix_ms(&stored.next_fire_at);
    assert_eq!(next % 1000, 0, "every 1s fires on whole seconds");
    assert!(stored.last_fire_at.is_none());
    let mut times = Vec::new();
    for _ in 0..3 {
        let task = next_task(&mut stream, common::WAIT)
            .await
            .expect("a fire within 10 s");
        let at = fire_time(&task.id);
        assert_eq!(task.id, format!("tick@{}", rfc3339(at)));
        assert_eq!(unix_ms(&task.due_at), at, "due at the fire time");
        assert_eq!(task.payload, b"tick".to_vec());
        times.push(at);
    }
    assert_eq!(
        times[0], next,
        "the first fire is the announced next_fire_at"
    );
    assert_eq!(times[1] - times[0], 1000);
    assert_eq!(times[2] - times[1], 1000);
    let later = get(&mut schedules, "tick").await?;
    assert!(unix_ms(&later.last_fire_at) >= times[2]);
    assert!(unix_ms(&later.next_fire_at) > unix_ms(&later.last_fire_at));
    let fired = server.metric("turnstile_schedule_fires_total").await;
    assert!(fired >= 3.0, "fires counted: {fired}");
    // Each counted fire's lateness is in the histogram the contract names (read after
    // the count: a fire in between adds to both).
    let late = server
        .metric("turnstile_schedule_lateness_seconds_count")
        .await;
    assert!(late >= fired, "{late} lateness samples for {fired} fires");
    Ok(())
}

/// RFC 3339 in UTC with milliseconds, as the ids spell it.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

on_each_store!(a_six_field_cron_fires_each_second_it_names);
async fn a_six_field_cron_fires_each_second_it_names(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut schedules = server.schedules().await;
    let mut stream = subscribe(&mut queues, "crons").await?;
    let mut cron = every("sixfield", "crons", 1000);
    cron.spec = Some(schedule::Spec::Cron("*/2 * * * * *".into()));
    cron.time_zone = "Asia/Kathmandu".into();
    put(&mut schedules, cron).await?;
    let first = fire_time(
        &next_task(&mut stream, common::WAIT)
            .await
            .expect("a fire")
            .id,
    );
    let second = fire_time(
        &next_task(&mut stream, common::WAIT)
            .await
            .expect("a fire")
            .id,
    );
    assert_eq!(first % 2000, 0, "even seconds only");
    assert_eq!(second - first, 2000);
    Ok(())
}

/// Three replicas fire every fire time; each is enqueued once, and counted once over
/// the replicas (`server` and `others`).
async fn fires_once_over_replicas(
    server: &TestServer,
    others: &[TestServer],
    queue: &str,
) -> TestResult {
    let mut schedules = server.schedules().await;
    let mut queues = server.queues().await;
    put(&mut schedules, every("once", queue, 1000)).await?;
    common::eventually("five fires", Duration::from_secs(20), || async {
        ids_in(&mut server.queues().await, queue, TaskState::Ready)
            .await
            .unwrap_or_default()
            .len()
            >= 5
    })
    .await;
    let ids = ids_in(&mut queues, queue, TaskState::Ready).await?;
    let times: Vec<i64> = ids.iter().map(|id| fire_time(id)).collect();
    let distinct: BTreeSet<i64> = times.iter().copied().collect();
    assert_eq!(distinct.len(), times.len(), "a fire time twice: {ids:?}");
    let (first, last) = (times[0], *times.last().unwrap());
    assert_eq!(
        (last - first) / 1000 + 1,
        times.len() as i64,
        "every fire time from the first to the last, once: {ids:?}"
    );
    // The replica whose fire enqueued a task counts it; the others heard `done`.
    let mut counted = server.metric("turnstile_schedule_fires_total").await;
    for other in others {
        counted += other.metric("turnstile_schedule_fires_total").await;
    }
    let now_ids = ids_in(&mut queues, queue, TaskState::Ready).await?;
    assert!(
        counted >= times.len() as f64 && counted <= now_ids.len() as f64,
        "{counted} fires counted for {} tasks",
        now_ids.len()
    );
    Ok(())
}

on_each_store!(three_replicas_enqueue_each_fire_time_once);
async fn three_replicas_enqueue_each_fire_time_once(redis: TestStore) -> TestResult {
    // One Redis: three servers of our own; a cluster store already runs three.
    let server = TestServer::start(&redis).await;
    let others = match &redis {
        TestStore::Single(_) => vec![
            TestServer::start(&redis).await,
            TestServer::start(&redis).await,
        ],
        TestStore::Cluster { .. } => Vec::new(),
    };
    fires_once_over_replicas(&server, &others, "replicated").await
}

on_each_store!(putting_a_schedule_again_never_enqueues_a_fire_time_twice);
async fn putting_a_schedule_again_never_enqueues_a_fire_time_twice(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut schedules = server.schedules().await;
    let mut stream = subscribe(&mut queues, "again").await?;
    let mut schedule = every("again", "again", 1000);
    // A window wide enough that a forgetful put would bring the acked fires back.
    schedule.catch_up_window = ms(3_600_000);
    put(&mut schedules, schedule.clone()).await?;
    let mut seen = BTreeSet::new();
    for round in 0..3 {
        let task = next_task(&mut stream, common::WAIT).await.expect("a fire");
        assert!(seen.insert(task.id.clone()), "{} delivered twice", task.id);
        // Acked: the task is gone from the queue, so only the fire record can stop a
        // second enqueue of its fire time.
        queues
            .ack(AckRequest {
                queue: "again".into(),
                receipts: vec![task.receipt],
                ..Default::default()
            })
            .await?;
        schedule.task.as_mut().unwrap().payload = format!("round {round}").into_bytes();
        put(&mut schedules, schedule.clone()).await?;
    }
    // A replica that starts now knows nothing of those fires but what Redis recorded.
    let fresh = TestServer::start(&redis).await;
    put(&mut fresh.schedules().await, schedule).await?;
    for _ in 0..2 {
        let next = next_task(&mut stream, common::WAIT).await.expect("a fire");
        assert!(!seen.contains(&next.id), "{} enqueued again", next.id);
        assert!(fire_time(&next.id) > seen.iter().map(|id| fire_time(id)).max().unwrap());
        seen.insert(next.id);
    }
    Ok(())
}

on_each_store!(overlap_skip_fires_only_when_the_last_task_is_gone);
async fn overlap_skip_fires_only_when_the_last_task_is_gone(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut schedules = server.schedules().await;
    let mut schedule = every("skipper", "overlaps", 1000);
    schedule.overlap = OverlapPolicy::Skip as i32;
    put(&mut schedules, schedule).await?;
    common::eventually("the first fire", common::WAIT, || async {
        !ids_in(&mut server.queues().await, "overlaps", TaskState::Ready)
            .await
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    // Two fire times pass while the first task is READY: both skipped, and counted.
    server
        .wait_metric("turnstile_schedule_skipped_total{reason=\"overlap\"}", 2.0)
        .await;
    let ready = ids_in(&mut queues, "overlaps", TaskState::Ready).await?;
    assert_eq!(
        ready.len(),
        1,
        "only the first fire while it waits: {ready:?}"
    );
    // Taken and acked: the next fire time enqueues again.
    let mut stream = subscribe(&mut queues, "overlaps").await?;
    let first = next_task(&mut stream, common::WAIT)
        .await
        .expect("the first");
    assert_eq!(first.id, ready[0]);
    queues
        .ack(AckRequest {
            queue: "overlaps".into(),
            receipts: vec![first.receipt],
            ..Default::default()
        })
        .await?;
    let next = next_task(&mut stream, common::WAIT)
        .await
        .expect("a fire after the ack");
    assert!(fire_time(&next.id) >= fire_time(&first.id) + 3000);
    Ok(())
}

on_each_store!(a_paused_schedule_fires_nothing_and_resumes_without_the_paused_fires);
async fn a_paused_schedule_fires_nothing_and_resumes_without_the_paused_fires(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut schedules = server.schedules().await;
    let mut stream = subscribe(&mut queues, "pauses").await?;
    let mut schedule = every("pausing", "pauses", 1000);
    schedule.paused = true;
    schedule.catch_up_window = ms(3_600_000);
    let stored = put(&mut schedules, schedule.clone()).await?;
    assert!(stored.paused);
    assert!(stored.next_fire_at.is_none(), "no next fire while paused");
    // Two fire times pass: nothing (the quiet window is what is checked).
    assert!(next_task(&mut stream, Duration::from_millis(2200))
        .await
        .is_none());
    // A trigger enqueues now, paused or not, with an id of its own instant.
    let triggered = schedules
        .trigger_schedule(TriggerScheduleRequest {
            name: "pausing".into(),
        })
        .await?
        .into_inner()
        .id;
    let task = next_task(&mut stream, common::WAIT)
        .await
        .expect("the trigger");
    assert_eq!(task.id, triggered);
    assert!(triggered.starts_with("pausing@"));
    let resumed_at = common::redis_now_ms(&mut redis.conn().await).await;
    schedule.paused = false;
    put(&mut schedules, schedule).await?;
    let fired = next_task(&mut stream, common::WAIT)
        .await
        .expect("a fire after resume");
    assert!(
        fire_time(&fired.id) > resumed_at,
        "a fire time of the paused time came back: {} (resumed at {resumed_at})",
        fired.id
    );
    Ok(())
}

on_each_store!(delete_stops_the_fires_and_keeps_the_tasks);
async fn delete_stops_the_fires_and_keeps_the_tasks(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut schedules = server.schedules().await;
    let mut stream = subscribe(&mut queues, "deletes").await?;
    put(&mut schedules, every("doomed", "deletes", 1000)).await?;
    let task = next_task(&mut stream, common::WAIT).await.expect("a fire");
    let deleted = schedules
        .delete_schedule(DeleteScheduleRequest {
            name: "doomed".into(),
        })
        .await?
        .into_inner()
        .deleted;
    assert!(deleted);
    let status = get(&mut schedules, "doomed").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    let again = schedules
        .delete_schedule(DeleteScheduleRequest {
            name: "doomed".into(),
        })
        .await?
        .into_inner()
        .deleted;
    assert!(!again);
    // A fire already under way may still land; after it, nothing.
    let _ = next_task(&mut stream, Duration::from_millis(1200)).await;
    assert!(next_task(&mut stream, Duration::from_millis(2200))
        .await
        .is_none());
    let leased = ids_in(&mut queues, "deletes", TaskState::InFlight).await?;
    assert!(leased.contains(&task.id), "the enqueued task stays");
    Ok(())
}

on_each_store!(listing_pages_through_the_tenant_s_schedules_by_name);
async fn listing_pages_through_the_tenant_s_schedules_by_name(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut schedules = server.schedules().await;
    for name in ["c", "a", "e", "b", "d"] {
        let mut s = every(name, "listed", 3_600_000);
        s.paused = name == "b";
        put(&mut schedules, s).await?;
    }
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page = schedules
            .list_schedules(ListSchedulesRequest {
                page_size: 2,
                page_token: token,
            })
            .await?
            .into_inner();
        assert!(page.schedules.len() <= 2);
        for s in &page.schedules {
            assert_eq!(s.next_fire_at.is_none(), s.name == "b", "{s:?}");
        }
        names.extend(page.schedules.into_iter().map(|s| s.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    Ok(())
}

on_each_store!(a_stored_schedule_reads_back_as_put);
async fn a_stored_schedule_reads_back_as_put(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut schedules = server.schedules().await;
    let mut cron = every("nightly", "reports", 1000);
    cron.spec = Some(schedule::Spec::Cron("0 3 * * MON-FRI".into()));
    cron.time_zone = "Asia/Kolkata".into();
    cron.overlap = OverlapPolicy::Skip as i32;
    cron.task = Some(ScheduledTask {
        payload: vec![0, 255, 1],
        max_attempts: 3,
        priority: 7,
        group: "acme".into(),
    });
    cron.catch_up_window = ms(90_000);
    let stored = put(&mut schedules, cron.clone()).await?;
    let read = get(&mut schedules, "nightly").await?;
    assert_eq!(read, stored);
    let mut expected = cron;
    expected.next_fire_at = read.next_fire_at;
    assert_eq!(read, expected);
    // 03:00 in Kolkata (UTC+05:30) is 21:30 UTC the day before.
    let next = unix_ms(&read.next_fire_at);
    assert_eq!(next.rem_euclid(86_400_000), 21 * 3_600_000 + 30 * 60_000);
    Ok(())
}

on_each_store!(nothing_reaches_redis_between_fires, own cluster);
async fn nothing_reaches_redis_between_fires(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut schedules = server.schedules().await;
    for n in 0..50 {
        put(
            &mut schedules,
            every(&format!("hourly-{n}"), "idle", 3_600_000),
        )
        .await?;
    }
    let mut cron = every("yearly", "idle", 1000);
    cron.spec = Some(schedule::Spec::Cron("@yearly".into()));
    put(&mut schedules, cron).await?;
    redis.wait_quiet("51 schedules between fires").await;
    Ok(())
}

/// Fires once each over replicas after every server was down: the missed fire times
/// within the catch-up window are enqueued, oldest first; older ones are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_times_missed_while_every_server_was_down_are_caught_up() -> TestResult {
    let redis = TestStore::one_redis().await;
    let server = TestServer::start(&redis).await;
    let mut schedules = server.schedules().await;
    let mut schedule = every("outage", "outages", 1000);
    schedule.catch_up_window = ms(2500);
    put(&mut schedules, schedule).await?;
    common::eventually("a first fire", common::WAIT, || async {
        !ids_in(&mut server.queues().await, "outages", TaskState::Ready)
            .await
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    server.shutdown().await?;
    let down_at = common::redis_now_ms(&mut redis.conn().await).await;
    // The outage itself: five fire times pass with no server.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let up_at = common::redis_now_ms(&mut redis.conn().await).await;
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let missed = |ids: &[String]| -> Vec<i64> {
        ids.iter()
            .map(|id| fire_time(id))
            .filter(|at| *at > down_at && *at <= up_at)
            .collect()
    };
    common::eventually("the catch-up", common::WAIT, || async {
        let ids = ids_in(&mut server.queues().await, "outages", TaskState::Ready)
            .await
            .unwrap_or_default();
        missed(&ids).len() >= 2
    })
    .await;
    let ids = ids_in(&mut queues, "outages", TaskState::Ready).await?;
    let caught_up = missed(&ids);
    let times: Vec<i64> = ids.iter().map(|id| fire_time(id)).collect();
    let distinct: BTreeSet<i64> = times.iter().copied().collect();
    assert_eq!(distinct.len(), times.len(), "{ids:?}");
    for at in &caught_up {
        assert!(
            *at >= up_at - 2500 - 1000,
            "{at} older than the window ({up_at})"
        );
    }
    let too_old = server
        .metric("turnstile_schedule_skipped_total{reason=\"too_old\"}")
        .await;
    assert!(
        too_old >= 1.0,
        "older fire times skipped and counted: {too_old}"
    );
    Ok(())
}

on_each_store!(a_replica_killed_as_it_fires_loses_and_repeats_no_fire_time);
async fn a_replica_killed_as_it_fires_loses_and_repeats_no_fire_time(
    redis: TestStore,
) -> TestResult {
    let mut doomed = common::ServerProcess::start_on(&redis);
    let survivor = common::ServerProcess::start_on(&redis);
    let channel = |addr: &str| {
        Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy()
    };
    let mut schedules = ScheduleServiceClient::new(channel(&doomed.addr));
    let mut queues = QueueServiceClient::new(channel(&survivor.addr));
    put(&mut schedules, every("crash", "crashes", 1000)).await?;
    let mut stream = subscribe(&mut queues, "crashes").await?;
    let first = fire_time(
        &next_task(&mut stream, common::WAIT)
            .await
            .expect("a fire")
            .id,
    );
    // SIGKILL at the instant of the next fire time, while both replicas fire it.
    let at = first + 1000;
    let now = common::redis_now_ms(&mut redis.conn().await).await;
    tokio::time::sleep(Duration::from_millis((at - now).max(0) as u64)).await;
    doomed.kill();
    // A replica that starts after the crash knows only what Redis recorded.
    let _fresh = common::ServerProcess::start_on(&redis);
    let mut times = vec![first];
    while times.len() < 6 {
        let task = next_task(&mut stream, common::WAIT)
            .await
            .expect("fires go on after the crash");
        times.push(fire_time(&task.id));
    }
    for pair in times.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1000,
            "a fire time lost or repeated: {times:?}"
        );
    }
    Ok(())
}

/// Redis down for three fire times and back with its data (a restart, as a failover
/// that loses nothing would look): the fire times of the outage are caught up, each
/// once, with none lost or repeated around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_times_missed_while_redis_was_down_are_each_enqueued_once() -> TestResult {
    let mut redis = common::TestRedis::start_durable().await;
    let server = TestServer::start(&redis).await;
    let mut schedule = every("outage", "redis-outage", 1000);
    schedule.catch_up_window = ms(30_000);
    put(&mut server.schedules().await, schedule).await?;
    common::eventually("a first fire", common::WAIT, || async {
        !ids_in(&mut server.queues().await, "redis-outage", TaskState::Ready)
            .await
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    redis.kill().await;
    // The outage itself: three fire times pass with Redis down.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    redis.restart().await;
    let up_at = common::redis_now_ms(&mut redis.conn().await).await;
    common::eventually("the outage caught up", common::WAIT, || async {
        let ids = ids_in(&mut server.queues().await, "redis-outage", TaskState::Ready)
            .await
            .unwrap_or_default();
        ids.last().is_some_and(|last| fire_time(last) >= up_at)
    })
    .await;
    let ids = ids_in(&mut server.queues().await, "redis-outage", TaskState::Ready).await?;
    let times: Vec<i64> = ids.iter().map(|id| fire_time(id)).collect();
    for pair in times.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1000,
            "a fire time lost or repeated: {ids:?}"
        );
    }
    Ok(())
}
