//! The Prometheus families of the contract's "Metrics" section, kept by this replica
//! and served at `/metrics` on `--metrics-listen` (see [`http`]).
//!
//! - Per RPC (`rpc.rs` records, the auth guard records its refusals): requests by
//!   method and status code, and unary durations. Fixed arrays of atomics indexed by
//!   method: no lock on the request path.
//! - Streams open by kind, lock waiters, connections: gauges of this replica.
//! - Per queue: deliveries and redeliveries this replica made, and at scrape time
//!   the queue's depths and its dead letters, read from Redis (so those two are the
//!   queue's own numbers, the same from every replica: aggregate them with `max`, not
//!   `sum`). Only queues some RPC named in the last [`QUEUE_WINDOW`] are reported, at
//!   most [`MAX_QUEUES`] of them, so label cardinality stays bounded whatever names
//!   clients send. With auth on, a `tenant` label joins the queue families. No metric
//!   carries a token.

pub mod histogram;
mod http;

use std::{
    collections::HashMap,
    fmt::Write,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::{Duration, Instant},
};

use histogram::Histogram;
pub use http::spawn;
use tonic::Code;

use crate::{auth::Tenant, redis::ErrorKind as RedisErrorKind};

/// The RPCs, in the order of the per-method arrays.
pub const METHODS: [&str; 16] = [
    "Acquire",
    "Release",
    "Extend",
    "Describe",
    "ReleaseAll",
    "Hold",
    "Enqueue",
    "Lease",
    "Ack",
    "Nack",
    "ExtendLease",
    "Peek",
    "Cancel",
    "Redrive",
    "Stats",
    "Subscribe",
];

/// A queue is reported while some RPC named it this recently.
pub const QUEUE_WINDOW: Duration = Duration::from_secs(600);

/// The most queues reported at once; past it, the least recently named one goes.
pub const MAX_QUEUES: usize = 1000;

/// gRPC status codes, by their number.
const CODES: usize = 17;

/// A server stream's kind, for `turnstile_streams_open{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Hold,
    Subscribe,
}

/// One queue of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueLabel {
    pub tenant: Tenant,
    pub queue: String,
}

#[derive(Debug)]
struct QueueEntry {
    seen: Instant,
    deliveries: u64,
    redeliveries: u64,
}

/// The queues named recently, by tenant and then by name, so that naming a known
/// queue (every queue RPC does) is two lookups by reference and allocates nothing.
#[derive(Debug, Default)]
struct Queues {
    by_tenant: HashMap<Tenant, HashMap<String, QueueEntry>>,
    /// Queues in `by_tenant`, against [`MAX_QUEUES`].
    len: usize,
}

impl Queues {
    /// Marks `queue` of `tenant` seen `now` (adding it, making room if full), then
    /// applies `change` to its entry.
    fn touch(
        &mut self,
        tenant: &Tenant,
        queue: &str,
        now: Instant,
        change: impl FnOnce(&mut QueueEntry),
    ) {
        let known = self
            .by_tenant
            .get(tenant)
            .is_some_and(|queues| queues.contains_key(queue));
        if !known {
            if self.len >= MAX_QUEUES {
                self.forget_old(now);
            }
            if self.len >= MAX_QUEUES {
                self.forget_oldest();
            }
            let entry = QueueEntry {
                seen: now,
                deliveries: 0,
                redeliveries: 0,
            };
            self.by_tenant
                .entry(tenant.clone())
                .or_default()
                .insert(queue.to_owned(), entry);
            self.len += 1;
        }
        if let Some(entry) = self
            .by_tenant
            .get_mut(tenant)
            .and_then(|queues| queues.get_mut(queue))
        {
            entry.seen = now;
            change(entry);
        }
    }

    /// Drops the queues not named within [`QUEUE_WINDOW`].
    fn forget_old(&mut self, now: Instant) {
        for queues in self.by_tenant.values_mut() {
            queues.retain(|_, entry| now.duration_since(entry.seen) < QUEUE_WINDOW);
        }
        self.by_tenant.retain(|_, queues| !queues.is_empty());
        self.len = self.by_tenant.values().map(HashMap::len).sum();
    }

    /// Drops the least recently named queue.
    fn forget_oldest(&mut self) {
        let oldest = self
            .by_tenant
            .iter()
            .flat_map(|(tenant, queues)| {
                queues.iter().map(move |(queue, e)| (e.seen, tenant, queue))
            })
            .min_by_key(|(seen, _, _)| *seen)
            .map(|(_, tenant, queue)| (tenant.clone(), queue.clone()));
        if let Some((tenant, queue)) = oldest {
            if let Some(queues) = self.by_tenant.get_mut(&tenant) {
                queues.remove(&queue);
                self.len -= 1;
            }
        }
    }
}

/// This replica's metrics; cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Auth is on: queue families carry a `tenant` label.
    tenant_label: bool,
    requests: [[AtomicU64; CODES]; METHODS.len()],
    durations: [Histogram; METHODS.len()],
    streams: [AtomicI64; 2],
    lateness: Histogram,
    redis_up: AtomicBool,
    queues: Mutex<Queues>,
}

impl Metrics {
    /// Empty metrics; `tenant_label` when auth is on.
    pub fn new(tenant_label: bool) -> Self {
        Self(Arc::new(Inner {
            tenant_label,
            requests: Default::default(),
            durations: Default::default(),
            streams: Default::default(),
            lateness: Histogram::default(),
            redis_up: AtomicBool::new(false),
            queues: Mutex::default(),
        }))
    }

    fn method(method: &str) -> Option<usize> {
        METHODS.iter().position(|m| *m == method)
    }

    /// One RPC ended with `code` (a stream: when it ended).
    pub fn request(&self, method: &str, code: Code) {
        if let Some(at) = Self::method(method) {
            let code = (code as usize).min(CODES - 1);
            self.0.requests[at][code].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A unary RPC took `elapsed`.
    pub fn duration(&self, method: &str, elapsed: Duration) {
        if let Some(at) = Self::method(method) {
            self.0.durations[at].observe(elapsed.as_secs_f64());
        }
    }

    /// A stream of `kind` opened; it counts as open until the guard is dropped.
    pub fn stream_opened(&self, kind: StreamKind) -> StreamGuard {
        self.0.streams[kind as usize].fetch_add(1, Ordering::Relaxed);
        StreamGuard {
            metrics: self.clone(),
            kind,
        }
    }

    /// An RPC named `queue` of `tenant` (it is reported for the next [`QUEUE_WINDOW`]).
    pub fn seen(&self, tenant: &Tenant, queue: &str) {
        self.with_queue(tenant, queue, |_| {});
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
            self.with_queue(tenant, queue, |entry| {
                entry.deliveries += deliveries;
                entry.redeliveries += redeliveries;
            });
        }
    }

    /// A Subscribe push went out `late` after its task's due time.
    pub fn pushed(&self, late: Duration) {
        self.0.lateness.observe(late.as_secs_f64());
    }

    /// Whether the readiness probe finds Redis answering.
    pub fn set_redis_up(&self, up: bool) {
        self.0.redis_up.store(up, Ordering::Relaxed);
    }

    fn with_queue(&self, tenant: &Tenant, queue: &str, change: impl FnOnce(&mut QueueEntry)) {
        let mut queues = self.0.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.touch(tenant, queue, Instant::now(), change);
    }

    /// The queues named within the window, with their delivery counts; older ones go.
    fn recent_queues(&self) -> Vec<(QueueLabel, u64, u64)> {
        let mut queues = self.0.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.forget_old(Instant::now());
        let mut recent: Vec<_> = queues
            .by_tenant
            .iter()
            .flat_map(|(tenant, queues)| {
                queues.iter().map(move |(queue, e)| {
                    let label = QueueLabel {
                        tenant: tenant.clone(),
                        queue: queue.clone(),
                    };
                    (label, e.deliveries, e.redeliveries)
                })
            })
            .collect();
        recent.sort_by(|a, b| {
            (a.0.tenant.as_str(), &a.0.queue).cmp(&(b.0.tenant.as_str(), &b.0.queue))
        });
        recent
    }

    /// The `queue="…"` (and `tenant="…"`) labels of a queue.
    fn queue_labels(&self, label: &QueueLabel) -> String {
        if self.0.tenant_label {
            format!(
                "tenant=\"{}\",queue=\"{}\"",
                escape(label.tenant.as_str()),
                escape(&label.queue)
            )
        } else {
            format!("queue=\"{}\"", escape(&label.queue))
        }
    }
}

/// Keeps a stream counted as open; dropped when the stream ends.
#[derive(Debug)]
pub struct StreamGuard {
    metrics: Metrics,
    kind: StreamKind,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.metrics.0.streams[self.kind as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What a scrape reads besides [`Metrics`]: gauges owned elsewhere and queue depths.
pub struct Sources {
    pub limits: crate::limits::Limits,
    pub connections: crate::connections::ConnectionLimit,
    pub queues: crate::queue::QueueStore,
    pub redis_errors: crate::redis::ErrorCounts,
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

impl Metrics {
    /// The whole scrape: this replica's families, then the queue depths read from
    /// Redis now (a queue whose read fails is left out of `turnstile_queue_tasks`).
    pub async fn render(&self, sources: &Sources) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let m = &self.0;
        header(
            &mut out,
            "turnstile_rpc_requests_total",
            "counter",
            "RPCs ended, by method and status code (streams when they end).",
        );
        for (at, method) in METHODS.iter().enumerate() {
            for code in 0..CODES {
                let count = m.requests[at][code].load(Ordering::Relaxed);
                if count > 0 {
                    let name = crate::error::code_name(Code::from_i32(code as i32));
                    let _ = writeln!(out, "turnstile_rpc_requests_total{{method=\"{method}\",code=\"{name}\"}} {count}");
                }
            }
        }
        header(
            &mut out,
            "turnstile_rpc_duration_seconds",
            "histogram",
            "Unary RPC durations, by method.",
        );
        for (at, method) in METHODS.iter().enumerate() {
            if METHODS[at] != "Hold" && METHODS[at] != "Subscribe" {
                m.durations[at].render(
                    &mut out,
                    "turnstile_rpc_duration_seconds",
                    &format!("method=\"{method}\""),
                );
            }
        }
        header(
            &mut out,
            "turnstile_streams_open",
            "gauge",
            "Open server streams, by kind.",
        );
        for (kind, at) in [
            ("hold", StreamKind::Hold),
            ("subscribe", StreamKind::Subscribe),
        ] {
            let _ = writeln!(
                out,
                "turnstile_streams_open{{kind=\"{kind}\"}} {}",
                m.streams[at as usize].load(Ordering::Relaxed)
            );
        }
        header(
            &mut out,
            "turnstile_lock_waiters",
            "gauge",
            "Acquire and Hold calls waiting on a held lock.",
        );
        let _ = writeln!(out, "turnstile_lock_waiters {}", sources.limits.waiting());
        // The names before the contract's families, kept for existing dashboards:
        // --max-streams and --max-waiters count these.
        header(
            &mut out,
            "turnstile_open_streams",
            "gauge",
            "Open Hold and Subscribe streams (--max-streams counts them).",
        );
        let _ = writeln!(
            out,
            "turnstile_open_streams {}",
            sources.limits.open_streams()
        );
        header(
            &mut out,
            "turnstile_waiting_calls",
            "gauge",
            "The same as turnstile_lock_waiters (--max-waiters counts them).",
        );
        let _ = writeln!(out, "turnstile_waiting_calls {}", sources.limits.waiting());
        header(
            &mut out,
            "turnstile_delivery_lateness_seconds",
            "histogram",
            "Subscribe pushes: push time minus the task's due time.",
        );
        m.lateness
            .render(&mut out, "turnstile_delivery_lateness_seconds", "");
        header(
            &mut out,
            "turnstile_redis_errors_total",
            "counter",
            "Failed Redis commands, by kind.",
        );
        for kind in RedisErrorKind::ALL {
            let _ = writeln!(
                out,
                "turnstile_redis_errors_total{{kind=\"{}\"}} {}",
                kind.as_str(),
                sources.redis_errors.get(kind)
            );
        }
        header(
            &mut out,
            "turnstile_redis_up",
            "gauge",
            "1 while the readiness probe finds Redis answering.",
        );
        let _ = writeln!(
            out,
            "turnstile_redis_up {}",
            u8::from(m.redis_up.load(Ordering::Relaxed))
        );
        header(
            &mut out,
            "turnstile_open_connections",
            "gauge",
            "Open client connections.",
        );
        let _ = writeln!(
            out,
            "turnstile_open_connections {}",
            sources.connections.open()
        );
        header(
            &mut out,
            "turnstile_refused_connections_total",
            "counter",
            "Connections closed at once past --max-connections.",
        );
        let _ = writeln!(
            out,
            "turnstile_refused_connections_total {}",
            sources.connections.refused()
        );

        let recent = self.recent_queues();
        header(
            &mut out,
            "turnstile_deliveries_total",
            "counter",
            "Tasks this replica delivered (Lease and Subscribe), by queue.",
        );
        for (label, deliveries, _) in &recent {
            let _ = writeln!(
                out,
                "turnstile_deliveries_total{{{}}} {deliveries}",
                self.queue_labels(label)
            );
        }
        header(
            &mut out,
            "turnstile_redeliveries_total",
            "counter",
            "Deliveries with attempt above 1, by queue.",
        );
        for (label, _, redeliveries) in &recent {
            let _ = writeln!(
                out,
                "turnstile_redeliveries_total{{{}}} {redeliveries}",
                self.queue_labels(label)
            );
        }
        let mut depths = Vec::with_capacity(recent.len());
        for (label, _, _) in &recent {
            match sources
                .queues
                .tenant(&label.tenant)
                .stats(&label.queue)
                .await
            {
                Ok(stats) => depths.push((label, stats)),
                Err(err) => {
                    tracing::debug!(queue = label.queue, cause = %err, "queue depths not scraped")
                }
            }
        }
        header(
            &mut out,
            "turnstile_queue_tasks",
            "gauge",
            "Tasks by queue and state (read from Redis: the same on every replica).",
        );
        for (label, stats) in &depths {
            let labels = self.queue_labels(label);
            for (state, count) in [
                ("ready", stats.ready),
                ("delayed", stats.delayed),
                ("in_flight", stats.in_flight),
                ("dead", stats.dead),
            ] {
                let _ = writeln!(
                    out,
                    "turnstile_queue_tasks{{{labels},state=\"{state}\"}} {count}"
                );
            }
        }
        header(
            &mut out,
            "turnstile_dead_letters_total",
            "counter",
            "Tasks that went DEAD, by queue (kept in Redis: the same on every replica).",
        );
        for (label, stats) in &depths {
            let _ = writeln!(
                out,
                "turnstile_dead_letters_total{{{}}} {}",
                self.queue_labels(label),
                stats.dead_letters
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_bounded_by_count_and_forgotten_after_the_window() {
        let metrics = Metrics::new(false);
        let tenant = Tenant::default();
        for n in 0..MAX_QUEUES + 5 {
            metrics.seen(&tenant, &format!("q{n}"));
        }
        let recent = metrics.recent_queues();
        assert_eq!(recent.len(), MAX_QUEUES);
        // The oldest went first.
        assert!(!recent.iter().any(|(label, _, _)| label.queue == "q0"));
        assert!(recent
            .iter()
            .any(|(label, _, _)| label.queue == format!("q{}", MAX_QUEUES + 4)));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}
