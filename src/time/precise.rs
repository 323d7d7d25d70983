//! Wake-ups on time to the tenth of a millisecond, for the timers whose lateness a
//! client sees: a delayed task's due time, a lease's end, a schedule's fire time.
//!
//! tokio's timer wheel ticks in whole milliseconds and rounds a deadline up to the next
//! tick, and its driver parks with a millisecond `epoll_wait` timeout: measured on the
//! 2-core development machine, `tokio::time::sleep_until` woke 1.1 ms late at p50. One
//! thread here waits on a condition variable with the exact remaining time (a futex
//! wait, which the kernel times with a high-resolution timer) and wakes each sleeper at
//! its instant: 0.1 ms late at p50 on the same machine.
//!
//! A sleeper first sleeps on tokio until [`MARGIN`] before its instant, so the far
//! deadlines that busy loops set and drop again and again (a lease's end 30 s away,
//! re-armed at every pass of a feed) never reach the thread. Only then is it an entry
//! in one ordered map; dropping its future (the other arm of a `select!` won) takes the
//! entry out. The thread is woken only by a sleeper earlier than the instant it waits
//! for.

use std::{
    collections::BTreeMap,
    sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError},
    time::Instant,
};

use tokio::sync::oneshot;

/// How long before its instant a sleeper leaves tokio's timer for the thread: more than
/// tokio's lateness on a loaded machine (5 ms at p99, measured).
const MARGIN: std::time::Duration = std::time::Duration::from_millis(10);

/// The sleepers, by (deadline, arrival), and the thread's wake-up.
struct Timers {
    state: Mutex<State>,
    earlier: Condvar,
}

#[derive(Default)]
struct State {
    next_seq: u64,
    sleepers: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
    thread: Thread,
}

/// What the timer thread is doing, as far as a new sleeper needs to know.
#[derive(Default)]
enum Thread {
    /// It looks at the map before it waits again: nothing to tell it.
    #[default]
    Awake,
    /// It waits until this instant (None: for a first sleeper).
    Waits(Option<Instant>),
}

impl Timers {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread's loop: wake the sleepers whose deadline came, then wait for the
    /// next deadline or an earlier sleeper.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(sleeper) = state.sleepers.first_entry() {
                if sleeper.key().0 > now {
                    break;
                }
                due.push(sleeper.remove());
            }
            if !due.is_empty() {
                drop(state);
                for sleeper in due {
                    let _ = sleeper.send(());
                }
                state = self.lock();
                continue;
            }
            let first = state.sleepers.keys().next().map(|(at, _)| *at);
            state.thread = Thread::Waits(first);
            state = match first {
                Some(at) => {
                    self.earlier
                        .wait_timeout(state, at.saturating_duration_since(now))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .earlier
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
            state.thread = Thread::Awake;
        }
    }
}

/// The one timer thread, started by the first sleep; None when it could not start
/// (then sleeps fall back to tokio's timer, a millisecond late).
fn timers() -> Option<&'static Timers> {
    static TIMERS: OnceLock<Option<&'static Timers>> = OnceLock::new();
    *TIMERS.get_or_init(|| {
        let timers: &'static Timers = Box::leak(Box::new(Timers {
            state: Mutex::default(),
            earlier: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("turnstile-timer".into())
            .spawn(|| timers.run())
        {
            Ok(_) => Some(timers),
            Err(err) => {
                tracing::warn!(cause = %err, "the timer thread did not start; timers wake on tokio's millisecond wheel");
                None
            }
        }
    })
}

/// Takes a sleeper's entry out when its future is dropped (a no-op once it fired).
struct Entry((Instant, u64));

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(timers) = timers() {
            timers.lock().sleepers.remove(&self.0);
        }
    }
}

/// Sleeps until `at`, waking within about a tenth of a millisecond of it.
pub async fn sleep_until(at: tokio::time::Instant) {
    if let Some(early) = at.checked_sub(MARGIN) {
        if early > tokio::time::Instant::now() {
            tokio::time::sleep_until(early).await;
        }
    }
    on_the_thread(at.into_std()).await;
}

/// Sleeps until `at` on the thread.
async fn on_the_thread(at: Instant) {
    if at <= Instant::now() {
        return;
    }
    let Some(timers) = timers() else {
        tokio::time::sleep_until(at.into()).await;
        return;
    };
    let (tx, rx) = oneshot::channel();
    let key = {
        let mut state = timers.lock();
        let key = (at, state.next_seq);
        state.next_seq += 1;
        state.sleepers.insert(key, tx);
        // Woken only when it waits for a later instant (or none); awake, it sees this
        // sleeper before it waits again.
        let wake = match state.thread {
            Thread::Awake => false,
            Thread::Waits(until) => until.is_none_or(|until| at < until),
        };
        if wake {
            state.thread = Thread::Awake;
            timers.earlier.notify_one();
        }
        key
    };
    let _entry = Entry(key);
    let _ = rx.await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn registered(at: Instant) -> bool {
        timers()
            .unwrap()
            .lock()
            .sleepers
            .keys()
            .any(|(when, _)| *when == at)
    }

    #[tokio::test]
    async fn wakes_in_order_never_early_and_forgets_a_dropped_sleeper() {
        let start = tokio::time::Instant::now();
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut sleepers = Vec::new();
        for (n, ms) in [30u64, 10, 20].into_iter().enumerate() {
            let order = order.clone();
            sleepers.push(tokio::spawn(async move {
                sleep_until(start + Duration::from_millis(ms)).await;
                assert!(start.elapsed() >= Duration::from_millis(ms), "woke early");
                order.lock().unwrap().push(n);
            }));
        }
        for sleeper in sleepers {
            tokio::time::timeout(Duration::from_secs(30), sleeper)
                .await
                .expect("every sleeper woke")
                .unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 0]);

        // A sleeper waiting on the thread, then dropped, leaves no entry behind.
        let at = Instant::now() + Duration::from_secs(3600);
        let mut sleeper = Box::pin(on_the_thread(at));
        assert!(tokio::time::timeout(Duration::from_millis(1), &mut sleeper)
            .await
            .is_err());
        assert!(registered(at));
        drop(sleeper);
        assert!(!registered(at));
    }

    #[tokio::test]
    async fn an_earlier_sleeper_wakes_the_thread_that_waits_for_a_later_one() {
        let at = Instant::now() + Duration::from_secs(7200);
        let later = on_the_thread(at);
        tokio::pin!(later);
        let _ = tokio::time::timeout(Duration::from_millis(1), &mut later).await;
        // Once the thread waits for a far deadline (the two hours, or another test's far
        // sleeper: the thread is shared by every test of this process, and a loaded run
        // saw it wait for another test's hour instead of these two)...
        tokio::time::timeout(Duration::from_secs(30), async {
            let far = |until: Instant| until >= Instant::now() + Duration::from_secs(60);
            while !matches!(timers().unwrap().lock().thread, Thread::Waits(Some(until)) if far(until)) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the thread waits for the later sleeper");
        // ... a sleeper of 3 ms must wake it, or it would sleep the two hours.
        tokio::time::timeout(
            Duration::from_secs(30),
            on_the_thread(Instant::now() + Duration::from_millis(3)),
        )
        .await
        .expect("the earlier sleeper woke");
    }
}
