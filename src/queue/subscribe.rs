//! One worker's Subscribe stream: the deliveries its feed (`scheduler.rs`) leases to
//! it, with a heartbeat whenever nothing else was sent for `--stream-heartbeat`. The
//! stream holds its `--max-streams` permit and its feed membership; dropping it (the
//! client went away) makes the feed give its unacked deliveries back, or keep them
//! for a re-attach when it named a worker_id. Domain events only: `api.rs` converts.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    sync::{mpsc, OwnedSemaphorePermit},
    time::{Instant, Sleep},
};
use tokio_stream::Stream;

use super::{scheduler::LeaveGuard, Task};
use crate::error::{Error, Result};

/// How a Subscribe stream is to be served (validated).
#[derive(Clone, Debug)]
pub struct SubscribeSpec {
    /// Most unacked deliveries at once.
    pub max_in_flight: u32,
    /// Lease length of each delivery.
    pub visibility: Duration,
    /// Keeps the deliveries for `--reattach-grace` after the stream ends.
    pub worker_id: Option<String>,
}

/// One event of a Subscribe stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscribeEvent {
    /// A delivery, leased to this stream.
    Task(Task),
    /// Nothing else was sent within the heartbeat interval.
    Heartbeat,
}

/// The stream of one subscriber. Ends after an error (shutdown: UNAVAILABLE).
pub struct Subscription {
    /// Deliveries from the feed, or the error that ends the stream.
    rx: mpsc::UnboundedReceiver<Result<Task>>,
    heartbeat: Duration,
    /// When the next heartbeat is due; pushed back by every message sent.
    beat: Pin<Box<Sleep>>,
    done: bool,
    /// Leaves the feed when the stream is dropped.
    _guard: LeaveGuard,
    /// This stream's place under `--max-streams`.
    _permit: OwnedSemaphorePermit,
}

impl Subscription {
    pub(super) fn new(
        rx: mpsc::UnboundedReceiver<Result<Task>>,
        heartbeat: Duration,
        guard: LeaveGuard,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        Self {
            rx,
            heartbeat,
            beat: Box::pin(tokio::time::sleep(heartbeat)),
            done: false,
            _guard: guard,
            _permit: permit,
        }
    }
}

impl Stream for Subscription {
    type Item = Result<SubscribeEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let event = match this.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(task))) => Ok(SubscribeEvent::Task(task)),
            Poll::Ready(Some(Err(err))) => {
                this.done = true;
                return Poll::Ready(Some(Err(err)));
            }
            Poll::Ready(None) => {
                this.done = true;
                return Poll::Ready(None);
            }
            Poll::Pending => match this.beat.as_mut().poll(cx) {
                Poll::Ready(()) => Ok(SubscribeEvent::Heartbeat),
                Poll::Pending => return Poll::Pending,
            },
        };
        let at = Instant::now() + this.heartbeat;
        this.beat.as_mut().reset(at);
        Poll::Ready(Some(event))
    }
}
