//! `google.protobuf.Duration` and `Timestamp` on the server's side: fields validated
//! into `std` durations and Unix milliseconds (errors name the field), and Unix
//! milliseconds back into timestamps. The only place the domain's plain times meet the
//! protobuf types.

use std::time::Duration;

use crate::error::{Error, Result};

/// Bounds of one duration field.
#[derive(Clone, Copy, Debug)]
pub struct DurationRule {
    /// Used when the field is unset.
    pub default: Duration,
    /// The smallest allowed value; `Duration::ZERO` lets zero through.
    pub min: Duration,
    /// The largest allowed value (inclusive).
    pub max: Duration,
}

/// A `google.protobuf.Duration` field: unset is the default, negative is an error,
/// and so is anything outside `rule`.
pub fn duration(
    field: &'static str,
    value: Option<&prost_types::Duration>,
    rule: DurationRule,
) -> Result<Duration> {
    let Some(value) = value else {
        return Ok(rule.default);
    };
    if value.seconds < 0 || value.nanos < 0 {
        return Err(Error::invalid(field, "must not be negative"));
    }
    if value.nanos >= 1_000_000_000 {
        return Err(Error::invalid(field, "nanos must be below 1e9"));
    }
    let value = Duration::new(value.seconds as u64, value.nanos as u32);
    if value < rule.min || value > rule.max {
        return Err(Error::invalid(
            field,
            format!(
                "must be from {:?} to {:?}, got {value:?}",
                rule.min, rule.max
            ),
        ));
    }
    Ok(value)
}

/// The earliest and latest instants a `google.protobuf.Timestamp` may hold:
/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z, in Unix seconds. Outside
/// them many clients cannot print or convert the value (Python's `ToDatetime()`, JSON).
pub const TIMESTAMP_SECONDS: std::ops::RangeInclusive<i64> = -62_135_596_800..=253_402_300_799;

/// A `google.protobuf.Timestamp` field within the range the type allows, in Unix ms.
pub fn timestamp(field: &'static str, value: &prost_types::Timestamp) -> Result<i64> {
    if !(0..1_000_000_000).contains(&value.nanos) {
        return Err(Error::invalid(field, "nanos must be from 0 to 999999999"));
    }
    if !TIMESTAMP_SECONDS.contains(&value.seconds) {
        return Err(Error::invalid(
            field,
            format!(
                "must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z, got {} s from 1970",
                value.seconds
            ),
        ));
    }
    Ok(ms_from_timestamp(value))
}

/// A `google.protobuf.Timestamp` for Unix milliseconds.
pub fn timestamp_from_ms(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// Unix milliseconds of a timestamp (rounded down).
pub fn ms_from_timestamp(ts: &prost_types::Timestamp) -> i64 {
    ts.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(ts.nanos) / 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_must_lie_in_years_1_to_9999() {
        let at = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(
            timestamp("due_at", &at(253_402_300_799, 999_999_999)),
            Ok(253_402_300_799_999)
        );
        assert!(timestamp("due_at", &at(-62_135_596_800, 0)).is_ok());
        assert!(timestamp("due_at", &at(253_402_300_800, 0)).is_err());
        assert!(timestamp("due_at", &at(-62_135_596_801, 0)).is_err());
        assert!(timestamp("due_at", &at(0, -1)).is_err());
    }

    #[test]
    fn durations_take_defaults_and_refuse_negatives() {
        let rule = DurationRule {
            default: Duration::from_secs(15),
            min: Duration::from_millis(1),
            max: Duration::from_secs(86_400),
        };
        assert_eq!(duration("ttl", None, rule), Ok(Duration::from_secs(15)));
        let negative = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert!(duration("ttl", Some(&negative), rule).is_err());
        let zero = prost_types::Duration {
            seconds: 0,
            nanos: 0,
        };
        assert!(duration("ttl", Some(&zero), rule).is_err());
        let day = prost_types::Duration {
            seconds: 86_400,
            nanos: 0,
        };
        assert_eq!(
            duration("ttl", Some(&day), rule),
            Ok(Duration::from_secs(86_400))
        );
    }
}
