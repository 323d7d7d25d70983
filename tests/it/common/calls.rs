//! Small helpers for building requests and checking replies.

use std::time::Duration;

/// A protobuf duration of `ms` milliseconds.
pub fn ms(ms: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

/// Unix milliseconds of an optional timestamp.
pub fn unix_ms(ts: &Option<prost_types::Timestamp>) -> i64 {
    ts.as_ref().map(turnstile::ms_from_timestamp).unwrap_or(0)
}

/// A request with a gRPC deadline.
pub fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}
/// The status a waiting call gets when its deadline passes: DEADLINE_EXCEEDED answered
/// by the server itself (a client-side timeout would be CANCELLED), and in time.
pub fn assert_server_deadline(status: &tonic::Status, started: std::time::Instant) {
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().contains("deadline exceeded while waiting"),
        "{status:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A queue's Stats shows nothing left in any state.
pub fn assert_drained(stats: &turnstile::pb::StatsResponse) {
    assert_eq!(
        (stats.ready, stats.delayed, stats.in_flight, stats.dead),
        (0, 0, 0, 0),
        "{stats:?}"
    );
}

/// The next task pushed on a Subscribe `stream` within `within` (heartbeats skipped),
/// or None; a stream that fails or ends fails the test.
pub async fn next_task(
    stream: &mut tonic::Streaming<turnstile::pb::SubscribeResponse>,
    within: Duration,
) -> Option<turnstile::pb::Task> {
    use tokio_stream::StreamExt;
    use turnstile::pb::{subscribe_response::Event, SubscribeResponse};
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(Ok(SubscribeResponse {
                event: Some(Event::Task(task)),
            }))) => return Some(task),
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(status))) => panic!("stream failed: {status}"),
            Ok(None) => panic!("stream ended"),
            Err(_) => return None,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes an auth file of `(token, tenant, permissions)` entries; returns its path.
pub fn write_auth_file(
    path: &std::path::Path,
    grants: &[(&str, &str, &[&str])],
) -> std::path::PathBuf {
    let mut text = String::new();
    for (token, tenant, permissions) in grants {
        let permissions: Vec<String> = permissions.iter().map(|p| format!("{p:?}")).collect();
        text.push_str(&format!(
            "[[token]]\nsha256 = \"{}\"\ntenant = {tenant:?}\npermissions = [{}]\n\n",
            hex(&turnstile::testing::sha256(token)),
            permissions.join(", ")
        ));
    }
    std::fs::write(path, text).expect("write auth file");
    path.to_path_buf()
}

/// An interceptor that sends `token` as the bearer token of every call (a client of
/// a server with `--auth-file`: `XClient::with_interceptor(channel, bearer("t"))`).
pub fn bearer(
    token: &str,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    let value: tonic::metadata::MetadataValue<_> =
        format!("Bearer {token}").parse().expect("an ASCII token");
    move |mut request: tonic::Request<()>| {
        request
            .metadata_mut()
            .insert("authorization", value.clone());
        Ok(request)
    }
}

/// A Lease of up to `max_tasks` of `queue` for a minute.
pub fn lease_of(queue: &str, max_tasks: u32) -> turnstile::pb::LeaseRequest {
    turnstile::pb::LeaseRequest {
        queue: queue.into(),
        max_tasks,
        visibility: ms(60_000),
        ..Default::default()
    }
}
