//! A queue's last hour, minute by minute (the dashboard's charts): deliveries started
//! and tasks waiting, recorded in Redis on the queue's slot by the scripts that enqueue
//! and deliver (`lua/include/history.lua`), so every replica reads the same.

use std::collections::HashMap;

use super::QueueStore;
use crate::{error::Result, time::now_ms};

/// Minutes a history covers.
pub const HISTORY_MINUTES: usize = 60;

/// One minute of a queue's history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Minute {
    /// Its start, Unix ms.
    pub at_ms: i64,
    /// Deliveries that started in it.
    pub delivered: u64,
    /// Tasks waiting (READY + DELAYED) at its first enqueue or delivery; in a minute
    /// with neither, what the minute before recorded (nothing changed the count but
    /// acks and expiries, which the chart does not claim to show); none before the
    /// first record.
    pub waiting: Option<u64>,
}

impl QueueStore {
    /// The last [`HISTORY_MINUTES`] minutes of `queue`, oldest first, ending with the
    /// current one.
    pub async fn history(&self, queue: &str) -> Result<Vec<Minute>> {
        let keys = self.keys(queue);
        let fields: HashMap<String, u64> = self
            .redis
            .query(redis::cmd("HGETALL").arg(keys.history()))
            .await?;
        Ok(minutes(&fields, now_ms() / 60_000))
    }
}

/// The stored fields as the minutes up to `current`.
fn minutes(fields: &HashMap<String, u64>, current: i64) -> Vec<Minute> {
    let first = current - HISTORY_MINUTES as i64 + 1;
    // The waiting count carried into the window: the latest one recorded before it.
    let mut waiting = fields
        .iter()
        .filter_map(|(field, n)| {
            let minute: i64 = field.strip_suffix(":w")?.parse().ok()?;
            (minute < first).then_some((minute, *n))
        })
        .max()
        .map(|(_, n)| n);
    (first..=current)
        .map(|minute| {
            if let Some(&n) = fields.get(&format!("{minute}:w")) {
                waiting = Some(n);
            }
            Minute {
                at_ms: minute * 60_000,
                delivered: fields.get(&minute.to_string()).copied().unwrap_or(0),
                waiting,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_fill_the_hour_and_carry_the_waiting_count_forward() {
        let fields: HashMap<String, u64> = [
            ("900:w", 7),
            ("1000", 5),
            ("1000:w", 3),
            ("1002:w", 9),
            ("1059", 2),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let got = minutes(&fields, 1059);
        assert_eq!(got.len(), HISTORY_MINUTES);
        assert_eq!(got[0].at_ms, 1000 * 60_000);
        assert_eq!((got[0].delivered, got[0].waiting), (5, Some(3)));
        assert_eq!(got[1].waiting, Some(3));
        assert_eq!(got[2].waiting, Some(9));
        assert_eq!((got[59].delivered, got[59].waiting), (2, Some(9)));
        assert_eq!(minutes(&fields, 1100)[0].waiting, Some(9), "carried in");
        assert_eq!(minutes(&HashMap::new(), 5)[0].waiting, None);
    }
}
