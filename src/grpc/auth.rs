//! Where auth is enforced: [`Authorized`] wraps each of our gRPC services and checks
//! every call before tonic decodes a byte of it or any handler runs, for unary and
//! streaming RPCs alike (`revocable.rs` ends an open stream whose token is revoked).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tonic::{
    codegen::{http, Service},
    server::NamedService,
    Status,
};

use super::metered::Refusal;
use crate::{auth::Auth, method::Method};

/// A service whose calls must pass [`Auth::check`]; the [`Caller`](crate::auth::Caller) goes in the
/// request's extensions, a refusal is answered here as a gRPC status (marked with a
/// [`Refusal`], which the RPC path's metering counts).
#[derive(Clone, Debug)]
pub struct Authorized<S> {
    inner: S,
    auth: Auth,
}

impl<S> Authorized<S> {
    /// `inner`, guarded by `auth`.
    pub fn new(inner: S, auth: Auth) -> Self {
        Self { inner, auth }
    }
}

impl<S, B> Service<http::Request<B>> for Authorized<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let authorization = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|value| value.as_bytes());
        match self.auth.check(request.uri().path(), authorization) {
            Some(Ok(caller)) => {
                request.extensions_mut().insert(caller);
                Box::pin(self.inner.call(request))
            }
            Some(Err(err)) => {
                let path = request.uri().path();
                tracing::debug!(method = path, cause = %err, "call refused");
                let status: Status = err.into();
                let code = status.code();
                let mut response = status.into_http();
                if let Some(method) = Method::from_path(path) {
                    response.extensions_mut().insert(Refusal { method, code });
                }
                Box::pin(std::future::ready(Ok(response)))
            }
            // Not one of our methods: tonic answers UNIMPLEMENTED.
            None => Box::pin(self.inner.call(request)),
        }
    }
}

impl<S: NamedService> NamedService for Authorized<S> {
    const NAME: &'static str = S::NAME;
}
