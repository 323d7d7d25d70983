//! The tenant's open Subscribe streams over every replica (the dashboard's Workers
//! page). Each replica records its streams in one hash per tenant (`Keys::workers`)
//! when they open and removes them when they end, and keeps a liveness key of its own
//! (`Keys::replica_alive`) while it runs; a reader drops the records of a replica whose
//! key expired (one that died without ending its streams). The record is written
//! beside the stream's work, never in its way: a failed write costs the page a row, not
//! the stream.

use std::{collections::HashMap, time::Duration};

use super::QueueStore;
use crate::{error::Result, shutdown::Shutdown};

/// How long a replica's liveness key lasts, and how often it is set again.
pub const REPLICA_ALIVE: Duration = Duration::from_secs(30);
const REPLICA_REFRESH: Duration = Duration::from_secs(10);
/// The most streams the page lists.
pub const STREAMS_SHOWN: usize = 1000;

/// One open Subscribe stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenStream {
    /// Its queue.
    pub queue: String,
    /// The worker_id it gave ('' for none).
    pub worker_id: String,
    /// The replica it is open on.
    pub replica: String,
    /// When it opened, Unix ms.
    pub since_ms: i64,
    /// Its deliveries in flight now.
    pub in_flight: u64,
}

/// What a stream's record holds, as the hash keeps it: queue, worker_id, replica,
/// since and tag, newline-separated (none of them holds a control character).
fn record(queue: &str, worker_id: &str, replica: &str, since_ms: i64, tag: &str) -> String {
    format!("{queue}\n{worker_id}\n{replica}\n{since_ms}\n{tag}")
}

impl QueueStore {
    /// Records an open stream (`session` names it) for the Workers page.
    pub(super) async fn register_stream(
        &self,
        session: &str,
        queue: &str,
        worker_id: &str,
        replica: &str,
        since_ms: i64,
        tag: &str,
    ) -> Result<()> {
        let value = record(queue, worker_id, replica, since_ms, tag);
        self.redis
            .query::<()>(
                redis::cmd("HSET")
                    .arg(self.redis.keys.workers())
                    .arg(session)
                    .arg(value),
            )
            .await
    }

    /// Removes an ended stream's record.
    pub(super) async fn unregister_stream(&self, session: &str) -> Result<()> {
        self.redis
            .query::<()>(
                redis::cmd("HDEL")
                    .arg(self.redis.keys.workers())
                    .arg(session),
            )
            .await
    }

    /// Sets `replica`'s liveness key every [`REPLICA_REFRESH`] until shutdown, then
    /// deletes it (its streams end with it).
    pub fn keep_replica_alive(&self, replica: String, shutdown: &Shutdown) {
        let (store, stop) = (self.clone(), shutdown.clone());
        shutdown.spawn(async move {
            let key = store.redis.keys.replica_alive(&replica);
            loop {
                let set = store
                    .redis
                    .query::<()>(
                        redis::cmd("SET")
                            .arg(&key)
                            .arg(1)
                            .arg("PX")
                            .arg(REPLICA_ALIVE.as_millis() as u64),
                    )
                    .await;
                if let Err(err) = set {
                    tracing::debug!(cause = %err, "replica liveness not set");
                }
                tokio::select! {
                    () = tokio::time::sleep(REPLICA_REFRESH) => {}
                    () = stop.cancelled() => break,
                }
            }
            let _ = store.redis.query::<()>(redis::cmd("DEL").arg(&key)).await;
        });
    }

    /// The tenant's open streams over every replica (at most [`STREAMS_SHOWN`]), by
    /// queue, then worker, then since; the records of replicas that are gone are
    /// dropped on the way.
    pub async fn open_streams(&self) -> Result<Vec<OpenStream>> {
        let key = self.redis.keys.workers();
        let records: HashMap<String, String> =
            self.redis.query(redis::cmd("HGETALL").arg(&key)).await?;
        let mut alive: HashMap<String, bool> = HashMap::new();
        let mut gone = Vec::new();
        let mut streams = Vec::new();
        for (session, value) in records {
            let parts: Vec<&str> = value.split('\n').collect();
            let [queue, worker_id, replica, since, tag] = parts[..] else {
                gone.push(session);
                continue;
            };
            let live = match alive.get(replica) {
                Some(live) => *live,
                None => {
                    let live: bool = self
                        .redis
                        .query(redis::cmd("EXISTS").arg(self.redis.keys.replica_alive(replica)))
                        .await?;
                    alive.insert(replica.to_owned(), live);
                    live
                }
            };
            if !live {
                gone.push(session);
                continue;
            }
            streams.push((
                OpenStream {
                    queue: queue.to_owned(),
                    worker_id: worker_id.to_owned(),
                    replica: replica.to_owned(),
                    since_ms: since.parse().unwrap_or(0),
                    in_flight: 0,
                },
                tag.to_owned(),
            ));
        }
        if !gone.is_empty() {
            self.redis
                .query::<()>(redis::cmd("HDEL").arg(&key).arg(&gone))
                .await?;
        }
        streams.sort_by(|(a, _), (b, _)| {
            (&a.queue, &a.worker_id, a.since_ms).cmp(&(&b.queue, &b.worker_id, b.since_ms))
        });
        streams.truncate(STREAMS_SHOWN);
        let mut out = Vec::with_capacity(streams.len());
        for (mut stream, tag) in streams {
            let keys = self.keys(&stream.queue);
            stream.in_flight = self
                .redis
                .query(
                    redis::cmd("ZLEXCOUNT")
                        .arg(keys.leased())
                        .arg(format!("[{tag}\0"))
                        .arg(format!("({tag}\u{1}")),
                )
                .await?;
            out.push(stream);
        }
        Ok(out)
    }
}
