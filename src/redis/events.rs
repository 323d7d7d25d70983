//! Wake-ups by pub/sub: one dedicated connection per server (never a pooled one) that
//! subscribes to the event channels and hands each message to a sink. Any replica can
//! publish (the scripts do, inside the state change), so waiters on every replica hear
//! of it. When the connection drops it is made again, and the sink is told, because
//! messages sent meanwhile were lost and waiters must look again.

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

/// Handle on the pub/sub task.
#[derive(Clone, Debug, Default)]
pub struct Events {
    /// Kicked to make the task drop its connection and subscribe again (e.g. when the
    /// readiness probe saw Redis come back, in case the old socket is half-open).
    resubscribe: Arc<Notify>,
}

impl Events {
    /// Spawns the subscriber task on `url`, running until shutdown; each channel's
    /// messages go to its sink.
    pub fn spawn(
        url: String,
        routes: Vec<(String, Arc<dyn EventSink>)>,
        shutdown: &Shutdown,
    ) -> Self {
        let events = Self::default();
        let resubscribe = events.resubscribe.clone();
        let task_shutdown = shutdown.clone();
        shutdown.spawn(async move {
            tokio::select! {
                () = run(url, routes, resubscribe) => {}
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

async fn run(url: String, routes: Vec<(String, Arc<dyn EventSink>)>, resubscribe: Arc<Notify>) {
    let channels: Vec<String> = routes.iter().map(|(channel, _)| channel.clone()).collect();
    let mut backoff = Duration::from_millis(50);
    loop {
        match subscribe(&url, &channels).await {
            Ok(pubsub) => {
                backoff = Duration::from_millis(50);
                tracing::debug!(channels = channels.len(), "pub/sub subscribed");
                for (_, sink) in &routes {
                    sink.on_subscribed();
                }
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        message = messages.next() => match message {
                            Some(message) => {
                                let channel = message.get_channel_name();
                                if let Some((_, sink)) = routes.iter().find(|(name, _)| name == channel) {
                                    sink.on_message(channel, message.get_payload_bytes());
                                }
                            }
                            None => break,
                        },
                        () = resubscribe.notified() => break,
                    }
                }
                tracing::warn!("pub/sub connection lost; subscribing again");
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

async fn subscribe(url: &str, channels: &[String]) -> redis::RedisResult<redis::aio::PubSub> {
    let client = redis::Client::open(url)?;
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        for channel in channels {
            pubsub.subscribe(channel).await?;
        }
        Ok(pubsub)
    };
    tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::Io, "pub/sub subscribe timed out"))
        })?
}
