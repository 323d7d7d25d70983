//! Redis URLs: parsed into what every connection is made from, and redacted for
//! messages and logs (a URL may hold a password).

use crate::error::{Error, Result};

/// Parses `url` (`redis://`, `rediss://`, `unix://`, with an ACL user and password
/// if given) into what every connection is made from. For `rediss://`, `ca` (PEM) is
/// the one CA to trust; `None` trusts the system's roots. Errors never quote the URL,
/// which may hold a password.
pub fn connection_info(url: &str, ca: Option<Vec<u8>>) -> Result<redis::ConnectionInfo> {
    let invalid =
        |err: redis::RedisError| Error::invalid("redis_url", format!("{}: {err}", redact(url)));
    let info = match ca {
        None => redis::IntoConnectionInfo::into_connection_info(url).map_err(invalid)?,
        Some(root_cert) => {
            let certificates = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            };
            redis::Client::build_with_tls(url, certificates)
                .map_err(invalid)?
                .get_connection_info()
                .clone()
        }
    };
    Ok(info)
}

/// `url` with its password (if any) replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            let password = if rest[..at].contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{password}{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}
