//! Flow control's fields between proto and domain: a task's group and priority, rate
//! limits, queue and group configs. Every error names the field as the `.proto`
//! spells it (`rate_limit.period`).

use std::time::Duration;

use super::pb;
use super::proto_time::{self, DurationRule};
use crate::{
    error::{Error, Result},
    queue::{
        GroupConfig, QueueConfig, QueueConfigChange, RateLimit, Retention, MAX_KEEP_COUNT,
        MAX_RATE_LIMIT, MAX_WEIGHT, RATE_PERIODS,
    },
    validate,
};

/// Highest task priority.
pub const MAX_PRIORITY: u32 = 9;

/// A task's group: 0–256 bytes, no control characters ('' = ungrouped).
pub fn group(value: &str) -> Result<&str> {
    validate::optional_id("group", value)
}

/// A task's priority, 0–9.
pub fn priority(value: u32) -> Result<u32> {
    if value > MAX_PRIORITY {
        return Err(Error::invalid(
            "priority",
            format!("must be 0–{MAX_PRIORITY}, got {value}"),
        ));
    }
    Ok(value)
}

/// Which of the two rate limits a field is, for its name in errors.
#[derive(Clone, Copy)]
enum Which {
    Queue,
    Group,
}

impl Which {
    fn field(self, part: &'static str) -> &'static str {
        match (self, part) {
            (Which::Queue, "limit") => "rate_limit.limit",
            (Which::Queue, "period") => "rate_limit.period",
            (Which::Queue, _) => "rate_limit.burst",
            (Which::Group, "limit") => "group_rate_limit.limit",
            (Which::Group, "period") => "group_rate_limit.period",
            (Which::Group, _) => "group_rate_limit.burst",
        }
    }
}

/// A `RateLimit` change: unset keeps it, `limit` 0 removes it (`Some(None)`).
fn rate_limit(which: Which, value: Option<pb::RateLimit>) -> Result<Option<Option<RateLimit>>> {
    let Some(value) = value else {
        return Ok(None);
    };
    if value.limit == 0 {
        return Ok(Some(None));
    }
    if value.limit > MAX_RATE_LIMIT {
        return Err(Error::invalid(
            which.field("limit"),
            format!("must be at most {MAX_RATE_LIMIT}, got {}", value.limit),
        ));
    }
    let period = proto_time::duration(
        which.field("period"),
        value.period.as_ref(),
        DurationRule {
            default: Duration::from_secs(1),
            min: RATE_PERIODS.0,
            max: RATE_PERIODS.1,
        },
    )?;
    if value.burst > MAX_RATE_LIMIT {
        return Err(Error::invalid(
            which.field("burst"),
            format!("must be at most {MAX_RATE_LIMIT}, got {}", value.burst),
        ));
    }
    Ok(Some(Some(RateLimit {
        limit: value.limit,
        period,
        burst: if value.burst == 0 {
            value.limit
        } else {
            value.burst
        },
    })))
}

/// The change a `ConfigureQueue` asks for.
pub fn queue_change(r: &pb::ConfigureQueueRequest) -> Result<QueueConfigChange> {
    Ok(QueueConfigChange {
        paused: r.paused,
        max_in_flight: r.max_in_flight,
        group_max_in_flight: r.group_max_in_flight,
        rate_limit: rate_limit(Which::Queue, r.rate_limit)?,
        group_rate_limit: rate_limit(Which::Group, r.group_rate_limit)?,
        keep_completed: retention(Keep::Completed, r.keep_completed)?,
        keep_dead: retention(Keep::Dead, r.keep_dead)?,
    })
}

/// Which of the two retentions a field is, for its name in errors.
#[derive(Clone, Copy)]
enum Keep {
    Completed,
    Dead,
}

impl Keep {
    fn field(self, part: &'static str) -> &'static str {
        match (self, part) {
            (Keep::Completed, "age") => "keep_completed.age",
            (Keep::Completed, _) => "keep_completed.count",
            (Keep::Dead, "age") => "keep_dead.age",
            (Keep::Dead, _) => "keep_dead.count",
        }
    }
}

/// The longest a queue keeps an ended task by age.
const MAX_KEEP_AGE: Duration = Duration::from_secs(366 * 24 * 3600);

/// A `keep_completed` or `keep_dead` change: unset keeps it, age and count both 0 remove
/// it (`Some(None)`: keep no ended task, keep every DEAD one).
fn retention(which: Keep, value: Option<pb::Retention>) -> Result<Option<Option<Retention>>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let age = proto_time::duration(
        which.field("age"),
        value.age.as_ref(),
        DurationRule {
            default: Duration::ZERO,
            min: Duration::ZERO,
            max: MAX_KEEP_AGE,
        },
    )?;
    if value.count > MAX_KEEP_COUNT {
        return Err(Error::invalid(
            which.field("count"),
            format!("must be at most {MAX_KEEP_COUNT}, got {}", value.count),
        ));
    }
    if age.is_zero() && value.count == 0 {
        return Ok(Some(None));
    }
    Ok(Some(Some(Retention {
        age,
        count: value.count,
    })))
}

fn retention_message(keep: Option<Retention>) -> Option<pb::Retention> {
    keep.map(|keep| pb::Retention {
        age: (!keep.age.is_zero()).then(|| prost_types::Duration {
            seconds: keep.age.as_secs() as i64,
            nanos: keep.age.subsec_nanos() as i32,
        }),
        count: keep.count,
    })
}

/// A group's weight: 1–100, 0 = the default (1).
pub fn weight(value: Option<u32>) -> Result<Option<u32>> {
    match value {
        Some(weight) if weight > MAX_WEIGHT => Err(Error::invalid(
            "weight",
            format!("must be 1–{MAX_WEIGHT} (0: the default, 1), got {weight}"),
        )),
        other => Ok(other),
    }
}

fn rate_limit_message(limit: Option<RateLimit>) -> Option<pb::RateLimit> {
    limit.map(|limit| pb::RateLimit {
        limit: limit.limit,
        period: Some(prost_types::Duration {
            seconds: limit.period.as_secs() as i64,
            nanos: limit.period.subsec_nanos() as i32,
        }),
        burst: limit.burst,
    })
}

pub fn config_message(config: QueueConfig) -> pb::QueueConfig {
    pb::QueueConfig {
        paused: config.paused,
        max_in_flight: config.max_in_flight,
        rate_limit: rate_limit_message(config.rate_limit),
        group_max_in_flight: config.group_max_in_flight,
        group_rate_limit: rate_limit_message(config.group_rate_limit),
        keep_completed: retention_message(config.keep_completed),
        keep_dead: retention_message(config.keep_dead),
    }
}

pub fn group_config_message(config: GroupConfig) -> pb::GroupConfig {
    pb::GroupConfig {
        paused: config.paused,
        weight: config.weight,
    }
}

/// What a page token continues: a listing of queues or of one queue's groups.
#[derive(Clone, Copy)]
pub enum Listing {
    Queues,
    Groups,
    /// `ListSchedules`.
    Schedules,
    /// `ListLocks`.
    Locks,
}

impl Listing {
    fn mark(self) -> &'static str {
        match self {
            Listing::Queues => "q1.",
            Listing::Groups => "g1.",
            Listing::Schedules => "s1.",
            Listing::Locks => "l1.",
        }
    }
}

/// The page token that continues a listing after `name`: its kind, then the name in
/// hex (opaque to clients, and checked when it comes back).
pub fn page_token(listing: Listing, name: Option<String>) -> String {
    let Some(name) = name else {
        return String::new();
    };
    let mut token = String::from(listing.mark());
    for byte in name.bytes() {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}

/// The name a page token continues after (None: the first page); a token we did not
/// make for this listing is INVALID_ARGUMENT naming `page_token`.
pub fn page_after(listing: Listing, token: &str) -> Result<Option<String>> {
    if token.is_empty() {
        return Ok(None);
    }
    let refused = || Error::invalid("page_token", "not a page token of this listing");
    let hex = token.strip_prefix(listing.mark()).ok_or_else(refused)?;
    if hex.len() % 2 != 0 || hex.len() > 2 * validate::MAX_NAME_BYTES {
        return Err(refused());
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| refused())?;
    String::from_utf8(bytes).map(Some).map_err(|_| refused())
}

/// A listing's page size: default 100, at most 1000.
pub fn page_size(value: u32) -> Result<usize> {
    validate::count("page_size", value, 100, 1000).map(|size| size as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_token_gives_back_its_name_and_refuses_any_other() {
        for name in ["orders", "", "naïve/queue"] {
            let token = page_token(Listing::Queues, Some(name.into()));
            assert_eq!(
                page_after(Listing::Queues, &token).unwrap().as_deref(),
                Some(name)
            );
            assert!(page_after(Listing::Groups, &token).is_err());
        }
        assert_eq!(page_token(Listing::Groups, None), "");
        assert_eq!(page_after(Listing::Groups, "").unwrap(), None);
        for bad in ["q1.zz", "q1.abc", "orders", "q1.ff"] {
            assert!(page_after(Listing::Queues, bad).is_err(), "{bad}");
        }
    }
}
