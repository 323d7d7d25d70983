//! The flow-control commands: `queues` (every queue of the tenant with its depths and
//! config), `pause` and `resume` (a queue or one group), `limit` (caps and rate
//! limits). Tables for people, one JSON object per line with `--json`.

use std::{process::ExitCode, time::Duration};

use clap::Args;
use serde_json::{json, Value};
use turnstile::{config::parse_duration, pb};

use super::{
    client::{ClientArgs, Outcome},
    output::{rfc3339, table},
};

/// A rate limit as the command line spells it: `N/D` (`10/1s`), or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateArg {
    /// Starts per period; 0 (`off`) removes the limit.
    pub limit: u32,
    pub period: Duration,
}

/// Parses `N/D` (like `10/1s`, `1000/1m`) or `off`.
pub fn parse_rate(text: &str) -> Result<RateArg, String> {
    if text == "off" {
        return Ok(RateArg {
            limit: 0,
            period: Duration::from_secs(1),
        });
    }
    let (limit, period) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not a rate like 10/1s (or off)"))?;
    let limit: u32 = limit
        .parse()
        .map_err(|_| format!("`{limit}` is not a count of starts"))?;
    Ok(RateArg {
        limit,
        period: parse_duration(period)?,
    })
}

impl RateArg {
    fn message(self) -> pb::RateLimit {
        pb::RateLimit {
            limit: self.limit,
            period: prost_types::Duration::try_from(self.period).ok(),
            burst: 0,
        }
    }
}

/// `10/1s`, with the burst when it is not the limit; `-` for none.
pub fn rate_text(limit: Option<&pb::RateLimit>) -> String {
    let Some(limit) = limit else {
        return "-".to_owned();
    };
    let period = limit
        .period
        .as_ref()
        .map(|p| Duration::new(p.seconds.max(0) as u64, p.nanos.max(0) as u32))
        .unwrap_or(Duration::from_secs(1));
    let period = if period.subsec_millis() == 0 {
        format!("{}s", period.as_secs())
    } else {
        format!("{}ms", period.as_millis())
    };
    if limit.burst == limit.limit {
        format!("{}/{period}", limit.limit)
    } else {
        format!("{}/{period} (burst {})", limit.limit, limit.burst)
    }
}

/// A config as JSON (for `--json` of `queues` and `stats`).
pub fn config_json(config: Option<&pb::QueueConfig>) -> Value {
    let config = config.cloned().unwrap_or_default();
    json!({
        "paused": config.paused,
        "max_in_flight": config.max_in_flight,
        "rate_limit": config.rate_limit.as_ref().map(|l| rate_text(Some(l))),
        "group_max_in_flight": config.group_max_in_flight,
        "group_rate_limit": config.group_rate_limit.as_ref().map(|l| rate_text(Some(l))),
    })
}

/// The config's table cells: PAUSED, MAX_IN_FLIGHT, RATE, GROUP_MAX_IN_FLIGHT,
/// GROUP_RATE.
pub fn config_cells(config: Option<&pb::QueueConfig>) -> [String; 5] {
    let config = config.cloned().unwrap_or_default();
    let cap = |n: u32| {
        if n == 0 {
            "-".to_owned()
        } else {
            n.to_string()
        }
    };
    [
        if config.paused { "yes" } else { "no" }.to_owned(),
        cap(config.max_in_flight),
        rate_text(config.rate_limit.as_ref()),
        cap(config.group_max_in_flight),
        rate_text(config.group_rate_limit.as_ref()),
    ]
}

/// `turnstile queues`.
#[derive(Debug, Args)]
pub struct QueuesArgs {
    /// Only queues whose names start with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn queues(args: QueuesArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let mut rows = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .queues
            .list_queues(pb::ListQueuesRequest {
                prefix: args.prefix.clone(),
                page_size: 1000,
                page_token: token,
            })
            .await?
            .into_inner();
        for queue in page.queues {
            if args.client.json {
                println!(
                    "{}",
                    json!({
                        "queue": queue.queue,
                        "ready": queue.ready,
                        "delayed": queue.delayed,
                        "in_flight": queue.in_flight,
                        "dead": queue.dead,
                        "oldest_ready_at": queue.oldest_ready_at.as_ref().map(|t| rfc3339(Some(t))),
                        "next_due_at": queue.next_due_at.as_ref().map(|t| rfc3339(Some(t))),
                        "config": config_json(queue.config.as_ref()),
                    })
                );
                continue;
            }
            let mut row = vec![
                queue.queue,
                queue.ready.to_string(),
                queue.delayed.to_string(),
                queue.in_flight.to_string(),
                queue.dead.to_string(),
            ];
            row.extend(config_cells(queue.config.as_ref()));
            rows.push(row);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    if !args.client.json {
        print!(
            "{}",
            table(
                &[
                    "QUEUE",
                    "READY",
                    "DELAYED",
                    "IN_FLIGHT",
                    "DEAD",
                    "PAUSED",
                    "MAX_IN_FLIGHT",
                    "RATE",
                    "GROUP_MAX_IN_FLIGHT",
                    "GROUP_RATE",
                ],
                &rows
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `turnstile pause` and `turnstile resume`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The queue.
    pub queue: String,
    /// Only this group of it ("" is its ungrouped tasks).
    #[arg(long)]
    pub group: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Pauses (or resumes) a queue or one of its groups; prints what is now stored.
pub async fn pause(args: PauseArgs, paused: bool) -> Outcome {
    let mut client = args.client.connect()?;
    let what = match &args.group {
        Some(group) => format!("group {group:?} of {}", args.queue),
        None => args.queue.clone(),
    };
    let now = if let Some(group) = args.group {
        client
            .queues
            .configure_group(pb::ConfigureGroupRequest {
                queue: args.queue,
                group,
                paused: Some(paused),
                weight: None,
            })
            .await?
            .into_inner()
            .config
            .unwrap_or_default()
            .paused
    } else {
        client
            .queues
            .configure_queue(pb::ConfigureQueueRequest {
                queue: args.queue,
                paused: Some(paused),
                ..Default::default()
            })
            .await?
            .into_inner()
            .config
            .unwrap_or_default()
            .paused
    };
    if args.client.json {
        println!("{}", json!({ "paused": now }));
    } else {
        println!("{what}: {}", if now { "paused" } else { "running" });
    }
    Ok(ExitCode::SUCCESS)
}

/// `turnstile limit`.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The queue.
    pub queue: String,
    /// Deliveries start no faster than N per D (like 10/1s); `off` removes it.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<RateArg>,
    /// At most N tasks in flight at once; 0 removes the cap.
    #[arg(long)]
    pub max_in_flight: Option<u32>,
    /// The rate limit of each group (N/D or off).
    #[arg(long, value_parser = parse_rate)]
    pub group_rate: Option<RateArg>,
    /// At most N tasks of each group in flight; 1 delivers each group in order.
    #[arg(long)]
    pub group_max_in_flight: Option<u32>,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn limit(args: LimitArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let config = client
        .queues
        .configure_queue(pb::ConfigureQueueRequest {
            queue: args.queue.clone(),
            paused: None,
            max_in_flight: args.max_in_flight,
            group_max_in_flight: args.group_max_in_flight,
            rate_limit: args.rate.map(RateArg::message),
            group_rate_limit: args.group_rate.map(RateArg::message),
            ..Default::default()
        })
        .await?
        .into_inner()
        .config;
    if args.client.json {
        println!("{}", config_json(config.as_ref()));
        return Ok(ExitCode::SUCCESS);
    }
    let config = config.unwrap_or_default();
    let cap = |n: u32| {
        if n == 0 {
            "-".to_owned()
        } else {
            n.to_string()
        }
    };
    print!(
        "{}",
        table(
            &[
                "QUEUE",
                "PAUSED",
                "MAX_IN_FLIGHT",
                "RATE",
                "GROUP_MAX_IN_FLIGHT",
                "GROUP_RATE"
            ],
            &[vec![
                args.queue,
                if config.paused { "yes" } else { "no" }.to_owned(),
                cap(config.max_in_flight),
                rate_text(config.rate_limit.as_ref()),
                cap(config.group_max_in_flight),
                rate_text(config.group_rate_limit.as_ref()),
            ]]
        )
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_n_per_duration_or_off() {
        assert_eq!(
            parse_rate("10/1s").unwrap(),
            RateArg {
                limit: 10,
                period: Duration::from_secs(1)
            }
        );
        assert_eq!(
            parse_rate("1000/1m").unwrap().period,
            Duration::from_secs(60)
        );
        assert_eq!(parse_rate("off").unwrap().limit, 0);
        assert!(parse_rate("10").is_err());
        assert!(parse_rate("x/1s").is_err());
        assert!(parse_rate("10/1").is_err());
        let limit = pb::RateLimit {
            limit: 10,
            period: prost_types::Duration::try_from(Duration::from_millis(500)).ok(),
            burst: 20,
        };
        assert_eq!(rate_text(Some(&limit)), "10/500ms (burst 20)");
        assert_eq!(rate_text(None), "-");
    }
}
