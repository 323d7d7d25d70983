//! What the queue store takes and answers: validated inputs (`NewTask`, `LeaseSpec`,
//! `StreamSlots`) and outcomes (`Task`, `Enqueued`, `Nacked`, `Stats`, …). Plain data:
//! no proto type and no Redis type appears here.

use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};

/// A task's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Due later.
    Delayed,
    /// Due now.
    Ready,
    /// Leased to a worker.
    InFlight,
    /// Out of attempts (or given up).
    Dead,
    /// Acked and kept (`QueueConfig.keep_completed`).
    Completed,
    /// Cancelled and kept (under `keep_completed`).
    Cancelled,
}

impl TaskState {
    /// The state as the scripts spell it.
    pub(super) fn as_script_arg(self) -> &'static str {
        match self {
            TaskState::Delayed => "delayed",
            TaskState::Ready => "ready",
            TaskState::InFlight => "in_flight",
            TaskState::Dead => "dead",
            TaskState::Completed => "completed",
            TaskState::Cancelled => "cancelled",
        }
    }

    /// A state as the scripts spell it.
    pub(super) fn from_script(text: &[u8]) -> Result<Self> {
        Ok(match text {
            b"delayed" => TaskState::Delayed,
            b"ready" => TaskState::Ready,
            b"in_flight" => TaskState::InFlight,
            b"dead" => TaskState::Dead,
            b"completed" => TaskState::Completed,
            b"cancelled" => TaskState::Cancelled,
            other => {
                return Err(Error::Internal(format!(
                    "unknown task state {:?}",
                    String::from_utf8_lossy(other)
                )))
            }
        })
    }
}

/// When a new task falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Now.
    Now,
    /// This long from now (Redis clock).
    Delay(Duration),
    /// At this Unix ms (a past one is READY at once, ordered by that time).
    At(i64),
}

/// One task to enqueue (validated).
#[derive(Clone, Debug)]
pub struct NewTask {
    /// The id (the API fills in a random one when the client gave none).
    pub id: String,
    /// The bytes.
    pub payload: Bytes,
    /// When it falls due.
    pub schedule: Schedule,
    /// Replace a DELAYED, READY or DEAD task of the same id (else keep it).
    pub replace: bool,
    /// Deliveries before it goes DEAD.
    pub max_attempts: u32,
    /// How long the id stays reserved after ack or cancel.
    pub dedupe_window: Duration,
    /// The id is 128 random bits the server just made, so no task holds it: the
    /// script skips the duplicate lookup.
    pub fresh_id: bool,
    /// Its group ('' for the queue's ungrouped tasks).
    pub group: String,
    /// 0-9, higher first within its group.
    pub priority: u32,
}

/// What `Enqueue` did with one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The task id.
    pub id: String,
    /// A new task was stored.
    pub created: bool,
    /// An existing task was replaced.
    pub replaced: bool,
    /// When the stored task is due (Unix ms; 0 when nothing is stored under the id).
    pub due_at_ms: i64,
}

/// A task as the scripts report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The id.
    pub id: String,
    /// The bytes.
    pub payload: Bytes,
    /// Its state now.
    pub state: TaskState,
    /// When it is (or was) due, Unix ms.
    pub due_at_ms: i64,
    /// When it was enqueued, Unix ms.
    pub enqueued_at_ms: i64,
    /// The delivery number (0 before the first).
    pub attempt: u32,
    /// The effective maximum.
    pub max_attempts: u32,
    /// The receipt of this delivery ('' when not a delivery).
    pub receipt: String,
    /// When this delivery's lease ends, Unix ms (0 when not leased).
    pub lease_expires_at_ms: i64,
    /// Its group ('' for none).
    pub group: String,
    /// Its priority, 0-9.
    pub priority: u32,
    /// The error its last failed delivery's Nack gave ('' for none).
    pub last_error: String,
    /// The latest progress a worker reported on it (empty for none).
    pub progress: Bytes,
    /// Its deliveries that ended and left it in the queue, oldest first (read only by
    /// [`super::QueueStore::task`]; empty elsewhere).
    pub history: Vec<Attempt>,
    /// What its Ack returned (a kept COMPLETED task; empty otherwise).
    pub result: Bytes,
}

/// How a delivery ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acked.
    Acked,
    /// Nacked (given back, or DEAD on its last attempt).
    Nacked,
    /// Its lease ran out, or its stream closed (after the re-attach grace).
    Expired,
    /// Nacked with `give_up`: DEAD at once.
    GaveUp,
    /// Cancelled while it ran.
    Cancelled,
}

impl Outcome {
    /// Every outcome, in the order the scripts count them (`stats.lua`).
    pub const ALL: [Outcome; 5] = [
        Outcome::Acked,
        Outcome::Nacked,
        Outcome::Expired,
        Outcome::GaveUp,
        Outcome::Cancelled,
    ];

    /// The outcome as the scripts spell it (one byte, `lua/include/attempts.lua`).
    pub(super) fn from_script(code: u8) -> Result<Self> {
        Ok(match code {
            b'a' => Self::Acked,
            b'n' => Self::Nacked,
            b'e' => Self::Expired,
            b'g' => Self::GaveUp,
            b'c' => Self::Cancelled,
            other => {
                return Err(Error::Internal(format!(
                    "unknown delivery outcome {:?}",
                    other as char
                )))
            }
        })
    }

    /// Its name in metrics and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Acked => "acked",
            Self::Nacked => "nacked",
            Self::Expired => "expired",
            Self::GaveUp => "gave_up",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One delivery of a task, as its history keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The delivery number (1 for the first).
    pub number: u32,
    /// The Subscribe stream's worker_id ('' for Lease and streams without one).
    pub worker_id: String,
    /// When it was leased, Unix ms (0 when not known: leased before history was kept).
    pub leased_at_ms: i64,
    /// When it ended, Unix ms.
    pub ended_at_ms: i64,
    /// How it ended.
    pub outcome: Outcome,
    /// The error its Nack gave ('' for none; the last 5 of a task's errors whole,
    /// older ones cut to 200 bytes).
    pub error: String,
}

/// The most progress bytes one `ExtendLease` may carry.
pub const MAX_PROGRESS_BYTES: usize = 4096;

/// The most bytes one delivery's result (`Ack.results`) may hold.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// The longest error a Nack stores: a longer one is cut, never refused.
pub const MAX_ERROR_BYTES: usize = 4096;
/// What ends an error that was cut.
pub const CUT_MARK: &str = "…[cut]";

/// Why a delivery failed, as its Nack says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// The worker's reason, at most [`MAX_ERROR_BYTES`] ('' for none).
    pub error: String,
    /// DEAD now, whatever attempts remain.
    pub give_up: bool,
}

impl Failure {
    /// A failure with `error` cut to [`MAX_ERROR_BYTES`] at a UTF-8 boundary, ending
    /// with [`CUT_MARK`] when it was cut.
    pub fn new(error: &str, give_up: bool) -> Self {
        let error = if error.len() <= MAX_ERROR_BYTES {
            error.to_owned()
        } else {
            let mut end = MAX_ERROR_BYTES - CUT_MARK.len();
            while !error.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{CUT_MARK}", &error[..end])
        };
        Failure { error, give_up }
    }
}

/// How a `Lease` call is to be served.
#[derive(Clone, Debug)]
pub struct LeaseSpec {
    /// At most this many tasks.
    pub max_tasks: u32,
    /// Lease length.
    pub visibility: Duration,
    /// Remove at once (at most once).
    pub auto_ack: bool,
}

/// What one `lease` script call returned.
#[derive(Clone, Debug)]
pub struct Leased {
    /// The tasks taken.
    pub tasks: Vec<Task>,
    /// The next instant (Unix ms) a task falls due or a lease ends, if any.
    pub next_due_ms: Option<i64>,
    /// The limits that held back a deliverable task.
    pub held_back: Vec<super::Limit>,
}

/// One Subscribe stream as the dispatch script sees it.
#[derive(Clone, Debug)]
pub struct StreamSlots {
    /// The tag its deliveries are indexed by (`w:<worker_id>` or `s:<session>`).
    pub tag: String,
    /// This stream's session: a newer stream of the same worker takes its tasks over.
    pub session: String,
    /// Most unacked deliveries.
    pub max_in_flight: u32,
    /// Lease length.
    pub visibility: Duration,
}

/// What one `dispatch` script call did.
#[derive(Clone, Debug)]
pub struct Dispatched {
    /// Redis' clock when it ran (Unix µs): timers count from here, not our clock.
    pub now_us: i64,
    /// The earliest due time left in pending (may be <= now when slots ran out).
    pub next_pending_ms: Option<i64>,
    /// The earliest lease end.
    pub next_lease_end_ms: Option<i64>,
    /// The limits that held back a deliverable task.
    pub held_back: Vec<super::Limit>,
    /// Each stream's deliveries held after the call, in the order given.
    pub held: Vec<u32>,
    /// The deliveries: index of the stream (in the order given) and the task.
    pub tasks: Vec<(usize, Task)>,
}

/// How `Nack` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// Stale receipt: nothing changed.
    Stale,
    /// Due again.
    Requeued,
    /// Out of attempts: DEAD.
    Dead,
}

/// Queue depths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// READY tasks.
    pub ready: u64,
    /// DELAYED tasks.
    pub delayed: u64,
    /// IN_FLIGHT tasks.
    pub in_flight: u64,
    /// DEAD tasks.
    pub dead: u64,
    /// Due time of the oldest READY task.
    pub oldest_ready_at_ms: Option<i64>,
    /// Due time of the next DELAYED task.
    pub next_due_at_ms: Option<i64>,
    /// Tasks that ever went DEAD in this queue (the dead-letter counter).
    pub dead_letters: u64,
    /// Its flow-control config.
    pub config: super::QueueConfig,
    /// Deliveries that started in the last five minutes (the current one included).
    pub delivered_5m: u64,
    /// Deliveries that ever ended in this queue, by outcome in [`Outcome::ALL`]'s
    /// order (counters kept in Redis).
    pub outcomes: [u64; 5],
    /// Kept COMPLETED tasks.
    pub completed: u64,
    /// Kept CANCELLED tasks.
    pub cancelled: u64,
}

/// One fire of a schedule (`lua/fire.lua`): its task, unless that fire time was handled.
#[derive(Clone, Debug)]
pub struct Fire {
    /// The schedule's name (the field of the queue's `fired` hash).
    pub schedule: String,
    /// The fire time, Unix ms (also the task's due time).
    pub at_ms: i64,
    /// Skip the fire while the last fire's task is DELAYED, READY or IN_FLIGHT.
    pub skip_overlap: bool,
    /// The task (its id the fire's, scheduled at `at_ms`, kept if present).
    pub task: NewTask,
}

/// What `fire.lua` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FireOutcome {
    /// The task is stored (`created` false: one of its id was already there).
    Fired {
        /// A new task was stored.
        created: bool,
    },
    /// Skipped: the last fire's task is still in the queue.
    Overlap,
    /// This fire time (or a later one) was already handled.
    Done,
    /// Not yet due on Redis' clock.
    Early,
}

/// The answer of one fire: what happened, Redis' clock, and the schedule's record
/// before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fired {
    /// What the script did.
    pub outcome: FireOutcome,
    /// Redis' clock when it ran, Unix ms.
    pub now_ms: i64,
    /// The last fire time handled before this call (0: none).
    pub handled_ms: i64,
    /// The last fire time that enqueued a task before this call (0: none).
    pub enqueued_ms: i64,
}
