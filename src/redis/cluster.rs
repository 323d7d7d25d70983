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
    /// `ca` is the CA to trust for TLS: the cluster client takes it here, not from the
    /// seeds, and uses it for every node it discovers (a seed's own CA would not reach
    /// the other nodes: found by a test against a TLS-only cluster).
    pub fn new(
        seeds: Vec<redis::ConnectionInfo>,
        ca: Option<Vec<u8>>,
        timeout: Duration,
    ) -> redis::RedisResult<Self> {
        let mut builder = ClusterClientBuilder::new(seeds)
            .connection_timeout(timeout)
            .response_timeout(timeout);
        if let Some(root_cert) = ca {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            });
        }
        let client = builder.build()?;
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

/// Runs each command of `pipe` on its own slot, all at once, each followed by `wait`
/// on the same node: the first error, or the fewest replicas that confirmed a command.
pub async fn query_split(
    connection: &ClusterConnection,
    pipe: &redis::Pipeline,
    wait: Option<&super::Wait>,
) -> redis::RedisResult<Option<i64>> {
    let mut calls = tokio::task::JoinSet::new();
    for cmd in pipe.cmd_iter() {
        let mut one = redis::pipe();
        one.add_command(cmd.clone());
        if let Some(wait) = wait {
            one.add_command(wait.command());
        }
        let mut connection = connection.clone();
        calls.spawn(async move { one.query_async::<Vec<redis::Value>>(&mut connection).await });
    }
    let mut first_error = None;
    let mut fewest: Option<i64> = None;
    while let Some(done) = calls.join_next().await {
        let result = done.map_err(|err| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "a pipelined command died",
                err.to_string(),
            ))
        });
        match result.and_then(|reply| reply) {
            Ok(replies) if wait.is_some() => {
                let confirmed = replies.last().and_then(super::Wait::confirmed).unwrap_or(0);
                fewest = Some(fewest.map_or(confirmed, |n| n.min(confirmed)));
            }
            Ok(_) => {}
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    first_error.map_or(Ok(fewest), Err)
}
