//! The Prometheus families of the contract's "Metrics" section, kept by this replica
//! and served at `/metrics` on `--metrics-listen` (see [`http`]). A leaf: it imports
//! only the foundations, and the layers above register what they measure.
//!
//! - Kept here: requests by method and status code and unary durations (recorded by
//!   the gRPC layer's RPC path; fixed arrays of atomics indexed by [`Method`], no lock
//!   on the request path), open streams by kind, Subscribe lateness, whether Redis is
//!   up, and per queue the deliveries and redeliveries this replica made.
//! - Registered by the layers that own them ([`Metrics::register`]): gauges and
//!   counters read at scrape time (lock waiters, connections, Redis errors).
//! - Per queue, read from Redis at scrape time through the [`DepthSource`] the queue
//!   layer registers: the queue's depths and its dead letters (the queue's own
//!   numbers, the same from every replica: aggregate them with `max`, not `sum`).
//!   Only queues some RPC named in the last [`QUEUE_WINDOW`] are reported, at most
//!   [`MAX_QUEUES`] of them, so label cardinality stays bounded whatever names clients
//!   send. With auth on, a `tenant` label joins the queue families. No metric carries
//!   a token.

pub mod histogram;
mod http;

use std::{
    collections::HashMap,
    fmt::{Display, Write},
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::{Duration, Instant},
};

use histogram::Histogram;
pub use http::spawn;

use crate::{
    method::{code_name, Method, CODE_NAMES},
    tenant::Tenant,
};

/// A queue is reported while some RPC named it this recently.
pub const QUEUE_WINDOW: Duration = Duration::from_secs(600);

/// The most queues reported at once; past it, the least recently named one goes.
pub const MAX_QUEUES: usize = 1000;

/// gRPC status codes, by their number.
const CODES: usize = CODE_NAMES.len();

/// A server stream's kind, for `turnstile_streams_open{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Hold,
    Subscribe,
    Watch,
}

/// A Prometheus metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// Reads a registered family's samples at scrape time: `(labels, value)` pairs, the
/// labels as the text format spells them inside the braces (`kind="timeout"`), empty
/// for none.
pub type Samples = Box<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// A family a layer above keeps itself and registers here, read at each scrape.
pub struct Family {
    /// `turnstile_…`.
    pub name: &'static str,
    pub kind: Kind,
    /// The `# HELP` text.
    pub help: &'static str,
    pub samples: Samples,
}

impl Family {
    /// A family of one unlabelled sample.
    pub fn single(
        name: &'static str,
        kind: Kind,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            kind,
            help,
            samples: Box::new(move || vec![(String::new(), read())]),
        }
    }
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
}

/// A queue's depths as Redis holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepths {
    pub ready: u64,
    pub delayed: u64,
    pub in_flight: u64,
    pub dead: u64,
    /// Tasks that ever went DEAD (a counter kept in Redis).
    pub dead_letters: u64,
    /// The queue is paused (flow control).
    pub paused: bool,
    /// Deliveries that ended, by outcome name (counters kept in Redis).
    pub outcomes: [(&'static str, u64); 5],
}

/// Where a scrape reads queue depths: implemented by the queue layer, which
/// registers it with [`Metrics::register_depths`].
pub trait DepthSource: Send + Sync {
    /// The depths of `queue` of `tenant` now, or why they could not be read.
    fn depths<'a>(
        &'a self,
        tenant: &'a Tenant,
        queue: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<QueueDepths, String>> + Send + 'a>>;
}

/// A queue named recently, with what this replica counted for it.
struct RecentQueue {
    label: QueueLabel,
    deliveries: u64,
    redeliveries: u64,
    held_back: Vec<(&'static str, u64)>,
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
    /// Times a limit held back a deliverable task, by the limit's name.
    held_back: Vec<(&'static str, u64)>,
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
                held_back: Vec::new(),
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

struct Inner {
    /// Auth is on: queue families carry a `tenant` label.
    tenant_label: bool,
    requests: [[AtomicU64; CODES]; Method::ALL.len()],
    durations: [Histogram; Method::ALL.len()],
    streams: [AtomicI64; 3],
    lateness: Histogram,
    /// Subscribe deliveries leased by the Enqueue that stored them.
    enqueue_pushes: AtomicU64,
    /// Subscribe deliveries leased by the Ack run that freed their slots.
    ack_pushes: AtomicU64,
    /// Schedule fires that enqueued a task, and their lateness.
    fires: AtomicU64,
    fire_lateness: Histogram,
    /// Skipped fire times: [overlap, too_old].
    skipped: [AtomicU64; 2],
    redis_up: AtomicBool,
    queues: Mutex<Queues>,
    /// Families the layers above keep, in the order they registered.
    registered: Mutex<Vec<Family>>,
    /// The queue layer's depths, once registered.
    depths: Mutex<Option<Arc<dyn DepthSource>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("tenant_label", &self.tenant_label)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Empty metrics; `tenant_label` when auth is on.
    pub fn new(tenant_label: bool) -> Self {
        Self(Arc::new(Inner {
            tenant_label,
            // std's Default stops at arrays of 32.
            requests: std::array::from_fn(|_| Default::default()),
            durations: std::array::from_fn(|_| Histogram::default()),
            streams: Default::default(),
            lateness: Histogram::default(),
            enqueue_pushes: AtomicU64::new(0),
            ack_pushes: AtomicU64::new(0),
            fires: AtomicU64::new(0),
            fire_lateness: Histogram::default(),
            skipped: Default::default(),
            redis_up: AtomicBool::new(false),
            queues: Mutex::default(),
            registered: Mutex::default(),
            depths: Mutex::default(),
        }))
    }

    /// Adds a family read at every scrape, after the families kept here.
    pub fn register(&self, family: Family) {
        lock(&self.0.registered).push(family);
    }

    /// Where scrapes read the depths of the queues named recently.
    pub fn register_depths(&self, source: Arc<dyn DepthSource>) {
        *lock(&self.0.depths) = Some(source);
    }

    /// One call of `method` ended with status `code` (a stream: when it ended).
    pub fn request(&self, method: Method, code: i32) {
        let code = usize::try_from(code).unwrap_or(2).min(CODES - 1);
        self.0.requests[method.index()][code].fetch_add(1, Ordering::Relaxed);
    }

    /// A unary call of `method` took `elapsed`.
    pub fn duration(&self, method: Method, elapsed: Duration) {
        self.0.durations[method.index()].observe(elapsed.as_secs_f64());
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

    /// A limit (flow control's `reason`: paused, max_in_flight, …) held back a
    /// deliverable task of `queue`.
    pub fn held_back(&self, tenant: &Tenant, queue: &str, reason: &'static str) {
        self.with_queue(tenant, queue, |entry| {
            match entry.held_back.iter_mut().find(|(name, _)| *name == reason) {
                Some((_, count)) => *count += 1,
                None => entry.held_back.push((reason, 1)),
            }
        });
    }

    /// A Subscribe push went out `late` after its task's due time.
    pub fn pushed(&self, late: Duration) {
        self.0.lateness.observe(late.as_secs_f64());
    }

    /// `count` Subscribe deliveries were leased by the Enqueue that stored them.
    pub fn pushed_in_enqueue(&self, count: usize) {
        self.0
            .enqueue_pushes
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// `count` Subscribe deliveries were leased by the Ack run that freed their slots.
    pub fn pushed_in_ack(&self, count: usize) {
        self.0.ack_pushes.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// A schedule's fire enqueued its task `late` after the fire time (Redis' clock).
    pub fn fired(&self, late: Duration) {
        self.0.fires.fetch_add(1, Ordering::Relaxed);
        self.0.fire_lateness.observe(late.as_secs_f64());
    }

    /// `count` fire times were skipped: `overlap` (the last fire's task was still in
    /// the queue) or else too old to catch up.
    pub fn fires_skipped(&self, overlap: bool, count: u64) {
        self.0.skipped[usize::from(!overlap)].fetch_add(count, Ordering::Relaxed);
    }

    /// Whether the readiness probe finds Redis answering.
    pub fn set_redis_up(&self, up: bool) {
        self.0.redis_up.store(up, Ordering::Relaxed);
    }

    fn with_queue(&self, tenant: &Tenant, queue: &str, change: impl FnOnce(&mut QueueEntry)) {
        lock(&self.0.queues).touch(tenant, queue, Instant::now(), change);
    }

    /// The queues named within the window, with their delivery and held-back counts;
    /// older ones go.
    fn recent_queues(&self) -> Vec<RecentQueue> {
        let mut queues = lock(&self.0.queues);
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
                    RecentQueue {
                        label,
                        deliveries: e.deliveries,
                        redeliveries: e.redeliveries,
                        held_back: e.held_back.clone(),
                    }
                })
            })
            .collect();
        recent.sort_by(|a, b| {
            (a.label.tenant.as_str(), &a.label.queue)
                .cmp(&(b.label.tenant.as_str(), &b.label.queue))
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
        self.metrics.0.streams[self.kind as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one family: its `# HELP` and `# TYPE` lines, then a line per sample. Every
/// family of the scrape but the histograms is written here.
fn write_family<V: Display>(
    out: &mut String,
    (name, kind, help): (&str, Kind, &str),
    samples: impl IntoIterator<Item = (String, V)>,
) {
    header(out, name, kind.as_str(), help);
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

impl Metrics {
    /// The whole scrape: this replica's families, the registered ones, then the
    /// queue depths read from Redis now (a queue whose read fails is left out of
    /// `turnstile_queue_tasks`).
    pub async fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let m = &self.0;
        write_family(
            &mut out,
            (
                "turnstile_rpc_requests_total",
                Kind::Counter,
                "RPCs ended, by method and status code (streams when they end).",
            ),
            Method::ALL.into_iter().flat_map(|method| {
                (0..CODES).filter_map(move |code| {
                    let count = m.requests[method.index()][code].load(Ordering::Relaxed);
                    (count > 0).then(|| {
                        let name = code_name(code as i32);
                        (format!("method=\"{method}\",code=\"{name}\""), count)
                    })
                })
            }),
        );
        header(
            &mut out,
            "turnstile_rpc_duration_seconds",
            "histogram",
            "Unary RPC durations, by method.",
        );
        for method in Method::ALL.into_iter().filter(|m| !m.is_stream()) {
            m.durations[method.index()].render(
                &mut out,
                "turnstile_rpc_duration_seconds",
                &format!("method=\"{method}\""),
            );
        }
        write_family(
            &mut out,
            (
                "turnstile_streams_open",
                Kind::Gauge,
                "Open server streams, by kind.",
            ),
            [
                ("hold", StreamKind::Hold),
                ("subscribe", StreamKind::Subscribe),
                ("watch", StreamKind::Watch),
            ]
            .map(|(kind, at)| {
                let open = m.streams[at as usize].load(Ordering::Relaxed);
                (format!("kind=\"{kind}\""), open)
            }),
        );
        header(
            &mut out,
            "turnstile_delivery_lateness_seconds",
            "histogram",
            "Subscribe pushes: push time minus the task's due time.",
        );
        m.lateness
            .render(&mut out, "turnstile_delivery_lateness_seconds", "");
        write_family(
            &mut out,
            (
                "turnstile_enqueue_pushes_total",
                Kind::Counter,
                "Subscribe deliveries leased by the Enqueue that stored them, to this replica's idle streams (one pub/sub hop and one round trip shorter than a feed's dispatch).",
            ),
            [(String::new(), m.enqueue_pushes.load(Ordering::Relaxed))],
        );
        write_family(
            &mut out,
            (
                "turnstile_ack_pushes_total",
                Kind::Counter,
                "Subscribe deliveries leased by the Ack run that freed their slots, to this replica's streams (one pub/sub hop and one round trip shorter than a feed's dispatch).",
            ),
            [(String::new(), m.ack_pushes.load(Ordering::Relaxed))],
        );
        write_family(
            &mut out,
            (
                "turnstile_schedule_fires_total",
                Kind::Counter,
                "Schedule fires that enqueued a task (counted by the replica whose fire did).",
            ),
            [(String::new(), m.fires.load(Ordering::Relaxed))],
        );
        header(
            &mut out,
            "turnstile_schedule_lateness_seconds",
            "histogram",
            "Schedule fires: enqueue time minus fire time, on Redis' clock.",
        );
        m.fire_lateness
            .render(&mut out, "turnstile_schedule_lateness_seconds", "");
        write_family(
            &mut out,
            (
                "turnstile_schedule_skipped_total",
                Kind::Counter,
                "Fire times skipped, by reason: overlap (the last fire's task was still in the queue) or too_old (older than catch_up_window on recovery).",
            ),
            ["overlap", "too_old"].into_iter().enumerate().map(|(at, reason)| {
                (format!("reason=\"{reason}\""), m.skipped[at].load(Ordering::Relaxed))
            }),
        );
        write_family(
            &mut out,
            (
                "turnstile_redis_up",
                Kind::Gauge,
                "1 while the readiness probe finds Redis answering.",
            ),
            [(String::new(), u8::from(m.redis_up.load(Ordering::Relaxed)))],
        );
        for family in lock(&m.registered).iter() {
            write_family(
                &mut out,
                (family.name, family.kind, family.help),
                (family.samples)(),
            );
        }

        let recent = self.recent_queues();
        write_family(
            &mut out,
            (
                "turnstile_deliveries_total",
                Kind::Counter,
                "Tasks this replica delivered (Lease and Subscribe), by queue.",
            ),
            recent
                .iter()
                .map(|q| (self.queue_labels(&q.label), q.deliveries)),
        );
        write_family(
            &mut out,
            (
                "turnstile_redeliveries_total",
                Kind::Counter,
                "Deliveries with attempt above 1, by queue.",
            ),
            recent
                .iter()
                .map(|q| (self.queue_labels(&q.label), q.redeliveries)),
        );
        write_family(
            &mut out,
            (
                "turnstile_queue_held_back_total",
                Kind::Counter,
                "Times this replica found a deliverable task and a limit held it back, by queue and limit.",
            ),
            recent.iter().flat_map(|q| {
                let labels = self.queue_labels(&q.label);
                q.held_back
                    .iter()
                    .map(move |(reason, count)| (format!("{labels},reason=\"{reason}\""), *count))
            }),
        );
        let source = lock(&m.depths).clone();
        let mut depths = Vec::with_capacity(recent.len());
        if let Some(source) = source {
            for q in &recent {
                let label = &q.label;
                match source.depths(&label.tenant, &label.queue).await {
                    Ok(read) => depths.push((self.queue_labels(label), read)),
                    Err(err) => {
                        tracing::debug!(queue = label.queue, cause = %err, "queue depths not scraped")
                    }
                }
            }
        }
        write_family(
            &mut out,
            (
                "turnstile_queue_tasks",
                Kind::Gauge,
                "Tasks by queue and state (read from Redis: the same on every replica).",
            ),
            depths.iter().flat_map(|(labels, read)| {
                [
                    ("ready", read.ready),
                    ("delayed", read.delayed),
                    ("in_flight", read.in_flight),
                    ("dead", read.dead),
                ]
                .map(|(state, count)| (format!("{labels},state=\"{state}\""), count))
            }),
        );
        write_family(
            &mut out,
            (
                "turnstile_dead_letters_total",
                Kind::Counter,
                "Tasks that went DEAD, by queue (kept in Redis: the same on every replica).",
            ),
            depths
                .iter()
                .map(|(labels, read)| (labels.clone(), read.dead_letters)),
        );
        write_family(
            &mut out,
            (
                "turnstile_task_outcomes_total",
                Kind::Counter,
                "Deliveries that ended, by queue and outcome (kept in Redis: the same on every replica).",
            ),
            depths.iter().flat_map(|(labels, read)| {
                read.outcomes
                    .map(|(outcome, count)| (format!("{labels},outcome=\"{outcome}\""), count))
            }),
        );
        write_family(
            &mut out,
            (
                "turnstile_queue_paused",
                Kind::Gauge,
                "1 while a queue is paused (read from Redis: the same on every replica).",
            ),
            depths
                .iter()
                .map(|(labels, read)| (labels.clone(), u8::from(read.paused))),
        );
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
        assert!(!recent.iter().any(|q| q.label.queue == "q0"));
        assert!(recent
            .iter()
            .any(|q| q.label.queue == format!("q{}", MAX_QUEUES + 4)));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}
