//! Fire times: when a schedule fires, as Unix milliseconds. A cron expression is
//! matched on the wall clock of its zone (croner walks the civil times); this module
//! turns each matching wall-clock time into the instant it fires at, with the
//! contract's DST rules, which are ours rather than the parser's:
//!
//! - a wall-clock time that a change skips (02:30 on a spring-forward night) fires at
//!   the first instant after the change (03:00 new time); several skipped times fire
//!   once there;
//! - a wall-clock time that occurs twice (01:30 on a fall-back night) fires once, at
//!   its first occurrence; the repeated hour fires nothing.
//!
//! croner's own zoned search fires an interval job (`*/15 * * * *`) on both
//! occurrences of a repeated time and skips its times in a gap, which is why the walk
//! is on civil times here. `every` fires at the multiples of its period since the
//! epoch, with no zone.

use croner::{parser::CronParser, Cron};
use jiff::{
    civil::DateTime,
    tz::{AmbiguousOffset, TimeZone},
    Timestamp,
};

/// How a schedule's fire times are spelled.
#[derive(Clone, Debug)]
pub enum FireTimes {
    /// A cron expression in a zone.
    Cron {
        /// The parsed expression.
        cron: Box<Cron>,
        /// The zone its wall clock is read in.
        zone: TimeZone,
    },
    /// Every multiple of this many milliseconds since the epoch.
    Every(i64),
}

/// The longest a cron expression may go without a fire time (a search bound: `0 0 30
/// 2 *` never fires, and is refused instead of searched forever).
const HORIZON_YEARS: i16 = 5;

impl FireTimes {
    /// Parses `expr` (5 or 6 fields, or an `@` name) in the IANA zone `zone` (empty:
    /// UTC). Errors name the reason, for `INVALID_ARGUMENT`: `Err((field, reason))`.
    pub fn cron(expr: &str, zone: &str) -> Result<Self, (&'static str, String)> {
        let fields = expr.split_whitespace().count();
        if !expr.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            return Err((
                "cron",
                format!("must have 5 or 6 fields (seconds first), not {fields}"),
            ));
        }
        let cron = CronParser::builder()
            .build()
            .parse(expr)
            .map_err(|err| ("cron", err.to_string()))?;
        let zone = if zone.is_empty() {
            TimeZone::UTC
        } else {
            TimeZone::get(zone)
                .map_err(|_| ("time_zone", format!("unknown IANA time zone {zone:?}")))?
        };
        let times = Self::Cron {
            cron: Box::new(cron),
            zone,
        };
        // A pattern that matches no day at all (30 February) is refused now.
        if times
            .next_after(Timestamp::now().as_millisecond())
            .is_none()
        {
            return Err((
                "cron",
                format!("never fires in the next {HORIZON_YEARS} years"),
            ));
        }
        Ok(times)
    }

    /// The first fire time strictly after `after_ms`, if there is one within the
    /// search horizon.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Self::Every(period) => Some((after_ms.div_euclid(*period) + 1) * period),
            Self::Cron { cron, zone } => next_cron(cron, zone, after_ms),
        }
    }
}

/// The cron walk: the next matching wall-clock time after the civil time of
/// `after_ms`, made an instant by the DST rules; a time whose instant is not after
/// `after_ms` (the first pass of a repeated hour, seen from its second pass) is passed
/// over.
fn next_cron(cron: &Cron, zone: &TimeZone, after_ms: i64) -> Option<i64> {
    let after = Timestamp::from_millisecond(after_ms).ok()?;
    let mut civil = zone.to_datetime(after);
    let horizon = civil.year().saturating_add(HORIZON_YEARS);
    loop {
        civil = cron.find_next_occurrence(&civil, false).ok()?;
        if civil.year() > horizon {
            return None;
        }
        let at = instant_of(zone, civil)?;
        if at > after {
            return Some(at.as_millisecond());
        }
    }
}

/// The instant a wall-clock time fires at: itself; the first instant after the change
/// when a DST change skips it; its first occurrence when it occurs twice.
fn instant_of(zone: &TimeZone, civil: DateTime) -> Option<Timestamp> {
    match zone.to_ambiguous_timestamp(civil).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok(),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(civil).ok(),
        AmbiguousOffset::Gap { before, .. } => {
            // Read with the offset before the gap, the time is past the change; the
            // change itself is the transition just before that instant.
            let past = before.to_timestamp(civil).ok()?;
            zone.preceding(past)
                .next()
                .map(|transition| transition.timestamp())
        }
    }
}

/// A fire time as the contract spells it in task ids: RFC 3339, UTC, milliseconds,
/// `Z` (`2026-11-25T03:00:00.000Z`).
pub fn rfc3339_ms(ms: i64) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(at) => at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => ms.to_string(),
    }
}

/// The task id of the fire of `name` at `ms`.
pub fn fire_id(name: &str, ms: i64) -> String {
    format!("{name}@{}", rfc3339_ms(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    fn cron(expr: &str, zone: &str) -> FireTimes {
        FireTimes::cron(expr, zone).unwrap()
    }

    /// The fire times after `from`, `n` of them, in RFC 3339.
    fn fires(times: &FireTimes, from: &str, n: usize) -> Vec<String> {
        let mut at = ms(from);
        (0..n)
            .map(|_| {
                at = times.next_after(at).unwrap();
                rfc3339_ms(at)
            })
            .collect()
    }

    #[test]
    fn a_time_skipped_by_spring_forward_fires_at_the_first_instant_after_it() {
        // New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z).
        let daily = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            fires(&daily, "2026-03-07T12:00:00Z", 3),
            [
                "2026-03-08T07:00:00.000Z", // 02:30 does not exist: 03:00 EDT
                "2026-03-09T06:30:00.000Z", // 02:30 EDT
                "2026-03-10T06:30:00.000Z",
            ]
        );
    }

    #[test]
    fn several_skipped_times_fire_once_after_the_change() {
        let quarterly = cron("*/15 * * * *", "America/New_York");
        assert_eq!(
            fires(&quarterly, "2026-03-08T06:40:00Z", 4),
            [
                "2026-03-08T06:45:00.000Z", // 01:45 EST
                "2026-03-08T07:00:00.000Z", // 02:00-02:45 skipped: 03:00 EDT, once
                "2026-03-08T07:15:00.000Z", // 03:15 EDT
                "2026-03-08T07:30:00.000Z",
            ]
        );
    }

    #[test]
    fn a_time_that_occurs_twice_fires_once() {
        // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST.
        let daily = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            fires(&daily, "2026-10-31T12:00:00Z", 2),
            ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]
        );
        let half_hourly = cron("*/30 * * * *", "America/New_York");
        assert_eq!(
            fires(&half_hourly, "2026-11-01T04:50:00Z", 4),
            [
                "2026-11-01T05:00:00.000Z", // 01:00 EDT
                "2026-11-01T05:30:00.000Z", // 01:30 EDT
                // 01:00 and 01:30 EST are the same wall-clock times again: nothing
                "2026-11-01T07:00:00.000Z", // 02:00 EST
                "2026-11-01T07:30:00.000Z",
            ]
        );
        // Seen from inside the repeated hour, the next fire is after it.
        assert_eq!(
            fires(&half_hourly, "2026-11-01T06:10:00Z", 1),
            ["2026-11-01T07:00:00.000Z"]
        );
    }

    #[test]
    fn a_zone_with_a_fractional_offset() {
        // Kolkata is UTC+05:30, Kathmandu UTC+05:45.
        assert_eq!(
            fires(
                &cron("0 9 * * *", "Asia/Kolkata"),
                "2026-11-25T00:00:00Z",
                1
            ),
            ["2026-11-25T03:30:00.000Z"]
        );
        assert_eq!(
            fires(
                &cron("0 9 * * *", "Asia/Kathmandu"),
                "2026-11-25T00:00:00Z",
                1
            ),
            ["2026-11-25T03:15:00.000Z"]
        );
    }

    #[test]
    fn six_fields_names_and_nicknames() {
        assert_eq!(
            fires(&cron("*/20 * * * * *", ""), "2026-11-25T10:00:05Z", 3),
            [
                "2026-11-25T10:00:20.000Z",
                "2026-11-25T10:00:40.000Z",
                "2026-11-25T10:01:00.000Z"
            ]
        );
        // 2026-11-25 is a Wednesday.
        assert_eq!(
            fires(
                &cron("0 8 * JAN,NOV MON-FRI", ""),
                "2026-11-27T09:00:00Z",
                2
            ),
            ["2026-11-30T08:00:00.000Z", "2027-01-01T08:00:00.000Z"]
        );
        assert_eq!(
            fires(&cron("@daily", "Europe/Paris"), "2026-11-25T10:00:00Z", 1),
            ["2026-11-25T23:00:00.000Z"]
        );
        assert_eq!(
            fires(&cron("@hourly", ""), "2026-11-25T10:00:00Z", 1),
            ["2026-11-25T11:00:00.000Z"]
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_together_match_either() {
        // The 1st, or any Monday (Vixie cron's rule): November 2026 starts on a Sunday.
        assert_eq!(
            fires(&cron("0 0 1 * MON", ""), "2026-10-31T12:00:00Z", 3),
            [
                "2026-11-01T00:00:00.000Z",
                "2026-11-02T00:00:00.000Z",
                "2026-11-09T00:00:00.000Z"
            ]
        );
    }

    #[test]
    fn every_fires_on_the_multiples_of_its_period() {
        let minute = FireTimes::Every(60_000);
        assert_eq!(
            fires(&minute, "2026-11-25T10:00:00Z", 2),
            ["2026-11-25T10:01:00.000Z", "2026-11-25T10:02:00.000Z"]
        );
        assert_eq!(
            fires(&FireTimes::Every(1500), "2026-11-25T10:00:00.200Z", 1),
            ["2026-11-25T10:00:01.500Z"]
        );
    }

    #[test]
    fn bad_expressions_and_zones_name_their_field() {
        for (expr, zone, field) in [
            ("* * *", "", "cron"),
            ("61 * * * *", "", "cron"),
            ("* * * * * * * *", "", "cron"),
            ("0 0 30 2 *", "", "cron"),
            ("@sometimes", "", "cron"),
            ("* * * * *", "Mars/Olympus_Mons", "time_zone"),
        ] {
            let err = FireTimes::cron(expr, zone).unwrap_err();
            assert_eq!(err.0, field, "{expr:?} {zone:?}: {}", err.1);
        }
    }

    #[test]
    fn ids_spell_the_fire_time_in_utc_milliseconds() {
        assert_eq!(
            fire_id("nightly", ms("2026-11-25T03:00:00Z")),
            "nightly@2026-11-25T03:00:00.000Z"
        );
        assert_eq!(
            rfc3339_ms(ms("2026-11-25T03:00:00.007Z")),
            "2026-11-25T03:00:00.007Z"
        );
    }
}
