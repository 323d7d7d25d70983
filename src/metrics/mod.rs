//! The Prometheus families of the contract's "Metrics" section, kept by this replica
//! and served at `/metrics` on `--metrics-listen` (see [`http`]). A leaf: it imports
//! only the foundations, and the layers above register what they measure.
//!
//! - `text.rs`: the text format, and [`Family`], how a layer registers a family it
//!   keeps itself (lock waiters, connections, Redis errors, Subscribe pushes and their
//!   lateness, schedule fires, whether Redis is up), read at every scrape.
//! - `rpc.rs`: requests by method and status code, unary durations and open streams,
//!   recorded by the gRPC layer's RPC path.
//! - `queues.rs`: the per-queue families, bounded by a cache of the queues named
//!   lately, with the depths read from Redis through the queue layer's
//!   [`DepthSource`].
//!
//! No metric carries a token.

pub mod histogram;
mod http;
mod queues;
mod rpc;
mod text;

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

pub use http::spawn;
pub use queues::{DepthSource, QueueDepths};
pub use rpc::StreamKind;
pub use text::{Family, Kind};

use crate::{method::Method, tenant::Tenant};

/// This replica's metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    rpc: rpc::RpcCounters,
    queues: queues::QueueFamilies,
    /// Families the layers keep, in the order they registered.
    registered: Mutex<Vec<Family>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Empty metrics; `tenant_label` when auth is on (the queue families then carry
    /// a `tenant` label).
    pub fn new(tenant_label: bool) -> Self {
        Self(Arc::new(Inner {
            rpc: rpc::RpcCounters::default(),
            queues: queues::QueueFamilies::new(tenant_label),
            registered: Mutex::default(),
        }))
    }

    /// Adds a family read at every scrape, after the RPC families.
    pub fn register(&self, family: Family) {
        lock(&self.0.registered).push(family);
    }

    /// Where scrapes read the depths of the queues named recently.
    pub fn register_depths(&self, source: Arc<dyn DepthSource>) {
        self.0.queues.register_depths(source);
    }

    /// One call of `method` ended with status `code` (a stream: when it ended).
    pub fn request(&self, method: Method, code: i32) {
        self.0.rpc.request(method, code);
    }

    /// A unary call of `method` took `elapsed`.
    pub fn duration(&self, method: Method, elapsed: Duration) {
        self.0.rpc.duration(method, elapsed);
    }

    /// A stream of `kind` opened; it counts as open until the guard is dropped.
    pub fn stream_opened(&self, kind: StreamKind) -> StreamGuard {
        self.0.rpc.stream(kind, 1);
        StreamGuard {
            metrics: self.clone(),
            kind,
        }
    }

    /// An RPC named `queue` of `tenant` (it is reported for the next
    /// [`queues::QUEUE_WINDOW`]).
    pub fn seen(&self, tenant: &Tenant, queue: &str) {
        self.0.queues.touch(tenant, queue, |_| {});
    }

    /// Tasks of `queue` were delivered with these `attempt`s (above 1: a redelivery).
    pub fn delivered(&self, tenant: &Tenant, queue: &str, attempts: impl Iterator<Item = u32>) {
        let (mut deliveries, mut redeliveries) = (0, 0);
        for attempt in attempts {
            deliveries += 1;
            if attempt > 1 {
                redeliveries += 1;
            }
        }
        if deliveries > 0 {
            self.0.queues.touch(tenant, queue, |entry| {
                entry.deliveries += deliveries;
                entry.redeliveries += redeliveries;
            });
        }
    }

    /// A limit (flow control's `reason`: paused, max_in_flight, …) held back a
    /// deliverable task of `queue`.
    pub fn held_back(&self, tenant: &Tenant, queue: &str, reason: &'static str) {
        self.0.queues.touch(tenant, queue, |entry| {
            match entry.held_back.iter_mut().find(|(name, _)| *name == reason) {
                Some((_, count)) => *count += 1,
                None => entry.held_back.push((reason, 1)),
            }
        });
    }

    /// The whole scrape: the RPC families, the registered ones, then the per-queue
    /// ones (their depths read from Redis now).
    pub async fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        self.0.rpc.write(&mut out);
        for family in lock(&self.0.registered).iter() {
            family.write(&mut out);
        }
        self.0.queues.write(&mut out).await;
        out
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a stream counted as open; dropped when the stream ends.
#[derive(Debug)]
pub struct StreamGuard {
    metrics: Metrics,
    kind: StreamKind,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.metrics.0.rpc.stream(self.kind, -1);
    }
}
