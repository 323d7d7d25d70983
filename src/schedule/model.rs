//! What the schedule store takes and answers (plain data; no proto type).

use std::time::Duration;

/// When a schedule fires (validated: `times::FireTimes` parses it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A cron expression read in an IANA zone ('' = UTC).
    Cron {
        /// The expression as given.
        expr: String,
        /// The zone's name as given.
        zone: String,
    },
    /// Every multiple of this period since the epoch (whole ms, at least 1 s).
    Every(Duration),
}

/// What a fire does while the last fire's task is still in the queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overlap {
    /// Fire anyway.
    #[default]
    Allow,
    /// Skip while the last fire's task is DELAYED, READY or IN_FLIGHT.
    Skip,
}

/// The task every fire enqueues.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskTemplate {
    /// Its bytes (at most 1 MiB).
    pub payload: Vec<u8>,
    /// Deliveries before it goes DEAD (validated; 0 never reaches here).
    pub max_attempts: u32,
    /// 0-9.
    pub priority: u32,
    /// Its group ('' none).
    pub group: String,
}

/// A schedule as a client puts it (validated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Its name, unique in the tenant.
    pub name: String,
    /// The queue it enqueues into.
    pub queue: String,
    /// When it fires.
    pub spec: Spec,
    /// What it enqueues.
    pub task: TaskTemplate,
    /// No fires while set.
    pub paused: bool,
    /// What a fire does while the last fire's task is in the queue.
    pub overlap: Overlap,
    /// How old a missed fire time may be and still be enqueued on recovery.
    pub catch_up_window: Duration,
}

/// A stored schedule with the times the server keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleView {
    /// The schedule.
    pub schedule: Schedule,
    /// The next fire time (Unix ms), none while paused.
    pub next_fire_ms: Option<i64>,
    /// The last fire time that enqueued a task (Unix ms), none before the first.
    pub last_fire_ms: Option<i64>,
}

/// One fire, as the queue domain runs it (`Queues::fire`).
#[derive(Clone, Debug)]
pub struct FireCall<'a> {
    /// The schedule's name.
    pub schedule: &'a str,
    /// The fire time, Unix ms.
    pub at_ms: i64,
    /// The task's id (`times::fire_id`).
    pub id: String,
    /// Skip while the last fire's task is in the queue.
    pub skip_overlap: bool,
    /// The task.
    pub task: &'a TaskTemplate,
}

/// What one fire did (the queue domain's answer, `queue/lua/fire.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FireOutcome {
    /// The task is stored (or one of its id already was).
    Fired,
    /// Skipped: the last fire's task is still in the queue.
    Overlap,
    /// This fire time was already handled (by another replica, or before a restart).
    Done,
    /// Not yet due on Redis' clock.
    Early,
}

/// A fire's answer: what happened, Redis' clock, and the schedule's record before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FireReply {
    /// What happened.
    pub outcome: FireOutcome,
    /// Redis' clock, Unix ms.
    pub now_ms: i64,
    /// The last fire time handled before (0: none).
    pub handled_ms: i64,
    /// The last fire time that enqueued a task before (0: none).
    pub enqueued_ms: i64,
}
