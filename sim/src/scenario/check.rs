//! The errors a scenario file's checks raise, naming the file and the key.

use std::path::Path;

use super::ScenarioError;

/// Builds `Invalid` errors for one file.
pub struct Check<'a> {
    pub path: &'a Path,
}

impl Check<'_> {
    pub fn fail(&self, key: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.path.to_path_buf(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub fn positive(&self, key: &str, value: f64) -> Result<f64, ScenarioError> {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(self.fail(key, format!("expected a number > 0, found {value}")))
        }
    }

    pub fn non_negative(&self, key: &str, value: f64) -> Result<f64, ScenarioError> {
        if value.is_finite() && value >= 0.0 {
            Ok(value)
        } else {
            Err(self.fail(key, format!("expected a number ≥ 0, found {value}")))
        }
    }

    pub fn fraction(&self, key: &str, value: f64) -> Result<f64, ScenarioError> {
        if (0.0..=1.0).contains(&value) {
            Ok(value)
        } else {
            Err(self.fail(key, format!("expected a number from 0 to 1, found {value}")))
        }
    }
}
