//! This replica's Subscribe feeds: one per queue that has subscribers here.
//! A feed runs one loop that leases READY tasks to all its streams with one `dispatch`
//! script (round robin, free slots only), then sleeps until the next due time or lease
//! end, or until woken: a queue-changed message (enqueue, nack, redrive, give-back), a
//! slot-freed message carrying one of its streams' tags (an Ack or Nack on any
//! replica), or a stream joining or ending. Never a fixed tick. Two runs outside the
//! loop lease to its streams too, and tell it what they learned: an Enqueue that finds
//! it asleep, and an Ack on this replica that frees slots of its full streams; the
//! queue's door (`door.rs`) decides those, asking [`Feeds::feed`] for the queue's feed.
//!
//! Each feed's streams and one pass of its loop are in `feed.rs`; this file keeps which
//! feeds exist, starts and retires them, and routes wake-ups to them. It holds no store:
//! each feed runs its passes with the store of the stream that started it.
//!
//! It keeps nothing another replica needs: which stream holds which delivery lives in
//! Redis (the `leased` index), so a stream's free slots are counted there, and a worker
//! can re-attach to any replica.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    sync::{mpsc, Notify},
    time::Instant,
};
use tracing::Instrument;

use super::{
    feed::{locked, Ended, Feed, Member, Members, Next},
    subscribe::{LeaveOnDrop, SubscribeSpec, Subscription},
    QueueStore, StreamSlots,
};
use crate::{
    error::{Error, Result},
    limits::Limits,
    redis::events::EventSink,
    shutdown::Shutdown,
    time::precisely_until_some,
    token::new_token,
};

/// Backoff after a failed pass (Redis trouble): first, then doubling up to the last.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Every Subscribe stream of this replica, grouped by queue. Shared (`Arc`).
pub(super) struct Feeds {
    limits: Limits,
    shutdown: Shutdown,
    /// `--reattach-grace`.
    reattach_grace: Duration,
    /// This replica's name on the Workers page (`host:port`).
    replica: String,
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

impl Feeds {
    /// The feeds of this replica's Subscribe streams (none yet).
    pub(super) fn new(
        limits: Limits,
        shutdown: Shutdown,
        reattach_grace: Duration,
        replica: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            limits,
            shutdown,
            reattach_grace,
            replica,
            registry: Mutex::default(),
        })
    }

    /// Opens a stream on `store`'s `queue` (`store` scoped to the caller's tenant, with
    /// no feeds of its own): RESOURCE_EXHAUSTED past `--max-streams`, UNAVAILABLE while
    /// shutting down.
    pub(super) fn subscribe(
        self: &Arc<Self>,
        store: QueueStore,
        queue: &str,
        spec: SubscribeSpec,
    ) -> Result<Subscription> {
        let key = store.keys(queue).pending().to_owned();
        let pushes = store.pushes.clone();
        let permit = self.limits.open_stream()?;
        let session = new_token();
        let (tag, worker) = match &spec.worker_id {
            Some(worker_id) => (format!("w:{worker_id}"), true),
            None => (format!("s:{session}"), false),
        };
        // The Workers page's record, written beside the stream's work; its removal
        // waits for the write, so an early end never leaves a record behind.
        let registered = {
            let (listed, session, tag) = (store.clone(), session.clone(), tag.clone());
            let (queue, worker_id) = (queue.to_owned(), spec.worker_id.clone().unwrap_or_default());
            let replica = self.replica.clone();
            self.shutdown.spawn(async move {
                let since = crate::time::now_ms();
                if let Err(err) = listed
                    .register_stream(&session, &queue, &worker_id, &replica, since, &tag)
                    .await
                {
                    tracing::debug!(cause = %err, "stream not recorded for the Workers page");
                }
                (listed, session)
            })
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
        let feeds = self.clone();
        let leave = LeaveOnDrop::new(move || {
            feeds.leave(&feed, id);
            feeds.shutdown.spawn(async move {
                if let Ok((listed, session)) = registered.await {
                    let _ = listed.unregister_stream(&session).await;
                }
            });
        });
        Ok(Subscription::new(rx, leave, permit, pushes))
    }

    /// The feed of the queue whose pending key is `key`, when it has streams here.
    pub(super) fn feed(&self, key: &str) -> Option<Arc<Feed>> {
        locked(&self.registry).feeds.get(key).cloned()
    }

    fn start_feed(self: &Arc<Self>, store: QueueStore, key: &str, queue: &str) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            queue: queue.to_owned(),
            freed_channel: store.slot_freed_channel(),
            store,
            key: key.to_owned(),
            wake: Notify::new(),
            members: Mutex::default(),
            reattach_grace: self.reattach_grace,
            rearm: Notify::new(),
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
            let timer = match feed.pass(&mut next).await {
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
            let mut timer = feed.rearmed(timer);
            feed.members().asleep_since = Some(Instant::now());
            loop {
                tokio::select! {
                    () = &mut notified => {}
                    () = feed.wake.notified() => {}
                    () = precisely_until_some(timer) => feed.mark_free(None),
                    () = self.shutdown.cancelled() => {}
                    () = feed.rearm.notified() => {
                        timer = feed.rearmed(timer);
                        continue;
                    }
                }
                break;
            }
            feed.members().asleep_since = None;
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

    /// Shutdown: every stream ends with UNAVAILABLE, and its deliveries go back (or
    /// wait for a re-attach on another replica). One try: Redis may be going too, and
    /// anything not given back returns when its lease ends.
    async fn close(&self, feed: &Feed) {
        let ended = {
            let _registry = locked(&self.registry);
            feed.end_streams()
        };
        if let Err(err) = feed.detach(ended).await {
            tracing::warn!(cause = %err, "could not give back deliveries at shutdown; they return when their leases end");
        }
    }
}

impl EventSink for Feeds {
    fn on_message(&self, channel: &str, payload: &[u8]) {
        let Ok(message) = std::str::from_utf8(payload) else {
            return;
        };
        // A tag (a freed slot), or "<tag>\0<id>\0<receipt>": a task that tag's stream
        // runs was cancelled (`cancel.lua`; no tag holds a NUL).
        let mut parts = message.split('\0');
        let tag = parts.next().unwrap_or_default();
        let cancelled = parts.next().zip(parts.next());
        let key = (channel.to_owned(), tag.to_owned());
        let feeds = locked(&self.registry).tags.get(&key).cloned();
        for feed in feeds.into_iter().flatten() {
            match cancelled {
                Some((id, receipt)) => feed.cancelled(tag, id, receipt),
                None => feed.free(Some(tag)),
            }
        }
    }

    fn on_subscribed(&self) {
        let feeds: Vec<Arc<Feed>> = locked(&self.registry).feeds.values().cloned().collect();
        for feed in feeds {
            feed.free(None);
        }
    }
}
