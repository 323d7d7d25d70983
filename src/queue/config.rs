//! Flow control's settings: a queue's `QueueConfig` and a group's `GroupConfig`, kept
//! in Redis on the queue's slot (`lua/include/group_state.lua` and the helpers beside it says how they act), with the
//! two scripts that change them.

use std::time::Duration;

use redis::Value;

use super::{scripts::call, QueueStore};
use crate::{
    error::{Error, Result},
    redis::{
        keys::Event,
        reply::{int, string},
    },
};

/// Most starts per period of a rate limit.
pub const MAX_RATE_LIMIT: u32 = 1_000_000;
/// Shortest and longest period of a rate limit.
pub const RATE_PERIODS: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_secs(24 * 3600));
/// Largest group weight.
pub const MAX_WEIGHT: u32 = 100;

/// A rate limit: in any interval of length t at most `burst + limit * t / period`
/// deliveries start (GCRA on Redis' clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Starts per period (at least 1).
    pub limit: u32,
    /// The period.
    pub period: Duration,
    /// Starts that may come at once (at least 1).
    pub burst: u32,
}

impl RateLimit {
    /// As the scripts store it: "limit period_ms burst".
    fn as_script_arg(&self) -> String {
        format!("{} {} {}", self.limit, self.period.as_millis(), self.burst)
    }

    /// A stored limit ('' for none).
    fn from_script(text: &str) -> Result<Option<Self>> {
        if text.is_empty() {
            return Ok(None);
        }
        let parts: Vec<u64> = text
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| Error::Internal(format!("stored rate limit {text:?}")))?;
        match parts[..] {
            [limit, period, burst] => Ok(Some(Self {
                limit: limit as u32,
                period: Duration::from_millis(period),
                burst: burst as u32,
            })),
            _ => Err(Error::Internal(format!("stored rate limit {text:?}"))),
        }
    }
}

/// A limit that held back a deliverable task (counted in
/// `turnstile_queue_held_back_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Paused,
    MaxInFlight,
    Rate,
    GroupMaxInFlight,
    GroupRate,
}

impl Limit {
    /// Every limit, in the order of [`Limit::index`].
    pub const ALL: [Limit; 5] = [
        Limit::Paused,
        Limit::MaxInFlight,
        Limit::Rate,
        Limit::GroupMaxInFlight,
        Limit::GroupRate,
    ];

    /// Its name, as the scripts and the metric's `reason` label spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Paused => "paused",
            Limit::MaxInFlight => "max_in_flight",
            Limit::Rate => "rate_limit",
            Limit::GroupMaxInFlight => "group_max_in_flight",
            Limit::GroupRate => "group_rate_limit",
        }
    }

    /// The limits a script named, comma-separated ('' for none).
    pub(super) fn from_script(text: &str) -> Result<Vec<Limit>> {
        text.split(',')
            .filter(|name| !name.is_empty())
            .map(|name| {
                Limit::ALL
                    .into_iter()
                    .find(|limit| limit.as_str() == name)
                    .ok_or_else(|| Error::Internal(format!("unknown limit {name:?}")))
            })
            .collect()
    }
}

/// A queue's flow-control config (all off by default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueConfig {
    /// Nothing is delivered.
    pub paused: bool,
    /// Most tasks IN_FLIGHT at once (0: no cap).
    pub max_in_flight: u32,
    /// Most tasks of one group IN_FLIGHT at once (0: no cap; 1: one at a time, in order).
    pub group_max_in_flight: u32,
    /// The queue's rate limit.
    pub rate_limit: Option<RateLimit>,
    /// Each group's rate limit.
    pub group_rate_limit: Option<RateLimit>,
    /// Which acked and cancelled tasks are kept (none: an ended task is gone).
    pub keep_completed: Option<Retention>,
    /// Which DEAD tasks are kept (none: all, until redriven or cancelled).
    pub keep_dead: Option<Retention>,
}

/// How many ended tasks of a state a queue keeps, and how long (`lua/include/keep.lua`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Kept at most this long after the end (zero: no bound by age).
    pub age: Duration,
    /// At most this many, the newest (0: no bound by count).
    pub count: u32,
}

/// The most ended tasks of a state a queue may be told to keep by count.
pub const MAX_KEEP_COUNT: u32 = 1_000_000;

impl Retention {
    /// As the scripts store it: "age_ms count".
    fn as_script_arg(&self) -> String {
        format!("{} {}", self.age.as_millis(), self.count)
    }

    /// A stored retention ('' for none).
    fn from_script(text: &str) -> Result<Option<Self>> {
        if text.is_empty() {
            return Ok(None);
        }
        let bad = || Error::Internal(format!("stored retention {text:?}"));
        let (age, count) = text.split_once(' ').ok_or_else(bad)?;
        Ok(Some(Self {
            age: Duration::from_millis(age.parse().map_err(|_| bad())?),
            count: count.parse().map_err(|_| bad())?,
        }))
    }
}

impl QueueConfig {
    /// From seven reply values: paused, max_in_flight, group_max_in_flight, rate,
    /// group_rate, keep_completed, keep_dead (as `configure_queue.lua` and the tail of
    /// `stats.lua` answer).
    pub(super) fn from_reply(r: &[Value]) -> Result<Self> {
        Ok(Self {
            paused: int(r, 0)? == 1,
            max_in_flight: int(r, 1)? as u32,
            group_max_in_flight: int(r, 2)? as u32,
            rate_limit: RateLimit::from_script(&string(r, 3)?)?,
            group_rate_limit: RateLimit::from_script(&string(r, 4)?)?,
            keep_completed: Retention::from_script(&string(r, 5)?)?,
            keep_dead: Retention::from_script(&string(r, 6)?)?,
        })
    }
}

/// A change of a queue's config: the fields that are `Some` change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueConfigChange {
    pub paused: Option<bool>,
    pub max_in_flight: Option<u32>,
    pub group_max_in_flight: Option<u32>,
    /// `Some(None)` removes the limit.
    pub rate_limit: Option<Option<RateLimit>>,
    pub group_rate_limit: Option<Option<RateLimit>>,
    /// `Some(None)` keeps nothing any more.
    pub keep_completed: Option<Option<Retention>>,
    /// `Some(None)` keeps every DEAD task again.
    pub keep_dead: Option<Option<Retention>>,
}

/// A group's config.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupConfig {
    /// Nothing of the group is delivered.
    pub paused: bool,
    /// Deliveries per turn of the rotation (1-100).
    pub weight: u32,
}

impl QueueStore {
    /// Changes the fields of `change` that are set; the config as now stored.
    pub async fn configure_queue(
        &self,
        queue: &str,
        change: &QueueConfigChange,
    ) -> Result<QueueConfig> {
        self.name_queue(queue).await?;
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.configure_queue, &keys);
        call.arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending());
        if let Some(paused) = change.paused {
            call.arg("paused").arg(if paused { "1" } else { "0" });
        }
        if let Some(cap) = change.max_in_flight {
            call.arg("max_in_flight").arg(cap);
        }
        if let Some(cap) = change.group_max_in_flight {
            call.arg("group_max_in_flight").arg(cap);
        }
        for (field, limit) in [
            ("rate", &change.rate_limit),
            ("group_rate", &change.group_rate_limit),
        ] {
            if let Some(limit) = limit {
                call.arg(field)
                    .arg(limit.map(|l| l.as_script_arg()).unwrap_or_default());
            }
        }
        for (field, keep) in [
            ("keep_completed", &change.keep_completed),
            ("keep_dead", &change.keep_dead),
        ] {
            if let Some(keep) = keep {
                call.arg(field)
                    .arg(keep.map(|k| k.as_script_arg()).unwrap_or_default());
            }
        }
        let reply: Vec<Value> = self.redis.invoke(&call).await?;
        QueueConfig::from_reply(&reply)
    }

    /// Pauses or resumes a group, or sets its weight; its config as now stored.
    pub async fn configure_group(
        &self,
        queue: &str,
        group: &str,
        paused: Option<bool>,
        weight: Option<u32>,
    ) -> Result<GroupConfig> {
        self.name_queue(queue).await?;
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.configure_group, &keys);
        call.arg(self.redis.keys.channel(Event::QueueChanged))
            .arg(keys.pending())
            .arg(group)
            .arg(match paused {
                None => "",
                Some(true) => "1",
                Some(false) => "0",
            })
            .arg(weight.map(|w| w.to_string()).unwrap_or_default());
        let (paused, weight): (i64, u32) = self.redis.invoke(&call).await?;
        Ok(GroupConfig {
            paused: paused == 1,
            weight: weight.max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_a_script_names_are_read_back_and_unknown_ones_refused() {
        assert_eq!(
            Limit::from_script("rate_limit,group_rate_limit,group_rate_limit").unwrap(),
            [Limit::Rate, Limit::GroupRate, Limit::GroupRate]
        );
        assert!(Limit::from_script("").unwrap().is_empty());
        assert!(Limit::from_script("sleepy").is_err());
    }

    #[test]
    fn a_rate_limit_is_stored_as_three_numbers_and_read_back() {
        let limit = RateLimit {
            limit: 1000,
            period: Duration::from_millis(1500),
            burst: 20,
        };
        assert_eq!(limit.as_script_arg(), "1000 1500 20");
        assert_eq!(RateLimit::from_script("1000 1500 20").unwrap(), Some(limit));
        assert_eq!(RateLimit::from_script("").unwrap(), None);
        assert!(RateLimit::from_script("1000 x 20").is_err());
        assert!(RateLimit::from_script("1000 20").is_err());
    }
}
