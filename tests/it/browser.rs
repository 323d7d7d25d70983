//! The dashboard in a real browser (headless Chromium over WebDriver,
//! `common/browser.rs`) against a real server and Redis, as a person uses it: sign in
//! with a token, see the tenant's queues and not another tenant's, open a queue, page
//! through DEAD tasks, open one and read why it died and its history, redrive it and
//! see it READY, cancel a running task and see its worker told, pause and resume,
//! change a limit, trigger a schedule, and watch a lock appear and disappear on a page
//! nobody reloads. Each step saves a screenshot under `target/screenshots/dashboard/`.

use crate::common;

use common::{bearer, ms, Browser, TestResult};
use turnstile::pb::{
    lock_service_client::LockServiceClient, queue_service_client::QueueServiceClient, schedule,
    schedule_service_client::ScheduleServiceClient, subscribe_response, AcquireRequest,
    EnqueueRequest, NackRequest, PutScheduleRequest, ReleaseRequest, Schedule, SubscribeRequest,
    TaskSpec,
};

#[test]
fn a_person_sees_and_steers_queues_schedules_and_locks_in_a_real_browser() -> TestResult {
    // The walk's poll frames are too large for a test thread's 2 MiB stack in a debug
    // build (the WebDriver JSON): its own thread and runtime, with room.
    const STACK: usize = 32 << 20;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(STACK)
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || runtime.block_on(walk()))?
        .join()
        .expect("the walk panicked")
}

async fn walk() -> TestResult {
    let Some(browser) = Browser::start("dashboard").await else {
        return Ok(());
    };
    let (_redis, server) = crate::dashboard::shop_and_rival().await;
    let addr = server.dashboard.expect("a dashboard");
    let base = format!("http://{addr}");
    crate::dashboard::enqueue_as(&server, "rival-admin", "rival-orders").await;

    // The shop's queue: 150 DEAD tasks (one attempt each, nacked) and 3 READY ones.
    let mut queues =
        QueueServiceClient::with_interceptor(server.channel().await, bearer("shop-admin"));
    let task = |id: String, max_attempts: u32| TaskSpec {
        payload: format!("{{\"order\":\"{id}\",\"total\":42}}")
            .into_bytes()
            .into(),
        id,
        max_attempts,
        ..Default::default()
    };
    queues
        .enqueue(EnqueueRequest {
            queue: "orders".into(),
            tasks: (0..150).map(|n| task(format!("order-{n:03}"), 1)).collect(),
            ..Default::default()
        })
        .await?;
    let leased = queues
        .lease(common::lease_of("orders", 150))
        .await?
        .into_inner()
        .tasks;
    assert_eq!(leased.len(), 150);
    for task in leased {
        queues
            .nack(NackRequest {
                queue: "orders".into(),
                receipt: task.receipt,
                delay: None,
                error: format!("card declined for {}", task.id),
                ..Default::default()
            })
            .await?;
    }
    queues
        .enqueue(EnqueueRequest {
            queue: "orders".into(),
            tasks: (0..3).map(|n| task(format!("fresh-{n}"), 5)).collect(),
            ..Default::default()
        })
        .await?;
    ScheduleServiceClient::with_interceptor(server.channel().await, bearer("shop-admin"))
        .put_schedule(PutScheduleRequest {
            schedule: Some(Schedule {
                name: "nightly-report".into(),
                queue: "reports".into(),
                spec: Some(schedule::Spec::Cron("0 3 * * *".into())),
                ..Default::default()
            }),
        })
        .await?;

    // Sign in with a token.
    browser.goto(&base).await;
    browser.find("#token").await;
    browser.screenshot("01-sign-in").await;
    browser.fill("#token", "shop-admin").await;
    browser.click("form.sign-in button[type=submit]").await;
    let overview = browser.wait_for_text("orders").await;
    assert!(overview.contains("tenant shop"), "{overview}");
    assert!(
        !overview.contains("rival-orders"),
        "another tenant's queue shown"
    );
    browser.screenshot("02-overview").await;

    // Open the queue; page through its DEAD tasks; open one.
    browser.click("a[href=\"/queue?name=orders\"]").await;
    browser.wait_for_text("Queue orders").await;
    browser.screenshot("03-queue").await;
    browser.click("nav.states a[href$=\"state=dead\"]").await;
    browser.wait_for_text("1–100 of 150").await;
    browser.click("a[rel=next]").await;
    browser.wait_for_text("101–150 of 150").await;
    browser.screenshot("04-dead-tasks-page-2").await;
    browser
        .click("a[href=\"/task?queue=orders&id=order-100\"]")
        .await;
    let detail = browser.wait_for_text("Task order-100").await;
    assert!(detail.contains("Dead"), "{detail}");
    // Why it died, and its history: one delivery, nacked, with the worker's reason.
    assert!(detail.contains("card declined for order-100"), "{detail}");
    assert!(
        detail.contains("History") && detail.contains("Nacked"),
        "{detail}"
    );
    browser.click("nav.states a[href$=\"view=json\"]").await;
    browser.wait_for_text("\"total\": 42").await;
    browser.screenshot("05-task").await;

    // Redrive it: asked to confirm, then done, and the task is READY.
    browser.click("button[value=redrive]").await;
    browser.wait_for_text("Redrive 1 task (order-100)").await;
    browser.screenshot("06-confirm-redrive").await;
    browser.confirm().await;
    browser.wait_for_text("1 of 1 task redriven to READY").await;
    browser
        .goto(&format!("{base}/task?queue=orders&id=order-100"))
        .await;
    let detail = browser.wait_for_text("Task order-100").await;
    assert!(detail.contains("Ready"), "{detail}");

    // Cancel a running task from its page: its worker's stream is told.
    queues
        .enqueue(EnqueueRequest {
            queue: "packing".into(),
            tasks: vec![task("parcel-1".into(), 5)],
            ..Default::default()
        })
        .await?;
    let mut stream = queues
        .subscribe(SubscribeRequest {
            queue: "packing".into(),
            max_in_flight: 1,
            visibility: ms(60_000),
            worker_id: "packer-1".into(),
        })
        .await?
        .into_inner();
    let running = loop {
        if let Some(subscribe_response::Event::Task(task)) =
            stream.message().await?.and_then(|m| m.event)
        {
            break task;
        }
    };
    browser
        .goto(&format!("{base}/task?queue=packing&id=parcel-1"))
        .await;
    browser.wait_for_text("Task parcel-1").await;
    browser.click("button[value=cancel-running]").await;
    browser.wait_for_text("Cancel 1 task (parcel-1)").await;
    browser.screenshot("06b-confirm-cancel-running").await;
    browser.confirm().await;
    browser.wait_for_text("1 of 1 task cancelled").await;
    let told = loop {
        if let Some(subscribe_response::Event::Cancelled(told)) =
            stream.message().await?.and_then(|m| m.event)
        {
            break told;
        }
    };
    assert_eq!(told.receipt, running.receipt);

    // Pause and resume the queue.
    browser.goto(&format!("{base}/queue?name=orders")).await;
    browser.click("button[value=pause-queue]").await;
    browser.confirm().await;
    browser.wait_for_text("Queue orders is paused.").await;
    browser.click("a[href=\"/queue?name=orders\"]").await;
    browser.wait_for_text("Paused").await;
    browser.screenshot("07-paused").await;
    browser.click("button[value=resume-queue]").await;
    browser.confirm().await;
    browser
        .wait_for_text("Queue orders is delivering again.")
        .await;

    // Change a limit.
    browser.goto(&format!("{base}/queue?name=orders")).await;
    browser.fill("input[name=max_in_flight]", "7").await;
    browser.click("button[value=limits]").await;
    browser.wait_for_text("7 in flight").await;
    browser.confirm().await;
    browser.wait_for_text("limits are now: 7 in flight").await;

    // Trigger a schedule.
    browser.goto(&format!("{base}/schedules")).await;
    browser.wait_for_text("nightly-report").await;
    browser.screenshot("08-schedules").await;
    browser.click("button[value=trigger-schedule]").await;
    browser.confirm().await;
    browser.wait_for_text("enqueued task").await;
    browser.goto(&format!("{base}/queue?name=reports")).await;
    browser.wait_for_text("Ready\n1").await;

    // A lock appears and disappears on a page nobody reloads (its live region).
    browser.goto(&format!("{base}/locks")).await;
    browser.wait_for_text("No lock is held").await;
    let mut locks =
        LockServiceClient::with_interceptor(server.channel().await, bearer("shop-admin"));
    let won = locks
        .acquire(AcquireRequest {
            name: "label-printer".into(),
            owner: "packing-station-3".into(),
            ttl: ms(60_000),
            ..Default::default()
        })
        .await?
        .into_inner();
    let held = browser.wait_for_text("label-printer").await;
    assert!(held.contains("packing-station-3"), "{held}");
    browser.screenshot("09-lock-held").await;
    locks
        .release(ReleaseRequest {
            name: "label-printer".into(),
            token: won.token,
        })
        .await?;
    browser
        .wait_until_text(|text| !text.contains("label-printer"), "the lock gone")
        .await;
    Ok(())
}
