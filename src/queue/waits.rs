//! Waiting for a task to be done (`Wait`, `Enqueue.wait`): `wait.lua` answers a task
//! that is done and kept at once, else registers the wait in Redis; the script that
//! ends the task (on any replica) publishes its end with the task in the message
//! (`lua/include/announce.lua`), and this replica's waiters for it are answered from
//! that message, so a waiter gets the result even when the queue keeps nothing. No
//! polling: between messages a waiter sleeps until its timeout. A waiter registered
//! before the pub/sub connection was (last) made may have missed its message: it looks
//! again once subscribed, and finds the end in Redis (kept a while for it as `told`,
//! when the queue keeps nothing). That happened: a Call sent as the server started
//! had its task done before the first subscription and waited out its 30 s.
//! A shutdown ends every wait with UNAVAILABLE (the caller waits again elsewhere).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use redis::Value;
use tokio::{sync::watch, time::Instant};

use super::{replies, scripts::call, QueueStore, Task};
use crate::{
    error::{Error, Result},
    redis::{events::EventSink, keys::Event},
};

/// What a wait came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waited {
    /// The task is done: COMPLETED, DEAD or CANCELLED.
    pub done: bool,
    /// The task as it ended, or as it is when the wait ran out (none when the queue
    /// does not hold it).
    pub task: Option<Task>,
}

/// Where one task's end is told to the calls waiting for it.
type Ends = watch::Sender<Option<Task>>;

/// The tasks this replica's calls wait for, by (pending key, id).
#[derive(Debug)]
pub struct TaskWaits {
    tasks: Mutex<HashMap<(String, String), Weak<Ends>>>,
    /// How many times the subscription was made: a waiter that registered before the
    /// latest looks again (a count, not a notification, so that one made while the
    /// waiter was busy elsewhere is not missed).
    subscriptions: watch::Sender<u64>,
}

impl Default for TaskWaits {
    fn default() -> Self {
        Self {
            tasks: Mutex::default(),
            subscriptions: watch::channel(0).0,
        }
    }
}

/// One caller's hold on the end of one task: the sender stays registered while a
/// caller holds it.
struct Heard {
    _sender: Arc<Ends>,
    receiver: watch::Receiver<Option<Task>>,
    /// The subscriptions as they were when the caller registered.
    subscriptions: watch::Receiver<u64>,
}

impl TaskWaits {
    fn hear(&self, key: &str, id: &str) -> Heard {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = (key.to_owned(), id.to_owned());
        let sender = match tasks.get(&slot).and_then(Weak::upgrade) {
            Some(sender) => sender,
            None => {
                if tasks.len() >= 1024 {
                    tasks.retain(|_, sender| sender.strong_count() > 0);
                }
                let sender = Arc::new(watch::channel(None).0);
                tasks.insert(slot, Arc::downgrade(&sender));
                sender
            }
        };
        Heard {
            receiver: sender.subscribe(),
            _sender: sender,
            subscriptions: self.subscriptions.subscribe(),
        }
    }
}

impl EventSink for TaskWaits {
    fn on_message(&self, _channel: &str, payload: &[u8]) {
        let Some((key, task)) = decode_announcement(payload) else {
            tracing::warn!("a task-done message that does not parse");
            return;
        };
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = tasks.get(&(key, task.id.clone())).and_then(Weak::upgrade) {
            sender.send_replace(Some(task));
        }
    }

    fn on_subscribed(&self) {
        self.subscriptions.send_modify(|count| *count += 1);
    }
}

/// `announce.lua`'s message: length-prefixed values, the pending key, then a task's
/// row, history and result.
fn decode_announcement(mut payload: &[u8]) -> Option<(String, Task)> {
    let mut values = Vec::new();
    while !payload.is_empty() {
        let len = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
        values.push(Value::BulkString(payload.get(4..4 + len)?.to_vec()));
        payload = &payload[4 + len..];
    }
    let key = match values.first()? {
        Value::BulkString(key) => String::from_utf8(key.clone()).ok()?,
        _ => return None,
    };
    let task = replies::task_with_story(&mut values[1..]).ok()??;
    Some((key, task))
}

impl QueueStore {
    /// Where task-done messages go: the waiting calls of this replica.
    pub fn done_route(&self) -> crate::redis::events::Route {
        self.redis.route(Event::TaskDone, self.waits.clone())
    }

    /// Waits up to `timeout` for task `id` to be done; a done task the queue keeps
    /// answers at once. DEADLINE_EXCEEDED when `deadline` comes first.
    pub async fn wait(
        &self,
        queue: &str,
        id: &str,
        timeout: Duration,
        deadline: Option<Instant>,
    ) -> Result<Waited> {
        let (heard, first) = self.wait_start(queue, id, timeout, Look::First).await?;
        self.wait_rest(queue, id, timeout, deadline, heard, first)
            .await
    }

    /// Registers a wait for `id` before the caller enqueues it (`Enqueue.wait`), so
    /// that an end right after the enqueue is heard; [`WaitGuard::finish`] waits.
    pub async fn wait_before_enqueue(
        &self,
        queue: &str,
        id: &str,
        timeout: Duration,
    ) -> Result<WaitGuard> {
        let (heard, first) = self
            .wait_start(queue, id, timeout, Look::BeforeEnqueue)
            .await?;
        Ok(WaitGuard {
            heard,
            first,
            timeout,
            started: Instant::now(),
        })
    }

    async fn wait_start(
        &self,
        queue: &str,
        id: &str,
        timeout: Duration,
        look: Look,
    ) -> Result<(Heard, Waited)> {
        // Heard before the script registers in Redis: an end published right after it
        // finds this caller listening.
        let heard = self.waits.hear(self.keys(queue).pending(), id);
        let first = self.wait_script(queue, id, timeout, look).await?;
        Ok((heard, first))
    }

    async fn wait_script(
        &self,
        queue: &str,
        id: &str,
        timeout: Duration,
        look: Look,
    ) -> Result<Waited> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.wait, &keys);
        call.arg(id)
            .arg(timeout.as_millis() as u64)
            .arg(self.redis.keys.channel(Event::TaskDone))
            .arg(look.arg());
        let mut reply: Vec<Value> = self.invoke_reclaiming(&call).await?;
        match crate::redis::reply::int(&reply, 0)? {
            TOLD => {
                let Some(Value::BulkString(message)) = reply.get(1) else {
                    return Err(Error::Internal(
                        "wait.lua: a told end without its message".into(),
                    ));
                };
                let (_, task) = decode_announcement(message).ok_or_else(|| {
                    Error::Internal("wait.lua: a told end that does not parse".into())
                })?;
                Ok(Waited {
                    done: true,
                    task: Some(task),
                })
            }
            done => Ok(Waited {
                done: done == 1,
                task: replies::task_with_story(&mut reply[1..])?,
            }),
        }
    }

    async fn wait_rest(
        &self,
        queue: &str,
        id: &str,
        timeout: Duration,
        deadline: Option<Instant>,
        mut heard: Heard,
        first: Waited,
    ) -> Result<Waited> {
        if first.done || timeout.is_zero() {
            return Ok(first);
        }
        let until = Instant::now() + timeout;
        loop {
            let stop = deadline.map_or(until, |deadline| deadline.min(until));
            tokio::select! {
                changed = heard.receiver.changed() => {
                    if changed.is_ok() {
                        if let Some(task) = heard.receiver.borrow_and_update().clone() {
                            return Ok(Waited { done: true, task: Some(task) });
                        }
                    }
                }
                Ok(()) = heard.subscriptions.changed() => {
                    let left = until.saturating_duration_since(Instant::now());
                    let again = self.wait_script(queue, id, left, Look::Again).await?;
                    if again.done {
                        return Ok(again);
                    }
                }
                // A waiting call must not hold the server's shutdown: it answers
                // UNAVAILABLE, and the caller waits again on another replica.
                () = self.shutdown.cancelled() => return Err(Error::ShuttingDown),
                () = tokio::time::sleep_until(stop) => {
                    if stop < until {
                        return Err(Error::DeadlineExceeded);
                    }
                    return Ok(Waited { done: false, task: self.task(queue, id).await? });
                }
            }
        }
    }
}

/// Which look at a task `wait.lua` takes (its ARGV[4]).
#[derive(Clone, Copy, Debug)]
enum Look {
    /// A `Wait`'s: registers unless the task is done.
    First,
    /// `Enqueue.wait`'s, before the enqueue: registers even when the task is done.
    BeforeEnqueue,
    /// A registered waiter's once its replica subscribed again: an end kept in `told`
    /// counts when the task is gone.
    Again,
}

impl Look {
    fn arg(self) -> &'static str {
        match self {
            Look::First => "0",
            Look::BeforeEnqueue => "1",
            Look::Again => "2",
        }
    }
}

/// `wait.lua`'s first value when it answers an end kept in `told`.
const TOLD: i64 = 2;

/// A wait registered before its task was enqueued (`Enqueue.wait`).
pub struct WaitGuard {
    heard: Heard,
    /// What the registering look found: a task done and kept before the call (a `KEEP`
    /// duplicate) is the answer; any later end is heard, since the wait was registered
    /// before the enqueue.
    first: Waited,
    timeout: Duration,
    started: Instant,
}

impl WaitGuard {
    /// Waits for the task the caller enqueued (or found enqueued: `stored` false), for
    /// what is left of the timeout. A task stored anew (created, or replacing an ended
    /// one) is not what the registering look saw.
    pub async fn finish(
        self,
        store: &QueueStore,
        queue: &str,
        id: &str,
        stored: bool,
        deadline: Option<Instant>,
    ) -> Result<Waited> {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        let first = if stored {
            Waited {
                done: false,
                task: None,
            }
        } else {
            self.first
        };
        store
            .wait_rest(queue, id, left, deadline, self.heard, first)
            .await
    }
}
