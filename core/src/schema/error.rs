//! What is wrong with a value of the shared blocks: the key's path and the accepted forms.

use crate::duration::{DURATION_FORMS, parse_duration};

/// A value of `fairshare`, `preemption` or `releaseScore` that is refused, naming its key by
/// path (`fairshare.pools.<pool>.k`) and the forms accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("{key} = {value} is out of range: expected {expected}")]
    OutOfRange {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("fairshare.pools has a pool named {name:?}: expected {expected}")]
    BadPoolName {
        name: String,
        expected: &'static str,
    },
}

impl SchemaError {
    pub(crate) fn out_of_range(
        key: impl Into<String>,
        value: impl ToString,
        expected: &'static str,
    ) -> Self {
        Self::OutOfRange {
            key: key.into(),
            value: value.to_string(),
            expected,
        }
    }

    /// The path of the key at fault, e.g. `fairshare.decay` or `fairshare.pools`.
    pub fn key(&self) -> &str {
        match self {
            Self::OutOfRange { key, .. } => key,
            Self::BadPoolName { .. } => "fairshare.pools",
        }
    }

    /// What is wrong and what is accepted, without the key.
    pub fn problem(&self) -> String {
        match self {
            Self::OutOfRange {
                value, expected, ..
            } => format!("{value} is out of range: expected {expected}"),
            Self::BadPoolName { name, expected } => {
                format!("a pool named {name:?}: expected {expected}")
            }
        }
    }
}

/// Parses a duration-valued key, naming it on failure.
pub(crate) fn duration_key(key: &str, text: &str) -> Result<f64, SchemaError> {
    parse_duration(text)
        .map_err(|_| SchemaError::out_of_range(key, format!("{text:?}"), DURATION_FORMS))
}

/// Checks a finite number lies in `[min, max]`.
pub(crate) fn ranged(
    key: &str,
    value: f64,
    min: f64,
    max: f64,
    expected: &'static str,
) -> Result<f64, SchemaError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(value)
    } else {
        Err(SchemaError::out_of_range(key, value, expected))
    }
}
