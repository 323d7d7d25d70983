//! Around the services: health (readiness follows Redis, liveness does not), server
//! reflection v1 and v1alpha, and the metrics endpoint.

mod common;

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

    redis.kill().await;
    for service in services {
        wait_for(&mut health, service, ServingStatus::NotServing).await;
    }
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
    let mut incoming = Box::pin(turnstile::server::incoming(listener));
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
