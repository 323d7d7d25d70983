//! Per queue: the deliveries, redeliveries and held-back tasks this replica counted,
//! and the queue's depths, dead letters, outcomes and pause read from Redis at scrape
//! time through the [`DepthSource`] the queue layer registers (the queue's own
//! numbers, the same from every replica: aggregate them with `max`, not `sum`). Only
//! queues some RPC named in the last [`QUEUE_WINDOW`] are reported, at most
//! [`MAX_QUEUES`] of them (the label cache below), so label cardinality stays bounded
//! whatever names clients send. With auth on, a `tenant` label joins them.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{
    lock,
    text::{escape, write_family, Kind},
};
use crate::tenant::Tenant;

/// A queue is reported while some RPC named it this recently.
pub const QUEUE_WINDOW: Duration = Duration::from_secs(600);

/// The most queues reported at once; past it, the least recently named one goes.
pub const MAX_QUEUES: usize = 1000;

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
pub(super) struct QueueEntry {
    seen: Instant,
    pub(super) deliveries: u64,
    pub(super) redeliveries: u64,
    /// Times a limit held back a deliverable task, by the limit's name.
    pub(super) held_back: Vec<(&'static str, u64)>,
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
        // A known queue (nearly every call) costs one lookup of each name.
        if let Some(entry) = self
            .by_tenant
            .get_mut(tenant)
            .and_then(|queues| queues.get_mut(queue))
        {
            entry.seen = now;
            change(entry);
            return;
        }
        if self.len >= MAX_QUEUES {
            self.forget_old(now);
        }
        if self.len >= MAX_QUEUES {
            self.forget_oldest();
        }
        let mut entry = QueueEntry {
            seen: now,
            deliveries: 0,
            redeliveries: 0,
            held_back: Vec::new(),
        };
        change(&mut entry);
        self.by_tenant
            .entry(tenant.clone())
            .or_default()
            .insert(queue.to_owned(), entry);
        self.len += 1;
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

/// The per-queue families: the label cache and the depths' source.
pub(super) struct QueueFamilies {
    /// Auth is on: queue families carry a `tenant` label.
    tenant_label: bool,
    queues: Mutex<Queues>,
    /// The queue layer's depths, once registered.
    depths: Mutex<Option<Arc<dyn DepthSource>>>,
}

impl QueueFamilies {
    pub(super) fn new(tenant_label: bool) -> Self {
        Self {
            tenant_label,
            queues: Mutex::default(),
            depths: Mutex::default(),
        }
    }

    pub(super) fn register_depths(&self, source: Arc<dyn DepthSource>) {
        *lock(&self.depths) = Some(source);
    }

    /// Marks `queue` of `tenant` named now, then applies `change` to its counts.
    pub(super) fn touch(&self, tenant: &Tenant, queue: &str, change: impl FnOnce(&mut QueueEntry)) {
        lock(&self.queues).touch(tenant, queue, Instant::now(), change);
    }

    /// The queues named within the window, with their delivery and held-back counts;
    /// older ones go.
    fn recent_queues(&self) -> Vec<RecentQueue> {
        let mut queues = lock(&self.queues);
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
    fn labels(&self, label: &QueueLabel) -> String {
        if self.tenant_label {
            format!(
                "tenant=\"{}\",queue=\"{}\"",
                escape(label.tenant.as_str()),
                escape(&label.queue)
            )
        } else {
            format!("queue=\"{}\"", escape(&label.queue))
        }
    }

    /// Writes the per-queue families (a queue whose depths cannot be read is left out
    /// of those read from Redis).
    pub(super) async fn write(&self, out: &mut String) {
        let out = &mut *out;
        let recent = self.recent_queues();
        write_family(
            out,
            (
                "turnstile_deliveries_total",
                Kind::Counter,
                "Tasks this replica delivered (Lease and Subscribe), by queue.",
            ),
            recent.iter().map(|q| (self.labels(&q.label), q.deliveries)),
        );
        write_family(
            out,
            (
                "turnstile_redeliveries_total",
                Kind::Counter,
                "Deliveries with attempt above 1, by queue.",
            ),
            recent
                .iter()
                .map(|q| (self.labels(&q.label), q.redeliveries)),
        );
        write_family(
            out,
            (
                "turnstile_queue_held_back_total",
                Kind::Counter,
                "Times this replica found a deliverable task and a limit held it back, by queue and limit.",
            ),
            recent.iter().flat_map(|q| {
                let labels = self.labels(&q.label);
                q.held_back
                    .iter()
                    .map(move |(reason, count)| (format!("{labels},reason=\"{reason}\""), *count))
            }),
        );
        let source = lock(&self.depths).clone();
        let mut depths = Vec::with_capacity(recent.len());
        if let Some(source) = source {
            for q in &recent {
                let label = &q.label;
                match source.depths(&label.tenant, &label.queue).await {
                    Ok(read) => depths.push((self.labels(label), read)),
                    Err(err) => {
                        tracing::debug!(queue = label.queue, cause = %err, "queue depths not scraped")
                    }
                }
            }
        }
        write_family(
            out,
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
            out,
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
            out,
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
            out,
            (
                "turnstile_queue_paused",
                Kind::Gauge,
                "1 while a queue is paused (read from Redis: the same on every replica).",
            ),
            depths
                .iter()
                .map(|(labels, read)| (labels.clone(), u8::from(read.paused))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_bounded_by_count_and_forgotten_after_the_window() {
        let families = QueueFamilies::new(false);
        let tenant = Tenant::default();
        for n in 0..MAX_QUEUES + 5 {
            families.touch(&tenant, &format!("q{n}"), |_| {});
        }
        let recent = families.recent_queues();
        assert_eq!(recent.len(), MAX_QUEUES);
        // The oldest went first.
        assert!(!recent.iter().any(|q| q.label.queue == "q0"));
        assert!(recent
            .iter()
            .any(|q| q.label.queue == format!("q{}", MAX_QUEUES + 4)));
    }
}
