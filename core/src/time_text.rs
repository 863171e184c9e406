//! Times and durations as people read them: "12 min", "12 min ago", "in 3 min",
//! "2026-12-02T02:40:00Z". Every message a person reads (wait reasons, Events, logs, the kubectl
//! plugin) formats its times here, never as raw seconds since the epoch.

/// A duration in the largest units that keep it short: "40 s", "12 min", "2 h 5 min",
/// "3 d 4 h". Rounded to whole seconds; negative or non-finite durations read as "0 s".
pub fn duration(seconds: f64) -> String {
    let total = if seconds.is_finite() && seconds > 0.0 {
        // Whole seconds; durations beyond u64 are not times anyone waits.
        seconds.round().min(u64::MAX as f64) as u64
    } else {
        0
    };
    const MINUTE: u64 = 60;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    let (days, hours, minutes, secs) = (
        total / DAY,
        total % DAY / HOUR,
        total % HOUR / MINUTE,
        total % MINUTE,
    );
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{secs} s"),
        (0, 0, m) if m < 10 && secs > 0 => format!("{m} min {secs} s"),
        (0, 0, m) => format!("{m} min"),
        (0, h, 0) => format!("{h} h"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, 0, _) => format!("{d} d"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

/// How long ago something happened: "12 min ago"; "just now" under a second.
pub fn ago(seconds: f64) -> String {
    if !(seconds.is_finite() && seconds >= 0.5) {
        return "just now".to_string();
    }
    format!("{} ago", duration(seconds))
}

/// How long until something happens: "in 3 min"; "now" under a second.
pub fn from_now(seconds: f64) -> String {
    if !(seconds.is_finite() && seconds >= 0.5) {
        return "now".to_string();
    }
    format!("in {}", duration(seconds))
}

/// Seconds since the Unix epoch as RFC 3339 in UTC, to the second: "2026-12-02T02:40:00Z".
/// `None` for a time jiff cannot represent (non-finite, or beyond year 9999).
pub fn rfc3339(unix_s: f64) -> Option<String> {
    if !unix_s.is_finite() {
        return None;
    }
    let whole = unix_s.round();
    if whole < i64::MIN as f64 || whole > i64::MAX as f64 {
        return None;
    }
    let at = jiff::Timestamp::from_second(whole as i64).ok()?;
    Some(format!("{at:.0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_the_largest_units_that_keep_them_short() {
        let cases = [
            (0.0, "0 s"),
            (0.4, "0 s"),
            (40.0, "40 s"),
            (59.6, "1 min"),
            (90.0, "1 min 30 s"),
            (600.0, "10 min"),
            (725.0, "12 min"),
            (3_600.0, "1 h"),
            (7_500.0, "2 h 5 min"),
            (86_400.0, "1 d"),
            (273_600.0, "3 d 4 h"),
            (-5.0, "0 s"),
            (f64::NAN, "0 s"),
            (f64::INFINITY, "0 s"),
        ];
        for (seconds, text) in cases {
            assert_eq!(duration(seconds), text, "{seconds}");
        }
    }

    #[test]
    fn relative_times_read_ago_and_from_now() {
        assert_eq!(ago(725.0), "12 min ago");
        assert_eq!(ago(0.2), "just now");
        assert_eq!(ago(-3.0), "just now");
        assert_eq!(from_now(180.0), "in 3 min");
        assert_eq!(from_now(0.0), "now");
    }

    #[test]
    fn epoch_seconds_read_as_rfc3339_utc() {
        assert_eq!(
            rfc3339(1_796_032_402.0).as_deref(),
            Some("2026-11-30T09:53:22Z")
        );
        assert_eq!(rfc3339(0.4).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(rfc3339(f64::NAN), None);
        assert_eq!(rfc3339(1e20), None);
    }
}
