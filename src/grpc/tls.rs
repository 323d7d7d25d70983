//! The TLS settings, read from their PEM files at start: the gRPC server's
//! certificate and key, the CA its clients' certificates must be signed by (mTLS),
//! and the CA to trust for a `rediss://` Redis. An unreadable file stops the start,
//! naming its flag.

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The PEM files of the server's TLS (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
#[derive(Clone, Copy, Debug)]
pub struct ServerPem<'a> {
    /// The certificate chain; without it (or the key) the server is plaintext.
    pub cert: Option<&'a Path>,
    /// The certificate's private key.
    pub key: Option<&'a Path>,
    /// The CA client certificates must be signed by (mTLS), if any.
    pub client_ca: Option<&'a Path>,
}

/// The gRPC server's TLS settings, as read from their files (tonic's own type inside:
/// the composition root passes it on without knowing it).
#[derive(Clone, Debug)]
pub struct ServerTls(pub(super) ServerTlsConfig);

/// The server's TLS, or `None` for plaintext (no certificate and key).
pub fn server_config(pem: ServerPem<'_>) -> Result<Option<ServerTls>, String> {
    let (Some(cert), Some(key)) = (pem.cert, pem.key) else {
        return Ok(None);
    };
    let identity = Identity::from_pem(read("--tls-cert", cert)?, read("--tls-key", key)?);
    let mut tls = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = pem.client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read("--tls-client-ca", ca)?));
    }
    Ok(Some(ServerTls(tls)))
}

/// The CA to trust for `rediss://` (`--redis-ca`), or `None` for the system's roots.
pub fn redis_ca(path: Option<&Path>) -> Result<Option<Vec<u8>>, String> {
    path.map(|path| read("--redis-ca", path)).transpose()
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(path).map_err(|err| format!("{flag} {}: {err}", path.display()))?;
    if !pem.starts_with(b"-----BEGIN") && !String::from_utf8_lossy(&pem).contains("-----BEGIN ") {
        return Err(format!("{flag} {}: not a PEM file", path.display()));
    }
    Ok(pem)
}
