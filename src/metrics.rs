//! `GET /metrics` in the Prometheus text format on `--metrics-listen`: open streams and
//! waiting calls (both gauges). A tiny HTTP/1.1 responder, since a scrape is
//! one request on a fresh connection and an HTTP framework would cost more to build
//! than the whole endpoint.

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use crate::{limits::Limits, shutdown::Shutdown};

/// Serves scrapes on `listener` until shutdown.
pub fn spawn(listener: TcpListener, limits: Limits, shutdown: &Shutdown) {
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
            let body = render(&limits);
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let read = socket.read(&mut request).await.unwrap_or(0);
                let found = request[..read].starts_with(b"GET /metrics ");
                let response = if found {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
                };
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
}

fn render(limits: &Limits) -> String {
    format!(
        "# HELP turnstile_open_streams Open Hold and Subscribe streams.\n\
         # TYPE turnstile_open_streams gauge\n\
         turnstile_open_streams {}\n\
         # HELP turnstile_waiting_calls Acquire and Hold calls waiting on a held lock.\n\
         # TYPE turnstile_waiting_calls gauge\n\
         turnstile_waiting_calls {}\n",
        limits.open_streams(),
        limits.waiting()
    )
}
