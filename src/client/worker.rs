//! The worker: one `Subscribe` stream, up to `concurrency` handlers at once, acks
//! coalesced, leases extended for long handlers, the stream re-attached by `worker_id`
//! after a cut, and a drain that finishes what runs and acks nothing unfinished.
//!
//! Why the drain holds acks and nacks until the stream is closed: each one frees a
//! slot, and the server would fill it with a delivery that the draining worker must
//! then give back (an attempt spent for nothing). Receipts stay valid after the stream
//! closes (the worker's deliveries stay leased to its `worker_id` for the server's
//! `--reattach-grace`), so the held acks and nacks are sent right after the close, and
//! the deliveries never started go back at once with a Nack instead of waiting out the
//! grace.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, SystemTime},
};

use prost::bytes::Bytes;
use tokio::{
    signal::unix::{signal, SignalKind},
    sync::{mpsc, watch},
    task::JoinSet,
    time::Instant,
};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{
    connect::Authed,
    error::{is_final, Error, Result},
    lease::{hostname, proto_duration, system_time},
    retry::{call, Backoff, RETRY},
    Client,
};
use crate::{
    pb::{self, queue_service_client::QueueServiceClient, subscribe_response::Event},
    token::new_token,
};

/// The most receipts one Ack carries.
pub const ACK_BATCH: usize = 64;

/// One delivery, as a handler gets it.
#[derive(Clone, Debug)]
pub struct Task {
    /// The queue it came from.
    pub queue: String,
    /// Its id.
    pub id: String,
    /// What the producer enqueued.
    pub payload: Bytes,
    /// Which delivery this is, from 1.
    pub attempt: u32,
    /// Deliveries before it goes DEAD.
    pub max_attempts: u32,
    /// Its group (empty: none).
    pub group: String,
    /// Its priority.
    pub priority: u32,
    /// When it was enqueued.
    pub enqueued_at: SystemTime,
    /// When it was due.
    pub due_at: SystemTime,
    /// Why its last delivery failed, as that Nack said ('' when none did).
    pub last_error: String,
    /// The latest progress a handler reported on it ([`Task::progress`]), as this
    /// delivery found it: where a retry may resume (empty when none was reported).
    pub last_progress: Vec<u8>,
    receipt: String,
    /// Progress reported and not yet sent: it rides on the next lease extension.
    reported: Arc<Mutex<Option<Vec<u8>>>>,
    cancelled: CancellationToken,
}

impl Task {
    fn from_pb(queue: &str, task: pb::Task) -> Self {
        Task {
            queue: queue.to_owned(),
            enqueued_at: system_time(task.enqueued_at.as_ref()),
            due_at: system_time(task.due_at.as_ref()),
            id: task.id,
            payload: task.payload,
            attempt: task.attempt,
            max_attempts: task.max_attempts,
            group: task.group,
            priority: task.priority,
            last_error: task.last_error,
            last_progress: task.progress,
            receipt: task.receipt,
            reported: Arc::default(),
            cancelled: CancellationToken::new(),
        }
    }

    /// The delivery's receipt (what acks it).
    pub fn receipt(&self) -> &str {
        &self.receipt
    }

    /// Fires when this delivery's lease is lost, the task was cancelled while it ran
    /// (`Cancel.running`: the stream's `cancelled` event, or an extension answering
    /// `cancelled`), or the drain ran out of time: the handler's future is dropped then
    /// too, so only work outside it (a thread, a child process) needs to watch this.
    pub fn cancelled(&self) -> CancellationToken {
        self.cancelled.clone()
    }

    /// Records the handler's latest word on a long task (at most 4 KiB): it rides on the
    /// next lease extension and is kept with the task, so a later delivery's
    /// `last_progress` carries it. A newer report replaces one not sent yet.
    pub fn progress(&self, data: impl Into<Vec<u8>>) {
        *self.reported.lock().unwrap_or_else(PoisonError::into_inner) = Some(data.into());
    }

    /// The payload as text.
    pub fn text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.payload)
    }

    /// The payload as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }

    /// The task without its payload, for the hooks.
    fn meta(&self) -> Task {
        Task {
            queue: self.queue.clone(),
            id: self.id.clone(),
            payload: Bytes::new(),
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            group: self.group.clone(),
            priority: self.priority,
            enqueued_at: self.enqueued_at,
            due_at: self.due_at,
            last_error: self.last_error.clone(),
            last_progress: Vec::new(),
            receipt: self.receipt.clone(),
            reported: self.reported.clone(),
            cancelled: self.cancelled.clone(),
        }
    }
}

/// How a handler did not finish its task. Every Nack carries its text as the task's
/// `last_error`.
pub enum TaskError {
    /// Try again after this delay (a `Nack` with it).
    Retry(Duration),
    /// It failed for good: a `Nack` with `give_up`, DEAD now whatever attempts remain.
    Fail(String),
    /// It failed: a `Nack` with the worker's backoff for this attempt. Any error
    /// converts into this with `?`.
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl TaskError {
    /// Try again after `delay`.
    pub fn retry(delay: Duration) -> Self {
        TaskError::Retry(delay)
    }

    /// Give up: DEAD now, with this reason.
    pub fn fail(reason: impl Into<String>) -> Self {
        TaskError::Fail(reason.into())
    }

    /// A failure with this message.
    pub fn msg(message: impl Into<String>) -> Self {
        TaskError::Failed(message.into().into())
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for TaskError {
    fn from(err: E) -> Self {
        TaskError::Failed(err.into())
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Retry(delay) => write!(f, "retry in {delay:?}"),
            TaskError::Fail(reason) => f.write_str(reason),
            TaskError::Failed(err) => err.fmt(f),
        }
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a handler's future returns: its result's bytes (none for `()`), or how it
/// failed.
pub type Handled = Pin<Box<dyn Future<Output = Result<Option<Bytes>, TaskError>> + Send>>;

/// What a handler may return on success: the task's result (`Ack.results`, at most 64
/// KiB), which a caller waiting for the task gets (`Queue::call`, `Queue::wait`) and a
/// queue that keeps completed tasks keeps. `()` is none; bytes and text are as they
/// are; [`Json`] is JSON.
pub trait TaskResult {
    /// The result's bytes (none for no result).
    fn into_result(self) -> Option<Bytes>;
}

impl TaskResult for () {
    fn into_result(self) -> Option<Bytes> {
        None
    }
}

impl TaskResult for Bytes {
    fn into_result(self) -> Option<Bytes> {
        Some(self)
    }
}

impl TaskResult for Vec<u8> {
    fn into_result(self) -> Option<Bytes> {
        Some(self.into())
    }
}

impl TaskResult for String {
    fn into_result(self) -> Option<Bytes> {
        Some(self.into())
    }
}

impl TaskResult for &'static str {
    fn into_result(self) -> Option<Bytes> {
        Some(Bytes::from_static(self.as_bytes()))
    }
}

/// A result sent as JSON: `Ok(Json(value))`.
pub struct Json<T>(pub T);

impl<T: serde::Serialize> TaskResult for Json<T> {
    fn into_result(self) -> Option<Bytes> {
        match serde_json::to_vec(&self.0) {
            Ok(bytes) => Some(bytes.into()),
            Err(err) => {
                tracing::warn!(cause = %err, "a result that is not JSON is sent as none");
                None
            }
        }
    }
}

/// The most bytes a result may hold (the server refuses more).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Handles one task: any `Fn(Task) -> impl Future<Output = Result<R, TaskError>>`
/// with `R` a [`TaskResult`]. `Ok` acks it with its result; `Err` nacks it (see
/// [`TaskError`]).
pub trait Handler: Send + Sync + 'static {
    /// The future that handles `task`.
    fn handle(&self, task: Task) -> Handled;
}

impl<F, Fut, R> Handler for F
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, TaskError>> + Send + 'static,
    R: TaskResult,
{
    fn handle(&self, task: Task) -> Handled {
        let handled = self(task);
        Box::pin(async move { handled.await.map(TaskResult::into_result) })
    }
}

/// A hook's callback.
type Hook<A> = Option<Arc<dyn Fn(&Task, A) + Send + Sync>>;

/// Callbacks for the user's metrics and logs; each gets the task (without its
/// payload) and what happened.
#[derive(Clone, Default)]
pub struct Hooks {
    /// A handler started.
    pub on_start: Hook<()>,
    /// A handler returned `Ok` (its ack is on its way).
    pub on_success: Hook<()>,
    /// A handler failed, with the error's text.
    pub on_failure: Hook<String>,
    /// A task was nacked to come back after this delay (also when the drain holds the
    /// Nack until the stream is closed).
    pub on_retry: Hook<Duration>,
    /// A task went DEAD, with the last error's text.
    pub on_dead: Hook<String>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hooks")
    }
}

fn fire<A>(hook: &Hook<A>, task: &Task, arg: A) {
    if let Some(hook) = hook {
        hook(task, arg);
    }
}

/// Runs a handler on a queue's tasks: build with [`Client::worker`] and the setters,
/// then [`run`](Self::run) until [`stop_token`](Self::stop_token) fires (or, unless
/// turned off, SIGTERM or SIGINT arrives), which drains it.
pub struct Worker {
    client: Client,
    queue: String,
    handler: Arc<dyn Handler>,
    concurrency: u32,
    visibility: Duration,
    worker_id: String,
    backoff: Backoff,
    drain_timeout: Duration,
    hooks: Hooks,
    handle_signals: bool,
    stop: CancellationToken,
}

/// `<host>-<pid>-<random>`: stable for the worker's life, unique across processes.
pub fn default_worker_id() -> String {
    format!(
        "{}-{}-{}",
        hostname(),
        std::process::id(),
        &new_token()[..6]
    )
}

impl Worker {
    pub(super) fn new(client: Client, queue: String, handler: impl Handler) -> Self {
        Worker {
            client,
            queue,
            handler: Arc::new(handler),
            concurrency: 1,
            visibility: Duration::from_secs(30),
            worker_id: default_worker_id(),
            backoff: Backoff::default(),
            drain_timeout: Duration::from_secs(30),
            hooks: Hooks::default(),
            handle_signals: true,
            stop: CancellationToken::new(),
        }
    }

    /// How many handlers run at once (Subscribe's `max_in_flight`; default 1).
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Each delivery's lease (default 30 s), extended at two thirds of it while its
    /// handler runs.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// The Subscribe `worker_id` (default `<host>-<pid>-<random>`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// The delay of a failed task's Nack by attempt (default 1 s doubling to 10
    /// minutes, ±20%).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long the drain lets running handlers finish (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// The callbacks for metrics and logs.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Whether SIGTERM and SIGINT start the drain (default true; turn it off where
    /// the program handles its signals itself).
    pub fn handle_signals(mut self, handle: bool) -> Self {
        self.handle_signals = handle;
        self
    }

    /// The token that stops `run()`: cancel it (from anywhere) to drain.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Works the queue until stopped, then drains: takes nothing new, lets running
    /// handlers finish within the drain timeout, closes the stream, sends their acks
    /// and gives back what did not finish. Returns the typed error of a stream the
    /// server refused (a bad queue name, a wrong token), after draining too.
    pub async fn run(self) -> Result<()> {
        let stop = self.stop.clone();
        let signals = if self.handle_signals {
            Some(StopSignals::install()?)
        } else {
            None
        };
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let (hold_acks, held) = watch::channel(false);
        let shared = Arc::new(Shared {
            queues: self.client.raw_queues(),
            request: pb::SubscribeRequest {
                queue: self.queue.clone(),
                max_in_flight: self.concurrency,
                visibility: Some(proto_duration(self.visibility)),
                worker_id: self.worker_id.clone(),
            },
            queue: self.queue,
            handler: self.handler,
            visibility: self.visibility,
            backoff: self.backoff,
            hooks: self.hooks,
            acks: ack_tx,
            state: Arc::default(),
        });
        // Not `shared` itself: the acker ends when every sender is gone, and `shared`
        // holds one.
        let acker = tokio::spawn(send_acks(
            shared.queues.clone(),
            shared.queue.clone(),
            shared.state.clone(),
            ack_rx,
            held,
        ));
        let stopped = async {
            match signals {
                Some(mut signals) => tokio::select! {
                    () = stop.cancelled() => {}
                    () = signals.next() => {}
                },
                None => stop.cancelled().await,
            }
        };
        let mut run = Running {
            shared: shared.clone(),
            stream: None,
            handlers: JoinSet::new(),
        };
        let outcome = tokio::select! {
            outcome = run.consume() => outcome,
            () = stopped => Ok(()),
        };
        run.drain(self.drain_timeout, &hold_acks).await;
        drop(run);
        // Every sender gone (the handlers' and ours): the acker sends the rest, ends.
        let _ = hold_acks.send(false);
        drop(shared);
        let _ = acker.await;
        outcome
    }
}

/// A Nack to send: the delivery, when it is due again, and why.
struct Nack {
    receipt: String,
    delay: Duration,
    error: String,
    give_up: bool,
}

/// What the stream loop and every handler share.
struct Shared {
    queues: QueueServiceClient<Authed>,
    request: pb::SubscribeRequest,
    queue: String,
    handler: Arc<dyn Handler>,
    visibility: Duration,
    backoff: Backoff,
    hooks: Hooks,
    /// Receipts to ack, with their results, to the acker.
    acks: mpsc::UnboundedSender<(String, Option<Bytes>)>,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Receipts delivered and not yet reported (running, or acked and waiting for
    /// their Ack): a re-attached stream sends them again, and they are not run twice.
    known: HashSet<String>,
    /// The running handlers' cancellation, by receipt.
    running: HashMap<String, CancellationToken>,
    /// Deliveries whose handlers the drain cancelled: given back after it.
    cut: HashSet<String>,
    /// The drain has started: deliveries are not started, nacks are held.
    draining: bool,
    /// Deliveries that arrived during the drain, given back after it.
    unstarted: Vec<String>,
    /// Deliveries the server cancelled while they ran (`Cancel.running`): their end is
    /// reported at once (a Nack, which ends the task as CANCELLED).
    stopped: HashSet<String>,
    /// Nacks held by the drain, with their delays.
    held_nacks: Vec<Nack>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding it cannot leave the state half-changed.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends receipts as soon as no Ack is in flight (at most [`ACK_BATCH`] each), so a
/// calm worker acks at once and a busy one coalesces; holds them while `held` is
/// true; ends when every sender is gone and nothing is left.
async fn send_acks(
    queues: QueueServiceClient<Authed>,
    queue: String,
    state: Arc<Mutex<State>>,
    mut receipts: mpsc::UnboundedReceiver<(String, Option<Bytes>)>,
    mut held: watch::Receiver<bool>,
) {
    let mut pending: Vec<(String, Option<Bytes>)> = Vec::new();
    let mut closed = false;
    loop {
        while let Ok(receipt) = receipts.try_recv() {
            pending.push(receipt);
        }
        let hold = *held.borrow() && !closed;
        if pending.is_empty() && closed {
            return;
        }
        if pending.is_empty() || hold {
            tokio::select! {
                receipt = receipts.recv(), if !closed => match receipt {
                    Some(receipt) => pending.push(receipt),
                    None => closed = true,
                },
                _ = held.changed(), if hold => {}
            }
            continue;
        }
        let acked: Vec<(String, Option<Bytes>)> =
            pending.drain(..pending.len().min(ACK_BATCH)).collect();
        let batch: Vec<String> = acked.iter().map(|(receipt, _)| receipt.clone()).collect();
        let request = pb::AckRequest {
            queue: queue.clone(),
            receipts: batch.clone(),
            results: acked
                .into_iter()
                .filter_map(|(receipt, result)| Some((receipt, result?.to_vec())))
                .collect(),
        };
        match call!(None, queues.clone(), ack, request).await {
            Ok(reply) => {
                let stale = reply.acked.iter().filter(|acked| !**acked).count();
                if stale > 0 {
                    tracing::warn!(count = stale, "acks were stale (their leases had ended)");
                }
            }
            // Unacked deliveries come back when their leases end: at least once.
            Err(err) => tracing::warn!(count = batch.len(), cause = %err, "ack failed"),
        }
        let mut state = lock(&state);
        for receipt in &batch {
            state.known.remove(receipt);
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Nacks `receipt` to come back after `delay`; whether it went DEAD.
    async fn nack(&self, nack: &Nack) -> bool {
        let receipt = &nack.receipt;
        let request = pb::NackRequest {
            queue: self.queue.clone(),
            receipt: receipt.clone(),
            delay: Some(proto_duration(nack.delay)),
            error: nack.error.clone(),
            give_up: nack.give_up,
        };
        let reply = call!(None, self.queues.clone(), nack, request).await;
        self.state().known.remove(receipt);
        match reply {
            Ok(reply) => reply.dead,
            Err(err) => {
                tracing::warn!(cause = %err, "nack failed; the delivery comes back when its lease ends");
                false
            }
        }
    }

    /// Extends the lease at two thirds of `visibility`, again and again; returns when
    /// the lease is gone (a stale receipt: false) or an extension says the task was
    /// cancelled while it ran (true).
    async fn keep_leased(&self, task: &Task) -> bool {
        let every = self.visibility * 2 / 3;
        loop {
            tokio::time::sleep(every).await;
            let progress = task
                .reported
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let request = pb::ExtendLeaseRequest {
                queue: self.queue.clone(),
                receipt: task.receipt.clone(),
                visibility: Some(proto_duration(self.visibility)),
                progress: progress.clone(),
            };
            match call!(
                Some(self.visibility / 3),
                self.queues.clone(),
                extend_lease,
                request
            )
            .await
            {
                Ok(reply) if !reply.extended => {
                    tracing::warn!(task_id = task.id, "lease lost; cancelling its handler");
                    return false;
                }
                Ok(reply) if reply.cancelled => {
                    tracing::info!(
                        task_id = task.id,
                        "task cancelled while it ran; cancelling its handler"
                    );
                    return true;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(task_id = task.id, cause = %err, "lease not extended");
                    // Not sent: it goes with the next extension, unless a newer report
                    // replaced it meanwhile.
                    let mut reported = task.reported.lock().unwrap_or_else(PoisonError::into_inner);
                    if reported.is_none() {
                        *reported = progress;
                    }
                }
            }
        }
    }

    /// Runs the handler on one delivery and reports how it went.
    async fn handle(self: Arc<Self>, task: Task) {
        let meta = task.meta();
        fire(&self.hooks.on_start, &meta, ());
        let cancelled = task.cancelled.clone();
        self.state()
            .running
            .insert(meta.receipt.clone(), cancelled.clone());
        let handled = self.handler.handle(task);
        let outcome = tokio::select! {
            outcome = handled => Some(outcome),
            stopped = self.keep_leased(&meta) => {
                if stopped {
                    self.state().stopped.insert(meta.receipt.clone());
                }
                cancelled.cancel();
                None
            }
            // The drain ran out of time (it gives the delivery back), or the server
            // cancelled the task (its end is reported below).
            () = cancelled.cancelled() => None,
        };
        let (cut, stopped) = {
            let mut state = self.state();
            state.running.remove(&meta.receipt);
            let cut = state.cut.contains(&meta.receipt);
            let stopped = state.stopped.remove(&meta.receipt);
            if outcome.is_none() && !cut && !stopped {
                // Its lease is gone: a redelivery comes with a new receipt.
                state.known.remove(&meta.receipt);
            }
            (cut, stopped)
        };
        if stopped && outcome.is_none() && !cut {
            // Cancelled while it ran: end the delivery now (it ends as CANCELLED)
            // rather than at its lease's end.
            let nack = Nack {
                receipt: meta.receipt.clone(),
                delay: Duration::ZERO,
                error: "cancelled while it ran".to_owned(),
                give_up: false,
            };
            self.report_nack(nack, &meta, Duration::ZERO, None).await;
            return;
        }
        // Lost, or cut by the drain (which gives it back): not ours to report.
        let Some(outcome) = outcome.filter(|_| !cut) else {
            return;
        };
        let outcome = match outcome {
            Ok(Some(result)) if result.len() > MAX_RESULT_BYTES => Err(TaskError::Fail(format!(
                "its result is {} bytes, over the limit of {MAX_RESULT_BYTES}",
                result.len()
            ))),
            other => other,
        };
        let err = match outcome {
            Ok(result) => {
                fire(&self.hooks.on_success, &meta, ());
                let _ = self.acks.send((meta.receipt.clone(), result));
                return;
            }
            Err(err) => err,
        };
        let text = err.to_string();
        let (delay, give_up) = match err {
            TaskError::Retry(delay) => (delay, false),
            TaskError::Fail(_) | TaskError::Failed(_) => {
                tracing::warn!(
                    task_id = meta.id,
                    attempt = meta.attempt,
                    cause = text,
                    "handler failed"
                );
                fire(&self.hooks.on_failure, &meta, text.clone());
                let give_up = matches!(err, TaskError::Fail(_));
                (self.backoff.delay(meta.attempt), give_up)
            }
        };
        let nack = Nack {
            receipt: meta.receipt.clone(),
            delay,
            error: text.clone(),
            give_up,
        };
        self.report_nack(nack, &meta, delay, Some(text)).await;
    }

    /// Sends a Nack (or holds it while the drain runs), firing the retry or dead hook
    /// (`text`: the failure's, none for a cancelled task).
    async fn report_nack(&self, nack: Nack, meta: &Task, delay: Duration, text: Option<String>) {
        {
            let mut state = self.state();
            if state.draining {
                state.held_nacks.push(nack);
                drop(state);
                if text.is_some() {
                    fire(&self.hooks.on_retry, meta, delay);
                }
                return;
            }
        }
        let dead = self.nack(&nack).await;
        match text {
            Some(text) if dead => fire(&self.hooks.on_dead, meta, text),
            Some(_) => fire(&self.hooks.on_retry, meta, delay),
            None => {}
        }
    }

    /// The server cancelled a task this worker runs: its handler's cancellation fires.
    fn stop(&self, receipt: &str) {
        let mut state = self.state();
        if let Some(token) = state.running.get(receipt).cloned() {
            state.stopped.insert(receipt.to_owned());
            token.cancel();
        }
    }
}

/// The stream and the running handlers of one `run()`.
struct Running {
    shared: Arc<Shared>,
    stream: Option<tonic::Streaming<pb::SubscribeResponse>>,
    handlers: JoinSet<()>,
}

impl Running {
    /// Reads deliveries until a final error, re-opening the stream after each cut
    /// (same `worker_id`: the server sends its unacked deliveries again).
    async fn consume(&mut self) -> Result<()> {
        let mut attempt = 0;
        loop {
            let stream = match &mut self.stream {
                Some(stream) => stream,
                None => {
                    let opened = self
                        .shared
                        .queues
                        .clone()
                        .subscribe(self.shared.request.clone())
                        .await;
                    match opened {
                        Ok(stream) => self.stream.insert(stream.into_inner()),
                        Err(status) if is_final(status.code()) => return Err(status.into()),
                        Err(status) => {
                            attempt += 1;
                            tracing::info!(queue = self.shared.queue, cause = %status, "subscribe failed; retrying");
                            tokio::time::sleep(RETRY.delay(attempt)).await;
                            continue;
                        }
                    }
                }
            };
            tokio::select! {
                message = stream.next() => match message {
                    Some(Ok(pb::SubscribeResponse { event: Some(Event::Task(task)) })) => {
                        attempt = 0;
                        self.deliver(task);
                    }
                    Some(Ok(pb::SubscribeResponse { event: Some(Event::Cancelled(told)) })) => {
                        attempt = 0;
                        self.shared.stop(&told.receipt);
                    }
                    Some(Ok(_)) => attempt = 0,
                    Some(Err(status)) if is_final(status.code()) => return Err(status.into()),
                    Some(Err(_)) | None => {
                        tracing::info!(queue = self.shared.queue, "subscribe stream cut; re-attaching");
                        self.stream = None;
                        attempt += 1;
                        tokio::time::sleep(RETRY.delay(attempt)).await;
                    }
                },
                Some(_) = self.handlers.join_next() => {}
            }
        }
    }

    /// Starts a handler on a delivery, unless it is one already known (a re-attached
    /// stream sends its kept deliveries again) or the drain has started.
    fn deliver(&mut self, task: pb::Task) {
        let mut state = self.shared.state();
        if state.draining {
            if !state.known.contains(&task.receipt) {
                state.unstarted.push(task.receipt);
            }
            return;
        }
        if !state.known.insert(task.receipt.clone()) {
            return;
        }
        drop(state);
        let task = Task::from_pb(&self.shared.queue, task);
        self.handlers.spawn(self.shared.clone().handle(task));
    }

    /// Takes nothing new, lets the handlers finish within `timeout` (cancelling the
    /// rest), keeps acks and nacks until the stream is closed, then gives back what
    /// never started or did not finish.
    async fn drain(&mut self, timeout: Duration, hold_acks: &watch::Sender<bool>) {
        self.shared.state().draining = true;
        let _ = hold_acks.send(true);
        // None: no end (a timeout too long to add).
        let deadline = Instant::now().checked_add(timeout);
        let mut cut = false;
        loop {
            tokio::select! {
                joined = self.handlers.join_next() => if joined.is_none() { break },
                message = next_message(&mut self.stream) => match message {
                    Some(Ok(pb::SubscribeResponse { event: Some(Event::Task(task)) })) => self.deliver(task),
                    Some(Ok(pb::SubscribeResponse { event: Some(Event::Cancelled(told)) })) => {
                        self.shared.stop(&told.receipt);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => self.stream = None,
                },
                () = sleep_until(deadline), if !cut => {
                    cut = true;
                    tracing::warn!(count = self.handlers.len(), "handlers still running at the drain's end; giving them back");
                    let mut state = self.shared.state();
                    let running: Vec<(String, CancellationToken)> = state.running.drain().collect();
                    for (receipt, cancel) in running {
                        state.cut.insert(receipt);
                        cancel.cancel();
                    }
                }
            }
        }
        // Closing the stream first: the held acks and nacks then free no slot the
        // server would fill.
        self.stream = None;
        let _ = hold_acks.send(false);
        let giving_back: Vec<Nack> = {
            let mut state = self.shared.state();
            let unstarted = std::mem::take(&mut state.unstarted);
            let cut: Vec<String> = state.cut.drain().collect();
            let held = std::mem::take(&mut state.held_nacks);
            let back = |receipt, error: &str| Nack {
                receipt,
                delay: Duration::ZERO,
                error: error.to_owned(),
                give_up: false,
            };
            unstarted
                .into_iter()
                .map(|receipt| back(receipt, ""))
                .chain(cut.into_iter().map(|receipt| {
                    back(receipt, "the worker's drain ran out of time while it ran")
                }))
                .chain(held)
                .collect()
        };
        let mut nacks = JoinSet::new();
        for nack in giving_back {
            let shared = self.shared.clone();
            nacks.spawn(async move {
                shared.nack(&nack).await;
            });
        }
        while nacks.join_next().await.is_some() {}
    }
}

/// Sleeps until `deadline`, or forever when there is none.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The stream's next message, or never when there is no stream.
async fn next_message(
    stream: &mut Option<tonic::Streaming<pb::SubscribeResponse>>,
) -> Option<Result<pb::SubscribeResponse, tonic::Status>> {
    match stream {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// SIGTERM and SIGINT, the requests to stop.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Result<Self> {
        let install = |kind| {
            signal(kind).map_err(|err| Error::Config(format!("cannot handle signals: {err}")))
        };
        Ok(StopSignals {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
