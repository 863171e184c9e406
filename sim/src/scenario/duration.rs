//! Durations in scenario files, written as admins write them everywhere else (`30s`, `2h`, `7d`).

use std::fmt;

use gpufair_core::duration::parse_duration;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A non-negative number of seconds read from a duration string.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Seconds(pub f64);

impl Seconds {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SecondsVisitor)
    }
}

struct SecondsVisitor;

impl Visitor<'_> for SecondsVisitor {
    type Value = Seconds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(gpufair_core::duration::DURATION_FORMS)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Seconds, E> {
        parse_duration(value).map(Seconds).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Seconds, E> {
        // A bare 0 is unambiguous; any other bare number could mean seconds or minutes.
        if value == 0 {
            Ok(Seconds(0.0))
        } else {
            Err(E::custom(format!(
                "invalid duration {value}: expected {}",
                gpufair_core::duration::DURATION_FORMS
            )))
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Seconds, E> {
        Err(E::custom(format!(
            "invalid duration {value}: expected {}",
            gpufair_core::duration::DURATION_FORMS
        )))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Seconds, E> {
        Err(E::custom(format!(
            "invalid duration {value}: expected {}",
            gpufair_core::duration::DURATION_FORMS
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_units_and_refuses_bare_numbers() {
        let ok: Seconds = serde_yaml::from_str("1h30m").unwrap();
        assert_eq!(ok, Seconds(5400.0));
        let zero: Seconds = serde_yaml::from_str("0").unwrap();
        assert_eq!(zero, Seconds(0.0));
        let err = serde_yaml::from_str::<Seconds>("60")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid duration 60"), "{err}");
        let err = serde_yaml::from_str::<Seconds>("3x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"3x\""), "{err}");
    }
}
