//! Group commit: concurrent callers with items for the same key share one Redis run.
//! While a run for a key is in flight, the items that arrive for it wait and go
//! together in the next run (up to a size), so a busy key pays a script's or a
//! pipeline's fixed cost once per batch instead of once per call, and an idle one adds
//! no delay: a lone call runs at once. Each caller gets the outputs for its own items,
//! in order, or the run's error.
//!
//! Used for Ack (key: the queue; one `ack.lua` run per batch) and the owner index
//! behind ReleaseAll (one key; one pipeline per batch). Only items waiting for a run
//! live here, never state: a server that dies loses calls that were never answered.

use std::{
    collections::HashMap,
    future::Future,
    hash::Hash,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// The batches of one kind of call, by key. Shared (`Arc`).
pub struct GroupCommit<K, I, O> {
    /// A key has an entry while a run for it is in flight: later callers join it.
    waiting: Mutex<HashMap<K, Waiting<I, O>>>,
    /// The most items one run carries (a caller's items are never split).
    max_items: usize,
}

/// Callers waiting for the next run of one key.
struct Waiting<I, O> {
    items: Vec<I>,
    /// Each caller's item count (its slice of the outputs, in order) and where its
    /// answer goes.
    callers: Vec<(usize, oneshot::Sender<Result<Vec<O>>>)>,
}

impl<I, O> Default for Waiting<I, O> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            callers: Vec::new(),
        }
    }
}

impl<I, O> Waiting<I, O> {
    fn push(&mut self, items: Vec<I>, tx: oneshot::Sender<Result<Vec<O>>>) {
        self.callers.push((items.len(), tx));
        self.items.extend(items);
    }

    /// Takes the callers whose items fit in one run (at least one caller).
    fn take_run(&mut self, max_items: usize) -> Self {
        let (mut fit, mut count) = (0, 0);
        for (n, _) in &self.callers {
            if fit > 0 && count + n > max_items {
                break;
            }
            fit += 1;
            count += n;
        }
        Self {
            items: self.items.drain(..count).collect(),
            callers: self.callers.drain(..fit).collect(),
        }
    }
}

impl<K, I, O> GroupCommit<K, I, O>
where
    K: Hash + Eq + Clone + Send + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    /// Batches of at most `max_items` items.
    pub fn new(max_items: usize) -> Arc<Self> {
        Arc::new(Self {
            waiting: Mutex::default(),
            max_items,
        })
    }

    /// Runs `items` for `key` with `run`, alone or batched with other callers' items;
    /// the outputs for these items. `run` gets every item of a batch in arrival order
    /// and must answer one output per item. The run that starts a key's batches uses
    /// its own caller's `run` for every batch until the key is idle again, so all
    /// callers of one key must pass the same function.
    pub async fn submit<Run, Fut>(
        self: &Arc<Self>,
        key: K,
        items: Vec<I>,
        run: Run,
    ) -> Result<Vec<O>>
    where
        Run: Fn(&K, Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<O>>> + Send + 'static,
    {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut waiting = self.lock();
            match waiting.get_mut(&key) {
                Some(next) => {
                    next.push(items, tx);
                    None
                }
                None => {
                    waiting.insert(key.clone(), Waiting::default());
                    let mut first = Waiting::default();
                    first.push(items, tx);
                    Some(first)
                }
            }
        };
        if let Some(first) = first {
            // Its own task, so a caller that goes away (deadline, cancel) cannot strand
            // the callers that joined its batch.
            tokio::spawn(self.clone().run_batches(key, first, run));
        }
        rx.await
            .unwrap_or_else(|_| Err(Error::Internal("batch dropped without an answer".into())))
    }

    /// Runs `batch`, then whatever joined meanwhile, until nobody waits for `key`.
    async fn run_batches<Run, Fut>(self: Arc<Self>, key: K, mut batch: Waiting<I, O>, run: Run)
    where
        Run: Fn(&K, Vec<I>) -> Fut,
        Fut: Future<Output = Result<Vec<O>>>,
    {
        loop {
            let count = batch.items.len();
            let reply = run(&key, std::mem::take(&mut batch.items)).await;
            answer(batch.callers, count, reply);
            let mut waiting = self.lock();
            let Some(next) = waiting.get_mut(&key) else {
                return;
            };
            if next.callers.is_empty() {
                waiting.remove(&key);
                return;
            }
            batch = next.take_run(self.max_items);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Waiting<I, O>>> {
        // Nothing panics while holding it, and the map stays whole if something did.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Hands each caller its slice of one run's outputs (or the run's error).
fn answer<O>(
    callers: Vec<(usize, oneshot::Sender<Result<Vec<O>>>)>,
    count: usize,
    reply: Result<Vec<O>>,
) {
    let reply = reply.and_then(|outputs| {
        if outputs.len() == count {
            Ok(outputs)
        } else {
            Err(Error::Internal(format!(
                "a batch of {count} items got {} answers",
                outputs.len()
            )))
        }
    });
    match reply {
        Ok(outputs) => {
            let mut outputs = outputs.into_iter();
            for (n, tx) in callers {
                let _ = tx.send(Ok(outputs.by_ref().take(n).collect()));
            }
        }
        Err(err) => {
            for (_, tx) in callers {
                let _ = tx.send(Err(err.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Semaphore;

    use super::*;

    type Run = Box<
        dyn Fn(
                &&'static str,
                Vec<u32>,
            ) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<u32>>> + Send>>
            + Send
            + Sync,
    >;

    /// A run that waits for a permit (so the test decides when a run ends), records its
    /// size and doubles each item.
    fn doubling(gate: Arc<Semaphore>, sizes: Arc<Mutex<Vec<usize>>>) -> Run {
        Box::new(move |_key, items| {
            let (gate, sizes) = (gate.clone(), sizes.clone());
            Box::pin(async move {
                gate.acquire().await.expect("gate open").forget();
                sizes.lock().unwrap().push(items.len());
                Ok(items.into_iter().map(|n| n * 2).collect())
            })
        })
    }

    #[tokio::test]
    async fn callers_arriving_during_a_run_share_the_next_and_each_gets_its_own_answers() {
        let batches = GroupCommit::<&'static str, u32, u32>::new(1000);
        let gate = Arc::new(Semaphore::new(0));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let first = tokio::spawn({
            let (batches, run) = (batches.clone(), doubling(gate.clone(), sizes.clone()));
            async move { batches.submit("q", vec![1], run).await }
        });
        // The first run is in flight (its key has an entry) before the others arrive.
        while batches.lock().get("q").is_none() {
            tokio::task::yield_now().await;
        }
        let mut later = Vec::new();
        for n in 0..10u32 {
            let (batches, run) = (batches.clone(), doubling(gate.clone(), sizes.clone()));
            later.push(tokio::spawn(async move {
                batches.submit("q", vec![n, n + 100], run).await
            }));
        }
        while batches.lock().get("q").map_or(0, |w| w.callers.len()) < 10 {
            tokio::task::yield_now().await;
        }
        gate.add_permits(2);
        assert_eq!(first.await.unwrap(), Ok(vec![2]));
        for (n, call) in later.into_iter().enumerate() {
            let n = n as u32;
            assert_eq!(call.await.unwrap(), Ok(vec![n * 2, (n + 100) * 2]));
        }
        assert_eq!(
            *sizes.lock().unwrap(),
            vec![1, 20],
            "one run, then one batch"
        );
        assert!(batches.lock().is_empty(), "an idle key leaves no entry");
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_max_items_and_never_splits_a_caller() {
        let batches = GroupCommit::<&'static str, u32, u32>::new(5);
        let gate = Arc::new(Semaphore::new(0));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let mut calls = vec![tokio::spawn({
            let (batches, run) = (batches.clone(), doubling(gate.clone(), sizes.clone()));
            async move { batches.submit("q", vec![0], run).await }
        })];
        while batches.lock().get("q").is_none() {
            tokio::task::yield_now().await;
        }
        for _ in 0..4 {
            let (batches, run) = (batches.clone(), doubling(gate.clone(), sizes.clone()));
            calls.push(tokio::spawn(async move {
                batches.submit("q", vec![1, 2, 3], run).await
            }));
        }
        while batches.lock().get("q").map_or(0, |w| w.callers.len()) < 4 {
            tokio::task::yield_now().await;
        }
        gate.add_permits(10);
        for call in calls {
            assert!(call.await.unwrap().is_ok());
        }
        // 3 + 3 would be 6 > 5: each later caller runs alone, none is split.
        assert_eq!(*sizes.lock().unwrap(), vec![1, 3, 3, 3, 3]);
    }

    #[tokio::test]
    async fn a_failed_run_fails_every_caller_in_it_and_keys_run_apart() {
        let batches = GroupCommit::<u8, u32, u32>::new(1000);
        let runs = Arc::new(AtomicUsize::new(0));
        let failing = {
            let runs = runs.clone();
            move |key: &u8, items: Vec<u32>| {
                runs.fetch_add(1, Ordering::SeqCst);
                let key = *key;
                async move {
                    if key == 1 {
                        Err(Error::Unavailable("down".into()))
                    } else {
                        Ok(items)
                    }
                }
            }
        };
        assert_eq!(
            batches.submit(1, vec![7], failing.clone()).await,
            Err(Error::Unavailable("down".into()))
        );
        assert_eq!(
            batches.submit(2, vec![7], failing.clone()).await,
            Ok(vec![7])
        );
        assert_eq!(batches.submit(2, vec![], failing).await, Ok(vec![]));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "an empty call runs nothing");
    }

    #[tokio::test]
    async fn a_run_with_the_wrong_number_of_answers_is_internal() {
        let batches = GroupCommit::<u8, u32, u32>::new(1000);
        let short = |_: &u8, _: Vec<u32>| async { Ok(vec![1]) };
        assert!(matches!(
            batches.submit(0, vec![1, 2], short).await,
            Err(Error::Internal(_))
        ));
    }
}
