//! One worker's Subscribe stream, as the feeds hand it out: the deliveries its
//! feed (`feeds.rs`) leases to it, its `--max-streams` permit, and its feed
//! membership. Dropping the stream (the client went away) leaves the feed, which then
//! gives its unacked deliveries back, or keeps them for a re-attach when it named a
//! worker_id. Knows nothing of the feeds: they depend on this, not the other way
//! round. Heartbeats are added by `rpc::stream`.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_stream::Stream;

use super::{counters::PushCounters, Task};
use crate::{error::Result, time::now_ms};

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

/// Runs its action once, when dropped: how a stream leaves its feed.
pub struct LeaveOnDrop(Option<Box<dyn FnOnce() + Send + Sync>>);

impl LeaveOnDrop {
    /// Runs `leave` when this is dropped.
    pub fn new(leave: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self(Some(Box::new(leave)))
    }
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        if let Some(leave) = self.0.take() {
            leave();
        }
    }
}

/// A delivery from the feed, or the error that ends the stream, boxed whole. A channel
/// allocates 32 slots at once. By heaptrack under `bench idle` (2026-11-27), a channel
/// of `Result<Task>` was 4.6 KB of every open stream, of `Result<Box<Task>>` 1.5 KB (an
/// `Error` is 40 bytes), of boxes 0.5 KB, for the same one allocation per delivered
/// task.
pub type Delivery = Box<Result<Pushed>>;

/// What a Subscribe stream is sent. Its variants differ in size, and that costs
/// nothing: it travels boxed ([`Delivery`]), one allocation per message either way.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Pushed {
    /// A task leased to it.
    Task(Task),
    /// A task it runs was cancelled (`Cancel.running`).
    Cancelled { id: String, receipt: String },
}

/// The deliveries of one subscriber. Ends after an error (shutdown: UNAVAILABLE).
pub struct Subscription {
    /// Deliveries from the feed, or the error that ends the stream.
    rx: mpsc::UnboundedReceiver<Delivery>,
    /// Leaves the feed when the stream is dropped.
    _leave: LeaveOnDrop,
    /// This stream's place under `--max-streams`.
    _permit: OwnedSemaphorePermit,
    /// Where each pushed task's lateness is counted.
    pushes: Arc<PushCounters>,
}

impl Subscription {
    /// The stream of `rx`, holding its feed membership and its permit.
    pub(super) fn new(
        rx: mpsc::UnboundedReceiver<Delivery>,
        leave: LeaveOnDrop,
        permit: OwnedSemaphorePermit,
        pushes: Arc<PushCounters>,
    ) -> Self {
        Self {
            rx,
            _leave: leave,
            _permit: permit,
            pushes,
        }
    }
}

impl Stream for Subscription {
    type Item = Result<Pushed>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self
            .rx
            .poll_recv(cx)
            .map(|item| item.map(|delivery| *delivery));
        if let Poll::Ready(Some(Ok(Pushed::Task(task)))) = &item {
            let late = now_ms() - task.due_at_ms;
            self.pushes
                .pushed(Duration::from_millis(late.max(0) as u64));
        }
        item
    }
}
