//! The binary's client side: code that talks to a turnstile server from outside, like
//! `redis-cli` beside `redis-server`. It is compiled into the `turnstile` binary only,
//! never into the server library, and is built on the Rust client library
//! ([`turnstile::client`]) and the generated gRPC clients. The benchmark is its own
//! binary, `turnstile-bench` (the workspace member `bench/`).
//!
//! - [`lock`], [`semaphore`] and [`work`]: run a command under a lock or a semaphore's
//!   permits, or once per task; [`watch`]: print a lock's changes; [`locks`]: list the
//!   held locks.
//! - [`admin`]: `enqueue`, `stats`, `peek`, `cancel`, `redrive`; [`tasks`]: `task`,
//!   `wait` (and how `enqueue --wait` ends).
//! - [`flow`]: `queues`, `pause`, `resume`, `limit`.
//! - [`schedule`]: `schedule put/ls/rm/pause/resume/trigger`.
//! - [`client`] (flags, connection, errors), [`output`] (tables, JSON, RFC 3339) and
//!   [`run`] (the user's command): what the commands share.

pub mod admin;
pub mod client;
pub mod flow;
pub mod lock;
pub mod locks;
pub mod output;
pub mod run;
pub mod schedule;
pub mod semaphore;
pub mod tasks;
pub mod watch;
pub mod work;

use std::process::ExitCode;

use clap::Subcommand;

/// The commands that talk to a server as a client.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Run a command while holding a lock (exit: the command's status; 75 not
    /// acquired within --wait; 70 lost while it ran).
    Lock(lock::LockArgs),
    /// Run a command while holding permits of a semaphore (exit statuses as `lock`).
    Semaphore(semaphore::SemaphoreArgs),
    /// Print a lock's holder now and each change (a line, or JSON with --json), until
    /// interrupted.
    Watch(watch::WatchArgs),
    /// The tenant's held locks, by name.
    Locks(locks::LocksArgs),
    /// Run a command once per task of a queue: payload on stdin, exit 0 acks,
    /// anything else nacks with backoff; SIGTERM drains.
    Work(work::WorkArgs),
    /// Enqueue one task; prints its id.
    Enqueue(admin::EnqueueArgs),
    /// Queue depths (--watch redraws).
    Stats(admin::StatsArgs),
    /// Look at a queue's tasks without taking them.
    Peek(admin::PeekArgs),
    /// Remove tasks that are not in flight; prints the ids removed.
    Cancel(admin::CancelArgs),
    /// One task and its delivery history (why it failed, who had it, when).
    Task(tasks::TaskArgs),
    /// Wait until a task is done; its result on stdout (exit 0 completed, 1 dead, 3
    /// cancelled, 4 not done within --timeout).
    Wait(tasks::WaitArgs),
    /// Bring DEAD tasks back to READY (all of them without ids); prints how many.
    Redrive(admin::RedriveArgs),
    /// Every queue of the tenant with its depths and config.
    Queues(flow::QueuesArgs),
    /// Stop delivering a queue's tasks (or one group's); enqueues and acks go on.
    Pause(flow::PauseArgs),
    /// Deliver a paused queue's (or group's) tasks again.
    Resume(flow::PauseArgs),
    /// Cap a queue's tasks in flight and limit its delivery rate, for the queue and for
    /// each group.
    Limit(flow::LimitArgs),
    /// Schedules that enqueue a task at every fire time: put, ls, rm, pause, resume,
    /// trigger.
    Schedule(schedule::ScheduleArgs),
}

impl ClientCommand {
    /// Runs the command; its exit status (a failed call prints its status, exit 1).
    pub async fn run(self) -> ExitCode {
        client::finish(match self {
            ClientCommand::Lock(args) => lock::run(args).await,
            ClientCommand::Semaphore(args) => semaphore::run(args).await,
            ClientCommand::Watch(args) => watch::run(args).await,
            ClientCommand::Locks(args) => locks::run(args).await,
            ClientCommand::Work(args) => work::run(args).await,
            ClientCommand::Enqueue(args) => admin::enqueue(args).await,
            ClientCommand::Stats(args) => admin::stats(args).await,
            ClientCommand::Peek(args) => admin::peek(args).await,
            ClientCommand::Cancel(args) => admin::cancel(args).await,
            ClientCommand::Task(args) => tasks::task(args).await,
            ClientCommand::Wait(args) => tasks::wait(args).await,
            ClientCommand::Redrive(args) => admin::redrive(args).await,
            ClientCommand::Queues(args) => flow::queues(args).await,
            ClientCommand::Pause(args) => flow::pause(args, true).await,
            ClientCommand::Resume(args) => flow::pause(args, false).await,
            ClientCommand::Limit(args) => flow::limit(args).await,
            ClientCommand::Schedule(args) => schedule::run(args).await,
        })
    }
}
