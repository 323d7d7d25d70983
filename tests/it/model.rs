//! A model-based test of the queue: seeded random sequences of Enqueue, Lease, Ack, Nack,
//! ExtendLease, Cancel, Redrive, Peek, Stats and the passing of time run against the
//! real server and, side by side, against a small in-memory model of the contract
//! ("turnstile.v1.QueueService"). Every reply must be one the model allows, and after
//! every step `Stats` and the listing of every state (in delivery order) must agree.
//! Every other run gives its tasks groups and priorities, and pauses, resumes and caps
//! the queue (`ConfigureQueue`), so the model also checks flow control: groups taking
//! turns in the order they came to have a READY task, each group's highest priority
//! first, nothing delivered while paused, never more in flight than the cap.
//! `MODEL_SEED=<n> cargo test --test it model::` replays a run.
//!
//! Time is Redis' clock, which no test can stop: each call is bracketed by two reads of
//! Redis `TIME`, and the model is asked for its answer at every instant in between at
//! which its answer could change (a task falling due, a lease running out). A reply
//! must match one of those answers. Values the server derives from its own "now" (a
//! lease's end, a Nack's due time, `enqueued_at`) are held as ranges until a reply
//! shows them, then adopted.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{seed_from, Rng, TestRedis, TestResult, TestServer};
use tonic::transport::Channel;
use turnstile::pb::{
    queue_service_client::QueueServiceClient, task_spec::Schedule, AckRequest, CancelRequest,
    ConfigureQueueRequest, DuplicatePolicy, EnqueueRequest, ExtendLeaseRequest, LeaseRequest,
    NackRequest, PeekRequest, RedriveRequest, StatsRequest, Task, TaskSpec, TaskState,
};

/// Steps per run, and runs (seeds) per test.
const STEPS: usize = 250;
const RUNS: u64 = 4;
/// The ids a run draws from: few, so that duplicates, replaces and stale receipts
/// are common.
const IDS: u64 = 8;
/// "Soon": due times and leases that pass during a run (ms from now).
const SOON: (u64, u64) = (300, 1500);
/// Far away: never passes during a run.
const HOUR: i64 = 3_600_000;
/// The most states the queue can be in at once, given the replies so far (see
/// `Run::models`).
const MAX_STATES: usize = 64;
/// The contract's default `max_attempts`.
const DEFAULT_MAX_ATTEMPTS: u32 = 25;

/// An instant (Unix ms) known to lie in `lo..=hi`; exact once a reply showed it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    lo: i64,
    hi: i64,
}

impl Span {
    fn at(t: i64) -> Self {
        Span { lo: t, hi: t }
    }

    fn shift(self, by: i64) -> Self {
        Span {
            lo: self.lo + by,
            hi: self.hi + by,
        }
    }

    fn holds(self, t: i64) -> bool {
        (self.lo..=self.hi).contains(&t)
    }

    fn min(self, other: Span) -> Span {
        Span {
            lo: self.lo.min(other.lo),
            hi: self.hi.min(other.hi),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum St {
    Pending,
    InFlight,
    Dead,
    /// Kept after its Ack (`keep_completed`).
    Completed,
    /// Kept after its cancel.
    Cancelled,
}

#[derive(Clone, Debug, PartialEq)]
struct MTask {
    payload: Vec<u8>,
    /// Enqueue order (ties in due time leave in it); a REPLACE takes a new one.
    seq: u64,
    due: Span,
    enqueued: Span,
    attempt: u32,
    max_attempts: u32,
    dedupe_ms: i64,
    st: St,
    /// The live delivery's receipt and lease end (in flight only).
    receipt: String,
    lease_end: i64,
    group: String,
    priority: u32,
    /// Flow mode: a waiting task moved into its group's order (due when it was placed,
    /// or promoted by a later Lease or Peek).
    promoted: bool,
    /// DEAD, COMPLETED, CANCELLED: the call that made it so (the calls run one at a
    /// time, each script at its own instant; ends of one call tie, in enqueue order).
    died: u64,
    /// In flight and cancelled while it runs (`Cancel.running`): its delivery's end,
    /// however it comes, ends it as CANCELLED.
    stopping: bool,
}

/// A task row the model expects: `receipt` `None` for a new one the server picks.
#[derive(Clone, Debug)]
struct Row {
    id: String,
    payload: Vec<u8>,
    state: TaskState,
    due: Span,
    enqueued: Span,
    attempt: u32,
    max_attempts: u32,
    receipt: Option<String>,
    lease_end: Option<Span>,
    group: String,
    priority: u32,
}

/// What the model expects of one call.
#[derive(Clone, Debug)]
enum Reply {
    Enqueue(Vec<(bool, bool, Option<Span>)>),
    Tasks(Vec<Row>),
    Acked(Vec<bool>),
    Nacked(bool, bool),
    Extended(Option<Span>),
    Cancelled(Vec<String>),
    Redriven(u64),
    Stats([u64; 4], Option<Span>, Option<Span>),
    /// The config as stored: paused, max_in_flight.
    Configured(bool, u32, u32),
    /// The `keep_completed` count as stored (0: none).
    Kept(u32),
}

/// The queue as the contract describes it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    tasks: BTreeMap<String, MTask>,
    /// Ids held by a dedupe window, until (Unix ms).
    reserved: BTreeMap<String, i64>,
    seq: u64,
    /// Flow mode: entered with the first task that has a group or a priority.
    flow: bool,
    /// Flow mode: the groups in turn order. A group joins at the back when it comes to
    /// have a READY task (placed or promoted) while not in it, and leaves when its turn
    /// finds nothing READY.
    rotation: Vec<String>,
    paused: bool,
    /// At most this many in flight (0: no cap).
    max_in_flight: u32,
    /// At most this many of one group in flight (0: no cap).
    group_cap: u32,
    /// Groups that must deliver this task next (given back under a group cap of 1).
    pins: BTreeMap<String, String>,
    /// Groups out of the rotation because of their cap, by name (the server's wake-up
    /// set, which a change of the cap goes through in this order).
    capped: BTreeSet<String>,
    /// Deliveries that ended in this script run but are still counted in flight until
    /// its end (returned leases), by group.
    lag: BTreeMap<String, usize>,
    /// Calls applied so far (a DEAD task's `died`).
    calls: u64,
    /// `keep_completed.count` (0: nothing kept).
    keep: u32,
}

#[derive(Clone, Debug)]
struct Spec {
    id: String,
    payload: Vec<u8>,
    due: i64,
    replace: bool,
    max_attempts: u32,
    dedupe_ms: i64,
    group: String,
    priority: u32,
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue(Vec<Spec>),
    Lease {
        max_tasks: u32,
        visibility: i64,
        auto_ack: bool,
    },
    Configure {
        paused: Option<bool>,
        max_in_flight: Option<u32>,
        group_max_in_flight: Option<u32>,
    },
    Ack(Vec<String>),
    Nack {
        receipt: String,
        delay: i64,
    },
    Extend {
        receipt: String,
        visibility: i64,
    },
    Cancel(Vec<String>),
    Redrive(Vec<String>),
    Peek {
        state: TaskState,
        limit: u32,
    },
    Stats,
    /// `ConfigureQueue(keep_completed { count })`.
    Keep(u32),
    /// `Cancel(ids, running)`.
    CancelRunning(Vec<String>),
}

impl Model {
    /// Expired leases end as the contract says: the task is READY again at its
    /// original due time, or DEAD after its last attempt.
    /// They end in lease-end order (then enqueue order), each joining its group's turn.
    fn expire(&mut self, now: i64) {
        let mut ended: Vec<(i64, u64, String)> = self
            .tasks
            .iter()
            .filter(|(_, task)| task.st == St::InFlight && task.lease_end <= now)
            .map(|(id, task)| (task.lease_end, task.seq, id.clone()))
            .collect();
        ended.sort();
        // Each goes back as the run meets it; its group's in-flight count drops once
        // the run ends, when the groups are considered again (under a group cap).
        let mut order: Vec<String> = Vec::new();
        for (_, _, id) in ended {
            let task = self.tasks.get_mut(&id).unwrap();
            task.receipt.clear();
            task.lease_end = 0;
            let group = task.group.clone();
            *self.lag.entry(group.clone()).or_default() += 1;
            if !order.contains(&group) {
                order.push(group.clone());
            }
            if task.stopping {
                self.end_cancelled(&id, now);
                continue;
            }
            let task = self.tasks.get_mut(&id).unwrap();
            if task.attempt >= task.max_attempts {
                task.st = St::Dead;
                task.died = self.calls;
            } else {
                task.st = St::Pending;
                if self.flow && self.group_cap == 1 {
                    self.pins.insert(group, id.clone());
                }
                self.place(&id, now);
            }
        }
        self.lag.clear();
        self.deliveries_ended(&order);
        self.reserved.retain(|_, until| *until > now);
    }

    /// Deliveries of these groups ended: under a group cap they may go again.
    fn deliveries_ended(&mut self, groups: &[String]) {
        if self.flow && self.group_cap > 0 {
            for group in groups {
                self.join(group);
            }
        }
    }

    /// A group's tasks in flight, as the server counts them now.
    fn in_flight_of(&self, group: &str) -> usize {
        self.tasks
            .values()
            .filter(|t| t.group == group && t.st == St::InFlight)
            .count()
            + self.lag.get(group).copied().unwrap_or(0)
    }

    fn has_ready(&self, group: &str) -> bool {
        self.tasks
            .values()
            .any(|t| t.group == group && t.st == St::Pending && t.promoted)
    }

    /// Flow mode: a task that waits again (placed, given back, redriven) is in its
    /// group's order at once when due, and its group joins the rotation.
    fn place(&mut self, id: &str, now: i64) {
        let task = self.tasks.get_mut(id).unwrap();
        task.promoted = self.flow && task.due.lo <= now;
        if task.promoted {
            let group = task.group.clone();
            self.join(&group);
        }
    }

    /// A group that can deliver joins the back of the rotation, unless it is in it:
    /// it has a READY task (the one it must deliver next, if pinned) and is under its
    /// cap (else it waits among the capped).
    fn join(&mut self, group: &str) {
        if !self.flow || self.rotation.iter().any(|g| g == group) {
            return;
        }
        let ready = match self.pins.get(group) {
            Some(pin) => self
                .tasks
                .get(pin)
                .is_some_and(|t| t.st == St::Pending && t.promoted),
            None => self.has_ready(group),
        };
        if !ready {
            return;
        }
        if self.group_cap > 0 && self.in_flight_of(group) >= self.group_cap as usize {
            self.capped.insert(group.to_owned());
            return;
        }
        self.capped.remove(group);
        self.rotation.push(group.to_owned());
    }

    /// Turns flow mode on: every waiting task is yet to be promoted.
    fn enter_flow(&mut self) {
        if !self.flow {
            self.flow = true;
            for task in self.tasks.values_mut() {
                task.promoted = false;
            }
        }
    }

    /// Flow mode: the waiting tasks that fell due move into their groups' order, in
    /// due and enqueue order; their groups join in that order.
    fn promote(&mut self, now: i64) {
        if !self.flow {
            return;
        }
        let mut due: Vec<(i64, u64, String)> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.st == St::Pending && !t.promoted && t.due.lo <= now)
            .map(|(id, t)| (t.due.lo, t.seq, id.clone()))
            .collect();
        due.sort();
        for (_, _, id) in &due {
            self.tasks.get_mut(id).unwrap().promoted = true;
        }
        for (_, _, id) in &due {
            let group = self.tasks[id].group.clone();
            self.join(&group);
        }
    }

    /// Flow mode: the next READY task of `group` in its order (priority, due, enqueue).
    fn next_of(&self, group: &str) -> Option<String> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.group == group && t.st == St::Pending && t.promoted)
            .min_by_key(|(_, t)| (9 - t.priority, t.due.lo, t.seq))
            .map(|(id, _)| id.clone())
    }

    /// The ids to deliver now, at most `n`: in flow mode groups in turn, one each per
    /// turn (a group alone gives all it has); else the READY listing.
    fn deliverable(&mut self, n: usize, now: i64, auto_ack: bool) -> Vec<String> {
        if !self.flow {
            return self
                .listing(TaskState::Ready, now)
                .into_iter()
                .take(n)
                .collect();
        }
        let mut out: Vec<String> = Vec::new();
        // What this call took from each group counts in flight (auto_ack's does not).
        let mut taken: BTreeMap<String, usize> = BTreeMap::new();
        while out.len() < n {
            let Some(group) = self.rotation.first().cloned() else {
                break;
            };
            let in_flight = |model: &Self, taken: &BTreeMap<String, usize>| {
                model.in_flight_of(&group) + taken.get(&group).copied().unwrap_or(0)
            };
            let mut want = if self.rotation.len() == 1 {
                (n - out.len()) as i64
            } else {
                1
            };
            if self.group_cap > 0 {
                want = want.min(self.group_cap as i64 - in_flight(self, &taken) as i64);
            }
            let pin = self.pins.get(&group).cloned();
            let waits = pin.as_ref().is_some_and(|pin| {
                !self
                    .tasks
                    .get(pin)
                    .is_some_and(|t| t.st == St::Pending && t.promoted)
            });
            if !waits && want > 0 {
                let mut take = |model: &mut Self, id: String| {
                    // Taken out of its group's order now (delivered by the caller).
                    model.tasks.get_mut(&id).unwrap().promoted = false;
                    if !auto_ack {
                        *taken.entry(group.clone()).or_default() += 1;
                    }
                    out.push(id);
                };
                if let Some(pin) = pin {
                    self.pins.remove(&group);
                    take(self, pin);
                } else {
                    for _ in 0..want {
                        match self.next_of(&group) {
                            Some(id) => take(self, id),
                            None => break,
                        }
                    }
                }
            }
            self.rotation.remove(0);
            if waits || !self.has_ready(&group) {
                continue;
            }
            if self.group_cap > 0 && in_flight(self, &taken) >= self.group_cap as usize {
                self.capped.insert(group);
            } else {
                self.rotation.push(group);
            }
        }
        out
    }

    /// The instants in `(from, to]` at which the model's answers could change.
    fn changes_within(&self, from: i64, to: i64) -> BTreeSet<i64> {
        let mut at = BTreeSet::new();
        for task in self.tasks.values() {
            for t in [task.due.lo, task.due.hi, task.lease_end] {
                if t > from && t <= to {
                    at.insert(t);
                }
            }
        }
        at.extend(self.reserved.values().filter(|t| **t > from && **t <= to));
        at
    }

    /// A task that leaves its group while pinned there lets the group go on.
    fn unpin(&mut self, group: &str, id: &str) {
        if self.pins.get(group).is_some_and(|pin| pin == id) {
            self.pins.remove(group);
            self.join(group);
        }
    }

    /// Keeps a task whose delivery or wait ended as `st` (COMPLETED, CANCELLED); its id
    /// stays reserved for its dedupe window.
    fn end_kept(&mut self, id: &str, st: St, now: i64) {
        let calls = self.calls;
        let task = self.tasks.get_mut(id).unwrap();
        task.st = st;
        task.receipt.clear();
        task.lease_end = 0;
        task.stopping = false;
        task.died = calls;
        if task.dedupe_ms > 0 {
            self.reserved.insert(id.into(), now + task.dedupe_ms);
        }
    }

    /// A delivery cancelled while it ran ended: CANCELLED (kept) or gone.
    fn end_cancelled(&mut self, id: &str, now: i64) {
        if self.keep > 0 {
            self.end_kept(id, St::Cancelled, now);
            self.prune(St::Cancelled);
        } else {
            self.remove(id, now);
        }
    }

    /// Keeps the newest `keep` tasks of a kept state (by when they ended, then enqueue
    /// order); the others go, their ids not reserved again.
    fn prune(&mut self, st: St) {
        if self.keep == 0 {
            return;
        }
        let mut kept: Vec<(u64, u64, String)> = self
            .tasks
            .iter()
            .filter(|(_, task)| task.st == st)
            .map(|(id, task)| (task.died, task.seq, id.clone()))
            .collect();
        kept.sort();
        let over = kept.len().saturating_sub(self.keep as usize);
        for (_, _, id) in kept.into_iter().take(over) {
            self.tasks.remove(&id);
        }
    }

    fn remove(&mut self, id: &str, now: i64) {
        let task = self.tasks.remove(id).expect("a task to remove");
        if task.dedupe_ms > 0 {
            self.reserved.insert(id.into(), now + task.dedupe_ms);
        }
    }

    fn state(&self, task: &MTask, now: i64) -> TaskState {
        match task.st {
            St::InFlight => TaskState::InFlight,
            St::Dead => TaskState::Dead,
            St::Completed => TaskState::Completed,
            St::Cancelled => TaskState::Cancelled,
            St::Pending if task.due.lo <= now => TaskState::Ready,
            St::Pending => TaskState::Delayed,
        }
    }

    fn row(&self, id: &str, task: &MTask, now: i64) -> Row {
        Row {
            id: id.into(),
            payload: task.payload.clone(),
            state: self.state(task, now),
            due: task.due,
            enqueued: task.enqueued,
            attempt: task.attempt,
            max_attempts: task.max_attempts,
            receipt: Some(String::new()),
            lease_end: (task.lease_end > 0).then(|| Span::at(task.lease_end)),
            group: task.group.clone(),
            priority: task.priority,
        }
    }

    /// The ids in `state`, in delivery order: due time (lease end for IN_FLIGHT),
    /// then enqueue order.
    fn listing(&self, state: TaskState, now: i64) -> Vec<String> {
        let mut ids: Vec<_> = self
            .tasks
            .iter()
            .filter(|(_, task)| self.state(task, now) == state)
            .map(|(id, task)| {
                // IN_FLIGHT by lease end, DEAD, COMPLETED and CANCELLED by when they
                // ended, the others by due.
                let at = match state {
                    TaskState::InFlight => task.lease_end,
                    TaskState::Dead | TaskState::Completed | TaskState::Cancelled => {
                        task.died as i64
                    }
                    _ => task.due.lo,
                };
                // READY: highest priority first (all 0 without flow control).
                let rank = if state == TaskState::Ready {
                    9 - task.priority
                } else {
                    0
                };
                ((rank, at, task.seq), id.clone())
            })
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    fn live(&self, receipt: &str, now: i64) -> Option<String> {
        let id = receipt.split_once(':')?.1;
        let task = self.tasks.get(id)?;
        (task.st == St::InFlight && task.receipt == receipt && task.lease_end > now)
            .then(|| id.to_string())
    }

    /// Applies `op` as a call whose script ran at some instant in `now` (no answer
    /// of the model changes within it), and returns the reply it expects.
    fn apply(&mut self, op: &Op, now: Span) -> Reply {
        self.calls += 1;
        let t = now.lo;
        // The scripts that return expired leases first (Ack, Nack and ExtendLease see
        // one as stale without returning it).
        if !matches!(
            op,
            Op::Ack(..) | Op::Nack { .. } | Op::Extend { .. } | Op::Keep(..)
        ) {
            self.expire(t);
            // Every script that returns expired leases also drops the kept tasks past
            // the retention.
            self.prune(St::Completed);
            self.prune(St::Cancelled);
        } else {
            self.reserved.retain(|_, until| *until > t);
        }
        match op {
            Op::Enqueue(specs) => {
                if specs.iter().any(|s| !s.group.is_empty() || s.priority != 0) {
                    self.enter_flow();
                }
                let mut out = Vec::new();
                // The tasks stored, in the order the batch placed them (a second spec
                // of one id places it again, later).
                let mut placed: Vec<String> = Vec::new();
                // Replaced tasks that were pinned in their groups.
                let mut unpinned: Vec<(String, String)> = Vec::new();
                for spec in specs {
                    if self.reserved.contains_key(&spec.id) {
                        out.push((false, false, None));
                        continue;
                    }
                    let old = self.tasks.get(&spec.id);
                    if let Some(old) = old {
                        if !spec.replace || old.st == St::InFlight {
                            out.push((false, false, Some(old.due)));
                            continue;
                        }
                    }
                    let enqueued = old.map_or(now, |old| old.enqueued);
                    let created = old.is_none();
                    if let Some(old) = old {
                        if !placed.contains(&spec.id) {
                            unpinned.push((old.group.clone(), spec.id.clone()));
                        }
                    }
                    self.seq += 1;
                    self.tasks.insert(
                        spec.id.clone(),
                        MTask {
                            payload: spec.payload.clone(),
                            seq: self.seq,
                            due: Span::at(spec.due),
                            enqueued,
                            attempt: 0,
                            max_attempts: if spec.max_attempts == 0 {
                                DEFAULT_MAX_ATTEMPTS
                            } else {
                                spec.max_attempts
                            },
                            dedupe_ms: spec.dedupe_ms,
                            st: St::Pending,
                            receipt: String::new(),
                            lease_end: 0,
                            group: spec.group.clone(),
                            priority: spec.priority,
                            promoted: false,
                            died: 0,
                            stopping: false,
                        },
                    );
                    placed.retain(|id| *id != spec.id);
                    placed.push(spec.id.clone());
                    out.push((created, !created, Some(Span::at(spec.due))));
                }
                for (group, id) in &unpinned {
                    self.unpin(group, id);
                }
                for id in &placed {
                    let task = self.tasks.get_mut(id).unwrap();
                    task.promoted = self.flow && task.due.lo <= t;
                }
                for id in &placed {
                    if self.tasks[id].promoted {
                        let group = self.tasks[id].group.clone();
                        self.join(&group);
                    }
                }
                Reply::Enqueue(out)
            }
            Op::Lease {
                max_tasks,
                visibility,
                auto_ack,
            } => {
                let mut rows = Vec::new();
                self.promote(t);
                let mut n = (*max_tasks).max(1) as usize;
                if self.paused {
                    n = 0;
                } else if self.max_in_flight > 0 && !*auto_ack {
                    let in_flight = self
                        .tasks
                        .values()
                        .filter(|task| task.st == St::InFlight)
                        .count();
                    n = n.min((self.max_in_flight as usize).saturating_sub(in_flight));
                }
                let ready = self.deliverable(n, t, *auto_ack);
                for id in ready {
                    let task = self.tasks.get_mut(&id).unwrap();
                    task.attempt += 1;
                    task.st = St::InFlight;
                    let mut row = self.row(&id, &self.tasks[&id], t);
                    if *auto_ack && self.keep > 0 {
                        // Kept as COMPLETED as it starts; the row shows it so.
                        self.end_kept(&id, St::Completed, t);
                        row = self.row(&id, &self.tasks[&id], t);
                    } else if *auto_ack {
                        self.remove(&id, t);
                    } else {
                        // Receipt and lease end are adopted from the reply.
                        row.receipt = None;
                        row.lease_end = Some(now.shift(*visibility));
                    }
                    rows.push(row);
                }
                if *auto_ack {
                    self.prune(St::Completed);
                }
                Reply::Tasks(rows)
            }
            Op::Ack(receipts) => {
                let mut out = Vec::new();
                let mut groups: Vec<String> = Vec::new();
                for receipt in receipts {
                    match self.live(receipt, t) {
                        Some(id) => {
                            let group = self.tasks[&id].group.clone();
                            if !groups.contains(&group) {
                                groups.push(group);
                            }
                            if self.tasks[&id].stopping {
                                self.end_cancelled(&id, t);
                            } else if self.keep > 0 {
                                self.end_kept(&id, St::Completed, t);
                            } else {
                                self.remove(&id, t);
                            }
                            out.push(true);
                        }
                        None => out.push(false),
                    }
                }
                self.prune(St::Completed);
                self.deliveries_ended(&groups);
                Reply::Acked(out)
            }
            Op::Nack { receipt, delay } => match self.live(receipt, t) {
                None => Reply::Nacked(false, false),
                Some(id) if self.tasks[&id].stopping => {
                    // Cancelled while it ran: the Nack ends it as CANCELLED.
                    let group = self.tasks[&id].group.clone();
                    self.end_cancelled(&id, t);
                    self.deliveries_ended(std::slice::from_ref(&group));
                    Reply::Nacked(false, false)
                }
                Some(id) => {
                    let task = self.tasks.get_mut(&id).unwrap();
                    task.receipt.clear();
                    task.lease_end = 0;
                    let group = task.group.clone();
                    // The delivery ends first (neither in flight nor READY meanwhile),
                    // then the task goes back.
                    task.st = St::Dead;
                    self.deliveries_ended(std::slice::from_ref(&group));
                    let task = self.tasks.get_mut(&id).unwrap();
                    if task.attempt >= task.max_attempts {
                        task.died = self.calls;
                        Reply::Nacked(false, true)
                    } else {
                        task.st = St::Pending;
                        task.due = now.shift(*delay);
                        if self.flow && self.group_cap == 1 {
                            self.pins.insert(group, id.clone());
                        }
                        self.place(&id, t);
                        Reply::Nacked(true, false)
                    }
                }
            },
            Op::Extend {
                receipt,
                visibility,
            } => match self.live(receipt, t) {
                None => Reply::Extended(None),
                // The new end is adopted from the reply.
                Some(_) => Reply::Extended(Some(now.shift(*visibility))),
            },
            Op::Cancel(ids) | Op::CancelRunning(ids) => {
                let running = matches!(op, Op::CancelRunning(..));
                let mut out = Vec::new();
                for id in ids {
                    let Some(task) = self.tasks.get(id) else {
                        continue;
                    };
                    if out.contains(id) {
                        continue;
                    }
                    if task.st == St::InFlight {
                        if running {
                            self.tasks.get_mut(id).unwrap().stopping = true;
                            out.push(id.clone());
                        }
                        continue;
                    }
                    let ended = matches!(task.st, St::Completed | St::Cancelled);
                    let group = task.group.clone();
                    if self.keep > 0 && !ended {
                        self.end_kept(id, St::Cancelled, t);
                    } else {
                        self.remove(id, t);
                    }
                    if !ended {
                        self.unpin(&group, id);
                    }
                    out.push(id.clone());
                }
                self.prune(St::Cancelled);
                Reply::Cancelled(out)
            }
            Op::Keep(count) => {
                self.keep = *count;
                Reply::Kept(*count)
            }
            Op::Redrive(ids) => {
                // All: in the dead set's order (when it died, then enqueue order).
                let ids: Vec<String> = if ids.is_empty() {
                    let mut dead: Vec<(u64, u64, String)> = self
                        .tasks
                        .iter()
                        .filter(|(_, task)| task.st == St::Dead)
                        .map(|(id, task)| (task.died, task.seq, id.clone()))
                        .collect();
                    dead.sort();
                    dead.into_iter().map(|(_, _, id)| id).collect()
                } else {
                    ids.clone()
                };
                let mut moved = Vec::new();
                for id in ids {
                    if let Some(task) = self.tasks.get_mut(&id).filter(|task| task.st == St::Dead) {
                        task.st = St::Pending;
                        task.attempt = 0;
                        task.promoted = self.flow && task.due.lo <= t;
                        moved.push(id);
                    }
                }
                for id in &moved {
                    if self.tasks[id].promoted {
                        let group = self.tasks[id].group.clone();
                        self.join(&group);
                    }
                }
                Reply::Redriven(moved.len() as u64)
            }
            Op::Peek { state, limit } => {
                self.promote(t);
                let limit = if *limit == 0 { 10 } else { *limit as usize };
                let ids = self.listing(*state, t);
                Reply::Tasks(
                    ids.iter()
                        .take(limit)
                        .map(|id| self.row(id, &self.tasks[id], t))
                        .collect(),
                )
            }
            Op::Configure {
                paused,
                max_in_flight,
                group_max_in_flight,
            } => {
                self.enter_flow();
                if let Some(paused) = paused {
                    self.paused = *paused;
                }
                if let Some(cap) = max_in_flight {
                    self.max_in_flight = *cap;
                }
                if let Some(cap) = group_max_in_flight {
                    self.group_cap = *cap;
                    // The groups waiting on the old cap are considered again.
                    for group in std::mem::take(&mut self.capped) {
                        self.join(&group);
                    }
                }
                Reply::Configured(self.paused, self.max_in_flight, self.group_cap)
            }
            Op::Stats => {
                let mut counts = [0u64; 4];
                let (mut oldest, mut next): (Option<Span>, Option<Span>) = (None, None);
                for task in self.tasks.values() {
                    match self.state(task, t) {
                        TaskState::Ready => {
                            counts[0] += 1;
                            oldest = Some(oldest.map_or(task.due, |o| o.min(task.due)));
                        }
                        TaskState::Delayed => {
                            counts[1] += 1;
                            next = Some(next.map_or(task.due, |n| n.min(task.due)));
                        }
                        TaskState::InFlight => counts[2] += 1,
                        TaskState::Dead => counts[3] += 1,
                        // Kept ended tasks count in no depth.
                        _ => {}
                    }
                }
                Reply::Stats(counts, oldest, next)
            }
        }
    }
}

/// The server's answer to one call, in the model's terms.
#[derive(Debug)]
enum Actual {
    Enqueue(Vec<(bool, bool, Option<i64>)>),
    Tasks(Vec<Task>),
    Acked(Vec<bool>),
    Nacked(bool, bool),
    Extended(Option<i64>),
    Cancelled(Vec<String>),
    Redriven(u64),
    Stats([u64; 4], Option<i64>, Option<i64>),
    Configured(bool, u32, u32),
    Kept(u32),
}

fn ms_of(ts: &Option<prost_types::Timestamp>) -> Option<i64> {
    ts.as_ref()
        .map(|ts| ts.seconds * 1000 + i64::from(ts.nanos) / 1_000_000)
}

fn span_holds(span: Option<Span>, t: Option<i64>) -> bool {
    match (span, t) {
        (None, None) => true,
        (Some(span), Some(t)) => span.holds(t),
        _ => false,
    }
}

fn row_matches(row: &Row, task: &Task) -> bool {
    row.id == task.id
        && row.payload == task.payload.as_ref()
        && row.state as i32 == task.state
        && span_holds(Some(row.due), ms_of(&task.due_at))
        && span_holds(Some(row.enqueued), ms_of(&task.enqueued_at))
        && row.attempt == task.attempt
        && row.max_attempts == task.max_attempts
        && row
            .receipt
            .as_ref()
            .map_or(!task.receipt.is_empty(), |r| *r == task.receipt)
        && span_holds(row.lease_end, ms_of(&task.lease_expires_at))
        && row.group == task.group
        && row.priority == task.priority
}

/// Whether the server's reply is one the model expects. Rows are compared in order
/// (the model computes delivery order from exact times: every instant a listing is
/// ordered by has been adopted from an earlier reply).
fn matches(expected: &Reply, actual: &Actual) -> bool {
    match (expected, actual) {
        (Reply::Enqueue(e), Actual::Enqueue(a)) => {
            e.len() == a.len()
                && e.iter().zip(a).all(|((c, r, due), (ac, ar, adue))| {
                    c == ac && r == ar && span_holds(*due, *adue)
                })
        }
        (Reply::Tasks(rows), Actual::Tasks(tasks)) => {
            rows.len() == tasks.len() && rows.iter().zip(tasks).all(|(r, t)| row_matches(r, t))
        }
        (Reply::Acked(e), Actual::Acked(a)) => e == a,
        (Reply::Nacked(r, d), Actual::Nacked(ar, ad)) => r == ar && d == ad,
        (Reply::Extended(e), Actual::Extended(a)) => span_holds(*e, *a),
        (Reply::Cancelled(e), Actual::Cancelled(a)) => e == a,
        (Reply::Redriven(e), Actual::Redriven(a)) => e == a,
        (Reply::Stats(c, o, n), Actual::Stats(ac, ao, an)) => {
            c == ac && span_holds(*o, *ao) && span_holds(*n, *an)
        }
        (Reply::Configured(p, m, g), Actual::Configured(ap, am, ag)) => {
            p == ap && m == am && g == ag
        }
        (Reply::Kept(k), Actual::Kept(ak)) => k == ak,
        _ => false,
    }
}

impl Model {
    /// Takes in what a matching reply showed: receipts, lease ends, and the exact
    /// instants the model held as ranges.
    fn adopt(&mut self, op: &Op, actual: &Actual) {
        match actual {
            Actual::Tasks(tasks) => {
                for shown in tasks {
                    let Some(task) = self.tasks.get_mut(&shown.id) else {
                        continue;
                    };
                    task.due = Span::at(ms_of(&shown.due_at).unwrap());
                    task.enqueued = Span::at(ms_of(&shown.enqueued_at).unwrap());
                    // A delivery's receipt and lease end (an auto-acked task kept as
                    // COMPLETED has neither).
                    if matches!(op, Op::Lease { .. }) && task.st == St::InFlight {
                        task.receipt = shown.receipt.clone();
                        task.lease_end = ms_of(&shown.lease_expires_at).unwrap();
                    }
                }
            }
            Actual::Extended(Some(end)) => {
                let Op::Extend { receipt, .. } = op else {
                    unreachable!()
                };
                let id = receipt.split_once(':').unwrap().1;
                self.tasks.get_mut(id).unwrap().lease_end = *end;
            }
            _ => {}
        }
    }
}

struct Run {
    queues: QueueServiceClient<Channel>,
    redis: redis::aio::MultiplexedConnection,
    /// Every state the queue can be in, given the replies so far: more than one when a
    /// reply matched the model at more than one stretch of its call's time and the
    /// stretches left different states (a task enqueued before or after a lease ran
    /// out, say). A later reply drops those it does not match.
    models: Vec<Model>,
    /// Every receipt the server handed out, stale ones included.
    receipts: Vec<String>,
    log: Vec<String>,
}

impl Run {
    /// Redis' clock, in Unix ms (the clock the scripts use).
    async fn redis_now(&mut self) -> i64 {
        common::redis_now_ms(&mut self.redis).await
    }

    async fn call(&mut self, op: &Op) -> Actual {
        let q = || "model".to_string();
        let queues = &mut self.queues;
        let result = match op.clone() {
            Op::Enqueue(specs) => queues
                .enqueue(EnqueueRequest {
                    queue: q(),
                    tasks: specs
                        .into_iter()
                        .map(|s| TaskSpec {
                            id: s.id,
                            payload: s.payload.into(),
                            schedule: Some(Schedule::DueAt(prost_types::Timestamp {
                                seconds: s.due.div_euclid(1000),
                                nanos: (s.due.rem_euclid(1000) * 1_000_000) as i32,
                            })),
                            on_duplicate: if s.replace {
                                DuplicatePolicy::Replace as i32
                            } else {
                                DuplicatePolicy::Keep as i32
                            },
                            max_attempts: s.max_attempts,
                            dedupe_window: (s.dedupe_ms > 0)
                                .then(|| common::ms(s.dedupe_ms).unwrap()),
                            group: s.group,
                            priority: s.priority,
                        })
                        .collect(),
                    ..Default::default()
                })
                .await
                .map(|r| {
                    Actual::Enqueue(
                        r.into_inner()
                            .results
                            .iter()
                            .map(|r| (r.created, r.replaced, ms_of(&r.due_at)))
                            .collect(),
                    )
                }),
            Op::Lease {
                max_tasks,
                visibility,
                auto_ack,
            } => queues
                .lease(LeaseRequest {
                    queue: q(),
                    max_tasks,
                    visibility: common::ms(visibility),
                    auto_ack,
                    ..Default::default()
                })
                .await
                .map(|r| Actual::Tasks(r.into_inner().tasks)),
            Op::Ack(receipts) => queues
                .ack(AckRequest {
                    queue: q(),
                    receipts,
                    ..Default::default()
                })
                .await
                .map(|r| Actual::Acked(r.into_inner().acked)),
            Op::Nack { receipt, delay } => queues
                .nack(NackRequest {
                    queue: q(),
                    receipt,
                    delay: common::ms(delay),
                    ..Default::default()
                })
                .await
                .map(|r| {
                    let r = r.into_inner();
                    Actual::Nacked(r.requeued, r.dead)
                }),
            Op::Extend {
                receipt,
                visibility,
            } => queues
                .extend_lease(ExtendLeaseRequest {
                    queue: q(),
                    receipt,
                    visibility: common::ms(visibility),
                    ..Default::default()
                })
                .await
                .map(|r| {
                    let r = r.into_inner();
                    Actual::Extended(r.extended.then(|| ms_of(&r.lease_expires_at).unwrap()))
                }),
            Op::Cancel(ids) => queues
                .cancel(CancelRequest {
                    queue: q(),
                    ids,
                    ..Default::default()
                })
                .await
                .map(|r| Actual::Cancelled(r.into_inner().cancelled)),
            Op::CancelRunning(ids) => queues
                .cancel(CancelRequest {
                    queue: q(),
                    ids,
                    running: true,
                })
                .await
                .map(|r| Actual::Cancelled(r.into_inner().cancelled)),
            Op::Keep(count) => queues
                .configure_queue(ConfigureQueueRequest {
                    queue: q(),
                    keep_completed: Some(turnstile::pb::Retention { age: None, count }),
                    ..Default::default()
                })
                .await
                .map(|r| {
                    let config = r.into_inner().config.unwrap_or_default();
                    Actual::Kept(config.keep_completed.map_or(0, |k| k.count))
                }),
            Op::Redrive(ids) => queues
                .redrive(RedriveRequest { queue: q(), ids })
                .await
                .map(|r| Actual::Redriven(r.into_inner().redriven)),
            Op::Peek { state, limit } => queues
                .peek(PeekRequest {
                    queue: q(),
                    state: state as i32,
                    limit,
                    group: None,
                })
                .await
                .map(|r| Actual::Tasks(r.into_inner().tasks)),
            Op::Configure {
                paused,
                max_in_flight,
                group_max_in_flight,
            } => queues
                .configure_queue(ConfigureQueueRequest {
                    queue: q(),
                    paused,
                    max_in_flight,
                    group_max_in_flight,
                    ..Default::default()
                })
                .await
                .map(|r| {
                    let config = r.into_inner().config.unwrap_or_default();
                    Actual::Configured(
                        config.paused,
                        config.max_in_flight,
                        config.group_max_in_flight,
                    )
                }),
            Op::Stats => queues.stats(StatsRequest { queue: q() }).await.map(|r| {
                let r = r.into_inner();
                Actual::Stats(
                    [r.ready, r.delayed, r.in_flight, r.dead],
                    ms_of(&r.oldest_ready_at),
                    ms_of(&r.next_due_at),
                )
            }),
        };
        result.unwrap_or_else(|status| panic!("{op:?} failed: {status:?}\n{}", self.log.join("\n")))
    }

    /// Runs `op` on the server and checks the reply against each model at each instant
    /// the call could have run at; every (model, instant) that matches is a model of
    /// the next step.
    async fn step(&mut self, op: Op) {
        let from = self.redis_now().await;
        let actual = self.call(&op).await;
        let to = self.redis_now().await;
        let mut next: Vec<Model> = Vec::new();
        let mut tried = Vec::new();
        for model in &self.models {
            // The instants at which the model's answer could change split from..=to
            // into stretches that each have one answer.
            let mut starts = vec![from];
            starts.extend(model.changes_within(from, to));
            for (n, &lo) in starts.iter().enumerate() {
                let hi = starts.get(n + 1).map_or(to, |next| next - 1);
                let mut candidate = model.clone();
                let expected = candidate.apply(&op, Span { lo, hi });
                if matches(&expected, &actual) {
                    candidate.adopt(&op, &actual);
                    if !next.contains(&candidate) {
                        next.push(candidate);
                    }
                } else if next.is_empty() {
                    tried.push(format!("  at {lo}..={hi}: {expected:?}"));
                }
            }
        }
        if next.is_empty() {
            panic!(
                "the server and the model disagree on {op:?}\nserver: {actual:?}\nmodel ({} possible states):\n{}\nfirst model state: {:#?}\nsteps so far:\n{}",
                self.models.len(),
                tried.join("\n"),
                self.models[0],
                self.log.join("\n")
            );
        }
        // States that differ only in what no reply has shown yet merge again once one
        // shows it, so a few remain; many would mean the model keeps a difference that
        // never shows.
        assert!(
            next.len() <= MAX_STATES,
            "{} possible states after {op:?}",
            next.len()
        );
        if let Actual::Tasks(tasks) = &actual {
            if matches!(op, Op::Lease { .. }) {
                self.receipts.extend(
                    tasks
                        .iter()
                        .map(|t| t.receipt.clone())
                        .filter(|r| !r.is_empty()),
                );
            }
        }
        self.models = next;
        self.log.push(format!("{op:?} -> {actual:?}"));
    }

    /// Stats and every state's full listing, in delivery order.
    async fn observe(&mut self) {
        for state in [
            TaskState::Ready,
            TaskState::Delayed,
            TaskState::InFlight,
            TaskState::Dead,
            TaskState::Completed,
            TaskState::Cancelled,
        ] {
            self.step(Op::Peek { state, limit: 1000 }).await;
        }
        self.step(Op::Stats).await;
    }

    /// Waits for Redis' clock to pass the model's next change (a task falling due, a
    /// lease running out), if one is near.
    async fn advance(&mut self) {
        let now = self.redis_now().await;
        let Some(next) = self
            .models
            .iter()
            .filter_map(|model| {
                model
                    .changes_within(now, now + 2 * SOON.1 as i64)
                    .first()
                    .copied()
            })
            .min()
        else {
            return;
        };
        self.log.push(format!("advance to {next}"));
        common::wait_redis_time(&self.redis, next).await;
    }

    fn receipt(&self, rng: &mut Rng) -> String {
        if self.receipts.is_empty() || rng.below(10) == 0 {
            // One the server never made.
            return format!("forged:t{}", rng.below(IDS));
        }
        self.receipts[rng.below(self.receipts.len() as u64) as usize].clone()
    }
}

fn id(rng: &mut Rng) -> String {
    format!("t{}", rng.below(IDS))
}

fn soon(rng: &mut Rng) -> i64 {
    (SOON.0 + rng.below(SOON.1 - SOON.0)) as i64
}

/// A random step; times relative to `now` (Redis' clock) and the run's `start`. Right
/// after time passed, a step that must see a lease that ran out (and that nothing
/// returned yet) as ended is likelier.
fn pick(
    rng: &mut Rng,
    run: &Run,
    now: i64,
    start: i64,
    time_passed: bool,
    grouped: bool,
) -> Option<Op> {
    let kind = if time_passed && rng.below(2) == 0 {
        [0, 71, 77][rng.below(3) as usize]
    } else {
        rng.below(100)
    };
    Some(match kind {
        0..=24 => Op::Enqueue(
            (0..1 + rng.below(3))
                .map(|_| Spec {
                    id: id(rng),
                    payload: (0..rng.below(6)).map(|_| rng.below(256) as u8).collect(),
                    due: match rng.below(3) {
                        // Past times from a small set, so that ties are common.
                        0 => start - HOUR + rng.below(4) as i64 * 1000,
                        1 => now + soon(rng),
                        _ => start + 2 * HOUR + rng.below(4) as i64 * 1000,
                    },
                    replace: rng.below(2) == 0,
                    max_attempts: [0, 1, 2, 3][rng.below(4) as usize],
                    dedupe_ms: if rng.below(6) == 0 { HOUR } else { 0 },
                    group: if grouped {
                        ["", "a", "a", "b"][rng.below(4) as usize].to_owned()
                    } else {
                        String::new()
                    },
                    priority: if grouped {
                        [0, 0, 5, 9][rng.below(4) as usize]
                    } else {
                        0
                    },
                })
                .collect(),
        ),
        25..=44 => Op::Lease {
            max_tasks: [0, 1, 2, 3, 5][rng.below(5) as usize],
            visibility: if rng.below(2) == 0 { soon(rng) } else { HOUR },
            auto_ack: rng.below(8) == 0,
        },
        45..=54 => Op::Ack((0..1 + rng.below(3)).map(|_| run.receipt(rng)).collect()),
        55..=64 => Op::Nack {
            receipt: run.receipt(rng),
            delay: if rng.below(2) == 0 { 0 } else { 2 * HOUR },
        },
        65..=70 => Op::Extend {
            receipt: run.receipt(rng),
            visibility: if rng.below(2) == 0 { soon(rng) } else { HOUR },
        },
        71..=76 => Op::Cancel((0..1 + rng.below(2)).map(|_| id(rng)).collect()),
        77..=82 => Op::Redrive(if rng.below(2) == 0 {
            Vec::new()
        } else {
            vec![id(rng)]
        }),
        83..=89 => Op::Peek {
            state: [
                TaskState::Ready,
                TaskState::Delayed,
                TaskState::InFlight,
                TaskState::Dead,
            ][rng.below(4) as usize],
            limit: rng.below(4) as u32,
        },
        90..=93 => Op::Stats,
        96 => Op::Keep([0, 1, 2, 4][rng.below(4) as usize]),
        97 => Op::CancelRunning((0..1 + rng.below(2)).map(|_| id(rng)).collect()),
        94..=95 if grouped => Op::Configure {
            // Paused about a third of the time; capped at 1 or 2, or not.
            paused: (rng.below(2) == 0).then(|| rng.below(3) == 0),
            max_in_flight: (rng.below(3) == 0).then(|| [0, 1, 2][rng.below(3) as usize]),
            group_max_in_flight: (rng.below(3) == 0).then(|| [0, 1, 1, 2][rng.below(4) as usize]),
        },
        _ => return None,
    })
}

async fn run_model(server: &TestServer, redis: &TestRedis, seed: u64) {
    let mut run = Run {
        queues: server.queues().await,
        redis: redis.conn().await,
        models: vec![Model::default()],
        receipts: Vec::new(),
        log: vec![format!("seed {seed} (replay with MODEL_SEED={seed})")],
    };
    // Each run has its own queue contents: start from an empty queue.
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut run.redis)
        .await
        .unwrap();
    let mut rng = Rng(seed);
    let start = run.redis_now().await;
    let mut time_passed = false;
    // One grouped run in two starts with each group one task at a time (a group cap
    // of 1: deliveries given back are pinned), the other without caps.
    if seed % 4 == 1 {
        run.step(Op::Configure {
            paused: None,
            max_in_flight: None,
            group_max_in_flight: Some(1),
        })
        .await;
    }
    // Half the runs keep ended tasks from the start (COMPLETED, CANCELLED).
    if seed % 4 >= 2 {
        run.step(Op::Keep(3)).await;
    }
    for _ in 0..STEPS {
        let now = run.redis_now().await;
        // Most steps are followed by a full look; the passing of time is not, so that
        // the next call meets leases that ran out and that nothing has returned yet.
        // Every other run uses groups and priorities (flow control's path).
        match pick(&mut rng, &run, now, start, time_passed, seed % 2 == 1) {
            Some(op) => {
                time_passed = false;
                let look = matches!(op, Op::Nack { .. }) || rng.below(3) > 0;
                run.step(op).await;
                if look {
                    run.observe().await;
                }
            }
            None => {
                run.advance().await;
                time_passed = true;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_agrees_with_its_model_on_every_reply_and_listing() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let seed = seed_from("MODEL_SEED");
    for n in 0..RUNS {
        println!(
            "model seed {} (replay with MODEL_SEED={})",
            seed + n,
            seed + n
        );
        run_model(&server, &redis, seed + n).await;
    }
    Ok(())
}
