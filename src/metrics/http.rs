//! `GET /metrics` (and `HEAD`, for probes) in the Prometheus text format on
//! `--metrics-listen` (the families: see the module above). A
//! query string is ignored, as scrapers add their own. A tiny HTTP/1.1 responder,
//! since a scrape is one request on a fresh connection and an HTTP framework would
//! cost more to build than the whole endpoint.

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use super::Metrics;
use crate::shutdown::Shutdown;

/// Serves scrapes of `metrics` on `listener` until shutdown.
pub fn spawn(listener: TcpListener, metrics: Metrics, shutdown: &Shutdown) {
    let task_shutdown = shutdown.clone();
    shutdown.spawn(async move {
        loop {
            let (mut socket, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::warn!(cause = %err, "metrics accept failed");
                        continue;
                    }
                },
                () = task_shutdown.cancelled() => return,
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let read = socket.read(&mut request).await.unwrap_or(0);
                let body = metrics.render().await;
                let response = respond(&request[..read], &body);
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
}

/// The whole HTTP response to a request whose first bytes are `request`.
fn respond(request: &[u8], body: &str) -> String {
    let line = request.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let status = match (method, path) {
        ("GET" | "HEAD", "/metrics") => "200 OK",
        (_, "/metrics") => "405 Method Not Allowed\r\nallow: GET, HEAD",
        _ => "404 Not Found",
    };
    let (length, body) = match (status, method) {
        ("200 OK", "GET") => (body.len(), body),
        ("200 OK", _) => (body.len(), ""),
        _ => (0, ""),
    };
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n{body}"
    )
}

#[cfg(test)]
mod tests {
    use super::respond;

    #[test]
    fn get_and_head_answer_with_or_without_a_query_string_and_others_do_not() {
        let get = respond(b"GET /metrics?x=1 HTTP/1.1\r\nhost: a\r\n\r\n", "body\n");
        assert!(get.starts_with("HTTP/1.1 200 OK\r\n") && get.ends_with("\r\n\r\nbody\n"));
        let head = respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", "body\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.contains("content-length: 5\r\n"));
        assert!(head.ends_with("\r\n\r\n"));
        assert!(respond(b"POST /metrics HTTP/1.1\r\n\r\n", "b").starts_with("HTTP/1.1 405"));
        assert!(respond(b"GET /other HTTP/1.1\r\n\r\n", "b").starts_with("HTTP/1.1 404"));
    }
}
