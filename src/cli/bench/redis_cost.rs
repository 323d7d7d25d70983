//! What a run costs Redis, read from INFO before and after it: the redis-server's CPU
//! time (user + sys), its script calls and its commands. This is how the bench shows
//! whether Redis is what bounds a number (a core near 100% busy) and what one
//! operation costs there. It needs the Redis URL; against `--server` alone it is
//! skipped.

use tokio::time::Instant;

use super::report::{Extra, Report};

/// Counters of one Redis at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// CPU seconds, user + sys, since Redis started.
    cpu_s: f64,
    /// EVAL, EVALSHA and FCALL calls since the last stats reset.
    scripts: u64,
    /// Commands processed, each command a script runs included.
    pub commands: u64,
    at: Instant,
}

impl Usage {
    /// Reads the counters of the Redis at `url`, summed over its nodes when `url`
    /// lists several (a cluster's seeds: all of its primaries).
    pub async fn read(url: &str) -> Result<Self, String> {
        let mut total: Option<Self> = None;
        for node in url.split(',') {
            let one = Self::read_one(node).await?;
            total = Some(match total {
                None => one,
                Some(sum) => Self {
                    cpu_s: sum.cpu_s + one.cpu_s,
                    scripts: sum.scripts + one.scripts,
                    commands: sum.commands + one.commands,
                    at: sum.at,
                },
            });
        }
        total.ok_or_else(|| "no Redis URL".to_owned())
    }

    async fn read_one(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .arg("stats")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        let calls = |command: &str| {
            info.lines()
                .find_map(|line| {
                    line.strip_prefix("cmdstat_")?
                        .strip_prefix(command)?
                        .strip_prefix(":calls=")
                })
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(Self {
            cpu_s: field("used_cpu_user").unwrap_or(0.0) + field("used_cpu_sys").unwrap_or(0.0),
            scripts: calls("evalsha") + calls("eval") + calls("fcall"),
            commands: field("total_commands_processed")
                .ok_or("no total_commands_processed in INFO")? as u64,
            at: Instant::now(),
        })
    }

    /// Reads the counters when there is a URL.
    pub async fn read_if(url: Option<&str>) -> Result<Option<Self>, String> {
        match url {
            Some(url) => Ok(Some(Self::read(url).await?)),
            None => Ok(None),
        }
    }

    /// Redis CPU µs per operation from `self` to `after`.
    pub fn cpu_us_per_op(self, after: Self, ops: u64) -> f64 {
        if ops == 0 {
            return f64::NAN;
        }
        (after.cpu_s - self.cpu_s).max(0.0) * 1e6 / ops as f64
    }

    /// Adds to `report` what Redis spent from `self` to `after` on `ops` operations:
    /// its CPU as a share of one core, its CPU per operation and scripts per
    /// operation.
    pub fn add_to(self, after: Self, ops: u64, report: Report) -> Report {
        let cpu = (after.cpu_s - self.cpu_s).max(0.0);
        let wall = after.at.duration_since(self.at).as_secs_f64();
        let scripts = after.scripts.saturating_sub(self.scripts) as f64;
        report
            .extra(
                "redis_cpu_pct",
                Extra::Number(if wall > 0.0 { cpu / wall * 100.0 } else { 0.0 }),
            )
            .extra(
                "redis_us_per_op",
                Extra::Number(self.cpu_us_per_op(after, ops)),
            )
            .extra(
                "scripts_per_op",
                Extra::Number(if ops > 0 {
                    scripts / ops as f64
                } else {
                    f64::NAN
                }),
            )
    }
}
