//! A schedule as Redis keeps it: one JSON object per schedule in the tenant's
//! definitions hash (`Keys::schedules`). JSON because a person reading Redis (or a
//! later version adding a field) should not need our code to know what a schedule is;
//! unknown fields are ignored and missing ones take their defaults.

use std::time::Duration;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde::{Deserialize, Serialize};

use super::model::{Overlap, Schedule, Spec, TaskTemplate};
use crate::error::{Error, Result};

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Record {
    queue: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    time_zone: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    every_ms: Option<u64>,
    /// The payload, base64.
    payload: String,
    max_attempts: u32,
    priority: u32,
    group: String,
    paused: bool,
    /// "allow" or "skip".
    overlap: String,
    catch_up_ms: u64,
}

/// The JSON of `schedule` (its name is the hash field, not repeated).
pub fn encode(schedule: &Schedule) -> String {
    let (cron, time_zone, every_ms) = match &schedule.spec {
        Spec::Cron { expr, zone } => (Some(expr.clone()), zone.clone(), None),
        Spec::Every(every) => (None, String::new(), Some(every.as_millis() as u64)),
    };
    let record = Record {
        queue: schedule.queue.clone(),
        cron,
        time_zone,
        every_ms,
        payload: STANDARD.encode(&schedule.task.payload),
        max_attempts: schedule.task.max_attempts,
        priority: schedule.task.priority,
        group: schedule.task.group.clone(),
        paused: schedule.paused,
        overlap: match schedule.overlap {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
        .into(),
        catch_up_ms: schedule.catch_up_window.as_millis() as u64,
    };
    serde_json::to_string(&record).unwrap_or_default()
}

/// The schedule `name` from its JSON.
pub fn decode(name: &str, json: &[u8]) -> Result<Schedule> {
    let bad = |what: String| Error::Internal(format!("schedule {name:?} in redis: {what}"));
    let record: Record = serde_json::from_slice(json).map_err(|err| bad(err.to_string()))?;
    let spec = match (record.cron, record.every_ms) {
        (Some(expr), _) => Spec::Cron {
            expr,
            zone: record.time_zone,
        },
        (None, Some(ms)) => Spec::Every(Duration::from_millis(ms)),
        (None, None) => return Err(bad("neither cron nor every".into())),
    };
    Ok(Schedule {
        name: name.to_owned(),
        queue: record.queue,
        spec,
        task: TaskTemplate {
            payload: STANDARD
                .decode(record.payload)
                .map_err(|err| bad(err.to_string()))?,
            max_attempts: record.max_attempts,
            priority: record.priority,
            group: record.group,
        },
        paused: record.paused,
        overlap: if record.overlap == "skip" {
            Overlap::Skip
        } else {
            Overlap::Allow
        },
        catch_up_window: Duration::from_millis(record.catch_up_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_reads_back_as_it_was_written() {
        let schedule = Schedule {
            name: "nightly".into(),
            queue: "reports".into(),
            spec: Spec::Cron {
                expr: "0 3 * * *".into(),
                zone: "Europe/Paris".into(),
            },
            task: TaskTemplate {
                payload: vec![0, 159, 146, 150],
                max_attempts: 3,
                priority: 7,
                group: "acme".into(),
            },
            paused: true,
            overlap: Overlap::Skip,
            catch_up_window: Duration::from_secs(90),
        };
        let json = encode(&schedule);
        assert_eq!(decode("nightly", json.as_bytes()).unwrap(), schedule);
        let every = Schedule {
            spec: Spec::Every(Duration::from_millis(1500)),
            overlap: Overlap::Allow,
            ..schedule
        };
        assert_eq!(decode("nightly", encode(&every).as_bytes()).unwrap(), every);
    }
}
