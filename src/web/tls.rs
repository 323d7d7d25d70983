//! The dashboard over TLS, with the gRPC port's `--tls-cert` and `--tls-key`: a
//! listener that hands axum finished TLS streams. Handshakes run beside the accept loop,
//! each bounded by [`HANDSHAKE_TIMEOUT`], so a slow or silent client never holds up the
//! next one.

use std::{io, net::SocketAddr, path::Path, sync::Arc, time::Duration};

use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::{rustls, server::TlsStream, TlsAcceptor};

use crate::shutdown::Shutdown;

/// The longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for axum to take them.
const READY_BACKLOG: usize = 64;

/// The dashboard's TLS settings from the PEM files (an unreadable or unparsable file
/// stops the start, naming its flag).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|err| format!("--tls-cert {}: {err}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|err| format!("--tls-key {}: {err}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("dashboard TLS: {err}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|err| format!("--tls-cert/--tls-key: {err}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A listener of finished TLS connections, for `axum::serve`.
pub struct TlsListener {
    /// Streams whose handshake finished, from the accept loop.
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` until shutdown, each handshake in its own task.
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor, shutdown: &Shutdown) -> io::Result<Self> {
        let local = tcp.local_addr()?;
        let (send, ready) = mpsc::channel(READY_BACKLOG);
        let stop = shutdown.clone();
        shutdown.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = tcp.accept() => accepted,
                    () = stop.cancelled() => return,
                };
                let Ok((stream, addr)) = accepted else {
                    // Out of file descriptors and the like: breathe, then go on.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                let send = send.clone();
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                    {
                        let _ = send.send((tls, addr)).await;
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (shutdown): no more connections, ever; axum's
            // graceful shutdown ends the serve.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
