//! The accepted TCP connections, at most `--max-connections` open at once. A
//! connection past the ceiling is closed as soon as it is accepted: its client sees
//! UNAVAILABLE at once (and may try another replica) instead of hanging in the listen
//! backlog, and a flood of connections costs a bounded amount of memory (each open
//! HTTP/2 connection holds its buffers and window state).
//!
//! With `--max-connection-age`, each connection also knows when it retires: tonic
//! sends its GOAWAY at the age; the streams on it end themselves at age + grace
//! ([`retires_at`], read by `rpc::stream`), and the connection is closed here a moment
//! later whatever is still running on it (a long `wait`), as grpc-go's
//! MaxConnectionAgeGrace does. tonic's own grace never sends the GOAWAY (it sleeps age
//! + grace, then drops the connection), so only the age is given to tonic.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use std::time::Duration;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{Instant, Sleep},
};

use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Connected, TlsConnectInfo};

use crate::metrics::{Family, Kind, Metrics};

/// How long after its streams were ended an aged-out connection is closed: time for
/// their last messages and trailers to reach the client.
const CLOSE_AFTER_RETIRE: std::time::Duration = std::time::Duration::from_secs(1);

/// Open connections against their ceiling, shared with the metrics endpoint.
#[derive(Clone, Debug)]
pub struct ConnectionLimit {
    /// One permit per open connection, held by [`Connection`] until it closes.
    open: Arc<Semaphore>,
    max: usize,
    /// Connections closed at once because the ceiling was reached.
    refused: Arc<AtomicU64>,
}

impl ConnectionLimit {
    /// A ceiling of `max` open connections.
    pub fn new(max: usize) -> Self {
        Self {
            open: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
            refused: Arc::default(),
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max.min(Semaphore::MAX_PERMITS) - self.open.available_permits()
    }

    /// Connections refused since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Reports the open and the refused connections.
    pub fn register(&self, metrics: &Metrics) {
        let open = self.clone();
        metrics.register(Family::single(
            "turnstile_open_connections",
            Kind::Gauge,
            "Open client connections.",
            move || open.open() as u64,
        ));
        let refused = self.clone();
        metrics.register(Family::single(
            "turnstile_refused_connections_total",
            Kind::Counter,
            "Connections closed at once past --max-connections.",
            move || refused.refused(),
        ));
    }

    /// The connections `listener` accepts, with Nagle's algorithm off (see
    /// [`incoming`]), each retiring at `age` if given; those past the
    /// ceiling are dropped (closed) here.
    pub fn accept(
        self,
        listener: TcpListener,
        age: Option<ConnectionAge>,
    ) -> impl Stream<Item = io::Result<Connection>> {
        incoming(listener).filter_map(move |accepted| {
            let stream = match accepted {
                Ok(stream) => stream,
                Err(err) => return Some(Err(err)),
            };
            match self.open.clone().try_acquire_owned() {
                Ok(permit) => {
                    let retires_at = age.map(|age| Instant::now() + age.age + age.grace);
                    Some(Ok(Connection {
                        stream,
                        _permit: permit,
                        retires_at,
                        closes: retires_at
                            .map(|at| Box::pin(tokio::time::sleep_until(at + CLOSE_AFTER_RETIRE))),
                    }))
                }
                Err(_) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        max = self.max,
                        "connection refused: --max-connections reached"
                    );
                    None
                }
            }
        })
    }
}

/// An accepted connection that counts against the ceiling until it is dropped.
pub struct Connection {
    stream: TcpStream,
    /// Returned to the ceiling when the connection closes.
    _permit: OwnedSemaphorePermit,
    /// When its streams end (`--max-connection-age` + grace), if it ages out.
    retires_at: Option<Instant>,
    /// Fires a moment after `retires_at`: reads then fail, which closes it.
    closes: Option<Pin<Box<Sleep>>>,
}

/// What a request learns about its connection (tonic puts it in the extensions).
#[derive(Clone, Debug)]
pub struct Peer {
    /// When the connection's streams must end, if it ages out.
    pub retires_at: Option<Instant>,
}

impl Connected for Connection {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Self::ConnectInfo {
        Peer {
            retires_at: self.retires_at,
        }
    }
}

/// When the connection a request came on retires, if it ages out (plain or TLS).
pub fn retires_at(extensions: &tonic::Extensions) -> Option<Instant> {
    extensions
        .get::<Peer>()
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<Peer>>()
                .map(|tls| tls.get_ref())
        })
        .and_then(|peer| peer.retires_at)
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(closes) = self.closes.as_mut() {
            if closes.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection reached --max-connection-age and its grace",
                )));
            }
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// `--max-connection-age` and its grace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionAge {
    /// GOAWAY after this.
    pub age: Duration,
    /// Streams end, and the connection closes, this much later.
    pub grace: Duration,
}

/// The accepted connections, with Nagle's algorithm off. tonic sets TCP_NODELAY only
/// on listeners it binds itself; without it, a small stream message written while an
/// earlier one awaits its ACK waits for the peer's delayed ACK (40 ms on Linux), which
/// made the p99 of Subscribe pushes and unary calls 40–45 ms.
pub fn incoming(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        let stream = accepted?;
        stream.set_nodelay(true)?;
        Ok(stream)
    })
}
