//! The metering layer: [`Metered`] puts this replica's [`Metrics`] in every request of
//! the service it wraps (where `rpc::unary` and `rpc::stream` record the call) and
//! counts the calls the auth layer refused before any handler ran, which it marks with
//! a [`Refusal`]. Its own file, below both `auth` and `rpc`, so neither imports the
//! other.

use std::{future::Future, pin::Pin};

use tonic::codegen::http;

use crate::{method::Method, metrics::Metrics};

/// Meters every call of the service it wraps: puts this replica's [`Metrics`] in the
/// request, where `rpc::unary` and `rpc::stream` record the call, and counts the calls the
/// auth layer refused before any handler ran (it marks its answer with a [`Refusal`]).
#[derive(Clone, Debug)]
pub struct Metered<S> {
    inner: S,
    metrics: Metrics,
}

impl<S> Metered<S> {
    /// `inner`, its calls counted in `metrics`.
    pub fn new(inner: S, metrics: Metrics) -> Self {
        Self { inner, metrics }
    }
}

/// Marks a response the auth layer answered itself: `method`, refused with `code`.
#[derive(Clone, Copy, Debug)]
pub struct Refusal {
    pub method: Method,
    pub code: tonic::Code,
}

impl<S, B> tonic::codegen::Service<http::Request<B>> for Metered<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = MeteredAnswer<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.metrics.clone());
        MeteredAnswer {
            answer: self.inner.call(request),
            metrics: self.metrics.clone(),
        }
    }
}

/// The answer of a metered call, counted when the auth layer refused it. A plain
/// wrapper, not a boxed `async` block: every call of the server passes here, and the
/// auth layer's future is already boxed.
pub struct MeteredAnswer<F> {
    answer: F,
    metrics: Metrics,
}

impl<F, E> Future for MeteredAnswer<F>
where
    F: Future<Output = Result<http::Response<tonic::body::Body>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        let response = std::task::ready!(Pin::new(&mut this.answer).poll(cx))?;
        if let Some(refusal) = response.extensions().get::<Refusal>() {
            this.metrics.request(refusal.method, refusal.code as i32);
        }
        std::task::Poll::Ready(Ok(response))
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Metered<S> {
    const NAME: &'static str = S::NAME;
}
