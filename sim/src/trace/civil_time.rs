//! `YYYY-MM-DD HH:MM:SS` timestamps as seconds, without a time zone.
//!
//! Philly's timestamps are local wall-clock times with no zone; they are read as naive times,
//! so one hour may be doubled or skipped around a daylight-saving change. Only differences
//! between arrivals matter to the simulation.

/// Seconds since 1970-01-01 00:00:00 of a naive civil time, or `None` if malformed.
pub fn parse_naive_seconds(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    if bytes.len() != 19 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b' ' {
        return None;
    }
    if bytes[13] != b':' || bytes[16] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = &text[range];
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second) as f64)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 in the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_naive_seconds("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(
            parse_naive_seconds("2017-09-04 00:00:01"),
            Some(1_504_483_201.0)
        );
        assert_eq!(
            parse_naive_seconds("2000-02-29 12:00:00"),
            Some(951_825_600.0)
        );
    }

    #[test]
    fn malformed_is_none() {
        for bad in [
            "2017-13-01 00:00:00",
            "2017-02-29 00:00:00",
            "2017-1-01 00:00:00",
            "2017-01-01T00:00:00",
            "2017-01-01 24:00:00",
            "",
        ] {
            assert_eq!(parse_naive_seconds(bad), None, "{bad}");
        }
    }
}
