/// A configuration file gpufair refuses, with enough detail to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{source_name}: {message}")]
    Parse {
        source_name: String,
        message: String,
    },
    #[error("config key {key} = {value} is out of range: expected {expected}")]
    OutOfRange {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    /// A value of `fairshare`, `preemption` or `releaseScore`, the blocks core's schema checks.
    #[error("config key {0}")]
    Schema(#[from] gpufair_core::schema::SchemaError),
}

impl ConfigError {
    pub(crate) fn out_of_range(
        key: &'static str,
        value: impl ToString,
        expected: &'static str,
    ) -> Self {
        Self::OutOfRange {
            key,
            value: value.to_string(),
            expected,
        }
    }
}

/// Checks a finite number lies in `[min, max]`.
pub(crate) fn ranged(
    key: &'static str,
    value: f64,
    min: f64,
    max: f64,
    expected: &'static str,
) -> Result<f64, ConfigError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(value)
    } else {
        Err(ConfigError::out_of_range(key, value, expected))
    }
}
