//! A real `redis-server` of a test's own: started on a free loopback port in its own
//! temp dir, killed on drop, restartable, pausable, its command counts readable.

use std::time::Duration;

use turnstile::embedded::{free_port, Bind, EmbeddedOptions, EmbeddedRedis};

use super::{eventually, init_tracing, TempDir, WAIT};

/// A real redis-server of this test's own, on a loopback port.
pub struct TestRedis {
    pub redis: Option<EmbeddedRedis>,
    pub port: u16,
    options: EmbeddedOptions,
    pub dir: TempDir,
}

impl TestRedis {
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// With `append_only`, restarts keep the data (for crash tests).
    pub async fn start_with(append_only: bool) -> Self {
        Self::start_with_options(append_only, false).await
    }

    /// With `appendfsync always` too: a SIGKILL loses no write Redis answered.
    pub async fn start_durable() -> Self {
        Self::start_with_options(true, true).await
    }

    async fn start_with_options(append_only: bool, fsync_always: bool) -> Self {
        init_tracing();
        let dir = TempDir::new("redis");
        for _ in 0..5 {
            let port = free_port().expect("free port");
            let options = EmbeddedOptions {
                dir: dir.0.clone(),
                bind: Bind::Port(port),
                append_only,
                fsync_always,
            };
            if let Ok(redis) = EmbeddedRedis::start(&options).await {
                return Self {
                    redis: Some(redis),
                    port,
                    options,
                    dir,
                };
            }
        }
        panic!("could not start redis-server on a free port");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("redis url")
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection")
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub async fn kill(&mut self) {
        if let Some(redis) = self.redis.take() {
            redis.kill().await;
        }
    }

    /// Starts it again on the same port and directory.
    pub async fn restart(&mut self) {
        self.kill().await;
        let redis = EmbeddedRedis::start(&self.options)
            .await
            .expect("redis restart");
        self.redis = Some(redis);
    }

    /// Holds every write (scripts included) for `pause`: once this returns, Redis
    /// queues the server's scripts until the pause ends, so a test can make a call's
    /// script run after its caller gave up, without sleeping to get the order right.
    pub async fn pause_writes(&self, pause: Duration) {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(pause.as_millis() as u64)
            .arg("WRITE")
            .query_async(&mut self.conn().await)
            .await
            .expect("CLIENT PAUSE");
    }

    /// Ends a pause of [`Self::pause_writes`] now.
    pub async fn resume_writes(&self) {
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query_async(&mut self.conn().await)
            .await
            .expect("CLIENT UNPAUSE");
    }

    /// Waits (at most 10 s) until `command` has run more than `calls` times: how a
    /// test knows that a call reached Redis (a long poll made its first look, a feed
    /// ran its detach) instead of sleeping.
    pub async fn wait_command_calls_above(&self, command: &str, calls: u64) {
        eventually(&format!("{command} runs"), WAIT, || async {
            self.command_calls(command).await > calls
        })
        .await;
    }

    /// How many times `command` ran (from INFO commandstats, e.g. "evalsha").
    pub async fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Every command Redis ran so far.
    pub async fn total_commands(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}
