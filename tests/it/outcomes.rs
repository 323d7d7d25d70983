//! Task outcomes (the contract's "Task outcomes" section): every way a delivery ends
//! in the task's history, `GetTask`, kept COMPLETED and CANCELLED tasks with their
//! results and their pruning, `Wait` and `Enqueue.wait` answered across replicas.

use crate::common;

use std::collections::HashMap;

use common::{ms, unix_ms, wait_redis_time, TestResult, TestServer, TestStore};
use tonic::{transport::Channel, Code};
use turnstile::pb::{
    queue_service_client::QueueServiceClient, subscribe_response::Event, AckRequest,
    AttemptOutcome, CancelRequest, ConfigureQueueRequest, EnqueueRequest, EnqueueResult,
    GetTaskRequest, LeaseRequest, ListTasksRequest, NackRequest, Retention, StatsRequest,
    SubscribeRequest, Task, TaskSpec, TaskState, WaitRequest,
};

type Queues = QueueServiceClient<Channel>;

fn spec(id: &str, max_attempts: u32) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        payload: id.as_bytes().to_vec().into(),
        max_attempts,
        ..Default::default()
    }
}

async fn enqueue(queues: &mut Queues, tasks: Vec<TaskSpec>) -> TestResult {
    queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks,
            ..Default::default()
        })
        .await?;
    Ok(())
}

async fn lease(
    queues: &mut Queues,
    visibility_ms: i64,
    wait_ms: i64,
) -> Result<Vec<Task>, tonic::Status> {
    Ok(queues
        .lease(LeaseRequest {
            queue: "q".into(),
            max_tasks: 10,
            visibility: ms(visibility_ms),
            wait: (wait_ms > 0).then(|| ms(wait_ms)).flatten(),
            auto_ack: false,
        })
        .await?
        .into_inner()
        .tasks)
}

fn nack(receipt: &str, error: &str, give_up: bool) -> NackRequest {
    NackRequest {
        queue: "q".into(),
        receipt: receipt.into(),
        error: error.into(),
        give_up,
        ..Default::default()
    }
}

async fn ack_with(
    queues: &mut Queues,
    receipt: &str,
    result: &[u8],
) -> Result<bool, tonic::Status> {
    let acked = queues
        .ack(AckRequest {
            queue: "q".into(),
            receipts: vec![receipt.into()],
            results: HashMap::from([(receipt.to_owned(), result.to_vec())]),
        })
        .await?
        .into_inner()
        .acked;
    Ok(acked == [true])
}

async fn get_task(queues: &mut Queues, id: &str) -> Result<Task, tonic::Status> {
    Ok(queues
        .get_task(GetTaskRequest {
            queue: "q".into(),
            id: id.into(),
        })
        .await?
        .into_inner())
}

fn outcomes(task: &Task) -> Vec<(u32, AttemptOutcome, &str, &str)> {
    task.history
        .iter()
        .map(|a| {
            (
                a.number,
                a.outcome(),
                a.worker_id.as_str(),
                a.error.as_str(),
            )
        })
        .collect()
}

async fn keep_completed(queues: &mut Queues, age_ms: i64, count: u32) -> TestResult {
    queues
        .configure_queue(ConfigureQueueRequest {
            queue: "q".into(),
            keep_completed: Some(Retention {
                age: (age_ms > 0).then(|| ms(age_ms)).flatten(),
                count,
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

on_each_store!(every_way_a_delivery_ends_is_in_the_task_s_history, own cluster);
async fn every_way_a_delivery_ends_is_in_the_task_s_history(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("a", 4)]).await?;
    // 1: nacked with a reason, by a Subscribe worker with a worker_id. Its stream is
    // closed first, and the Nack waits until the server has seen it close (the stream
    // gauge, then the feed's detach script): a Nack that came first freed the stream's
    // slot while the feed still held it, and the feed sent the task to the closing stream
    // again (a CI run read attempt 3 below).
    let (stream, first) = first_delivery(&mut queues, "w-7").await?;
    closed(&server, &redis, stream).await;
    queues
        .nack(nack(&first.receipt, "disk full", false))
        .await?;
    // 2: its lease runs out (any script that looks at the queue ends it).
    let second = lease(&mut queues, 100, 10_000).await?;
    assert_eq!(second[0].attempt, 2);
    assert_eq!(second[0].last_error, "disk full");
    wait_redis_time(
        &redis.conn().await,
        unix_ms(&second[0].lease_expires_at) + 1,
    )
    .await;
    // 3: given up: DEAD at once, with one attempt left.
    let third = lease(&mut queues, 60_000, 10_000).await?;
    assert_eq!(third[0].attempt, 3);
    let dead = queues
        .nack(nack(&third[0].receipt, "bad input", true))
        .await?
        .into_inner();
    assert!(dead.dead);
    let task = get_task(&mut queues, "a").await?;
    assert_eq!(task.state(), TaskState::Dead);
    assert_eq!(task.last_error, "bad input");
    assert_eq!(task.payload.as_ref(), b"a");
    assert_eq!(
        outcomes(&task),
        [
            (1, AttemptOutcome::Nacked, "w-7", "disk full"),
            (2, AttemptOutcome::Expired, "", ""),
            (3, AttemptOutcome::GaveUp, "", "bad input"),
        ]
    );
    for attempt in &task.history {
        let (leased, ended) = (unix_ms(&attempt.leased_at), unix_ms(&attempt.ended_at));
        assert!(leased > 0 && leased <= ended, "{attempt:?}");
    }
    assert_eq!(
        unix_ms(&task.history[1].ended_at).max(unix_ms(&second[0].lease_expires_at)),
        unix_ms(&task.history[1].ended_at),
        "an expiry ends the delivery no earlier than its lease end"
    );
    // An id the queue does not hold: NOT_FOUND.
    let unknown = get_task(&mut queues, "nope").await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    Ok(())
}

on_each_store!(the_last_five_errors_stay_whole_and_older_ones_are_cut);
async fn the_last_five_errors_stay_whole_and_older_ones_are_cut(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("a", 7)]).await?;
    let long = |n: usize| format!("{n}:{}", "x".repeat(1000));
    for n in 1..=7 {
        let task = lease(&mut queues, 60_000, 10_000).await?;
        queues.nack(nack(&task[0].receipt, &long(n), false)).await?;
    }
    let task = get_task(&mut queues, "a").await?;
    assert_eq!(task.state(), TaskState::Dead);
    assert_eq!(task.history.len(), 7);
    for (at, attempt) in task.history.iter().enumerate() {
        if at < 2 {
            assert!(attempt.error.ends_with("…[cut]"), "{}", attempt.error);
            assert!(attempt.error.len() <= 200 + "…[cut]".len());
            assert!(attempt.error.starts_with(&format!("{}:xx", at + 1)));
        } else {
            assert_eq!(attempt.error, long(at + 1));
        }
    }
    Ok(())
}

on_each_store!(a_kept_task_keeps_its_result_and_history_and_goes_by_count_and_by_age);
async fn a_kept_task_keeps_its_result_and_history_and_goes_by_count_and_by_age(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    // Without keep_completed an acked task is gone, as before.
    enqueue(&mut queues, vec![spec("gone", 0)]).await?;
    let task = lease(&mut queues, 60_000, 10_000).await?;
    assert!(ack_with(&mut queues, &task[0].receipt, b"r").await?);
    assert_eq!(
        get_task(&mut queues, "gone").await.unwrap_err().code(),
        Code::NotFound
    );
    // Keep the newest two.
    keep_completed(&mut queues, 0, 2).await?;
    for id in ["a", "b", "c"] {
        enqueue(&mut queues, vec![spec(id, 0)]).await?;
        let task = lease(&mut queues, 60_000, 10_000).await?;
        assert!(ack_with(&mut queues, &task[0].receipt, format!("{id}!").as_bytes()).await?);
    }
    assert_eq!(
        get_task(&mut queues, "a").await.unwrap_err().code(),
        Code::NotFound
    );
    for id in ["b", "c"] {
        let task = get_task(&mut queues, id).await?;
        assert_eq!(task.state(), TaskState::Completed);
        assert_eq!(task.result, format!("{id}!").as_bytes());
        assert_eq!(outcomes(&task), [(1, AttemptOutcome::Acked, "", "")]);
    }
    // A kept id is a duplicate, as a task in the queue is.
    let again = queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks: vec![spec("c", 0)],
            ..Default::default()
        })
        .await?
        .into_inner()
        .results;
    assert!(!again[0].created);
    // A cancelled waiting task is kept as CANCELLED; kept tasks count in no depth.
    enqueue(&mut queues, vec![spec("x", 0)]).await?;
    queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: vec!["x".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(
        get_task(&mut queues, "x").await?.state(),
        TaskState::Cancelled
    );
    let stats = queues
        .stats(StatsRequest { queue: "q".into() })
        .await?
        .into_inner();
    assert_eq!(
        (stats.ready, stats.delayed, stats.in_flight, stats.dead),
        (0, 0, 0, 0)
    );
    // By age: gone once older than it, even with nothing else ending.
    keep_completed(&mut queues, 300, 0).await?;
    enqueue(&mut queues, vec![spec("d", 0)]).await?;
    let task = lease(&mut queues, 60_000, 10_000).await?;
    ack_with(&mut queues, &task[0].receipt, b"d!").await?;
    let acked_at = unix_ms(&get_task(&mut queues, "d").await?.history[0].ended_at);
    wait_redis_time(&redis.conn().await, acked_at + 301).await;
    for id in ["b", "c", "d", "x"] {
        assert_eq!(
            get_task(&mut queues, id).await.unwrap_err().code(),
            Code::NotFound,
            "{id}"
        );
    }
    Ok(())
}

/// Waits until a `Wait` for `id` is registered in Redis (the watched zset): the stream
/// of its wait is open by then, so an end after it is published to the waiter.
async fn wait_registered(redis: &TestStore, id: &str) {
    let watched = redis.key("queue:{q}:watched");
    common::eventually("the wait registered", common::WAIT, || {
        let (conn, watched) = (redis.conn(), watched.clone());
        async move {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(&watched)
                .arg(id)
                .query_async(&mut conn.await)
                .await
                .unwrap_or(None);
            score.is_some()
        }
    })
    .await;
}

on_each_store!(enqueue_wait_is_a_remote_call_that_outlives_a_crashed_worker_across_replicas);
async fn enqueue_wait_is_a_remote_call_that_outlives_a_crashed_worker_across_replicas(
    redis: TestStore,
) -> TestResult {
    let (caller, worker) = (
        TestServer::start(&redis).await,
        TestServer::start(&redis).await,
    );
    let mut callers = caller.queues().await;
    let call = |mut queues: Queues| async move {
        let results: Vec<EnqueueResult> = queues
            .enqueue(EnqueueRequest {
                queue: "q".into(),
                tasks: vec![spec("call-1", 0)],
                wait: ms(60_000),
            })
            .await?
            .into_inner()
            .results;
        Ok::<_, tonic::Status>(results.into_iter().next().unwrap())
    };
    let first = tokio::spawn(call(callers.clone()));
    // The worker, on the other replica, takes it and dies without an answer.
    let mut workers = worker.queues().await;
    let crashed = lease(&mut workers, 100, 30_000).await?;
    assert_eq!(crashed[0].id, "call-1");
    // A retried call (same id) joins the first one's task.
    let second = tokio::spawn(call(callers.clone()));
    // Its next delivery answers.
    let answered = lease(&mut workers, 60_000, 30_000).await?;
    assert_eq!(answered[0].attempt, 2);
    assert!(ack_with(&mut workers, &answered[0].receipt, b"42").await?);
    for result in [first.await??, second.await??] {
        assert!(result.done);
        let task = result.task.unwrap();
        assert_eq!(task.state(), TaskState::Completed);
        assert_eq!(task.result, b"42");
        assert_eq!(
            outcomes(&task),
            [
                (1, AttemptOutcome::Expired, "", ""),
                (2, AttemptOutcome::Acked, "", "")
            ]
        );
    }
    // Nothing was kept: the task is gone.
    assert_eq!(
        get_task(&mut callers, "call-1").await.unwrap_err().code(),
        Code::NotFound
    );
    Ok(())
}

on_each_store!(wait_answers_a_dead_task_a_kept_one_at_once_and_a_timeout_with_done_false);
async fn wait_answers_a_dead_task_a_kept_one_at_once_and_a_timeout_with_done_false(
    redis: TestStore,
) -> TestResult {
    let (one, two) = (
        TestServer::start(&redis).await,
        TestServer::start(&redis).await,
    );
    let (mut here, mut there) = (one.queues().await, two.queues().await);
    let wait = |id: &str, timeout_ms: i64| WaitRequest {
        queue: "q".into(),
        id: id.into(),
        timeout: ms(timeout_ms),
    };
    // An id never enqueued: done false once the timeout passes, no task.
    let nothing = here.wait(wait("never", 200)).await?.into_inner();
    assert!(!nothing.done && nothing.task.is_none());
    // A waiting task: done false, the task as it is.
    enqueue(&mut here, vec![spec("later", 0)]).await?;
    let waiting = here.wait(wait("later", 100)).await?.into_inner();
    assert!(!waiting.done);
    assert_eq!(waiting.task.unwrap().state(), TaskState::Ready);
    // Given up on the other replica: the waiter hears of it.
    enqueue(&mut here, vec![spec("doomed", 0)]).await?;
    let mut waiter = here.clone();
    let dead = tokio::spawn(async move { waiter.wait(wait("doomed", 60_000)).await });
    let leased = lease(&mut there, 60_000, 10_000).await?;
    let doomed = leased.iter().find(|t| t.id == "doomed").unwrap();
    // The waiter must be registered before the task ends.
    wait_registered(&redis, "doomed").await;
    there.nack(nack(&doomed.receipt, "no", true)).await?;
    let dead = dead.await??.into_inner();
    assert!(dead.done);
    let task = dead.task.unwrap();
    assert_eq!(task.state(), TaskState::Dead);
    assert_eq!(task.last_error, "no");
    // A done task that is kept answers at once.
    keep_completed(&mut here, 0, 10).await?;
    enqueue(&mut here, vec![spec("kept", 0)]).await?;
    let leased = lease(&mut there, 60_000, 10_000).await?;
    let kept = leased.iter().find(|t| t.id == "kept").unwrap();
    ack_with(&mut there, &kept.receipt, b"ok").await?;
    let answer = here.wait(wait("kept", 3_600_000)).await?.into_inner();
    assert!(answer.done);
    assert_eq!(answer.task.unwrap().result, b"ok");
    Ok(())
}

/// The end of a task the queue does not keep lives only in the message published to
/// its waiters; a replica whose pub/sub connection was down then (or not yet made:
/// a Call sent as the server started once waited out its 30 s this way) must still
/// answer its waiter once it subscribes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_hears_an_end_published_while_its_replica_was_not_subscribed() -> TestResult {
    let redis = TestStore::one_redis().await;
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("blip", 0)]).await?;
    let leased = lease(&mut queues, 60_000, 10_000).await?;
    let mut waiter = queues.clone();
    let waited = tokio::spawn(async move {
        waiter
            .wait(WaitRequest {
                queue: "q".into(),
                id: "blip".into(),
                timeout: ms(20_000),
            })
            .await
    });
    wait_registered(&redis, "blip").await;
    let told = redis.key("queue:{q}:told");
    // The replica's subscription is cut, and refused until the test allows it again.
    let mut conn = redis.conn().await;
    let acl = |rule: &str| {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg(rule)
            .clone()
    };
    let () = acl("-psubscribe").query_async(&mut conn).await?;
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await?;
    assert_eq!(killed, 1, "the replica's pub/sub connection");
    assert!(ack_with(&mut queues, &leased[0].receipt, b"heard late").await?);
    // Nobody heard it; the end is kept a while for a waiter that looks again.
    let kept: u64 = redis::cmd("PTTL").arg(&told).query_async(&mut conn).await?;
    assert!((1..=30_000).contains(&kept), "told expires: {kept}");
    let () = acl("+psubscribe").query_async(&mut conn).await?;
    let waited = waited.await??.into_inner();
    assert!(waited.done);
    let task = waited.task.unwrap();
    assert_eq!(task.state(), TaskState::Completed);
    assert_eq!(task.result, b"heard late");
    assert_eq!(
        get_task(&mut queues, "blip").await.unwrap_err().code(),
        Code::NotFound
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_fields_refuse_bad_values_naming_the_field() -> TestResult {
    let redis = common::TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let refused = |status: tonic::Status, field: &str| {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
    };
    enqueue(&mut queues, vec![spec("a", 0)]).await?;
    let task = lease(&mut queues, 60_000, 10_000).await?;
    let big = queues
        .ack(AckRequest {
            queue: "q".into(),
            receipts: vec![task[0].receipt.clone()],
            results: HashMap::from([(task[0].receipt.clone(), vec![0; 64 * 1024 + 1])]),
        })
        .await
        .unwrap_err();
    refused(big, "results");
    let two = queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks: vec![spec("b", 0), spec("c", 0)],
            wait: ms(1000),
        })
        .await
        .unwrap_err();
    refused(two, "wait");
    let count = queues
        .configure_queue(ConfigureQueueRequest {
            queue: "q".into(),
            keep_completed: Some(Retention {
                age: None,
                count: 1_000_001,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    refused(count, "keep_completed.count");
    let long = queues
        .wait(WaitRequest {
            queue: "q".into(),
            id: "a".into(),
            timeout: ms(3_600_001),
        })
        .await
        .unwrap_err();
    refused(long, "timeout");
    let no_id = queues
        .get_task(GetTaskRequest {
            queue: "q".into(),
            id: String::new(),
        })
        .await
        .unwrap_err();
    refused(no_id, "id");
    let big_page = queues
        .list_tasks(ListTasksRequest {
            queue: "q".into(),
            page_size: 1001,
            ..Default::default()
        })
        .await
        .unwrap_err();
    refused(big_page, "page_size");
    // The result of a receipt that went is refused, never stored: the ack did nothing.
    assert!(get_task(&mut queues, "a").await?.state() == TaskState::InFlight);
    Ok(())
}

on_each_store!(a_running_task_cancelled_is_told_to_its_worker_and_never_comes_back);
async fn a_running_task_cancelled_is_told_to_its_worker_and_never_comes_back(
    redis: TestStore,
) -> TestResult {
    let (one, two) = (
        TestServer::start(&redis).await,
        TestServer::start(&redis).await,
    );
    let (mut workers, mut operators) = (one.queues().await, two.queues().await);
    keep_completed(&mut operators, 0, 100).await?;
    let cancel = |id: &str| CancelRequest {
        queue: "q".into(),
        ids: vec![id.into()],
        running: true,
    };
    // A Subscribe worker on one replica, the cancel on the other: the stream is told.
    enqueue(&mut operators, vec![spec("pushed", 0)]).await?;
    let (mut stream, task) = first_delivery(&mut workers, "w-c").await?;
    // Without `running` a task in flight is left alone.
    let left = operators
        .cancel(CancelRequest {
            running: false,
            ..cancel("pushed")
        })
        .await?
        .into_inner()
        .cancelled;
    assert!(left.is_empty());
    let marked = operators
        .cancel(cancel("pushed"))
        .await?
        .into_inner()
        .cancelled;
    assert_eq!(marked, ["pushed"]);
    let told = loop {
        if let Some(Event::Cancelled(told)) = stream.message().await?.and_then(|m| m.event) {
            break told;
        }
    };
    assert_eq!(
        (told.id.as_str(), told.receipt.as_str()),
        ("pushed", task.receipt.as_str())
    );
    // Its Ack ends it as CANCELLED (kept here), not COMPLETED.
    assert!(ack_with(&mut workers, &task.receipt, b"late").await?);
    let ended = get_task(&mut operators, "pushed").await?;
    assert_eq!(ended.state(), TaskState::Cancelled);
    assert!(ended.result.is_empty());
    assert_eq!(
        outcomes(&ended),
        [(1, AttemptOutcome::Cancelled, "w-c", "")]
    );
    drop(stream);
    // A Lease worker hears of it through ExtendLease; its lease's end does not bring
    // the task back.
    enqueue(&mut operators, vec![spec("leased", 0)]).await?;
    let leased = lease(&mut workers, 300, 10_000).await?;
    let leased = leased.iter().find(|t| t.id == "leased").unwrap();
    operators.cancel(cancel("leased")).await?;
    let extended = workers
        .extend_lease(turnstile::pb::ExtendLeaseRequest {
            queue: "q".into(),
            receipt: leased.receipt.clone(),
            visibility: ms(300),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(extended.extended && extended.cancelled);
    wait_redis_time(&redis.conn().await, unix_ms(&extended.lease_expires_at) + 1).await;
    let ended = get_task(&mut operators, "leased").await?;
    assert_eq!(ended.state(), TaskState::Cancelled);
    assert_eq!(outcomes(&ended), [(1, AttemptOutcome::Cancelled, "", "")]);
    let stats = operators
        .stats(StatsRequest { queue: "q".into() })
        .await?
        .into_inner();
    assert_eq!(
        (stats.ready, stats.delayed, stats.in_flight, stats.dead),
        (0, 0, 0, 0)
    );
    // A Nack of a cancelled delivery ends it as CANCELLED too, and a waiter hears it.
    enqueue(&mut operators, vec![spec("nacked", 0)]).await?;
    let leased = lease(&mut workers, 60_000, 10_000).await?;
    let nacked = leased.iter().find(|t| t.id == "nacked").unwrap();
    operators.cancel(cancel("nacked")).await?;
    let answer = workers
        .nack(nack(&nacked.receipt, "stopped", false))
        .await?
        .into_inner();
    assert!(!answer.requeued && !answer.dead);
    let waited = operators
        .wait(WaitRequest {
            queue: "q".into(),
            id: "nacked".into(),
            timeout: ms(10_000),
        })
        .await?
        .into_inner();
    assert!(waited.done);
    assert_eq!(waited.task.unwrap().state(), TaskState::Cancelled);
    Ok(())
}

async fn list_page(
    queues: &mut Queues,
    state: TaskState,
    group: Option<&str>,
    size: u32,
    token: &str,
) -> Result<(Vec<String>, String), tonic::Status> {
    let page = queues
        .list_tasks(ListTasksRequest {
            queue: "q".into(),
            state: state as i32,
            group: group.map(str::to_owned),
            page_size: size,
            page_token: token.into(),
        })
        .await?
        .into_inner();
    Ok((
        page.tasks.into_iter().map(|t| t.id).collect(),
        page.next_page_token,
    ))
}

on_each_store!(list_tasks_pages_stay_right_while_tasks_come_and_go);
async fn list_tasks_pages_stay_right_while_tasks_come_and_go(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    // 250 READY tasks, enqueued in batches that share their due time (ties by seq).
    let ids: Vec<String> = (0..250).map(|n| format!("t{n:03}")).collect();
    for batch in ids.chunks(50) {
        enqueue(&mut queues, batch.iter().map(|id| spec(id, 0)).collect()).await?;
    }
    let (first, token) = list_page(&mut queues, TaskState::Ready, None, 100, "").await?;
    assert_eq!(first, ids[..100]);
    // Meanwhile: the cursor's own task and others on both sides go; new ones come
    // (due now: after every listed one in delivery order).
    queues
        .cancel(CancelRequest {
            queue: "q".into(),
            ids: ["t099", "t050", "t100", "t180"].map(String::from).to_vec(),
            running: false,
        })
        .await?;
    enqueue(&mut queues, vec![spec("late-1", 0), spec("late-2", 0)]).await?;
    let mut seen = first;
    let mut token = token;
    while !token.is_empty() {
        let (page, next) = list_page(&mut queues, TaskState::Ready, None, 100, &token).await?;
        seen.extend(page);
        token = next;
    }
    // Every task present for the whole listing appears exactly once, in order.
    let whole: Vec<&String> = ids
        .iter()
        .filter(|id| !["t099", "t050", "t100", "t180"].contains(&id.as_str()))
        .collect();
    let listed: Vec<&String> = seen.iter().filter(|id| id.starts_with('t')).collect();
    let expected: Vec<&String> = whole
        .iter()
        .copied()
        .filter(|id| id.as_str() > "t099" || seen[..100].contains(id))
        .collect();
    assert_eq!(listed.iter().filter(|id| id.as_str() == "t180").count(), 0);
    let mut once = listed.clone();
    once.dedup();
    assert_eq!(once.len(), listed.len(), "no task twice");
    for id in &expected {
        assert!(listed.contains(id), "{id} missing");
    }
    // A group's tasks only; a token of another state or made up is refused.
    enqueue(
        &mut queues,
        vec![TaskSpec {
            group: "acme".into(),
            ..spec("g1", 0)
        }],
    )
    .await?;
    let (acme, _) = list_page(&mut queues, TaskState::Ready, Some("acme"), 10, "").await?;
    assert_eq!(acme, ["g1"]);
    let (_, token) = list_page(&mut queues, TaskState::Ready, None, 10, "").await?;
    for bad in [token.as_str(), "t1.zz", "nonsense"] {
        let state = if bad == token {
            TaskState::Dead
        } else {
            TaskState::Ready
        };
        let refused = list_page(&mut queues, state, None, 10, bad)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(refused.message().contains("page_token"), "{refused:?}");
    }
    Ok(())
}

on_each_store!(ended_tasks_list_by_when_they_ended);
async fn ended_tasks_list_by_when_they_ended(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    keep_completed(&mut queues, 0, 100).await?;
    // Enqueued a, b, c; ended c, a, b: COMPLETED lists c, a, b. DEAD the same way.
    enqueue(&mut queues, vec![spec("a", 1), spec("b", 1), spec("c", 1)]).await?;
    let leased = lease(&mut queues, 60_000, 10_000).await?;
    let receipt = |id: &str| leased.iter().find(|t| t.id == id).unwrap().receipt.clone();
    // Each end in a millisecond of its own (ends in one millisecond tie by enqueue order).
    let next_ms = || async {
        let mut conn = redis.conn().await;
        let now = common::redis_now_ms(&mut conn).await;
        wait_redis_time(&conn, now + 1).await;
    };
    for id in ["c", "a", "b"] {
        ack_with(&mut queues, &receipt(id), id.as_bytes()).await?;
        next_ms().await;
    }
    let (done, next) = list_page(&mut queues, TaskState::Completed, None, 10, "").await?;
    assert_eq!(
        (done, next.as_str()),
        (vec!["c".into(), "a".into(), "b".to_string()], "")
    );
    enqueue(&mut queues, vec![spec("x", 1), spec("y", 1)]).await?;
    let leased = lease(&mut queues, 60_000, 10_000).await?;
    for id in ["y", "x"] {
        let task = leased.iter().find(|t| t.id == id).unwrap();
        queues.nack(nack(&task.receipt, "", false)).await?;
        next_ms().await;
    }
    let (dead, _) = list_page(&mut queues, TaskState::Dead, None, 10, "").await?;
    assert_eq!(dead, ["y", "x"]);
    Ok(())
}

/// Opens a Subscribe stream and returns it with its first delivery.
/// Closes a Subscribe stream and waits until the server has seen it close: the stream
/// gauge reads none open and the feed's detach script has run. A Nack sent before that
/// could free the closing stream's slot while the feed still held it, and the feed sent
/// the task to it again (a CI run read one attempt too many).
async fn closed(
    server: &TestServer,
    redis: &TestStore,
    stream: tonic::Streaming<turnstile::pb::SubscribeResponse>,
) {
    let scripts = redis.command_calls("evalsha").await;
    drop(stream);
    server
        .wait_metric("turnstile_streams_open{kind=\"subscribe\"}", 0.0)
        .await;
    redis.wait_command_calls_above("evalsha", scripts).await;
}

async fn first_delivery(
    queues: &mut Queues,
    worker_id: &str,
) -> Result<(tonic::Streaming<turnstile::pb::SubscribeResponse>, Task), tonic::Status> {
    let mut stream = queues
        .subscribe(SubscribeRequest {
            queue: "q".into(),
            max_in_flight: 1,
            visibility: ms(60_000),
            worker_id: worker_id.into(),
        })
        .await?
        .into_inner();
    loop {
        if let Some(Event::Task(task)) = stream.message().await?.and_then(|m| m.event) {
            return Ok((stream, task));
        }
    }
}

on_each_store!(the_history_follows_cut_streams_re_attaches_and_an_ended_grace, own cluster);
async fn the_history_follows_cut_streams_re_attaches_and_an_ended_grace(
    redis: TestStore,
) -> TestResult {
    let server = TestServer::start_with(&redis, |config| {
        config.reattach_grace = std::time::Duration::from_millis(300);
    })
    .await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("a", 5)]).await?;
    // 1: a worker's stream is cut and it re-attaches within the grace: the same
    // delivery goes on (nothing recorded), and its Nack ends it.
    let (stream, first) = first_delivery(&mut queues, "w-r").await?;
    drop(stream);
    let (stream, again) = first_delivery(&mut queues, "w-r").await?;
    assert_eq!(again.receipt, first.receipt, "re-attached, not redelivered");
    // Closed first (its delivery stays leased to w-r for the grace), and the Nack
    // waits until the server has seen it close, so the Nack's freed slot does not bring
    // the task straight back to this stream.
    closed(&server, &redis, stream).await;
    queues.nack(nack(&again.receipt, "retry me", false)).await?;
    // 2: a stream without a worker_id closes: its delivery ends at once.
    let (stream, second) = first_delivery(&mut queues, "").await?;
    assert_eq!(second.attempt, 2);
    drop(stream);
    // 3: a worker's stream is cut and nobody re-attaches: the grace runs out.
    let (stream, third) = first_delivery(&mut queues, "w-g").await?;
    assert_eq!(third.attempt, 3);
    drop(stream);
    let fourth = lease(&mut queues, 60_000, 10_000).await?;
    assert_eq!(fourth[0].attempt, 4);
    let story = get_task(&mut queues, "a").await?;
    assert_eq!(
        outcomes(&story),
        [
            (1, AttemptOutcome::Nacked, "w-r", "retry me"),
            (2, AttemptOutcome::Expired, "", ""),
            (3, AttemptOutcome::Expired, "w-g", ""),
        ]
    );
    Ok(())
}

on_each_store!(dead_tasks_are_kept_by_count_and_by_age_when_asked);
async fn dead_tasks_are_kept_by_count_and_by_age_when_asked(redis: TestStore) -> TestResult {
    let server = TestServer::start(&redis).await;
    let mut queues = server.queues().await;
    let keep_dead = |age_ms: i64, count: u32| ConfigureQueueRequest {
        queue: "q".into(),
        keep_dead: Some(Retention {
            age: (age_ms > 0).then(|| ms(age_ms)).flatten(),
            count,
        }),
        ..Default::default()
    };
    let config = queues.configure_queue(keep_dead(0, 2)).await?.into_inner();
    assert_eq!(config.config.unwrap().keep_dead.unwrap().count, 2);
    let dying = queues.clone();
    let die = |id: &'static str| {
        let mut queues = dying.clone();
        async move {
            enqueue(&mut queues, vec![spec(id, 1)]).await?;
            let task = lease(&mut queues, 60_000, 10_000).await?;
            let dead = queues.nack(nack(&task[0].receipt, "no", false)).await?;
            assert!(dead.into_inner().dead);
            TestResult::Ok(())
        }
    };
    for id in ["a", "b", "c"] {
        die(id).await?;
    }
    // The newest two are kept; the oldest went as the third died.
    assert_eq!(
        get_task(&mut queues, "a").await.unwrap_err().code(),
        Code::NotFound
    );
    for id in ["b", "c"] {
        assert_eq!(get_task(&mut queues, id).await?.state(), TaskState::Dead);
    }
    let stats = queues
        .stats(StatsRequest { queue: "q".into() })
        .await?
        .into_inner();
    assert_eq!(stats.dead, 2);
    // By age: gone once older than it, with nothing else dying.
    queues.configure_queue(keep_dead(300, 0)).await?;
    die("d").await?;
    let died = unix_ms(&get_task(&mut queues, "d").await?.history[0].ended_at);
    wait_redis_time(&redis.conn().await, died + 301).await;
    for id in ["b", "c", "d"] {
        assert_eq!(
            get_task(&mut queues, id).await.unwrap_err().code(),
            Code::NotFound,
            "{id}"
        );
    }
    // Both 0: every DEAD task is kept again.
    let config = queues.configure_queue(keep_dead(0, 0)).await?.into_inner();
    assert!(config.config.unwrap().keep_dead.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_s_delivery_is_in_the_history_as_expired_with_its_worker_id(
) -> TestResult {
    let redis = common::TestRedis::start().await;
    let server = TestServer::start_with(&redis, |config| {
        config.reattach_grace = std::time::Duration::from_millis(300);
    })
    .await;
    let mut queues = server.queues().await;
    enqueue(&mut queues, vec![spec("stuck", 3)]).await?;
    let dir = common::TempDir::new("outcomes-kill");
    let started = dir.0.join("started");
    // The command runs until the test lets it go (a line into a FIFO), so it outlives
    // its killed parent by no fixed time.
    let release = dir.0.join("release");
    let fifo = std::ffi::CString::new(release.to_str().unwrap())?;
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let script = format!(
        "touch {}; read _ < {}",
        started.display(),
        release.display()
    );
    let mut worker = common::cli_of(&server)
        .args(["work", "q", "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::null())
        .spawn()?;
    common::eventually("the task running", common::WAIT, || async {
        started.exists()
    })
    .await;
    worker.start_kill()?;
    worker.wait().await?;
    // Its stream closed with the process; the re-attach grace runs out; the task is
    // delivered again, and its history says how the first delivery ended and whose it
    // was.
    let again = lease(&mut queues, 60_000, 10_000).await?;
    assert_eq!(again[0].attempt, 2);
    let story = get_task(&mut queues, "stuck").await?;
    let [first] = &story.history[..] else {
        panic!("{:?}", story.history)
    };
    assert_eq!(
        (first.number, first.outcome()),
        (1, AttemptOutcome::Expired)
    );
    assert!(!first.worker_id.is_empty(), "the work command's worker_id");
    // Let the orphaned command go (non-blocking: nothing to do if it is gone).
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(mut writer) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&release)
    {
        use std::io::Write;
        let _ = writer.write_all(b"go\n");
    }
    Ok(())
}
