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
    #[error(
        "config key fairshare.pools.{pool}.{key} = {value} is out of range: expected {expected}"
    )]
    PoolOutOfRange {
        pool: String,
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("config key fairshare.pools has a pool named {name:?}: expected {expected}")]
    BadPoolName {
        name: String,
        expected: &'static str,
    },
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

/// Parses a duration-valued key, naming it on failure.
pub(crate) fn duration_key(key: &'static str, text: &str) -> Result<f64, ConfigError> {
    gpufair_core::duration::parse_duration(text).map_err(|_| {
        ConfigError::out_of_range(
            key,
            format!("{text:?}"),
            gpufair_core::duration::DURATION_FORMS,
        )
    })
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
