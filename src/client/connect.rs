//! Where the server is and how to reach it: `TURNSTILE_SERVER`, `TURNSTILE_TOKEN` and
//! `TURNSTILE_CA_CERT` as defaults, explicit settings winning; TLS with a private CA;
//! the bearer token on every call; several replicas named in one address
//! (`http://a:1,b:2`) balanced over.

use std::path::PathBuf;

use tonic::{
    metadata::AsciiMetadataValue,
    service::interceptor::InterceptedService,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint},
    Request, Status,
};

use super::error::{Error, Result};

/// The address a client uses when neither it nor `TURNSTILE_SERVER` names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";

/// A client's settings.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `http://host:port` or `https://host:port`; several replicas as
    /// `http://a:1,b:2`; a bare `host:port` is `http://`.
    pub server: Option<String>,
    /// The bearer token, when the server has an auth file.
    pub token: Option<String>,
    /// A CA certificate (PEM file) to trust for `https://`.
    pub ca_cert: Option<PathBuf>,
}

impl Options {
    /// The settings of the environment: `TURNSTILE_SERVER`, `TURNSTILE_TOKEN`,
    /// `TURNSTILE_CA_CERT` (empty ones count as unset).
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|value| !value.is_empty());
        Options {
            server: var("TURNSTILE_SERVER"),
            token: var("TURNSTILE_TOKEN"),
            ca_cert: var("TURNSTILE_CA_CERT").map(PathBuf::from),
        }
    }

    /// These settings, each unset one taken from the environment.
    pub fn or_env(self) -> Self {
        let env = Options::from_env();
        Options {
            server: self.server.or(env.server),
            token: self.token.or(env.token),
            ca_cert: self.ca_cert.or(env.ca_cert),
        }
    }

    /// A lazily connected channel and the interceptor adding the token.
    pub(super) fn channel(&self) -> Result<(Channel, Bearer)> {
        let server = self.server.as_deref().unwrap_or(DEFAULT_SERVER);
        let (scheme, hosts) = match server.split_once("://") {
            Some((scheme, hosts)) => (scheme, hosts),
            None => ("http", server),
        };
        let tls = match scheme {
            "http" => None,
            "https" => {
                let mut tls = ClientTlsConfig::new().with_enabled_roots();
                if let Some(path) = &self.ca_cert {
                    let pem = std::fs::read(path).map_err(|err| {
                        Error::Config(format!("ca_cert {}: {err}", path.display()))
                    })?;
                    tls = tls.ca_certificate(Certificate::from_pem(pem));
                }
                Some(tls)
            }
            other => {
                return Err(Error::Config(format!(
                    "server {server}: unknown scheme {other}"
                )))
            }
        };
        let mut endpoints = Vec::new();
        for host in hosts.trim_end_matches('/').split(',') {
            let url = format!("{scheme}://{host}");
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|err| Error::Config(format!("server {url}: {err}")))?;
            if let Some(tls) = &tls {
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|err| Error::Config(format!("server {url}: {err}")))?;
            }
            endpoints.push(endpoint);
        }
        let channel = match endpoints.as_slice() {
            [one] => one.connect_lazy(),
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        let bearer = match &self.token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| Error::Config("token: not a valid header value".into()))?,
            ),
            None => None,
        };
        Ok((channel, Bearer(bearer)))
    }
}

/// Adds `authorization: Bearer <token>` to every call, when there is a token.
#[derive(Clone, Debug)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A channel with the token on every call.
pub type Authed = InterceptedService<Channel, Bearer>;
