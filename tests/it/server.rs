//! Around the services: health (readiness follows Redis, liveness does not), server
//! reflection v1 and v1alpha, and the metrics endpoint.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestRedis, TestResult, TestServer};
use tokio_stream::StreamExt;
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};

async fn status(
    health: &mut HealthClient<tonic::transport::Channel>,
    service: &str,
) -> ServingStatus {
    let reply = health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("Check answers");
    ServingStatus::try_from(reply.into_inner().status).expect("known status")
}

async fn wait_for(
    health: &mut HealthClient<tonic::transport::Channel>,
    service: &str,
    want: ServingStatus,
) {
    let started = Instant::now();
    while status(health, service).await != want {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{service:?} never became {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_redis_and_liveness_stays_serving() -> TestResult {
    let mut redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let mut health = HealthClient::new(server.channel().await);
    let services = ["", "turnstile.v1.LockService", "turnstile.v1.QueueService"];
    for service in services {
        assert_eq!(status(&mut health, service).await, ServingStatus::Serving);
    }
    assert_eq!(
        status(&mut health, "liveness").await,
        ServingStatus::Serving
    );

    server.wait_metric("turnstile_redis_up", 1.0).await;
    redis.kill().await;
    for service in services {
        wait_for(&mut health, service, ServingStatus::NotServing).await;
    }
    server.wait_metric("turnstile_redis_up", 0.0).await;
    // A call while Redis is down fails, and the failure is counted by kind.
    let mut locks = server.locks().await;
    let failed = locks
        .describe(turnstile::pb::DescribeRequest {
            name: "x".into(),
            token: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Unavailable);
    let mut errors = 0.0;
    for kind in ["connection", "timeout"] {
        errors += server
            .metric(&format!("turnstile_redis_errors_total{{kind=\"{kind}\"}}"))
            .await;
    }
    assert!(errors >= 1.0, "no redis error counted");
    assert_eq!(
        status(&mut health, "liveness").await,
        ServingStatus::Serving
    );

    redis.restart().await;
    for service in services {
        wait_for(&mut health, service, ServingStatus::Serving).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_says_not_serving_first_and_is_bounded_by_the_grace() -> TestResult {
    let redis = TestRedis::start().await;
    let server =
        TestServer::start_with(&redis, |c| c.shutdown_grace = Duration::from_secs(1)).await;
    let mut health = HealthClient::new(server.channel().await);
    // A Watch stream that this client never closes: an unbounded drain would wait for
    // it forever.
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await?
        .into_inner();
    let first = watch.next().await.expect("a status")?;
    assert_eq!(first.status, ServingStatus::Serving as i32);
    let started = Instant::now();
    let shutting = tokio::spawn(server.shutdown());
    let next = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await?
        .expect("a status before the end")?;
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    shutting.await??;
    // Generous against the 1 s grace: a loaded machine, never an unbounded wait.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        started.elapsed()
    );
    Ok(())
}

/// One server reflection v1 question and its answer.
async fn reflect(
    server: &TestServer,
    question: tonic_reflection::pb::v1::server_reflection_request::MessageRequest,
) -> Result<tonic_reflection::pb::v1::server_reflection_response::MessageResponse, tonic::Status> {
    use tonic_reflection::pb::v1;
    let mut client =
        v1::server_reflection_client::ServerReflectionClient::new(server.channel().await);
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(question),
    };
    let mut replies = client
        .server_reflection_info(tokio_stream::once(request))
        .await?
        .into_inner();
    Ok(replies
        .next()
        .await
        .expect("a reply")?
        .message_response
        .expect("an answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1_and_v1alpha_list_both_services() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;

    use tonic_reflection::pb::{v1, v1alpha};
    let answer = reflect(
        &server,
        v1::server_reflection_request::MessageRequest::ListServices(String::new()),
    )
    .await?;
    let v1::server_reflection_response::MessageResponse::ListServicesResponse(list) = answer else {
        panic!("not a service list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"turnstile.v1.LockService".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"turnstile.v1.QueueService".to_owned()),
        "{names:?}"
    );

    let mut alpha =
        v1alpha::server_reflection_client::ServerReflectionClient::new(server.channel().await);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut replies = alpha
        .server_reflection_info(tokio_stream::once(request))
        .await?
        .into_inner();
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        replies.next().await.expect("a reply")?.message_response
    else {
        panic!("not a service list")
    };
    assert!(list
        .service
        .iter()
        .any(|s| s.name == "turnstile.v1.LockService"));
    Ok(())
}

#[tokio::test]
async fn accepted_connections_have_nagle_off() -> TestResult {
    // With Nagle on, a small stream message waits for the peer's delayed ACK (40 ms),
    // which broke the promptness of pushes and wake-ups.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut incoming = Box::pin(turnstile::floor::incoming(listener));
    let _client = tokio::net::TcpStream::connect(addr).await?;
    let accepted = incoming.next().await.expect("a connection")?;
    assert!(accepted.nodelay()?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_are_closed_at_once_and_counted() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start_with(&redis, |config| config.max_connections = 3).await;
    // The start-up health check's connection closes on its own time.
    server.wait_metric("turnstile_open_connections", 0.0).await;
    let describe = || turnstile::pb::DescribeRequest {
        name: "n".into(),
        token: String::new(),
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut locks = server.locks().await;
        locks.describe(describe()).await?;
        held.push(locks);
    }
    server.wait_metric("turnstile_open_connections", 3.0).await;
    // A fourth is closed as soon as it is accepted: its client sees a closed
    // connection (when connecting or on its first call), not a hang. grpc-go, grpcio
    // and grpc-js call that UNAVAILABLE; tonic's client says CANCELLED or UNKNOWN
    // (a reset or a broken pipe), so only the failure is checked here.
    let started = Instant::now();
    let fourth = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))?
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await;
    if let Ok(channel) = fourth {
        turnstile::pb::lock_service_client::LockServiceClient::new(channel)
            .describe(describe())
            .await
            .expect_err("a call on a fourth connection");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "it hung");
    assert!(server.metric("turnstile_refused_connections_total").await >= 1.0);
    // A connection that closes makes room.
    held.pop();
    server.wait_metric("turnstile_open_connections", 2.0).await;
    server.locks().await.describe(describe()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_carries_the_proto_comments() -> TestResult {
    use prost::Message;
    use tonic_reflection::pb::v1;
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let answer = reflect(
        &server,
        v1::server_reflection_request::MessageRequest::FileContainingSymbol(
            "turnstile.v1.LockService".into(),
        ),
    )
    .await?;
    let v1::server_reflection_response::MessageResponse::FileDescriptorResponse(files) = answer
    else {
        panic!("not a file descriptor")
    };
    let comments: Vec<String> = files
        .file_descriptor_proto
        .iter()
        .map(|bytes| prost_types::FileDescriptorProto::decode(bytes.as_slice()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter_map(|file| file.source_code_info)
        .flat_map(|info| info.location)
        .filter_map(|location| location.leading_comments)
        .collect();
    // What `grpcurl describe` and GUI clients show for Acquire and its request.
    assert!(
        comments
            .iter()
            .any(|c| c.contains("Not acquired is a normal answer")),
        "{comments:?}"
    );
    assert!(
        comments
            .iter()
            .any(|c| c.contains("The request of `Acquire`")),
        "{comments:?}"
    );
    Ok(())
}

fn ms(ms: i64) -> Option<prost_types::Duration> {
    common::ms(ms)
}

/// Leases one task of `queue` and gives it back (on its last attempt: it dies).
async fn lease_and_nack(
    queues: &mut turnstile::pb::queue_service_client::QueueServiceClient<tonic::transport::Channel>,
    queue: &str,
) -> TestResult {
    use turnstile::pb;
    let leased = queues
        .lease(pb::LeaseRequest {
            queue: queue.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    queues
        .nack(pb::NackRequest {
            queue: queue.into(),
            receipt: leased[0].receipt.clone(),
            delay: None,
            ..Default::default()
        })
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_known_traffic_by_method_code_stream_and_queue() -> TestResult {
    use turnstile::pb::{self, TaskSpec};
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    server.wait_metric("turnstile_redis_up", 1.0).await;
    let mut locks = server.locks().await;
    let mut queues = server.queues().await;
    let acquire = |owner: &str| pb::AcquireRequest {
        name: "m".into(),
        owner: owner.into(),
        ttl: ms(60_000),
        ..Default::default()
    };
    // Three Acquires answer OK (one of them not acquired), one Release is refused.
    for owner in ["a", "b", "c"] {
        locks.acquire(acquire(owner)).await?;
    }
    let refused = locks
        .release(pb::ReleaseRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let requests = |method: &str, code: &str| {
        format!("turnstile_rpc_requests_total{{method=\"{method}\",code=\"{code}\"}}")
    };
    assert_eq!(server.metric(&requests("Acquire", "OK")).await, 3.0);
    assert_eq!(
        server
            .metric(&requests("Release", "INVALID_ARGUMENT"))
            .await,
        1.0
    );
    assert_eq!(
        server
            .metric("turnstile_rpc_duration_seconds_count{method=\"Acquire\"}")
            .await,
        3.0
    );
    // A Hold counts as open while it is, and as one request when it ends.
    let mut hold = locks
        .hold(pb::HoldRequest {
            name: "h".into(),
            owner: "a".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    hold.next().await.expect("Acquired")?;
    server
        .wait_metric("turnstile_streams_open{kind=\"hold\"}", 1.0)
        .await;
    drop(hold);
    server
        .wait_metric("turnstile_streams_open{kind=\"hold\"}", 0.0)
        .await;
    server.wait_metric(&requests("Hold", "OK"), 1.0).await;

    // Queue "mq": three tasks; two delivered, one given back and delivered again.
    let spec = |id: &str, max_attempts: u32| TaskSpec {
        id: id.into(),
        max_attempts,
        ..Default::default()
    };
    queues
        .enqueue(pb::EnqueueRequest {
            queue: "mq".into(),
            tasks: vec![spec("1", 0), spec("2", 0), spec("3", 0)],
            ..Default::default()
        })
        .await?;
    let lease = |queue: &str, max_tasks: u32| pb::LeaseRequest {
        queue: queue.into(),
        max_tasks,
        ..Default::default()
    };
    let leased = queues.lease(lease("mq", 2)).await?.into_inner().tasks;
    queues
        .nack(pb::NackRequest {
            queue: "mq".into(),
            receipt: leased[0].receipt.clone(),
            delay: None,
            ..Default::default()
        })
        .await?;
    // The nacked task is due now, after task 3: both come in the next lease.
    let again = queues.lease(lease("mq", 2)).await?.into_inner().tasks;
    let attempts: Vec<u32> = again.iter().map(|t| t.attempt).collect();
    assert_eq!(attempts, [1, 2]);
    let queue_metric = |name: &str, queue: &str| format!("{name}{{queue=\"{queue}\"}}");
    assert_eq!(
        server
            .metric(&queue_metric("turnstile_deliveries_total", "mq"))
            .await,
        4.0
    );
    assert_eq!(
        server
            .metric(&queue_metric("turnstile_redeliveries_total", "mq"))
            .await,
        1.0
    );
    let tasks = |queue: &str, state: &str| {
        format!("turnstile_queue_tasks{{queue=\"{queue}\",state=\"{state}\"}}")
    };
    assert_eq!(server.metric(&tasks("mq", "ready")).await, 0.0);
    assert_eq!(server.metric(&tasks("mq", "in_flight")).await, 3.0);
    assert_eq!(server.metric(&tasks("mq", "dead")).await, 0.0);

    // Queue "dq": a task with one attempt, nacked: a dead letter.
    queues
        .enqueue(pb::EnqueueRequest {
            queue: "dq".into(),
            tasks: vec![spec("x", 1)],
            ..Default::default()
        })
        .await?;
    lease_and_nack(&mut queues, "dq").await?;
    assert_eq!(
        server
            .metric(&queue_metric("turnstile_dead_letters_total", "dq"))
            .await,
        1.0
    );
    assert_eq!(server.metric(&tasks("dq", "dead")).await, 1.0);
    // Redriven and dead again: the counter counts deaths, not the dead now.
    queues
        .redrive(pb::RedriveRequest {
            queue: "dq".into(),
            ids: vec![],
        })
        .await?;
    lease_and_nack(&mut queues, "dq").await?;
    assert_eq!(
        server
            .metric(&queue_metric("turnstile_dead_letters_total", "dq"))
            .await,
        2.0
    );
    assert_eq!(server.metric(&tasks("dq", "dead")).await, 1.0);
    // Each delivery's end by outcome: both of dq's were nacked; mq's one nack.
    let outcome = |queue: &str, outcome: &str| {
        format!("turnstile_task_outcomes_total{{queue=\"{queue}\",outcome=\"{outcome}\"}}")
    };
    assert_eq!(server.metric(&outcome("dq", "nacked")).await, 2.0);
    assert_eq!(server.metric(&outcome("dq", "acked")).await, 0.0);
    assert_eq!(server.metric(&outcome("mq", "nacked")).await, 1.0);

    // A Subscribe push: a delivery and one lateness observation.
    let mut stream = queues
        .subscribe(pb::SubscribeRequest {
            queue: "sq".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    server
        .wait_metric("turnstile_streams_open{kind=\"subscribe\"}", 1.0)
        .await;
    queues
        .enqueue(pb::EnqueueRequest {
            queue: "sq".into(),
            tasks: vec![spec("s", 0)],
            ..Default::default()
        })
        .await?;
    loop {
        let message = stream.next().await.expect("a message")?;
        if matches!(message.event, Some(pb::subscribe_response::Event::Task(_))) {
            break;
        }
    }
    server
        .wait_metric(&queue_metric("turnstile_deliveries_total", "sq"), 1.0)
        .await;
    assert_eq!(
        server
            .metric("turnstile_delivery_lateness_seconds_count")
            .await,
        1.0
    );
    // No tenant label without auth; only queues some RPC named are reported.
    let body = server.scrape().await;
    assert!(!body.contains("tenant="), "{body}");
    let reported = body
        .lines()
        .filter(|l| l.starts_with("turnstile_queue_tasks{") && l.contains("state=\"ready\""))
        .count();
    assert_eq!(reported, 3, "{body}");
    Ok(())
}
