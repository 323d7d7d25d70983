//! The heartbeat of server streams (`Hold`, `Subscribe`): wraps a stream of domain
//! events and adds a [`Beat::Heartbeat`] whenever nothing was sent for
//! `--stream-heartbeat`, so a proxy never sees an idle stream and closes it. Every
//! item sent pushes the next heartbeat back. The stream ends after its first error.
//! The engines behind the streams (the Hold loop, the Subscribe feed) only send
//! events; when a heartbeat is due is decided here alone.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::time::{Instant, Sleep};
use tokio_stream::Stream;

use crate::error::Result;

/// One item of a stream with heartbeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Beat<T> {
    /// An event of the wrapped stream.
    Event(T),
    /// Nothing else was sent within the heartbeat interval.
    Heartbeat,
}

/// `inner` with a heartbeat after every `every` of silence. Ends after an error.
pub struct Heartbeats<S> {
    inner: S,
    every: Duration,
    /// When the next heartbeat is due; pushed back by every item sent.
    beat: Pin<Box<Sleep>>,
    /// An error or the end of `inner` was passed on: nothing more is sent.
    done: bool,
}

impl<S> Heartbeats<S> {
    /// Wraps `inner`; the first heartbeat is due `every` from now.
    pub fn new(inner: S, every: Duration) -> Self {
        Self {
            inner,
            every,
            beat: Box::pin(tokio::time::sleep(every)),
            done: false,
        }
    }
}

impl<S, T> Stream for Heartbeats<S>
where
    S: Stream<Item = Result<T>> + Unpin,
{
    type Item = Result<Beat<T>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let item = match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(event))) => Beat::Event(event),
            Poll::Ready(Some(Err(err))) => {
                this.done = true;
                return Poll::Ready(Some(Err(err)));
            }
            Poll::Ready(None) => {
                this.done = true;
                return Poll::Ready(None);
            }
            Poll::Pending => match this.beat.as_mut().poll(cx) {
                Poll::Ready(()) => Beat::Heartbeat,
                Poll::Pending => return Poll::Pending,
            },
        };
        let next = Instant::now() + this.every;
        this.beat.as_mut().reset(next);
        Poll::Ready(Some(Ok(item)))
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;
    use tokio_stream::{wrappers::UnboundedReceiverStream, StreamExt};

    use super::*;
    use crate::error::Error;

    const EVERY: Duration = Duration::from_secs(15);

    fn wrapped() -> (
        mpsc::UnboundedSender<Result<u32>>,
        Heartbeats<UnboundedReceiverStream<Result<u32>>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Heartbeats::new(UnboundedReceiverStream::new(rx), EVERY))
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_beats_every_interval_and_events_push_the_beat_back() {
        let (tx, mut stream) = wrapped();
        let start = Instant::now();
        assert_eq!(stream.next().await, Some(Ok(Beat::Heartbeat)));
        assert_eq!(start.elapsed(), EVERY);
        tokio::time::advance(EVERY / 2).await;
        tx.send(Ok(7)).unwrap();
        assert_eq!(stream.next().await, Some(Ok(Beat::Event(7))));
        let sent = Instant::now();
        assert_eq!(stream.next().await, Some(Ok(Beat::Heartbeat)));
        assert_eq!(sent.elapsed(), EVERY, "counted from the last item sent");
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_ends_after_its_first_error_or_when_the_events_end() {
        let (tx, mut stream) = wrapped();
        tx.send(Err(Error::ShuttingDown)).unwrap();
        tx.send(Ok(1)).unwrap();
        assert_eq!(stream.next().await, Some(Err(Error::ShuttingDown)));
        assert_eq!(stream.next().await, None);

        let (tx, mut stream) = wrapped();
        tx.send(Ok(1)).unwrap();
        drop(tx);
        assert_eq!(stream.next().await, Some(Ok(Beat::Event(1))));
        assert_eq!(stream.next().await, None);
    }
}
