//! Human durations as admins write them: `250ms`, `30s`, `10m`, `2h`, `7d`, `1h30m`, `1.5h`.
//!
//! This is the one duration grammar of every gpufair file and flag (webhook, controller, device
//! plugin, certificates, simulator), so a value that works in one place works in all of them.
//! A duration is one or more `<number><unit>` terms, summed; the number is decimal digits with
//! an optional fraction, the unit `ms`, `s`, `m`, `h` or `d`. A bare `0` is accepted because "no
//! minimum run time" is commonly written that way; any other bare number is refused, since `60`
//! could mean seconds or minutes and guessing would be a silent surprise.

use std::fmt;
use std::time::Duration;

/// The forms accepted, quoted in every error message.
pub const DURATION_FORMS: &str = "a number followed by a unit ms, s, m, h or d, \
     e.g. 250ms, 30s, 10m, 2h, 7d, 1h30m or 1.5h (a bare 0 also means none)";

/// A duration string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {value:?}: expected {DURATION_FORMS}")]
pub struct DurationError {
    pub value: String,
}

/// Parses a duration into seconds.
pub fn parse_duration(text: &str) -> Result<f64, DurationError> {
    let fail = || DurationError {
        value: text.to_string(),
    };
    let trimmed = text.trim();
    if trimmed == "0" {
        return Ok(0.0);
    }
    if trimmed.is_empty() {
        return Err(fail());
    }
    let mut total = 0.0_f64;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(fail)?;
        if number_len == 0 {
            return Err(fail());
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| fail())?;
        rest = &rest[number_len..];
        // `ms` before `m`: a minute term is always followed by a digit or the end, never `s`.
        let (unit_len, scale) = if rest.starts_with("ms") {
            (2, 0.001)
        } else {
            match rest.as_bytes().first() {
                Some(b's') => (1, 1.0),
                Some(b'm') => (1, 60.0),
                Some(b'h') => (1, 3600.0),
                Some(b'd') => (1, 86400.0),
                _ => return Err(fail()),
            }
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    if total.is_finite() {
        Ok(total)
    } else {
        Err(fail())
    }
}

/// Parses a duration into a `std::time::Duration`, for timers and intervals. Refuses what
/// `Duration` cannot hold (far beyond any sensible setting) with the same error.
pub fn parse_std_duration(text: &str) -> Result<Duration, DurationError> {
    let seconds = parse_duration(text)?;
    // Rounded to whole nanoseconds, so `600ms` is exactly 600 ms although 0.6 is not exact in
    // binary; beyond u64 nanoseconds (584 years) is refused.
    let nanos = (seconds * 1e9).round();
    if nanos.is_finite() && nanos < u64::MAX as f64 {
        Ok(Duration::from_nanos(nanos as u64))
    } else {
        Err(DurationError {
            value: text.to_string(),
        })
    }
}

/// Formats seconds the way they are parsed: the largest units first, e.g. `1h30m`, `168h` stays
/// `7d`, zero is `0s`. Fractions of a second are rounded to whole seconds.
pub fn format_duration(seconds: f64) -> String {
    FormattedDuration(seconds).to_string()
}

struct FormattedDuration(f64);

impl fmt::Display for FormattedDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.is_finite() || self.0 < 0.5 {
            return f.write_str("0s");
        }
        let mut left = self.0.round() as u64;
        for (unit, size) in [("d", 86400_u64), ("h", 3600), ("m", 60), ("s", 1)] {
            if left >= size {
                write!(f, "{}{unit}", left / size)?;
                left %= size;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_units() {
        assert_eq!(parse_duration("30s"), Ok(30.0));
        assert_eq!(parse_duration("10m"), Ok(600.0));
        assert_eq!(parse_duration("168h"), Ok(604800.0));
        assert_eq!(parse_duration("7d"), Ok(604800.0));
        assert_eq!(parse_duration("1h30m"), Ok(5400.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        assert_eq!(parse_duration("0"), Ok(0.0));
        assert_eq!(parse_duration("0s"), Ok(0.0));
        assert_eq!(parse_duration("250ms"), Ok(0.25));
        assert_eq!(parse_duration("1m500ms"), Ok(60.5));
        assert_eq!(parse_duration("2m30s"), Ok(150.0));
    }

    #[test]
    fn std_durations_are_exact_for_milliseconds() {
        assert_eq!(parse_std_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_std_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_std_duration("600ms"), Ok(Duration::from_millis(600)));
        assert_eq!(parse_std_duration("0.2s"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_std_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_std_duration("0"), Ok(Duration::ZERO));
        let huge = "99999999999999999999h";
        assert_eq!(
            parse_std_duration(huge),
            Err(DurationError {
                value: huge.to_string()
            })
        );
    }

    #[test]
    fn rejects_ambiguous_or_malformed_text_naming_the_value() {
        for bad in [
            "", "60", "h", "2x", "1..5h", "-1h", "2 h", "1h-", "5mss", "1sm", "ms", "1µs", "1e3s",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains("ms, s, m, h or d"), "{err}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for text in ["0s", "45s", "10m", "2h", "7d", "1d2h3m4s"] {
            let secs = parse_duration(text).unwrap();
            assert_eq!(format_duration(secs), text);
            assert_eq!(parse_duration(&format_duration(secs)).unwrap(), secs);
        }
    }
}
