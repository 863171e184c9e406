//! Human durations in config files (`500ms`, `30s`, `5m`, `1h30m`).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The forms accepted, for error messages.
pub const ACCEPTED_FORMS: &str =
    "a duration such as 250ms, 30s, 5m, 1h or 1h30m (units ms, s, m, h), or a number of seconds";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {input:?}: expected {ACCEPTED_FORMS}")]
pub struct DurationError {
    pub input: String,
}

/// Parses a sequence of `<integer><unit>` terms; a bare integer is seconds.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_string(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(err());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let term = match unit {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value.checked_mul(60).ok_or_else(err)?),
            "h" => Duration::from_secs(value.checked_mul(3600).ok_or_else(err)?),
            _ => return Err(err()),
        };
        total = total.checked_add(term).ok_or_else(err)?;
    }
    Ok(total)
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

/// Serde adapter: a duration given as a string (`5m`) or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)
            .map_err(|_| serde::de::Error::custom(format!("expected {ACCEPTED_FORMS}")))?
        {
            Raw::Secs(secs) => Ok(HumanDuration(Duration::from_secs(secs))),
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
        assert_eq!(parse("42"), Ok(Duration::from_secs(42)));
    }

    #[test]
    fn rejects_junk_with_the_accepted_forms() {
        for bad in ["", "m", "5x", "5 m", "-5s", "1.5s", "99999999999999999999h"] {
            let err = parse(bad).expect_err(bad);
            assert!(err.to_string().contains("250ms, 30s, 5m"), "{err}");
        }
    }
}
