//! Wake-ups by pub/sub: one dedicated connection per server (never a pooled one) that
//! subscribes to the event channels of every tenant (one pattern per event,
//! `Keys::events_pattern`) and hands each message to that event's sink. Any replica can
//! publish (the scripts do, inside the state change), so waiters on every replica hear
//! of it. When the connection drops it is made again, and the sink is told, because
//! messages sent meanwhile were lost and waiters must look again.
//!
//! On a Redis Cluster (`--redis-cluster`) the scripts' `PUBLISH` is the cluster-wide
//! kind: every node forwards it to every other over the cluster bus, so one
//! subscription on any node (primary or replica) hears every event. When that node
//! fails, the connection drops, and the next attempt goes to the next seed node: the
//! subscription survives a failover by itself, and the sinks look again. The cost is
//! that each event crosses the cluster bus to every node. Sharded pub/sub
//! (`SPUBLISH`) would keep an event on its slot's shard, but it has no patterns, and
//! one subscription per tenant and shard would have to follow slot migrations.

use std::{sync::Arc, time::Duration};

use tokio::sync::Notify;
use tokio_stream::StreamExt;

use crate::shutdown::Shutdown;

/// Receives the messages of the subscribed channels.
pub trait EventSink: Send + Sync + 'static {
    /// One message on `channel`.
    fn on_message(&self, channel: &str, payload: &[u8]);
    /// The subscription was (re)established: messages may have been missed.
    fn on_subscribed(&self);
}

/// The channels of one event for every tenant (a pattern), and the sink their messages
/// go to.
pub type Route = (String, Arc<dyn EventSink>);

/// Handle on the pub/sub task.
#[derive(Clone, Debug, Default)]
pub struct Events {
    /// Kicked to make the task drop its connection and subscribe again (e.g. when the
    /// readiness probe saw Redis come back, in case the old socket is half-open).
    resubscribe: Arc<Notify>,
}

impl Events {
    /// Spawns the subscriber task on the first of `nodes` (the next one after each
    /// failure), running until shutdown; the messages of the channels matching each
    /// pattern go to its sink.
    pub fn spawn(
        nodes: Vec<redis::ConnectionInfo>,
        routes: Vec<(String, Arc<dyn EventSink>)>,
        shutdown: &Shutdown,
    ) -> Self {
        let events = Self::default();
        let resubscribe = events.resubscribe.clone();
        let task_shutdown = shutdown.clone();
        shutdown.spawn(async move {
            tokio::select! {
                () = run(nodes, routes, resubscribe) => {}
                () = task_shutdown.cancelled() => {}
            }
        });
        events
    }

    /// Asks the task to reconnect and subscribe again.
    pub fn resubscribe(&self) {
        self.resubscribe.notify_one();
    }
}

async fn run(
    nodes: Vec<redis::ConnectionInfo>,
    routes: Vec<(String, Arc<dyn EventSink>)>,
    resubscribe: Arc<Notify>,
) {
    let patterns: Vec<String> = routes.iter().map(|(pattern, _)| pattern.clone()).collect();
    let mut backoff = Duration::from_millis(50);
    let mut turn = 0;
    loop {
        let Some(info) = nodes.get(turn % nodes.len().max(1)) else {
            return;
        };
        turn += 1;
        match subscribe(info, &patterns).await {
            Ok(pubsub) => {
                let subscribed = tokio::time::Instant::now();
                tracing::debug!(patterns = patterns.len(), "pub/sub subscribed");
                for (_, sink) in &routes {
                    sink.on_subscribed();
                }
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        message = messages.next() => match message {
                            Some(message) => {
                                let pattern: Option<String> = message.get_pattern().ok();
                                let route = routes.iter().find(|(p, _)| Some(p) == pattern.as_ref());
                                if let Some((_, sink)) = route {
                                    sink.on_message(message.get_channel_name(), message.get_payload_bytes());
                                }
                            }
                            None => break,
                        },
                        () = resubscribe.notified() => break,
                    }
                }
                tracing::warn!("pub/sub connection lost; subscribing again");
                // A node that accepts the subscription and drops it at once (a primary
                // being demoted, a client limit) must not be asked again in a hot loop.
                if subscribed.elapsed() < Duration::from_secs(1) {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                } else {
                    backoff = Duration::from_millis(50);
                }
            }
            Err(err) => {
                tracing::warn!(cause = %err, "pub/sub subscribe failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = resubscribe.notified() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn subscribe(
    info: &redis::ConnectionInfo,
    patterns: &[String],
) -> redis::RedisResult<redis::aio::PubSub> {
    let client = redis::Client::open(info.clone())?;
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        for pattern in patterns {
            pubsub.psubscribe(pattern).await?;
        }
        Ok(pubsub)
    };
    tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::Io, "pub/sub subscribe timed out"))
        })?
}
