//! `--redis-cluster`: the connection to a Redis Cluster, through redis-rs' async
//! cluster client (slot map, MOVED/ASK redirects, topology refresh, reconnects). It is
//! made on first use, not at start, so the server starts (NOT_SERVING) while the
//! cluster is unreachable, as with one Redis; a failed attempt is retried by the next
//! call. Every script's keys share one hash tag, so each runs on one slot (see
//! `keys.rs`); a pipeline of commands on several slots is split here (redis-rs refuses
//! a cross-slot pipeline).

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

/// The cluster's client and its one shared, multiplexed connection.
pub struct ClusterLink {
    client: ClusterClient,
    /// Made by the first call that needs it; clones share it.
    connection: OnceCell<ClusterConnection>,
}

impl ClusterLink {
    /// A client of the cluster that `seeds` belong to; commands answer within `timeout`.
    pub fn new(seeds: Vec<redis::ConnectionInfo>, timeout: Duration) -> redis::RedisResult<Self> {
        let client = ClusterClientBuilder::new(seeds)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()?;
        Ok(Self {
            client,
            connection: OnceCell::new(),
        })
    }

    /// The shared connection, made now if it is not yet.
    pub async fn connection(&self) -> redis::RedisResult<ClusterConnection> {
        self.connection
            .get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
    }
}

/// Runs each command of `pipe` on its own slot, all at once; the first error.
pub async fn query_split(
    connection: &ClusterConnection,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<()> {
    let mut calls = tokio::task::JoinSet::new();
    for cmd in pipe.cmd_iter() {
        let (cmd, mut connection) = (cmd.clone(), connection.clone());
        calls.spawn(async move { cmd.query_async::<redis::Value>(&mut connection).await });
    }
    let mut first_error = None;
    while let Some(done) = calls.join_next().await {
        let result = done.map_err(|err| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "a pipelined command died",
                err.to_string(),
            ))
        });
        if let Err(err) = result.and_then(|reply| reply.map(drop)) {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}
