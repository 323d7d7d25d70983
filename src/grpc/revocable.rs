//! [`Revocable`]: an open stream ended when its caller's token is revoked (or its
//! connection retires), as a client's cancel would end it.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tokio_stream::Stream;

use crate::{auth::Caller, error::Error};

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
