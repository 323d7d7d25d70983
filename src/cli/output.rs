//! How client commands print: aligned tables for people, one JSON object per line for
//! scripts, and instants as RFC 3339 in UTC (parsed back for `enqueue --at`). The date
//! arithmetic is the proleptic Gregorian calendar's (days from 1970-01-01), which is
//! all RFC 3339 needs; a date crate would cost more to build than these lines.

use prost_types::Timestamp;

/// Prints `rows` under `header`, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (at, cell) in row.iter().enumerate() {
            widths[at] = widths[at].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (at, cell) in row.iter().enumerate() {
            if at + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[at] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Unix milliseconds of a timestamp.
pub fn unix_ms(at: &Timestamp) -> i64 {
    at.seconds * 1000 + i64::from(at.nanos) / 1_000_000
}

/// `2026-11-23T19:10:44.123Z`, or `-` for none.
pub fn rfc3339(at: Option<&Timestamp>) -> String {
    let Some(at) = at else {
        return "-".to_owned();
    };
    let ms = unix_ms(at);
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, frac) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{frac:03}Z")
}

/// Parses RFC 3339 (`2026-11-23T19:10:44Z`, fractions and `+01:00` offsets allowed).
pub fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
    let bad = || format!("`{text}` is not an RFC 3339 time like 2026-11-23T19:10:44Z");
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return Err(bad());
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return Err(bad());
    }
    let number = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = text.get(range).ok_or_else(bad)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse().map_err(|_| bad())
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(bad());
    }
    if second > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    let mut nanos = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let kept = &fraction[..digits.min(9)];
        nanos = kept.parse::<i64>().map_err(|_| bad())? * 10i64.pow(9 - kept.len() as u32);
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let (h, m) = (number_at(rest, 1..3)?, number_at(rest, 4..6)?);
            sign * (h * 3600 + m * 60)
        }
        _ => return Err(bad()),
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Ok(Timestamp {
        seconds,
        nanos: nanos as i32,
    })
}

fn number_at(text: &str, range: std::ops::Range<usize>) -> Result<i64, String> {
    text.get(range)
        .filter(|part| part.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|part| part.parse().ok())
        .ok_or_else(|| format!("`{text}` is not an offset like +01:00"))
}

/// Days since 1970-01-01 of a Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The Gregorian date of a day count since 1970-01-01 (the inverse of the above).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A payload for a person: the text if it is UTF-8 (control characters escaped,
/// shortened), else its size.
pub fn payload_preview(payload: &[u8]) -> String {
    match std::str::from_utf8(payload) {
        Ok(text) => {
            let escaped = text.escape_debug().to_string();
            let mut shown: String = escaped.chars().take(40).collect();
            if shown.len() < escaped.len() {
                shown.push('…');
            }
            shown
        }
        Err(_) => format!("<{} bytes>", payload.len()),
    }
}

/// A payload for a script: `"payload"` as text when it is UTF-8, else
/// `"payload_base64"`.
pub fn payload_json(payload: &[u8]) -> (&'static str, serde_json::Value) {
    use base64::Engine;
    match std::str::from_utf8(payload) {
        Ok(text) => ("payload", text.into()),
        Err(_) => (
            "payload_base64",
            base64::engine::general_purpose::STANDARD
                .encode(payload)
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_prints_and_parses_back_across_eras_and_offsets() {
        for ms in [
            0i64,
            1_700_000_000_123,
            951_782_400_000,
            -86_400_000,
            4_102_444_800_999,
        ] {
            let at = Timestamp {
                seconds: ms.div_euclid(1000),
                nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
            };
            let text = rfc3339(Some(&at));
            assert_eq!(parse_rfc3339(&text), Ok(at), "{text}");
        }
        assert_eq!(
            rfc3339(Some(&Timestamp {
                seconds: 951_782_400,
                nanos: 0
            })),
            "2000-02-29T00:00:00.000Z"
        );
        let offset = parse_rfc3339("2026-11-23T20:10:44+01:00").unwrap();
        assert_eq!(offset, parse_rfc3339("2026-11-23T19:10:44Z").unwrap());
        for bad in [
            "2026-11-23",
            "2026-13-01T00:00:00Z",
            "2026-11-23T19:10:44",
            "x",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tables_align_every_column_to_its_widest_cell() {
        let out = table(
            &["QUEUE", "READY"],
            &[
                vec!["a".into(), "1".into()],
                vec!["longer".into(), "22".into()],
            ],
        );
        assert_eq!(out, "QUEUE   READY\na       1\nlonger  22\n");
    }
}
