//! The Subscribe scheduler: one feed per queue that has subscribers on this replica.
//! A feed runs one loop that leases READY tasks to all its streams with one `dispatch`
//! script (round robin, free slots only), then sleeps until the next due time or lease
//! end, or until woken: a queue-changed message (enqueue, nack, redrive, give-back), a
//! slot-freed message carrying one of its streams' tags (an Ack or Nack on any
//! replica), or a stream joining or ending. Never a fixed tick.
//!
//! It keeps nothing another replica needs: which stream holds which delivery lives in
//! Redis (the `leased` index), so a stream's free slots are counted there, and a worker
//! can re-attach to any replica.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{
    sync::{mpsc, Notify},
    time::Instant,
};
use tracing::Instrument;

use super::{
    subscribe::{LeaveOnDrop, SubscribeSpec, Subscription},
    Dispatched, QueueStore, StreamSlots, Task,
};
use crate::{
    error::{Error, Result},
    limits::Limits,
    redis::events::EventSink,
    shutdown::Shutdown,
    tenant::Tenant,
    time::sleep_until_some,
    token::new_token,
};

/// Backoff after a failed pass (Redis trouble): first, then doubling up to the last.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Every Subscribe stream of this replica, grouped by queue. Shared (`Arc`).
pub struct Scheduler {
    store: QueueStore,
    limits: Limits,
    shutdown: Shutdown,
    /// `--reattach-grace`.
    reattach_grace: Duration,
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    /// The feed of each queue with streams here, by the queue's pending key (which
    /// names its tenant: two tenants' queues of one name have two feeds).
    feeds: HashMap<String, Arc<Feed>>,
    /// The feeds with a stream of each tag (one worker_id may be on several queues),
    /// by the tenant's slot-freed channel and the tag: a freed slot of one tenant's
    /// worker never wakes another tenant's feed.
    tags: HashMap<(String, String), Vec<Arc<Feed>>>,
}

/// One queue's streams on this replica and the loop that feeds them.
pub struct Feed {
    queue: String,
    /// The queue's store, scoped to its tenant.
    store: QueueStore,
    /// Its key in `Registry::feeds`.
    key: String,
    /// Its tenant's slot-freed channel (half of its tags' keys in `Registry::tags`).
    freed_channel: String,
    /// Kicked when a stream joins or ends or a slot frees. `notify_one` keeps a permit,
    /// so a kick that lands during a pass is not lost.
    wake: Notify,
    members: Mutex<Members>,
}

#[derive(Default)]
struct Members {
    streams: Vec<Member>,
    /// Ended streams whose deliveries are still to be given back (or kept).
    ended: Vec<Ended>,
    next_id: u64,
    /// Where the next pass starts its round robin, so no stream is always first.
    turn: usize,
}

struct Member {
    id: u64,
    slots: StreamSlots,
    /// Gave a worker_id: its deliveries wait for a re-attach when it ends.
    worker: bool,
    /// Its attach (taking over an earlier stream's deliveries) is done.
    attached: bool,
    /// Every slot was taken at the last dispatch; a freed slot or a lease end clears it.
    full: bool,
    /// Counts slot-freed messages, so that one arriving during a dispatch is not
    /// overwritten by that dispatch's older count.
    freed: u64,
    /// Where its deliveries go. Unbounded, yet never holds more than the stream's
    /// unacked deliveries.
    tx: mpsc::UnboundedSender<Result<Task>>,
}

struct Ended {
    tag: String,
    session: String,
    /// Keep the deliveries leased for the re-attach grace (it gave a worker_id).
    keep: bool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Feed {
    fn members(&self) -> MutexGuard<'_, Members> {
        locked(&self.members)
    }

    /// Marks streams as maybe having free slots (all of them with `None`) and wakes
    /// the feed's loop.
    fn free(&self, tag: Option<&str>) {
        self.mark_free(tag);
        self.wake.notify_one();
    }

    /// [`Feed::free`] without the wake-up: for the loop itself, which looks again
    /// anyway. A wake-up it sent itself would end its next wait at once: after a
    /// failed pass that skipped the back-off, and a Redis refusing every script (out
    /// of memory) had the feed retry thousands of times a second, logging each.
    fn mark_free(&self, tag: Option<&str>) {
        for member in self.members().streams.iter_mut() {
            if tag.is_none_or(|tag| tag == member.slots.tag) {
                member.full = false;
                member.freed += 1;
            }
        }
    }
}

/// What one pass learned: when to look again.
struct Next {
    /// The earliest pending due time (a task falls due).
    pending: Option<Instant>,
    /// The earliest lease end (a task comes back, maybe freeing a slot).
    lease_end: Option<Instant>,
}

impl Scheduler {
    /// The scheduler of this replica's Subscribe streams.
    pub fn new(
        store: QueueStore,
        limits: Limits,
        shutdown: Shutdown,
        reattach_grace: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            limits,
            shutdown,
            reattach_grace,
            registry: Mutex::default(),
        })
    }

    /// The pub/sub channel of freed slots, and this scheduler as its sink.
    pub fn event_route(self: &Arc<Self>) -> (String, Arc<dyn EventSink>) {
        (self.store.slot_freed_pattern(), self.clone())
    }

    /// Opens a stream on `tenant`'s `queue`: RESOURCE_EXHAUSTED past `--max-streams`,
    /// UNAVAILABLE while shutting down.
    pub fn subscribe(
        self: &Arc<Self>,
        tenant: &Tenant,
        queue: &str,
        spec: SubscribeSpec,
    ) -> Result<Subscription> {
        let store = self.store.tenant(tenant);
        let key = store.keys(queue).pending().to_owned();
        let permit = self.limits.open_stream()?;
        let session = new_token();
        let (tag, worker) = match &spec.worker_id {
            Some(worker_id) => (format!("w:{worker_id}"), true),
            None => (format!("s:{session}"), false),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let (feed, id) = {
            let mut registry = locked(&self.registry);
            if self.shutdown.is_triggered() {
                return Err(Error::ShuttingDown);
            }
            let feed = registry
                .feeds
                .entry(key)
                .or_insert_with_key(|key| self.start_feed(store, key, queue))
                .clone();
            registry
                .tags
                .entry((feed.freed_channel.clone(), tag.clone()))
                .or_default()
                .push(feed.clone());
            let mut members = feed.members();
            let id = members.next_id;
            members.next_id += 1;
            members.streams.push(Member {
                id,
                slots: StreamSlots {
                    tag,
                    session,
                    max_in_flight: spec.max_in_flight,
                    visibility: spec.visibility,
                },
                worker,
                attached: !worker,
                full: false,
                freed: 0,
                tx,
            });
            drop(members);
            (feed, id)
        };
        feed.wake.notify_one();
        // Dropping the stream (client gone, stream ended) leaves the feed, which then
        // gives its deliveries back, or keeps them for a re-attach.
        let scheduler = self.clone();
        let leave = LeaveOnDrop::new(move || scheduler.leave(&feed, id));
        Ok(Subscription::new(rx, leave, permit))
    }

    fn start_feed(self: &Arc<Self>, store: QueueStore, key: &str, queue: &str) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            queue: queue.to_owned(),
            freed_channel: store.slot_freed_channel(),
            store,
            key: key.to_owned(),
            wake: Notify::new(),
            members: Mutex::default(),
        });
        let span = tracing::debug_span!("feed", queue);
        self.shutdown
            .spawn(self.clone().run(feed.clone()).instrument(span));
        feed
    }

    fn leave(&self, feed: &Arc<Feed>, id: u64) {
        let mut registry = locked(&self.registry);
        let mut members = feed.members();
        let Some(at) = members.streams.iter().position(|m| m.id == id) else {
            return;
        };
        let member = members.streams.remove(at);
        let tag = member.slots.tag;
        let tag_key = (feed.freed_channel.clone(), tag);
        if let Some(feeds) = registry.tags.get_mut(&tag_key) {
            if let Some(at) = feeds.iter().position(|f| Arc::ptr_eq(f, feed)) {
                feeds.swap_remove(at);
            }
            if feeds.is_empty() {
                registry.tags.remove(&tag_key);
            }
        }
        let tag = tag_key.1;
        members.ended.push(Ended {
            tag,
            session: member.slots.session,
            keep: member.worker,
        });
        drop(members);
        feed.wake.notify_one();
    }

    /// One feed's loop, until its last stream is gone or the server shuts down.
    async fn run(self: Arc<Self>, feed: Arc<Feed>) {
        let changed = feed.store.changes(&feed.queue);
        let mut next = Next {
            pending: None,
            lease_end: None,
        };
        let mut retry = RETRY_FIRST;
        loop {
            // Registered before the pass, so a message sent during it is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shutdown.is_triggered() {
                break;
            }
            if self.retire(&feed) {
                return;
            }
            let timer = match self.pass(&feed, &mut next).await {
                Ok(timer) => {
                    retry = RETRY_FIRST;
                    timer
                }
                Err(err) => {
                    tracing::warn!(cause = %err, ?retry, "subscribe dispatch failed; retrying");
                    feed.mark_free(None);
                    let at = Instant::now() + retry;
                    retry = (retry * 2).min(RETRY_MAX);
                    Some(at)
                }
            };
            tokio::select! {
                () = &mut notified => {}
                () = feed.wake.notified() => {}
                () = sleep_until_some(timer) => feed.mark_free(None),
                () = self.shutdown.cancelled() => {}
            }
        }
        self.close(&feed).await;
    }

    /// Drops the feed from the registry if it has nothing left to do.
    fn retire(&self, feed: &Arc<Feed>) -> bool {
        let idle = |members: &Members| members.streams.is_empty() && members.ended.is_empty();
        if !idle(&feed.members()) {
            return false;
        }
        let mut registry = locked(&self.registry);
        if !idle(&feed.members()) {
            return false;
        }
        if registry
            .feeds
            .get(&feed.key)
            .is_some_and(|f| Arc::ptr_eq(f, feed))
        {
            registry.feeds.remove(&feed.key);
        }
        true
    }

    /// Detaches ended streams, attaches new worker streams, then leases to every stream
    /// with a free slot. Returns when to look again without being woken.
    async fn pass(&self, feed: &Feed, next: &mut Next) -> Result<Option<Instant>> {
        let (ended, attach, eligible, slots) = {
            let mut members = feed.members();
            let ended = std::mem::take(&mut members.ended);
            let attach: Vec<(u64, StreamSlots)> = members
                .streams
                .iter()
                .filter(|m| !m.attached)
                .map(|m| (m.id, m.slots.clone()))
                .collect();
            let count = members.streams.len();
            let turn = members.turn;
            members.turn = members.turn.wrapping_add(1);
            // Who is asked (id, freed count at the ask), and their slots in that order.
            let (eligible, slots): (Vec<(u64, u64)>, Vec<StreamSlots>) = (0..count)
                .map(|k| &members.streams[(turn + k) % count])
                .filter(|m| !m.full)
                .map(|m| ((m.id, m.freed), m.slots.clone()))
                .unzip();
            (ended, attach, eligible, slots)
        };
        self.detach(feed, ended).await?;
        for (id, slots) in attach {
            let tasks = feed.store.attach(&feed.queue, &slots).await?;
            tracing::debug!(count = tasks.len(), "worker re-attached");
            let mut members = feed.members();
            if let Some(member) = members.streams.iter_mut().find(|m| m.id == id) {
                member.attached = true;
                for task in tasks {
                    let _ = member.tx.send(Ok(task));
                }
            }
        }
        if !eligible.is_empty() {
            let dispatched = feed.store.dispatch(&feed.queue, &slots).await?;
            *next = Self::deliver(feed, &eligible, &slots, dispatched);
        }
        let any_free = feed.members().streams.iter().any(|m| !m.full);
        Ok(if any_free {
            [next.pending, next.lease_end].into_iter().flatten().min()
        } else {
            next.lease_end
        })
    }

    /// Hands one dispatch's tasks to their streams and records who is full now.
    fn deliver(
        feed: &Feed,
        eligible: &[(u64, u64)],
        slots: &[StreamSlots],
        dispatched: Dispatched,
    ) -> Next {
        // Counted from Redis' clock at the call, so a skewed local clock cannot make
        // the loop spin early or sleep late.
        let at = |ms: i64| {
            Instant::now() + Duration::from_millis((ms - dispatched.now_ms).max(0) as u64)
        };
        let next = Next {
            pending: dispatched.next_pending_ms.map(at),
            lease_end: dispatched.next_lease_end_ms.map(at),
        };
        let mut members = feed.members();
        for (at, task) in dispatched.tasks {
            let id = eligible[at].0;
            if let Some(member) = members.streams.iter_mut().find(|m| m.id == id) {
                // A failed send means the stream just ended: its Ended entry gives the
                // task back on the next pass.
                let _ = member.tx.send(Ok(task));
            }
        }
        for (((id, freed), slots), held) in eligible.iter().zip(slots).zip(dispatched.held) {
            if let Some(member) = members.streams.iter_mut().find(|m| m.id == *id) {
                if member.freed == *freed {
                    member.full = held >= slots.max_in_flight;
                }
            }
        }
        next
    }

    /// Gives back (or keeps for re-attach) the deliveries of ended streams. On failure
    /// they stay queued for the next pass.
    async fn detach(&self, feed: &Feed, ended: Vec<Ended>) -> Result<()> {
        if ended.is_empty() {
            return Ok(());
        }
        let (keep, give): (Vec<Ended>, Vec<Ended>) = ended.into_iter().partition(|e| e.keep);
        for (group, grace) in [(give, Duration::ZERO), (keep, self.reattach_grace)] {
            if group.is_empty() {
                continue;
            }
            let streams: Vec<(String, String)> = group
                .iter()
                .map(|e| (e.tag.clone(), e.session.clone()))
                .collect();
            match feed.store.detach(&feed.queue, &streams, grace).await {
                Ok((returned, kept)) => {
                    tracing::debug!(streams = streams.len(), returned, kept, "streams detached");
                }
                Err(err) => {
                    feed.members().ended.extend(group);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Shutdown: every stream ends with UNAVAILABLE, and its deliveries go back (or
    /// wait for a re-attach on another replica). One try: Redis may be going too, and
    /// anything not given back returns when its lease ends.
    async fn close(&self, feed: &Feed) {
        let ended = {
            let _registry = locked(&self.registry);
            let mut members = feed.members();
            let streams = std::mem::take(&mut members.streams);
            let mut ended = std::mem::take(&mut members.ended);
            for member in streams {
                let _ = member.tx.send(Err(Error::ShuttingDown));
                ended.push(Ended {
                    tag: member.slots.tag,
                    session: member.slots.session,
                    keep: member.worker,
                });
            }
            ended
        };
        if let Err(err) = self.detach(feed, ended).await {
            tracing::warn!(cause = %err, "could not give back deliveries at shutdown; they return when their leases end");
        }
    }
}

impl EventSink for Scheduler {
    fn on_message(&self, channel: &str, payload: &[u8]) {
        let Ok(tag) = std::str::from_utf8(payload) else {
            return;
        };
        let key = (channel.to_owned(), tag.to_owned());
        let feeds = locked(&self.registry).tags.get(&key).cloned();
        for feed in feeds.into_iter().flatten() {
            feed.free(Some(tag));
        }
    }

    fn on_subscribed(&self) {
        let feeds: Vec<Arc<Feed>> = locked(&self.registry).feeds.values().cloned().collect();
        for feed in feeds {
            feed.free(None);
        }
    }
}
