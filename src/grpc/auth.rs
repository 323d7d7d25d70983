//! Where auth is enforced: [`Authorized`] wraps each of our gRPC services and checks
//! every call before tonic decodes a byte of it or any handler runs, for unary and
//! streaming RPCs alike; [`Revocable`] ends an open stream whose token is revoked.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tokio_stream::Stream;
use tonic::{
    codegen::{http, Service},
    server::NamedService,
    Status,
};

use super::rpc::Refusal;
use crate::{
    auth::{Auth, Caller},
    error::Error,
    method::Method,
};

/// A service whose calls must pass [`Auth::check`]; the [`Caller`] goes in the
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

/// A stream that ends with the error of [`Caller::revoked`] when its caller's token is
/// revoked. The inner stream is dropped at that moment, which is what a client's
/// cancel does too: a Hold releases its lock, a Subscribe gives its tasks back.
pub struct Revocable<S> {
    inner: Option<Pin<Box<S>>>,
    revoked: Pin<Box<dyn Future<Output = Error> + Send>>,
}

impl<S> Revocable<S> {
    /// `inner`, ended when `caller`'s token no longer lets it in.
    pub fn new(inner: S, caller: Caller) -> Self {
        Self::until(inner, async move { caller.revoked().await })
    }

    /// `inner`, ended with the error `end` completes with (a connection's retirement).
    pub fn until(inner: S, end: impl Future<Output = Error> + Send + 'static) -> Self {
        Self {
            inner: Some(Box::pin(inner)),
            revoked: Box::pin(end),
        }
    }
}

impl<S, T> Stream for Revocable<S>
where
    S: Stream<Item = Result<T, Error>>,
{
    type Item = Result<T, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let next = inner.as_mut().poll_next(cx);
        if next.is_ready() {
            return next;
        }
        match self.revoked.as_mut().poll(cx) {
            Poll::Ready(err) => {
                self.inner = None;
                Poll::Ready(Some(Err(err)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
