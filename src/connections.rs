//! The accepted TCP connections, at most `--max-connections` open at once. A
//! connection past the ceiling is closed as soon as it is accepted: its client sees
//! UNAVAILABLE at once (and may try another replica) instead of hanging in the listen
//! backlog, and a flood of connections costs a bounded amount of memory (each open
//! HTTP/2 connection holds its buffers and window state).

use std::{
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_stream::{Stream, StreamExt};

/// The default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

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

    /// The connections `listener` accepts, with Nagle's algorithm off (see
    /// [`crate::server::incoming`]); those past the ceiling are dropped (closed) here.
    pub fn accept(self, listener: TcpListener) -> impl Stream<Item = io::Result<Connection>> {
        crate::server::incoming(listener).filter_map(move |accepted| {
            let stream = match accepted {
                Ok(stream) => stream,
                Err(err) => return Some(Err(err)),
            };
            match self.open.clone().try_acquire_owned() {
                Ok(permit) => Some(Ok(Connection {
                    stream,
                    _permit: permit,
                })),
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
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
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
