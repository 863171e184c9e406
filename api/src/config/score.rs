use gpufair_core::params::{
    MAX_RELEASE_SCORE_WEIGHT as MAX_WEIGHT, RELEASE_SCORE_WEIGHT_FORMS as WEIGHT_FORMS,
    ReleaseScoreParams,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ConfigError, duration_key, ranged};

/// The `releaseScore` section: how workloads of one tier are ordered inside a queue. Each part
/// is a number in [0, 1] times its weight; the highest sum goes first, ties by age, then UID.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ReleaseScoreConfig {
    /// Weight of `urgency-level` (high 1, medium 0.5, low 0).
    pub urgency: f64,
    /// Weight of the `user-tier` annotation (premium 1, standard 0.5, basic 0).
    pub user_tier: f64,
    /// Weight of deadline slack (1 at or past the deadline, 0.5 at `deadlineScale` before it).
    pub deadline: f64,
    /// Weight of time waited (0 on arrival, 0.5 after `waitScale`).
    pub waited: f64,
    /// Slack at which the deadline part is one half, e.g. `24h`.
    pub deadline_scale: String,
    /// Time waited at which the waited part is one half, e.g. `1h`.
    pub wait_scale: String,
}

impl Default for ReleaseScoreConfig {
    fn default() -> Self {
        let params = ReleaseScoreParams::default();
        Self {
            urgency: params.urgency,
            user_tier: params.user_tier,
            deadline: params.deadline,
            waited: params.waited,
            deadline_scale: "24h".into(),
            wait_scale: "1h".into(),
        }
    }
}

fn positive_duration(key: &'static str, text: &str) -> Result<f64, ConfigError> {
    let seconds = duration_key(key, text)?;
    if seconds > 0.0 {
        Ok(seconds)
    } else {
        Err(ConfigError::out_of_range(
            key,
            format!("{text:?}"),
            "a duration > 0, e.g. 1h",
        ))
    }
}

impl ReleaseScoreConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.to_params().map(|_| ())
    }

    /// The validated weights and scales.
    pub fn to_params(&self) -> Result<ReleaseScoreParams, ConfigError> {
        let weight = |key, value| ranged(key, value, 0.0, MAX_WEIGHT, WEIGHT_FORMS);
        Ok(ReleaseScoreParams {
            urgency: weight("releaseScore.urgency", self.urgency)?,
            user_tier: weight("releaseScore.userTier", self.user_tier)?,
            deadline: weight("releaseScore.deadline", self.deadline)?,
            waited: weight("releaseScore.waited", self.waited)?,
            deadline_scale_s: positive_duration(
                "releaseScore.deadlineScale",
                &self.deadline_scale,
            )?,
            wait_scale_s: positive_duration("releaseScore.waitScale", &self.wait_scale)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_core_defaults() {
        assert_eq!(
            ReleaseScoreConfig::default().to_params().unwrap(),
            ReleaseScoreParams::default()
        );
    }

    #[test]
    fn bad_weights_and_scales_name_the_key() {
        let cases = [
            (
                ReleaseScoreConfig {
                    urgency: -1.0,
                    ..ReleaseScoreConfig::default()
                },
                "releaseScore.urgency",
            ),
            (
                ReleaseScoreConfig {
                    user_tier: f64::NAN,
                    ..ReleaseScoreConfig::default()
                },
                "releaseScore.userTier",
            ),
            (
                ReleaseScoreConfig {
                    waited: 1e9,
                    ..ReleaseScoreConfig::default()
                },
                "releaseScore.waited",
            ),
            (
                ReleaseScoreConfig {
                    deadline_scale: "0s".into(),
                    ..ReleaseScoreConfig::default()
                },
                "releaseScore.deadlineScale",
            ),
            (
                ReleaseScoreConfig {
                    wait_scale: "soon".into(),
                    ..ReleaseScoreConfig::default()
                },
                "releaseScore.waitScale",
            ),
        ];
        for (config, key) in cases {
            let err = config.to_params().unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }
}
