//! Kubernetes times in and out: RFC 3339 text and Unix seconds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A Kubernetes time as RFC 3339 in UTC, to the second.
pub fn timestamp(time: &Time) -> String {
    format!("{:.0}", time.0)
}

/// Unix seconds of an RFC 3339 time; `None` if it does not parse.
pub fn seconds(text: &str) -> Option<f64> {
    let at: k8s_openapi::jiff::Timestamp = text.parse().ok()?;
    Some(unix(&Time(at)))
}

/// Unix seconds of a Kubernetes time.
pub fn unix(time: &Time) -> f64 {
    time.0.as_millisecond() as f64 / 1000.0
}

/// Now, Unix seconds.
pub fn now() -> f64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_text() {
        let at = seconds("2026-12-02T02:40:00.5Z").unwrap();
        assert_eq!(at, 1_796_179_200.5);
        let time = Time(k8s_openapi::jiff::Timestamp::from_second(1_796_179_200).unwrap());
        assert_eq!(timestamp(&time), "2026-12-02T02:40:00Z");
        assert_eq!(seconds("yesterday"), None);
    }
}
