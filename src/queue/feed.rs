//! One queue's Subscribe feed on this replica: its streams, and one pass of the loop
//! that feeds them (detach the ended, attach the re-attached, one `dispatch` script
//! for every stream with a free slot). The loop itself, and which feeds exist, are the
//! feeds' (`feeds.rs`).

use std::{
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{
    sync::{mpsc, Notify},
    time::Instant,
};

use super::{
    subscribe::{Delivery, Pushed},
    Dispatched, QueueStore, StreamSlots,
};
use crate::{
    error::{Error, Result},
    time::until_ms_from,
};

/// One queue's streams on this replica and the loop that feeds them.
pub struct Feed {
    pub(super) queue: String,
    /// The queue's store, scoped to its tenant.
    pub(super) store: QueueStore,
    /// Its key in `Registry::feeds`.
    pub(super) key: String,
    /// Its tenant's slot-freed channel (half of its tags' keys in `Registry::tags`).
    pub(super) freed_channel: String,
    /// Kicked when a stream joins or ends or a slot frees. `notify_one` keeps a permit,
    /// so a kick that lands during a pass is not lost.
    pub(super) wake: Notify,
    pub(super) members: Mutex<Members>,
    /// `--reattach-grace`: how long an ended worker stream's deliveries wait for it.
    pub(super) reattach_grace: Duration,
    /// Kicked when `Members::timer_hint` is set earlier: the loop sets its timer
    /// again, without a pass.
    pub(super) rearm: Notify,
}

#[derive(Default)]
pub(super) struct Members {
    pub(super) streams: Vec<Member>,
    /// Ended streams whose deliveries are still to be given back (or kept).
    pub(super) ended: Vec<Ended>,
    pub(super) next_id: u64,
    /// Where the next pass starts its round robin, so no stream is always first.
    pub(super) turn: usize,
    /// Since when the loop has waited for a wake-up or its timer (None: a pass is
    /// under way). An enqueue on this replica that finds it asleep for [`QUIET`] leases
    /// to the streams itself (`QueueStore::enqueue`, `enqueue.rs`).
    pub(super) asleep_since: Option<Instant>,
    /// The earliest instant a dispatch outside the loop (an Enqueue's or an Ack's own
    /// leasing, `Feed::hand_over`) found for the loop's timer: its lease end, or its
    /// next start when a stream kept a free slot. Those scripts publish nothing for the
    /// streams they served, so no pass learns it.
    pub(super) timer_hint: Option<Instant>,
}

/// How long a feed must have been asleep before an enqueue leases to its streams
/// itself. A quiet queue's enqueue finds its feed asleep for milliseconds; a busy
/// one's wakes it every few dozen µs, and there a pass that leases many enqueues'
/// tasks at once costs less than a dispatch in every enqueue: with no such wait, the
/// one-Ack `queue` bench lost 7% (spread 4–12%) and Redis spent 8% more per task
/// (7–12%), `bench --against` the build before, 3 rounds.
pub const QUIET: Duration = Duration::from_millis(1);

/// The most streams an Ack's run is given to refill: each costs the script four
/// arguments whether or not the Ack freed its slots, and an Ack frees one stream's slots
/// as a rule. The streams past it are refilled by the loop, as without the short cut.
pub const REFILL_STREAMS: usize = 32;

pub(super) struct Member {
    pub(super) id: u64,
    pub(super) slots: StreamSlots,
    /// Gave a worker_id: its deliveries wait for a re-attach when it ends.
    pub(super) worker: bool,
    /// Its attach (taking over an earlier stream's deliveries) is done.
    pub(super) attached: bool,
    /// Every slot was taken at the last dispatch; a freed slot or a lease end clears it.
    pub(super) full: bool,
    /// Counts slot-freed messages, so that one arriving during a dispatch is not
    /// overwritten by that dispatch's older count.
    pub(super) freed: u64,
    /// Where its deliveries go. Unbounded, yet never holds more than the stream's
    /// unacked deliveries.
    pub(super) tx: mpsc::UnboundedSender<Delivery>,
}

pub(super) struct Ended {
    pub(super) tag: String,
    pub(super) session: String,
    /// Keep the deliveries leased for the re-attach grace (it gave a worker_id).
    pub(super) keep: bool,
}

pub(super) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Feed {
    pub(super) fn members(&self) -> MutexGuard<'_, Members> {
        locked(&self.members)
    }

    /// Tells this replica's streams of `tag` that a task they run was cancelled
    /// (`Cancel.running`).
    pub(super) fn cancelled(&self, tag: &str, id: &str, receipt: &str) {
        for member in self.members().streams.iter() {
            if member.slots.tag == tag {
                let _ = member.tx.send(Box::new(Ok(Pushed::Cancelled {
                    id: id.to_owned(),
                    receipt: receipt.to_owned(),
                })));
            }
        }
    }

    /// Marks streams as maybe having free slots (all of them with `None`) and wakes
    /// the feed's loop.
    pub(super) fn free(&self, tag: Option<&str>) {
        self.mark_free(tag);
        self.wake.notify_one();
    }

    /// [`Feed::free`] without the wake-up: for the loop itself, which looks again
    /// anyway. A wake-up it sent itself would end its next wait at once: after a
    /// failed pass that skipped the back-off, and a Redis refusing every script (out
    /// of memory) had the feed retry thousands of times a second, logging each.
    pub(super) fn mark_free(&self, tag: Option<&str>) {
        for member in self.members().streams.iter_mut() {
            if tag.is_none_or(|tag| tag == member.slots.tag) {
                member.full = false;
                member.freed += 1;
            }
        }
    }

    /// The streams an enqueue may lease to itself: those a dispatch would ask, when the
    /// loop has been asleep for [`QUIET`] and has nothing of its own to do first (no
    /// ended stream to detach, no worker stream to attach). None when there is none.
    pub(super) fn idle_streams(&self) -> Option<Asked> {
        let mut members = self.members();
        let quiet = members
            .asleep_since
            .is_some_and(|since| since.elapsed() >= QUIET);
        if !quiet || !members.ended.is_empty() || members.streams.iter().any(|m| !m.attached) {
            return None;
        }
        let (eligible, slots) = members.eligible();
        (!eligible.is_empty()).then_some((eligible, slots))
    }

    /// The streams an Ack's run may refill (`QueueStore::ack`, `acks.rs`): those the last dispatch
    /// left full, at most [`REFILL_STREAMS`], when the feed has nothing of its own to
    /// do first (no ended stream to detach, no worker stream to attach). None when
    /// there is none. The script picks those whose slots the acks freed. A stream that
    /// was not full had no task waiting for its slot: an Ack of its tasks wakes the
    /// loop as before.
    pub(super) fn full_streams(&self) -> Option<Asked> {
        let members = self.members();
        if !members.ended.is_empty() || members.streams.iter().any(|m| !m.attached) {
            return None;
        }
        let asked: Asked = members
            .streams
            .iter()
            .filter(|m| m.full)
            .take(REFILL_STREAMS)
            .map(|m| ((m.id, m.freed), m.slots.clone()))
            .unzip();
        (!asked.0.is_empty()).then_some(asked)
    }

    /// Hands the tasks of a dispatch run outside the loop (an Enqueue's or an Ack's)
    /// to the streams `asked`, and tells the loop what that run learned, since no
    /// message follows it: the new lease end for its timer, and, when an asked stream
    /// still has a free slot, the next start too (the loop would sleep past it when
    /// its last pass found every stream full). Such a stream counts as freed, so that a
    /// pass that read an older count cannot mark it full. Tasks whose stream left
    /// (its detach may have run before the script) go back at once; on failure they
    /// return when their leases end.
    pub(super) async fn hand_over(
        &self,
        store: &QueueStore,
        queue: &str,
        asked: &[(u64, u64)],
        slots: &[StreamSlots],
        dispatched: Dispatched,
    ) {
        store.held_back(queue, &dispatched.held_back);
        let (next, orphans) = self.deliver(asked, slots, dispatched);
        let sooner = {
            let mut members = self.members();
            let mut free = false;
            for (id, _) in asked {
                if let Some(member) = members.streams.iter_mut().find(|m| m.id == *id) {
                    if !member.full {
                        free = true;
                        member.freed += 1;
                    }
                }
            }
            let at = match free {
                true => [next.pending, next.lease_end].into_iter().flatten().min(),
                false => next.lease_end,
            };
            let sooner = at.filter(|at| members.timer_hint.is_none_or(|earlier| *at < earlier));
            if sooner.is_some() {
                members.timer_hint = sooner;
            }
            sooner.is_some()
        };
        if sooner {
            self.rearm.notify_one();
        }
        if !orphans.is_empty() {
            if let Err(err) = store.give_back(queue, &orphans).await {
                tracing::warn!(cause = %err, count = orphans.len(), "could not give back deliveries of a stream that left; they return when their leases end");
            }
        }
    }

    /// The loop's timer `timer` with the latest hint taken in.
    pub(super) fn rearmed(&self, timer: Option<Instant>) -> Option<Instant> {
        let hint = self.members().timer_hint.take();
        [timer, hint].into_iter().flatten().min()
    }

    /// Detaches ended streams, attaches new worker streams, then leases to every stream
    /// with a free slot. Returns when to look again without being woken.
    pub(super) async fn pass(&self, next: &mut Next) -> Result<Option<Instant>> {
        let (ended, attach, eligible, slots) = {
            let mut members = self.members();
            let ended = std::mem::take(&mut members.ended);
            let attach: Vec<(u64, StreamSlots)> = members
                .streams
                .iter()
                .filter(|m| !m.attached)
                .map(|m| (m.id, m.slots.clone()))
                .collect();
            let (eligible, slots) = members.eligible();
            (ended, attach, eligible, slots)
        };
        self.detach(ended).await?;
        for (id, slots) in attach {
            let tasks = self.store.attach(&self.queue, &slots).await?;
            tracing::debug!(count = tasks.len(), "worker re-attached");
            let mut members = self.members();
            if let Some(member) = members.streams.iter_mut().find(|m| m.id == id) {
                member.attached = true;
                for task in tasks {
                    let _ = member.tx.send(Box::new(Ok(Pushed::Task(task))));
                }
            }
        }
        if !eligible.is_empty() {
            let dispatched = self.store.dispatch(&self.queue, &slots).await?;
            self.store.held_back(&self.queue, &dispatched.held_back);
            (*next, _) = self.deliver(&eligible, &slots, dispatched);
        }
        let any_free = self.members().streams.iter().any(|m| !m.full);
        Ok(if any_free {
            [next.pending, next.lease_end].into_iter().flatten().min()
        } else {
            next.lease_end
        })
    }

    /// Hands one dispatch's tasks to their streams and records who is full now. Returns
    /// when to look again, and the receipts of tasks whose stream had already left the
    /// feed: the loop's next pass gives those back (its Ended entry, detached after this
    /// dispatch), but a dispatch outside the loop may come after that detach.
    pub(super) fn deliver(
        &self,
        eligible: &[(u64, u64)],
        slots: &[StreamSlots],
        dispatched: Dispatched,
    ) -> (Next, Vec<String>) {
        // Counted from Redis' clock at the call, to the µs, so a skewed local clock
        // cannot make the loop spin early or sleep late, and the part of a ms that had
        // passed when the script ran does not make it late.
        let at = |ms: i64| Instant::now() + until_ms_from(ms, dispatched.now_us);
        let next = Next {
            pending: dispatched.next_pending_ms.map(at),
            lease_end: dispatched.next_lease_end_ms.map(at),
        };
        let mut members = self.members();
        let mut orphans = Vec::new();
        for (at, task) in dispatched.tasks {
            let id = eligible[at].0;
            match members.streams.iter_mut().find(|m| m.id == id) {
                // A failed send means the stream just ended: its Ended entry, queued
                // when it leaves, gives the task back on a later pass.
                Some(member) => {
                    let _ = member.tx.send(Box::new(Ok(Pushed::Task(task))));
                }
                None => orphans.push(task.receipt),
            }
        }
        for (((id, freed), slots), held) in eligible.iter().zip(slots).zip(dispatched.held) {
            if let Some(member) = members.streams.iter_mut().find(|m| m.id == *id) {
                if member.freed == *freed {
                    member.full = held >= slots.max_in_flight;
                }
            }
        }
        (next, orphans)
    }

    /// Gives back (or keeps for re-attach) the deliveries of ended streams. On failure
    /// they stay queued for the next pass.
    pub(super) async fn detach(&self, ended: Vec<Ended>) -> Result<()> {
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
            match self.store.detach(&self.queue, &streams, grace).await {
                Ok((returned, kept)) => {
                    tracing::debug!(streams = streams.len(), returned, kept, "streams detached");
                }
                Err(err) => {
                    self.members().ended.extend(group);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Ends every stream with UNAVAILABLE (the server shuts down); what they and the
    /// streams that ended before held is to be detached.
    pub(super) fn end_streams(&self) -> Vec<Ended> {
        let mut members = self.members();
        let streams = std::mem::take(&mut members.streams);
        let mut ended = std::mem::take(&mut members.ended);
        for member in streams {
            let _ = member.tx.send(Box::new(Err(Error::ShuttingDown)));
            ended.push(Ended {
                tag: member.slots.tag,
                session: member.slots.session,
                keep: member.worker,
            });
        }
        ended
    }
}

/// The streams one dispatch asks: who (id, freed count at the ask), and their slots,
/// in the same order.
pub(super) type Asked = (Vec<(u64, u64)>, Vec<StreamSlots>);

impl Members {
    /// The streams a dispatch asks, those not known to be full: who (id, freed count
    /// at the ask) and their slots, in that order, starting one further round each
    /// call so that no stream is always first.
    pub(super) fn eligible(&mut self) -> Asked {
        let count = self.streams.len();
        let turn = self.turn;
        self.turn = self.turn.wrapping_add(1);
        (0..count)
            .map(|k| &self.streams[(turn + k) % count])
            .filter(|m| !m.full)
            .map(|m| ((m.id, m.freed), m.slots.clone()))
            .unzip()
    }
}

/// What one pass learned: when to look again.
pub(super) struct Next {
    /// The earliest pending due time (a task falls due).
    pub(super) pending: Option<Instant>,
    /// The earliest lease end (a task comes back, maybe freeing a slot).
    pub(super) lease_end: Option<Instant>,
}
