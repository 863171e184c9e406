//! Human durations in config files (`500ms`, `30s`, `5m`, `1h30m`), read with gpufair-core's
//! one duration grammar so the device plugin accepts exactly what every other gpufair file does.

use std::time::Duration;

use gpufair_core::duration::{DURATION_FORMS, parse_std_duration};
use serde::{Deserialize, Deserializer};

pub use gpufair_core::duration::DurationError;

/// Parses a duration with core's grammar.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    parse_std_duration(input)
}

/// Deserialises YAML, prefixing errors with the path of the offending key (`sharing.replicas:`),
/// which serde_yaml leaves out for errors raised by custom deserialisers.
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text)).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        if path == "." || inner.starts_with(&format!("{path}:")) {
            inner
        } else {
            format!("{path}: {inner}")
        }
    })
}

/// Serde adapter: a duration given as a string (`5m`); of bare numbers only `0` is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(serde_yaml::Number),
            Text(String),
        }
        match Raw::deserialize(deserializer)
            .map_err(|_| serde::de::Error::custom(format!("expected {DURATION_FORMS}")))?
        {
            // YAML reads `0` as a number: the one bare number the grammar accepts.
            Raw::Number(number) => parse(&number.to_string())
                .map(HumanDuration)
                .map_err(serde::de::Error::custom),
            Raw::Text(text) => parse(&text)
                .map(HumanDuration)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1m500ms"), Ok(Duration::from_millis(60_500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86400)));
    }

    #[test]
    fn rejects_junk_with_the_accepted_forms() {
        for bad in ["", "m", "5x", "5 m", "-5s", "42", "99999999999999999999h"] {
            let err = parse(bad).expect_err(bad);
            assert!(err.to_string().contains("250ms, 30s, 10m"), "{err}");
        }
    }

    #[test]
    fn yaml_numbers_other_than_zero_are_refused() {
        let zero: HumanDuration = serde_yaml::from_str("0").unwrap();
        assert_eq!(zero, HumanDuration(Duration::ZERO));
        let text: HumanDuration = serde_yaml::from_str("250ms").unwrap();
        assert_eq!(text, HumanDuration(Duration::from_millis(250)));
        for bad in ["60", "1.5", "-1"] {
            let err = serde_yaml::from_str::<HumanDuration>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("ms, s, m, h or d"), "{bad}: {err}");
        }
    }
}
