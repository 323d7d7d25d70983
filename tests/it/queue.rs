//! QueueService over real gRPC against a real redis-server: one test per guarantee of
//! the contract's unary RPCs (docs/api.md, "turnstile.v1.QueueService").

use crate::common;

use std::time::{Duration, Instant};

use common::{ms, unix_ms, wait_redis_time, TestRedis, TestResult, TestServer, TestStore};
use redis::AsyncCommands;
use tonic::{transport::Channel, Code};
use turnstile::pb::{
    queue_service_client::QueueServiceClient, task_spec::Schedule, AckRequest, CancelRequest,
    DuplicatePolicy, EnqueueRequest, EnqueueResult, ExtendLeaseRequest, LeaseRequest, NackRequest,
    PeekRequest, RedriveRequest, StatsRequest, StatsResponse, Task, TaskSpec, TaskState,
};

type Queues = QueueServiceClient<Channel>;

fn spec(id: &str, payload: &str) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        payload: payload.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

/// `task` with the REPLACE duplicate policy.
fn replacing(task: TaskSpec) -> TaskSpec {
    TaskSpec {
        on_duplicate: DuplicatePolicy::Replace as i32,
        ..task
    }
}

fn delayed(id: &str, delay_ms: i64) -> TaskSpec {
    TaskSpec {
        schedule: Some(Schedule::Delay(ms(delay_ms).unwrap())),
        ..spec(id, id)
    }
}

async fn enqueue(
    queues: &mut Queues,
    tasks: Vec<TaskSpec>,
) -> Result<Vec<EnqueueResult>, tonic::Status> {
    Ok(queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks,
            ..Default::default()
        })
        .await?
        .into_inner()
        .results)
}

fn lease_request(max_tasks: u32, visibility_ms: i64) -> LeaseRequest {
    LeaseRequest {
        queue: "q".into(),
        max_tasks,
        visibility: ms(visibility_ms),
        wait: None,
        auto_ack: false,
    }
}

async fn lease(
    queues: &mut Queues,
    max_tasks: u32,
    visibility_ms: i64,
) -> Result<Vec<Task>, tonic::Status> {
    Ok(queues
        .lease(lease_request(max_tasks, visibility_ms))
        .await?
        .into_inner()
        .tasks)
}

async fn ack(queues: &mut Queues, receipts: &[&str]) -> Result<Vec<bool>, tonic::Status> {
    let receipts = receipts.iter().map(|r| r.to_string()).collect();
    Ok(queues
        .ack(AckRequest {
            queue: "q".into(),
            receipts,
            ..Default::default()
        })
        .await?
        .into_inner()
        .acked)
}

async fn stats(queues: &mut Queues) -> Result<StatsResponse, tonic::Status> {
    Ok(queues
        .stats(StatsRequest { queue: "q".into() })
        .await?
        .into_inner())
}

async fn peek(
    queues: &mut Queues,
    state: TaskState,
    limit: u32,
) -> Result<Vec<Task>, tonic::Status> {
    Ok(queues
        .peek(PeekRequest {
            queue: "q".into(),
            state: state as i32,
            limit,
            group: None,
        })
        .await?
        .into_inner()
        .tasks)
}

fn ids(tasks: &[Task]) -> Vec<&str> {
    tasks.iter().map(|t| t.id.as_str()).collect()
}

on_each_store!(an_enqueued_task_is_leased_with_a_receipt_and_gone_after_ack);
async fn an_enqueued_task_is_leased_with_a_receipt_and_gone_after_ack(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let results = enqueue(
        &mut queues,
        vec![spec("t1", "hello"), spec("", "anonymous")],
    )
    .await?;
    assert!(results[0].created && !results[0].replaced && results[0].id == "t1");
    assert!(
        results[1].created && results[1].id.len() >= 16,
        "server-made id {:?}",
        results[1].id
    );
    let tasks = lease(&mut queues, 1, 30_000).await?;
    assert_eq!(ids(&tasks), ["t1"]);
    let task = &tasks[0];
    assert_eq!(&task.payload[..], b"hello");
    assert_eq!(task.state, TaskState::InFlight as i32);
    assert_eq!((task.attempt, task.max_attempts), (1, 25));
    assert!(!task.receipt.is_empty());
    assert!(unix_ms(&task.lease_expires_at) > turnstile::time::now_ms() + 25_000);
    assert_eq!(ack(&mut queues, &[&task.receipt]).await?, [true]);
    assert_eq!(
        ack(&mut queues, &[&task.receipt]).await?,
        [false],
        "a second ack is stale"
    );
    let depth = stats(&mut queues).await?;
    assert_eq!(
        (depth.ready, depth.delayed, depth.in_flight, depth.dead),
        (1, 0, 0, 0)
    );
    Ok(())
}

on_each_store!(a_delayed_task_is_not_leased_before_it_is_due);
async fn a_delayed_task_is_not_leased_before_it_is_due(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let due = enqueue(&mut queues, vec![delayed("later", 400)]).await?[0].due_at;
    assert!(lease(&mut queues, 10, 30_000).await?.is_empty());
    let depth = stats(&mut queues).await?;
    assert_eq!((depth.ready, depth.delayed), (0, 1));
    assert_eq!(depth.next_due_at, due);
    let waiting = peek(&mut queues, TaskState::Delayed, 10).await?;
    assert_eq!(ids(&waiting), ["later"]);
    assert_eq!(waiting[0].state, TaskState::Delayed as i32);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(ids(&lease(&mut queues, 10, 30_000).await?), ["later"]);
    Ok(())
}

on_each_store!(earliest_due_leaves_first_and_equal_due_times_leave_in_enqueue_order);
async fn earliest_due_leaves_first_and_equal_due_times_leave_in_enqueue_order(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let at = prost_types::Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    };
    let same = |id: String| TaskSpec {
        schedule: Some(Schedule::DueAt(at)),
        ..spec(&id, "x")
    };
    let batch: Vec<TaskSpec> = (0..30).map(|n| same(format!("a{n:02}"))).collect();
    enqueue(&mut queues, batch).await?;
    for n in 30..40 {
        enqueue(&mut queues, vec![same(format!("a{n:02}"))]).await?;
    }
    // Due now, but a past due_at is READY at once and ordered by that past time.
    enqueue(&mut queues, vec![spec("now", "x")]).await?;
    let older = prost_types::Timestamp {
        seconds: 1_600_000_000,
        nanos: 0,
    };
    enqueue(
        &mut queues,
        vec![TaskSpec {
            schedule: Some(Schedule::DueAt(older)),
            ..spec("oldest", "x")
        }],
    )
    .await?;
    let tasks = lease(&mut queues, 100, 30_000).await?;
    let mut want = vec!["oldest".to_owned()];
    want.extend((0..40).map(|n| format!("a{n:02}")));
    want.push("now".into());
    assert_eq!(ids(&tasks), want);
    Ok(())
}

on_each_store!(a_duplicate_id_is_kept_by_default_and_replaced_only_when_not_in_flight);
async fn a_duplicate_id_is_kept_by_default_and_replaced_only_when_not_in_flight(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("d", "first")]).await?;
    let kept = &enqueue(&mut queues, vec![spec("d", "second")]).await?[0];
    assert!(!kept.created && !kept.replaced);
    let replace = |payload: &str| replacing(spec("d", payload));
    let replaced = &enqueue(&mut queues, vec![replace("third")]).await?[0];
    assert!(!replaced.created && replaced.replaced);
    let tasks = lease(&mut queues, 10, 30_000).await?;
    assert_eq!(tasks.len(), 1);
    assert_eq!(&tasks[0].payload[..], b"third");
    // In flight: left alone by both policies.
    let in_flight = &enqueue(&mut queues, vec![replace("fourth")]).await?[0];
    assert!(!in_flight.created && !in_flight.replaced);
    assert_eq!(ack(&mut queues, &[&tasks[0].receipt]).await?, [true]);
    Ok(())
}

on_each_store!(one_batch_is_decided_in_order_as_if_enqueued_one_by_one);
async fn one_batch_is_decided_in_order_as_if_enqueued_one_by_one(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("old", "stored")]).await?;
    let replace = |id: &str, payload: &str| replacing(spec(id, payload));
    let results = enqueue(
        &mut queues,
        vec![
            spec("a", "a1"),
            spec("", "anonymous"),
            spec("b", "b1"),
            replace("a", "a2"),
            spec("b", "b2"),
            replace("old", "fresh"),
            replace("old", "fresher"),
        ],
    )
    .await?;
    let flags: Vec<(bool, bool)> = results.iter().map(|r| (r.created, r.replaced)).collect();
    assert_eq!(
        flags,
        [
            (true, false),
            (true, false),
            (true, false),
            (false, true),
            (false, false),
            (false, true),
            (false, true),
        ]
    );
    // One task per id, the last payload each policy let in, and a replace leaves
    // after the tasks enqueued before it (all are due now, so enqueue order rules).
    let tasks = lease(&mut queues, 10, 30_000).await?;
    let got: Vec<(&str, &[u8])> = tasks
        .iter()
        .map(|t| (t.id.as_str(), &t.payload[..]))
        .collect();
    assert_eq!(
        got,
        [
            (results[1].id.as_str(), &b"anonymous"[..]),
            ("b", &b"b1"[..]),
            ("a", &b"a2"[..]),
            ("old", &b"fresher"[..])
        ]
    );
    assert_eq!(tasks[2].attempt, 1);
    // The same receipt twice in one Ack counts once.
    let receipt = tasks[0].receipt.as_str();
    assert_eq!(
        ack(&mut queues, &[receipt, receipt, "nonsense"]).await?,
        [true, false, false]
    );
    assert_eq!(stats(&mut queues).await?.in_flight, 3);
    Ok(())
}

on_each_store!(concurrent_acks_each_get_their_own_answers);
async fn concurrent_acks_each_get_their_own_answers(redis: TestStore) -> TestResult {
    // Concurrent Acks on one queue share script runs; each call must still get the
    // flags of its own receipts, in its own order.
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let batch: Vec<TaskSpec> = (0..300).map(|n| spec(&format!("c{n}"), "x")).collect();
    enqueue(&mut queues, batch).await?;
    let tasks = lease(&mut queues, 300, 30_000).await?;
    assert_eq!(tasks.len(), 300);
    let mut calls = tokio::task::JoinSet::new();
    for (n, task) in tasks.iter().enumerate() {
        let mut queues = queues.clone();
        let receipt = task.receipt.clone();
        calls.spawn(async move {
            // Every third call also sends a receipt that is not live, first or last.
            let (receipts, want) = match n % 3 {
                0 => (vec![receipt], vec![true]),
                1 => (vec!["stale:c0".to_owned(), receipt], vec![false, true]),
                _ => (vec![receipt.clone(), receipt], vec![true, false]),
            };
            let got = queues
                .ack(AckRequest {
                    queue: "q".into(),
                    receipts,
                    ..Default::default()
                })
                .await?
                .into_inner()
                .acked;
            Ok::<_, tonic::Status>((got, want))
        });
    }
    while let Some(call) = calls.join_next().await {
        let (got, want) = call??;
        assert_eq!(got, want);
    }
    let depth = stats(&mut queues).await?;
    assert_eq!((depth.ready, depth.in_flight), (0, 0));
    Ok(())
}

on_each_store!(a_dedupe_window_refuses_a_late_duplicate_after_ack_cancel_or_auto_ack);
async fn a_dedupe_window_refuses_a_late_duplicate_after_ack_cancel_or_auto_ack(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let windowed = |id: &str| TaskSpec {
        dedupe_window: ms(500),
        ..spec(id, "x")
    };
    enqueue(&mut queues, vec![windowed("acked"), windowed("cancelled")]).await?;
    let tasks = lease(&mut queues, 1, 30_000).await?;
    assert_eq!(ack(&mut queues, &[&tasks[0].receipt]).await?, [true]);
    queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: vec!["cancelled".into()],
            ..Default::default()
        })
        .await?;
    enqueue(&mut queues, vec![windowed("popped")]).await?;
    let popped = queues
        .lease(LeaseRequest {
            auto_ack: true,
            ..lease_request(1, 30_000)
        })
        .await?
        .into_inner()
        .tasks;
    assert_eq!(ids(&popped), ["popped"]);
    for id in ["acked", "cancelled", "popped"] {
        let late = &enqueue(&mut queues, vec![windowed(id)]).await?[0];
        assert!(
            !late.created && !late.replaced,
            "{id} accepted inside its window"
        );
        let replace = replacing(windowed(id));
        let late = &enqueue(&mut queues, vec![replace]).await?[0];
        assert!(
            !late.created && !late.replaced,
            "{id} replaced inside its window"
        );
    }
    tokio::time::sleep(Duration::from_millis(550)).await;
    assert!(enqueue(&mut queues, vec![windowed("acked")]).await?[0].created);
    Ok(())
}

on_each_store!(an_expired_lease_redelivers_with_a_new_receipt_and_the_old_one_is_stale);
async fn an_expired_lease_redelivers_with_a_new_receipt_and_the_old_one_is_stale(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let due = enqueue(&mut queues, vec![spec("v", "x")]).await?[0].due_at;
    let first = lease(&mut queues, 1, 1_000).await?.remove(0);
    assert!(
        lease(&mut queues, 1, 200).await?.is_empty(),
        "leased twice at once"
    );
    // The worker died: nothing acks; the lease runs out and the task comes back.
    wait_redis_time(&redis.conn().await, unix_ms(&first.lease_expires_at) + 1).await;
    let second = lease(&mut queues, 1, 30_000).await?.remove(0);
    assert_eq!(second.id, "v");
    assert_eq!(second.attempt, 2);
    assert_ne!(second.receipt, first.receipt);
    assert_eq!(second.due_at, due, "given back at its original due time");
    assert_eq!(ack(&mut queues, &[&first.receipt]).await?, [false]);
    let nack = queues
        .nack(NackRequest {
            queue: "q".into(),
            receipt: first.receipt.clone(),
            delay: None,
            ..Default::default()
        })
        .await?;
    assert!(!nack.get_ref().requeued && !nack.get_ref().dead);
    let extend = ExtendLeaseRequest {
        queue: "q".into(),
        receipt: first.receipt.clone(),
        visibility: ms(1_000),
        ..Default::default()
    };
    assert!(!queues.extend_lease(extend).await?.into_inner().extended);
    assert_eq!(ack(&mut queues, &[&second.receipt]).await?, [true]);
    Ok(())
}

on_each_store!(extend_lease_keeps_a_long_task_leased);
async fn extend_lease_keeps_a_long_task_leased(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("long", "x")]).await?;
    let task = lease(&mut queues, 1, 1_000).await?.remove(0);
    let extend = ExtendLeaseRequest {
        queue: "q".into(),
        receipt: task.receipt.clone(),
        visibility: ms(5_000),
        ..Default::default()
    };
    let extended = queues.extend_lease(extend).await?.into_inner();
    assert!(extended.extended);
    assert!(unix_ms(&extended.lease_expires_at) > turnstile::time::now_ms() + 4_000);
    // Past the first lease's end, by Redis' clock: the extended lease still holds it.
    wait_redis_time(&redis.conn().await, unix_ms(&task.lease_expires_at) + 1).await;
    assert!(lease(&mut queues, 1, 200).await?.is_empty());
    assert_eq!(ack(&mut queues, &[&task.receipt]).await?, [true]);
    Ok(())
}

on_each_store!(nack_requeues_until_max_attempts_then_the_task_is_dead_until_redriven);
async fn nack_requeues_until_max_attempts_then_the_task_is_dead_until_redriven(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(
        &mut queues,
        vec![TaskSpec {
            max_attempts: 2,
            ..spec("flaky", "x")
        }],
    )
    .await?;
    let first = lease(&mut queues, 1, 30_000).await?.remove(0);
    let nack = |receipt: String, delay| NackRequest {
        queue: "q".into(),
        receipt,
        delay: ms(delay),
        ..Default::default()
    };
    let requeued = queues
        .nack(nack(first.receipt.clone(), 200))
        .await?
        .into_inner();
    assert!(requeued.requeued && !requeued.dead);
    assert!(
        lease(&mut queues, 1, 30_000).await?.is_empty(),
        "due again only after the nack delay"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let second = lease(&mut queues, 1, 30_000).await?.remove(0);
    assert_eq!(second.attempt, 2);
    let dead = queues
        .nack(nack(second.receipt.clone(), 0))
        .await?
        .into_inner();
    assert!(dead.dead && !dead.requeued);
    assert!(lease(&mut queues, 1, 30_000).await?.is_empty());
    let depth = stats(&mut queues).await?;
    assert_eq!((depth.ready, depth.in_flight, depth.dead), (0, 0, 1));
    let corpses = peek(&mut queues, TaskState::Dead, 10).await?;
    assert_eq!(ids(&corpses), ["flaky"]);
    assert_eq!(corpses[0].state, TaskState::Dead as i32);
    let redriven = queues
        .redrive(RedriveRequest {
            queue: "q".into(),
            ids: vec![],
        })
        .await?
        .into_inner();
    assert_eq!(redriven.redriven, 1);
    let again = lease(&mut queues, 1, 30_000).await?.remove(0);
    assert_eq!((again.id.as_str(), again.attempt), ("flaky", 1));
    Ok(())
}

on_each_store!(redrive_by_ids_and_of_hundreds_of_dead_tasks_in_bounded_runs, own cluster);
async fn redrive_by_ids_and_of_hundreds_of_dead_tasks_in_bounded_runs(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let tasks: Vec<TaskSpec> = (0..450)
        .map(|n| TaskSpec {
            max_attempts: 1,
            ..spec(&format!("d{n:03}"), "x")
        })
        .collect();
    enqueue(&mut queues, tasks).await?;
    // One delivery each, nacked on its only attempt: all DEAD.
    for task in lease(&mut queues, 1000, 30_000).await? {
        let nacked = queues
            .nack(NackRequest {
                queue: "q".into(),
                receipt: task.receipt,
                delay: None,
                ..Default::default()
            })
            .await?
            .into_inner();
        assert!(nacked.dead);
    }
    assert_eq!(stats(&mut queues).await?.dead, 450);

    // By ids: only those named (an unknown or live id is skipped).
    let redriven = queues
        .redrive(RedriveRequest {
            queue: "q".into(),
            ids: vec!["d000".into(), "d001".into(), "nope".into()],
        })
        .await?
        .into_inner()
        .redriven;
    assert_eq!(redriven, 2);
    let ready = peek(&mut queues, TaskState::Ready, 10).await?;
    assert_eq!(ids(&ready), ["d000", "d001"]);
    assert_eq!(ready[0].attempt, 0, "attempts reset");

    // A dead-set member with no task behind it (a hand-edited or half-restored key)
    // is dropped, not looked at again by every run: Redrive of all still ends.
    let _: i64 = redis
        .conn()
        .await
        .zadd(redis.key("queue:{q}:dead"), "000000000999999:ghost", 0)
        .await?;
    // All of them: several script runs, none walking the whole dead set.
    let runs = redis.command_calls("evalsha").await;
    let redriven = queues
        .redrive(RedriveRequest {
            queue: "q".into(),
            ids: vec![],
        })
        .await?
        .into_inner()
        .redriven;
    assert_eq!(redriven, 448);
    assert!(
        redis.command_calls("evalsha").await - runs >= 3,
        "one unbounded run"
    );
    let after = stats(&mut queues).await?;
    assert_eq!(
        (after.ready, after.dead),
        (450, 0),
        "the stray member is gone too"
    );
    Ok(())
}

on_each_store!(more_leases_running_out_at_once_than_one_script_run_returns_all_come_back);
async fn more_leases_running_out_at_once_than_one_script_run_returns_all_come_back(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    // 2,500 tasks due an hour ago, a millisecond apart: more than one script run
    // returns (1,000), so each script meets a backlog it must work through first.
    let past = turnstile::time::now_ms() - 3_600_000;
    for batch in 0..3 {
        let tasks = (batch * 1000..(batch * 1000 + 1000).min(2500))
            .map(|n| TaskSpec {
                schedule: Some(Schedule::DueAt(turnstile::timestamp_from_ms(past + n))),
                ..spec(&format!("t{n:04}"), "x")
            })
            .collect();
        enqueue(&mut queues, tasks).await?;
    }
    let mut last_end = 0;
    for _ in 0..3 {
        // Long enough that no lease runs out before all three calls and the count.
        for task in lease(&mut queues, 1000, 2_000).await? {
            last_end = last_end.max(unix_ms(&task.lease_expires_at));
        }
    }
    assert_eq!(stats(&mut queues).await?.in_flight, 2500);
    // Every lease ran out, by Redis' clock.
    wait_redis_time(&redis.conn().await, last_end + 1).await;
    // Nothing has returned them yet; the first look sees them all back.
    let depth = stats(&mut queues).await?;
    assert_eq!((depth.ready, depth.in_flight), (2500, 0));
    let ready = peek(&mut queues, TaskState::Ready, 1000).await?;
    assert_eq!(ready.len(), 1000);
    assert!(ready
        .iter()
        .enumerate()
        .all(|(n, task)| task.id == format!("t{n:04}") && task.attempt == 1));
    Ok(())
}

on_each_store!(an_expired_lease_on_the_last_attempt_makes_the_task_dead);
async fn an_expired_lease_on_the_last_attempt_makes_the_task_dead(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(
        &mut queues,
        vec![TaskSpec {
            max_attempts: 1,
            ..spec("once", "x")
        }],
    )
    .await?;
    let leased = lease(&mut queues, 1, 100).await?.remove(0);
    wait_redis_time(&redis.conn().await, unix_ms(&leased.lease_expires_at) + 1).await;
    assert_eq!(stats(&mut queues).await?.dead, 1);
    // A DEAD task comes back to life with REPLACE, its attempts reset.
    let replace = replacing(spec("once", "fixed"));
    assert!(enqueue(&mut queues, vec![replace]).await?[0].replaced);
    let task = lease(&mut queues, 1, 30_000).await?.remove(0);
    assert_eq!((&task.payload[..], task.attempt), (&b"fixed"[..], 1));
    Ok(())
}

on_each_store!(a_lease_whose_caller_left_gives_its_tasks_back_at_their_original_due_time, own cluster);
async fn a_lease_whose_caller_left_gives_its_tasks_back_at_their_original_due_time(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let now = turnstile::time::now_ms();
    let due = |id: &str, ago_ms: i64| TaskSpec {
        schedule: Some(Schedule::DueAt(turnstile::timestamp_from_ms(now - ago_ms))),
        ..spec(id, id)
    };
    enqueue(
        &mut queues,
        vec![due("first", 10_000), due("second", 5_000)],
    )
    .await?;
    // Redis holds the Lease script past the caller's deadline: it takes "first" for a
    // caller who is gone.
    redis.pause_writes(Duration::from_millis(600)).await;
    let gone = queues
        .lease(common::with_timeout(
            lease_request(1, 60_000),
            Duration::from_millis(200),
        ))
        .await;
    assert!(gone.is_err(), "answered while Redis was paused: {gone:?}");
    // Both READY again, with "first" back in its place (not at the back, as a Nack
    // with delay 0 would put it) and the delivery counted.
    common::eventually("both READY again", common::WAIT, || {
        let mut queues = queues.clone();
        async move {
            peek(&mut queues, TaskState::Ready, 10)
                .await
                .is_ok_and(|ready| ready.len() == 2)
        }
    })
    .await;
    let ready = peek(&mut queues, TaskState::Ready, 10).await?;
    assert_eq!(ids(&ready), ["first", "second"]);
    assert_eq!(unix_ms(&ready[0].due_at), now - 10_000);
    assert_eq!(ready[0].attempt, 1);
    Ok(())
}

on_each_store!(cancel_removes_waiting_tasks_and_leaves_in_flight_ones_alone);
async fn cancel_removes_waiting_tasks_and_leaves_in_flight_ones_alone(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(
        &mut queues,
        vec![spec("a", "x"), spec("b", "x"), delayed("c", 60_000)],
    )
    .await?;
    let leased = lease(&mut queues, 1, 30_000).await?.remove(0);
    // "b" twice: an id is removed (and reported) once.
    let ids_to_cancel = vec![
        "a".into(),
        "b".into(),
        "c".into(),
        "b".into(),
        "missing".into(),
    ];
    let cancelled = queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: ids_to_cancel,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(cancelled.cancelled, ["b", "c"]);
    assert_eq!(ack(&mut queues, &[&leased.receipt]).await?, [true]);
    let depth = stats(&mut queues).await?;
    assert_eq!(
        (depth.ready, depth.delayed, depth.in_flight, depth.dead),
        (0, 0, 0, 0)
    );
    let status = queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: vec![],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("ids:"));
    Ok(())
}

on_each_store!(stats_and_peek_agree_with_what_lease_then_returns);
async fn stats_and_peek_agree_with_what_lease_then_returns(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let mut batch: Vec<TaskSpec> = (0..5).map(|n| spec(&format!("r{n}"), "x")).collect();
    batch.push(delayed("d1", 60_000));
    batch.push(delayed("d2", 120_000));
    let results = enqueue(&mut queues, batch).await?;
    let depth = stats(&mut queues).await?;
    assert_eq!(
        (depth.ready, depth.delayed, depth.in_flight, depth.dead),
        (5, 2, 0, 0)
    );
    assert_eq!(depth.oldest_ready_at, results[0].due_at);
    assert_eq!(depth.next_due_at, results[5].due_at);
    let peeked = peek(&mut queues, TaskState::Unspecified, 0).await?;
    assert!(peeked
        .iter()
        .all(|t| t.receipt.is_empty() && t.state == TaskState::Ready as i32));
    let leased = lease(&mut queues, 10, 30_000).await?;
    assert_eq!(ids(&peeked), ids(&leased));
    assert_eq!(
        ids(&peek(&mut queues, TaskState::InFlight, 10).await?),
        ids(&leased)
    );
    assert_eq!(stats(&mut queues).await?.in_flight, 5);
    assert_eq!(
        ids(&peek(&mut queues, TaskState::Delayed, 1).await?),
        ["d1"]
    );
    Ok(())
}

on_each_store!(auto_ack_pops_at_most_once);
async fn auto_ack_pops_at_most_once(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("p1", "x"), spec("p2", "x")]).await?;
    let popped = queues
        .lease(LeaseRequest {
            auto_ack: true,
            ..lease_request(5, 100)
        })
        .await?
        .into_inner()
        .tasks;
    assert_eq!(ids(&popped), ["p1", "p2"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        lease(&mut queues, 5, 100).await?.is_empty(),
        "an auto-acked task came back"
    );
    let depth = stats(&mut queues).await?;
    assert_eq!((depth.ready, depth.in_flight), (0, 0));
    Ok(())
}

on_each_store!(lease_and_peek_return_fewer_tasks_rather_than_a_reply_over_4_mib);
async fn lease_and_peek_return_fewer_tasks_rather_than_a_reply_over_4_mib(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let big = vec![7u8; 1024 * 1024];
    for n in 0..5 {
        let task = TaskSpec {
            id: format!("big{n}"),
            payload: big.clone().into(),
            ..Default::default()
        };
        assert!(
            enqueue(&mut queues, vec![task]).await?[0].created,
            "exactly 1 MiB is accepted"
        );
    }
    let over = TaskSpec {
        id: "over".into(),
        payload: vec![0u8; 1024 * 1024 + 1].into(),
        ..Default::default()
    };
    let status = enqueue(&mut queues, vec![over]).await.unwrap_err();
    assert!(
        status.code() == Code::InvalidArgument && status.message().starts_with("payload:"),
        "{status:?}"
    );
    // Peek is capped like Lease, and takes nothing.
    let peeked = peek(&mut queues, TaskState::Ready, 10).await?;
    assert_eq!(ids(&peeked), ["big0", "big1", "big2"]);
    assert_eq!(stats(&mut queues).await?.ready, 5);
    let first = lease(&mut queues, 10, 30_000).await?;
    assert_eq!(
        first.len(),
        3,
        "three 1 MiB payloads fit under 4 MiB, four do not"
    );
    let peeked = peek(&mut queues, TaskState::Ready, 10).await?;
    assert_eq!(peeked.len(), 2);
    Ok(())
}

on_each_store!(a_waiting_lease_returns_as_soon_as_a_task_is_enqueued_or_falls_due, own cluster);
async fn a_waiting_lease_returns_as_soon_as_a_task_is_enqueued_or_falls_due(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut producer = server.queues().await;
    let mut worker = server.queues().await;
    let looks = redis.command_calls("evalsha").await;
    let waiting = tokio::spawn(async move {
        let request = LeaseRequest {
            wait: ms(5_000),
            ..lease_request(1, 30_000)
        };
        let tasks = worker.lease(request).await.map(|r| r.into_inner().tasks);
        (tasks, Instant::now(), worker)
    });
    // Its first look found nothing: it waits now.
    redis.wait_command_calls_above("evalsha", looks).await;
    let sent = Instant::now();
    enqueue(&mut producer, vec![spec("pushed", "x")]).await?;
    let (tasks, got, mut worker) = waiting.await?;
    assert_eq!(ids(&tasks?), ["pushed"]);
    assert!(
        got - sent < Duration::from_secs(1),
        "woken {:?} after the enqueue",
        got - sent
    );

    let due = enqueue(&mut producer, vec![delayed("timed", 300)]).await?[0].due_at;
    let request = LeaseRequest {
        wait: ms(5_000),
        ..lease_request(1, 30_000)
    };
    let tasks = worker.lease(request).await?.into_inner().tasks;
    let late = turnstile::time::now_ms() - unix_ms(&due);
    assert_eq!(ids(&tasks), ["timed"]);
    assert!((0..100).contains(&late), "delivered {late} ms after due");

    let started = Instant::now();
    let request = LeaseRequest {
        wait: ms(300),
        ..lease_request(1, 30_000)
    };
    assert!(worker.lease(request).await?.into_inner().tasks.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(290));
    Ok(())
}

/// Asserts INVALID_ARGUMENT whose message starts with `field:`.
/// Every unary queue RPC once, each with a `timeout` deadline: (rpc, status, time taken).
async fn every_rpc(
    queues: &Queues,
    receipt: &str,
    timeout: Duration,
) -> Vec<(&'static str, Code, Duration)> {
    use common::with_timeout;
    let q = || "q".to_owned();
    let mut calls = tokio::task::JoinSet::new();
    macro_rules! call {
        ($name:literal, $method:ident, $request:expr) => {{
            let mut queues = queues.clone();
            let request = with_timeout($request, timeout);
            calls.spawn(async move {
                let started = Instant::now();
                let code = match queues.$method(request).await {
                    Ok(_) => Code::Ok,
                    Err(status) => status.code(),
                };
                ($name, code, started.elapsed())
            });
        }};
    }
    call!(
        "Enqueue",
        enqueue,
        EnqueueRequest {
            queue: q(),
            tasks: vec![spec("new", "x")],
            ..Default::default()
        }
    );
    call!("Lease", lease, lease_request(1, 30_000));
    call!(
        "Ack",
        ack,
        AckRequest {
            queue: q(),
            receipts: vec![receipt.to_owned()],
            ..Default::default()
        }
    );
    call!(
        "Nack",
        nack,
        NackRequest {
            queue: q(),
            receipt: receipt.to_owned(),
            delay: None,
            ..Default::default()
        }
    );
    call!(
        "ExtendLease",
        extend_lease,
        ExtendLeaseRequest {
            queue: q(),
            receipt: receipt.to_owned(),
            visibility: None,
            ..Default::default()
        }
    );
    call!(
        "Peek",
        peek,
        PeekRequest {
            queue: q(),
            state: 0,
            limit: 0,
            group: None,
        }
    );
    call!(
        "Cancel",
        cancel,
        CancelRequest {
            queue: q(),
            ids: vec!["a".into()],
            ..Default::default()
        }
    );
    call!(
        "Redrive",
        redrive,
        RedriveRequest {
            queue: q(),
            ids: vec![]
        }
    );
    call!("Stats", stats, StatsRequest { queue: q() });
    calls.join_all().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_queue_rpc_is_unavailable_when_redis_is_slower_than_the_timeout_or_down() -> TestResult
{
    let mut redis = TestRedis::start().await;
    // The setup goes through a server with the default timeout: on a loaded machine a
    // call may take longer than 300 ms, and a lease that timed out cannot be retried.
    let setup = TestServer::start(&redis).await;
    let mut queues = setup.queues().await;
    enqueue(&mut queues, vec![spec("a", "x")]).await?;
    let receipt = lease(&mut queues, 1, 30_000).await?[0].receipt.clone();
    let server =
        TestServer::start_with(&redis, |c| c.redis_timeout = Duration::from_millis(300)).await;
    let queues = server.queues().await;

    // Slower than --redis-timeout: every script waits behind a 3 s pause.
    redis.pause_writes(Duration::from_secs(3)).await;
    for (rpc, code, took) in every_rpc(&queues, &receipt, Duration::from_secs(5)).await {
        assert_eq!(code, Code::Unavailable, "{rpc} with Redis paused");
        assert!(took < Duration::from_millis(2_500), "{rpc} took {took:?}");
    }

    // Down: answered UNAVAILABLE, each before its caller's deadline.
    redis.kill().await;
    for timeout in [Duration::from_millis(500), Duration::from_secs(5)] {
        for (rpc, code, took) in every_rpc(&queues, &receipt, timeout).await {
            assert_eq!(code, Code::Unavailable, "{rpc} with Redis down");
            assert!(
                took < timeout.min(Duration::from_secs(3)),
                "{rpc} took {took:?}"
            );
        }
    }
    Ok(())
}

on_each_store!(a_long_poll_whose_deadline_passes_answers_deadline_exceeded);
async fn a_long_poll_whose_deadline_passes_answers_deadline_exceeded(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let started = Instant::now();
    let status = queues
        .lease(common::with_timeout(
            LeaseRequest {
                wait: ms(30_000),
                ..lease_request(1, 30_000)
            },
            Duration::from_millis(300),
        ))
        .await
        .unwrap_err();
    common::assert_server_deadline(&status, started);
    Ok(())
}

fn expect<T: std::fmt::Debug>(result: Result<tonic::Response<T>, tonic::Status>, field: &str) {
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
    assert!(
        status.message().starts_with(&format!("{field}:")),
        "{field}: {}",
        status.message()
    );
}

on_each_store!(bad_queue_input_is_invalid_argument_naming_the_field);
async fn bad_queue_input_is_invalid_argument_naming_the_field(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let enq = |queue: &str, tasks: Vec<TaskSpec>| EnqueueRequest {
        queue: queue.into(),
        tasks,
        ..Default::default()
    };
    expect(queues.enqueue(enq("", vec![spec("a", "x")])).await, "queue");
    expect(queues.enqueue(enq("q", vec![])).await, "tasks");
    expect(
        queues
            .enqueue(enq(
                "q",
                (0..1001).map(|n| spec(&n.to_string(), "x")).collect(),
            ))
            .await,
        "tasks",
    );
    expect(
        queues.enqueue(enq("q", vec![spec("bad\nid", "x")])).await,
        "id",
    );
    expect(
        queues.enqueue(enq("q", vec![delayed("neg", -1)])).await,
        "delay",
    );
    let bad_policy = TaskSpec {
        on_duplicate: 9,
        ..spec("p", "x")
    };
    expect(
        queues.enqueue(enq("q", vec![bad_policy])).await,
        "on_duplicate",
    );
    let bad_window = TaskSpec {
        dedupe_window: ms(-5),
        ..spec("w", "x")
    };
    expect(
        queues.enqueue(enq("q", vec![bad_window])).await,
        "dedupe_window",
    );
    expect(
        queues
            .lease(LeaseRequest {
                max_tasks: 1001,
                ..lease_request(1, 1_000)
            })
            .await,
        "max_tasks",
    );
    expect(queues.lease(lease_request(1, 0)).await, "visibility");
    expect(
        queues
            .lease(LeaseRequest {
                wait: ms(-1),
                ..lease_request(1, 1_000)
            })
            .await,
        "wait",
    );
    expect(
        queues
            .ack(AckRequest {
                queue: "q".into(),
                receipts: vec![String::new()],
                ..Default::default()
            })
            .await,
        "receipts",
    );
    expect(
        queues
            .nack(NackRequest {
                queue: "q".into(),
                receipt: String::new(),
                delay: None,
                ..Default::default()
            })
            .await,
        "receipt",
    );
    let nack = NackRequest {
        queue: "q".into(),
        receipt: "r".into(),
        delay: ms(-1),
        ..Default::default()
    };
    expect(queues.nack(nack).await, "delay");
    let extend = ExtendLeaseRequest {
        queue: "q".into(),
        receipt: "r".into(),
        visibility: ms(0),
        ..Default::default()
    };
    expect(queues.extend_lease(extend).await, "visibility");
    expect(
        queues
            .peek(PeekRequest {
                queue: "q".into(),
                state: 0,
                limit: 1001,
                group: None,
            })
            .await,
        "limit",
    );
    expect(
        queues
            .peek(PeekRequest {
                queue: "q".into(),
                state: 42,
                limit: 1,
                group: None,
            })
            .await,
        "state",
    );
    expect(
        queues
            .stats(StatsRequest {
                queue: "x".repeat(513),
            })
            .await,
        "queue",
    );
    Ok(())
}

on_each_store!(counts_of_zero_and_unset_durations_mean_the_defaults);
async fn counts_of_zero_and_unset_durations_mean_the_defaults(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let tasks = (0..12).map(|n| spec(&format!("t{n:02}"), "x")).collect();
    enqueue(&mut queues, tasks).await?;
    // limit 0: 10 tasks; max_attempts 0: 25.
    let peeked = peek(&mut queues, TaskState::Ready, 0).await?;
    assert_eq!(peeked.len(), 10);
    assert_eq!(peeked[0].max_attempts, 25);
    // max_tasks 0: one task; visibility unset: a 30 s lease.
    let before = turnstile::time::now_ms();
    let leased = queues
        .lease(LeaseRequest {
            queue: "q".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    assert_eq!(leased.len(), 1);
    let lease_ms = unix_ms(&leased[0].lease_expires_at) - before;
    assert!(
        (29_000..=31_000).contains(&lease_ms),
        "lease of {lease_ms} ms"
    );
    // ExtendLease with visibility unset: 30 s again.
    let before = turnstile::time::now_ms();
    let extended = queues
        .extend_lease(ExtendLeaseRequest {
            queue: "q".into(),
            receipt: leased[0].receipt.clone(),
            visibility: None,
            ..Default::default()
        })
        .await?
        .into_inner();
    let lease_ms = unix_ms(&extended.lease_expires_at) - before;
    assert!(
        (29_000..=31_000).contains(&lease_ms),
        "extended by {lease_ms} ms"
    );
    Ok(())
}

on_each_store!(maximums_are_inclusive);
async fn maximums_are_inclusive(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let tasks: Vec<TaskSpec> = (0..1000).map(|n| spec(&format!("t{n:04}"), "x")).collect();
    assert_eq!(enqueue(&mut queues, tasks).await?.len(), 1000);
    assert_eq!(peek(&mut queues, TaskState::Ready, 1000).await?.len(), 1000);
    // A 1 h wait returns at once when tasks are there; 1,000 tasks in one lease.
    let leased = queues
        .lease(LeaseRequest {
            wait: ms(3_600_000),
            ..lease_request(1000, 30_000)
        })
        .await?
        .into_inner()
        .tasks;
    assert_eq!(leased.len(), 1000);
    let receipts: Vec<&str> = leased.iter().map(|t| t.receipt.as_str()).collect();
    assert!(ack(&mut queues, &receipts)
        .await?
        .iter()
        .all(|&acked| acked));
    Ok(())
}

on_each_store!(replace_moves_a_delayed_task_and_adopts_the_new_attempts_and_window);
async fn replace_moves_a_delayed_task_and_adopts_the_new_attempts_and_window(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![delayed("r", 60_000)]).await?;
    assert_eq!(stats(&mut queues).await?.delayed, 1);
    let new = TaskSpec {
        max_attempts: 2,
        dedupe_window: ms(60_000),
        ..replacing(spec("r", "new"))
    };
    let result = enqueue(&mut queues, vec![new]).await?;
    assert!(result[0].replaced && !result[0].created);
    // READY now, with the new payload and max_attempts.
    let ready = peek(&mut queues, TaskState::Ready, 10).await?;
    assert_eq!(ids(&ready), ["r"]);
    assert_eq!(
        (&ready[0].payload[..], ready[0].max_attempts),
        (&b"new"[..], 2)
    );
    // And the new dedupe window: after its ack, both policies refuse the id.
    let task = lease(&mut queues, 1, 30_000).await?.remove(0);
    assert_eq!(ack(&mut queues, &[&task.receipt]).await?, [true]);
    for again in [spec("r", "late"), replacing(spec("r", "late"))] {
        let result = enqueue(&mut queues, vec![again]).await?;
        assert!(!result[0].created && !result[0].replaced);
    }
    Ok(())
}

on_each_store!(an_enqueue_batch_is_seen_whole_or_not_at_all);
async fn an_enqueue_batch_is_seen_whole_or_not_at_all(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut producer = server.queues().await;
    let mut watcher = server.queues().await;
    let tasks: Vec<TaskSpec> = (0..1000).map(|n| spec(&format!("b{n:04}"), "x")).collect();
    let batch = tokio::spawn(async move { enqueue(&mut producer, tasks).await });
    let mut seen = std::collections::BTreeSet::new();
    while !batch.is_finished() {
        seen.insert(stats(&mut watcher).await?.ready);
    }
    batch.await??;
    seen.insert(stats(&mut watcher).await?.ready);
    assert!(seen.iter().all(|&n| n == 0 || n == 1000), "saw {seen:?}");
    // A batch with one bad task stores none of it.
    let mut queues = server.queues().await;
    let bad = EnqueueRequest {
        queue: "other".into(),
        tasks: vec![spec("fine", "x"), spec("", "y"), spec("bad\u{7}", "z")],
        ..Default::default()
    };
    assert_eq!(
        queues.enqueue(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let other = queues
        .stats(StatsRequest {
            queue: "other".into(),
        })
        .await?
        .into_inner();
    assert_eq!(other.ready, 0);
    Ok(())
}

on_each_store!(nack_with_delay_zero_is_ready_at_once_for_the_next_attempt);
async fn nack_with_delay_zero_is_ready_at_once_for_the_next_attempt(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("n", "x")]).await?;
    let first = lease(&mut queues, 1, 30_000).await?.remove(0);
    let nacked = queues
        .nack(NackRequest {
            queue: "q".into(),
            receipt: first.receipt.clone(),
            delay: ms(0),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(nacked.requeued && !nacked.dead);
    let again = lease(&mut queues, 1, 30_000).await?;
    assert_eq!(ids(&again), ["n"]);
    assert_eq!(again[0].attempt, 2);
    assert_ne!(again[0].receipt, first.receipt);
    Ok(())
}

on_each_store!(a_nack_s_error_is_the_task_s_last_error_until_the_task_is_gone);
async fn a_nack_s_error_is_the_task_s_last_error_until_the_task_is_gone(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let nack = |receipt: &str, error: &str, give_up: bool| NackRequest {
        queue: "q".into(),
        receipt: receipt.into(),
        delay: None,
        error: error.into(),
        give_up,
    };
    enqueue(&mut queues, vec![spec("a", "a"), spec("b", "b")]).await?;
    let first = lease(&mut queues, 2, 60_000).await?;
    assert!(first.iter().all(|t| t.last_error.is_empty()));
    // a fails with a reason: its next delivery carries it, and Peek shows it.
    let a = first.iter().find(|t| t.id == "a").unwrap();
    let requeued = queues.nack(nack(&a.receipt, "disk full", false)).await?;
    assert!(requeued.get_ref().requeued);
    assert_eq!(
        peek(&mut queues, TaskState::Ready, 10).await?[0].last_error,
        "disk full"
    );
    let again = lease(&mut queues, 1, 60_000).await?;
    assert_eq!((again[0].id.as_str(), again[0].attempt), ("a", 2));
    assert_eq!(again[0].last_error, "disk full");
    // b gives up on its first of 25 attempts: DEAD now, saying why. An error over
    // 4 KiB is cut at a character boundary and marked, never refused.
    let b = first.iter().find(|t| t.id == "b").unwrap();
    let long = "é".repeat(3_000);
    let dead = queues
        .nack(nack(&b.receipt, &long, true))
        .await?
        .into_inner();
    assert!(dead.dead && !dead.requeued);
    let dead = peek(&mut queues, TaskState::Dead, 10).await?;
    assert_eq!((dead[0].id.as_str(), dead[0].attempt), ("b", 1));
    let kept = &dead[0].last_error;
    assert!(
        kept.len() <= 4096 && kept.ends_with("…[cut]"),
        "{}",
        kept.len()
    );
    assert!(kept.starts_with("éé"));
    // A Nack without an error keeps the last one.
    queues.nack(nack(&again[0].receipt, "", false)).await?;
    assert_eq!(
        peek(&mut queues, TaskState::Ready, 10).await?[0].last_error,
        "disk full"
    );
    // Acked, the task and its error are gone: the same id enqueued again starts clean.
    let third = lease(&mut queues, 1, 60_000).await?;
    assert_eq!(ack(&mut queues, &[&third[0].receipt]).await?, [true]);
    enqueue(&mut queues, vec![spec("a", "a")]).await?;
    assert_eq!(
        peek(&mut queues, TaskState::Ready, 10).await?[0].last_error,
        ""
    );
    // A DEAD task redriven keeps why it died; cancelled, it is gone with its error.
    queues
        .redrive(RedriveRequest {
            queue: "q".into(),
            ids: vec!["b".into()],
        })
        .await?;
    let ready = peek(&mut queues, TaskState::Ready, 10).await?;
    let b = ready.iter().find(|t| t.id == "b").unwrap();
    assert!(b.last_error.ends_with("…[cut]"));
    queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: vec!["b".into()],
            ..Default::default()
        })
        .await?;
    enqueue(&mut queues, vec![spec("b", "b")]).await?;
    let ready = peek(&mut queues, TaskState::Ready, 10).await?;
    assert!(ready.iter().all(|t| t.last_error.is_empty()), "{ready:?}");
    // Replacing a waiting task that failed starts it clean too.
    let c = {
        enqueue(&mut queues, vec![spec("c", "c")]).await?;
        let leased = lease(&mut queues, 3, 60_000).await?;
        leased.into_iter().find(|t| t.id == "c").unwrap()
    };
    queues.nack(nack(&c.receipt, "flaky", false)).await?;
    enqueue(&mut queues, vec![replacing(spec("c", "c2"))]).await?;
    let c = peek(&mut queues, TaskState::Ready, 10).await?;
    let c = c.iter().find(|t| t.id == "c").unwrap();
    assert_eq!(c.last_error, "");
    Ok(())
}

on_each_store!(progress_reported_on_an_extension_is_kept_and_carried_by_the_next_delivery);
async fn progress_reported_on_an_extension_is_kept_and_carried_by_the_next_delivery(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let extend = |receipt: &str, progress: Option<&[u8]>| ExtendLeaseRequest {
        queue: "q".into(),
        receipt: receipt.into(),
        visibility: ms(60_000),
        progress: progress.map(<[u8]>::to_vec),
    };
    enqueue(&mut queues, vec![spec("long", "x")]).await?;
    let first = lease(&mut queues, 1, 60_000).await?.remove(0);
    assert!(first.progress.is_empty());
    let extended = queues
        .extend_lease(extend(&first.receipt, Some(b"row 400 of 1000")))
        .await?;
    assert!(extended.get_ref().extended);
    // An extension without progress keeps what was reported.
    queues.extend_lease(extend(&first.receipt, None)).await?;
    let in_flight = peek(&mut queues, TaskState::InFlight, 10).await?;
    assert_eq!(in_flight[0].progress, b"row 400 of 1000");
    // Over 4 KiB is refused, naming the field; what was kept stays.
    let refused = queues
        .extend_lease(extend(&first.receipt, Some(&[b'x'; 4097])))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().starts_with("progress"),
        "{}",
        refused.message()
    );
    // The worker dies; the next delivery says where to resume.
    queues
        .nack(NackRequest {
            queue: "q".into(),
            receipt: first.receipt.clone(),
            ..Default::default()
        })
        .await?;
    let second = lease(&mut queues, 1, 60_000).await?.remove(0);
    assert_eq!(
        (second.attempt, second.progress.as_slice()),
        (2, &b"row 400 of 1000"[..])
    );
    // Acked, it is gone with the task.
    assert_eq!(ack(&mut queues, &[&second.receipt]).await?, [true]);
    enqueue(&mut queues, vec![spec("long", "x")]).await?;
    assert!(peek(&mut queues, TaskState::Ready, 10).await?[0]
        .progress
        .is_empty());
    Ok(())
}

// A Cancel of more ids than one script run takes (200 a run, so no run holds Redis
// long) cancels every one of them and answers them all.
on_each_store!(a_cancel_of_hundreds_of_ids_cancels_each_over_bounded_runs);
async fn a_cancel_of_hundreds_of_ids_cancels_each_over_bounded_runs(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let ids: Vec<String> = (0..450).map(|n| format!("c{n}")).collect();
    queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks: ids.iter().map(|id| spec(id, "x")).collect(),
            ..Default::default()
        })
        .await?;
    let mut cancelled = queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: ids.clone(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .cancelled;
    cancelled.sort_unstable();
    let mut expected = ids;
    expected.sort_unstable();
    assert_eq!(cancelled, expected);
    let stats = queues
        .stats(StatsRequest { queue: "q".into() })
        .await?
        .into_inner();
    assert_eq!(stats.ready, 0);
    Ok(())
}

// A Peek, a page of ListTasks or an Ack of more than one script run's worth (250 a
// run, so no run holds Redis long) misses nothing and repeats nothing: each run goes
// on where the last stopped.
on_each_store!(big_looks_and_acks_go_in_bounded_runs_and_miss_nothing);
async fn big_looks_and_acks_go_in_bounded_runs_and_miss_nothing(redis: TestStore) -> TestResult {
    use turnstile::pb::ListTasksRequest;
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    // Priorities mix the delivery order up, so a run that began again from the top
    // would show.
    let tasks: Vec<TaskSpec> = (0..700)
        .map(|n| TaskSpec {
            priority: n % 3,
            ..spec(&format!("t{n:03}"), "x")
        })
        .collect();
    enqueue(&mut queues, tasks).await?;
    let peeked = peek(&mut queues, TaskState::Ready, 1000).await?;
    assert_eq!(peeked.len(), 700);
    let list = |page_size: u32, page_token: String| ListTasksRequest {
        queue: "q".into(),
        state: TaskState::Ready as i32,
        page_size,
        page_token,
        ..Default::default()
    };
    let whole = queues
        .list_tasks(list(1000, String::new()))
        .await?
        .into_inner();
    assert_eq!(ids(&whole.tasks), ids(&peeked));
    assert!(whole.next_page_token.is_empty());
    let first = queues
        .list_tasks(list(450, String::new()))
        .await?
        .into_inner();
    assert_eq!(first.tasks.len(), 450);
    let second = queues
        .list_tasks(list(450, first.next_page_token))
        .await?
        .into_inner();
    let paged: Vec<&str> = ids(&first.tasks)
        .into_iter()
        .chain(ids(&second.tasks))
        .collect();
    assert_eq!(paged, ids(&peeked));
    // One Ack of every receipt: a flag for each, all true, nothing left in flight.
    let leased = lease(&mut queues, 1000, 60_000).await?;
    assert_eq!(leased.len(), 700);
    let receipts: Vec<&str> = leased.iter().map(|t| t.receipt.as_str()).collect();
    let acked = ack(&mut queues, &receipts).await?;
    assert_eq!(acked, vec![true; 700]);
    let after = stats(&mut queues).await?;
    assert_eq!((after.ready, after.in_flight), (0, 0));
    Ok(())
}

// A group's Peek of more than one run's worth: the task it delivers next first, then
// the others in its order, each once.
on_each_store!(a_big_group_peek_shows_each_task_once_in_the_groups_order);
async fn a_big_group_peek_shows_each_task_once_in_the_groups_order(redis: TestStore) -> TestResult {
    use turnstile::pb::ConfigureQueueRequest;
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    queues
        .configure_queue(ConfigureQueueRequest {
            queue: "q".into(),
            group_max_in_flight: Some(1),
            ..Default::default()
        })
        .await?;
    let tasks: Vec<TaskSpec> = (0..600)
        .map(|n| TaskSpec {
            group: "g".into(),
            priority: n % 2,
            ..spec(&format!("t{n:03}"), "x")
        })
        .collect();
    enqueue(&mut queues, tasks).await?;
    let look = |limit| PeekRequest {
        queue: "q".into(),
        state: TaskState::Ready as i32,
        limit,
        group: Some("g".into()),
    };
    let small = queues.peek(look(200)).await?.into_inner().tasks;
    let big = queues.peek(look(1000)).await?.into_inner().tasks;
    assert_eq!(big.len(), 600);
    assert_eq!(
        ids(&big[..200]),
        ids(&small),
        "the first 200 as one run shows them"
    );
    let distinct: std::collections::HashSet<&str> = ids(&big).into_iter().collect();
    assert_eq!(distinct.len(), 600);
    // The group delivers in that order.
    let next = lease(&mut queues, 1, 60_000).await?;
    assert_eq!(next[0].id, big[0].id);
    Ok(())
}
