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

/// The CPU time (user + sys) of the server process under test, from `/proc`, so that
/// the server's share of an operation is a figure beside Redis' (`server_us_per_op`).
/// Only with one server child whose pid the bench knows (not `--server`, not the
/// replicas of `scale`).
#[derive(Clone, Copy, Debug)]
pub struct ServerCpu {
    pid: u32,
    cpu_s: f64,
}

impl ServerCpu {
    /// Reads the server's CPU time now, when there is one server child.
    pub fn read(target: &super::target::Target) -> Option<Self> {
        if target.servers.len() != 1 {
            return None;
        }
        Self::of(target.server_pid?)
    }

    /// Reads the CPU time of the process `pid` now.
    pub fn of(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            cpu_s: cpu_seconds(pid)?,
        })
    }

    /// Adds to `report` the server's CPU µs per operation from `self` until now, over
    /// `ops` operations.
    pub fn add_to(self, ops: u64, report: Report) -> Report {
        self.add_as("server_us_per_op", ops, report)
    }

    /// Adds to `report`, as `figure`, the process' CPU µs per operation from `self`
    /// until now, over `ops` operations.
    pub fn add_as(self, figure: &'static str, ops: u64, report: Report) -> Report {
        let Some(now) = cpu_seconds(self.pid) else {
            return report;
        };
        let per_op = if ops > 0 {
            (now - self.cpu_s).max(0.0) * 1e6 / ops as f64
        } else {
            f64::NAN
        };
        report.extra(figure, Extra::Number(per_op))
    }
}

/// utime + stime of `pid` in seconds (fields 14 and 15 of `/proc/<pid>/stat`, after
/// the parenthesised command name, which may hold spaces).
pub(super) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields from the state (field 3): utime is field 14, stime field 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) / ticks as f64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_cpu_time_is_read_and_grows_with_work() {
        let pid = std::process::id();
        let before = super::cpu_seconds(pid).expect("own /proc stat");
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let after = super::cpu_seconds(pid).unwrap();
        assert!(after > before, "{before} -> {after}");
    }
}
