//! The `releaseScore` block: how workloads of one tier are ordered inside a queue.

use serde::{Deserialize, Serialize};

use super::error::{SchemaError, duration_key, ranged};
use crate::duration::format_duration;
use crate::params::{MAX_RELEASE_SCORE_WEIGHT, RELEASE_SCORE_WEIGHT_FORMS, ReleaseScoreParams};

/// The `releaseScore` block. Each part is a number in [0, 1] times its weight; the highest sum
/// goes first, ties by age, then UID. An absent key keeps core's [`ReleaseScoreParams`] default.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
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
            deadline_scale: format_duration(params.deadline_scale_s),
            wait_scale: format_duration(params.wait_scale_s),
        }
    }
}

fn positive_duration(key: &str, text: &str) -> Result<f64, SchemaError> {
    let seconds = duration_key(key, text)?;
    if seconds > 0.0 {
        Ok(seconds)
    } else {
        Err(SchemaError::out_of_range(
            key,
            format!("{text:?}"),
            "a duration > 0, e.g. 1h",
        ))
    }
}

impl ReleaseScoreConfig {
    pub fn validate(&self) -> Result<(), SchemaError> {
        self.to_params().map(|_| ())
    }

    /// The validated weights and scales.
    pub fn to_params(&self) -> Result<ReleaseScoreParams, SchemaError> {
        let weight = |key, value| {
            ranged(
                key,
                value,
                0.0,
                MAX_RELEASE_SCORE_WEIGHT,
                RELEASE_SCORE_WEIGHT_FORMS,
            )
        };
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

    fn parse(yaml: &str) -> ReleaseScoreConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn an_empty_block_gives_core_s_defaults_and_every_key_is_read() {
        assert_eq!(
            parse("{}").to_params().unwrap(),
            ReleaseScoreParams::default()
        );
        let params = parse(
            "{urgency: 0, userTier: 3, deadline: 1000, waited: 0.5, deadlineScale: 12h, \
             waitScale: 30m}",
        )
        .to_params()
        .unwrap();
        assert_eq!(
            params,
            ReleaseScoreParams {
                urgency: 0.0,
                user_tier: 3.0,
                deadline: 1000.0,
                waited: 0.5,
                deadline_scale_s: 12.0 * 3600.0,
                wait_scale_s: 1800.0,
            }
        );
    }

    #[test]
    fn bad_values_name_the_key_and_the_accepted_forms() {
        let cases = [
            ("{urgency: -1}", "releaseScore.urgency", "[0, 1000]"),
            ("{userTier: 1001}", "releaseScore.userTier", "[0, 1000]"),
            ("{deadline: .nan}", "releaseScore.deadline", "[0, 1000]"),
            ("{waited: .inf}", "releaseScore.waited", "[0, 1000]"),
            ("{deadlineScale: 0s}", "releaseScore.deadlineScale", "> 0"),
            (
                "{waitScale: soon}",
                "releaseScore.waitScale",
                "ms, s, m, h or d",
            ),
        ];
        for (yaml, key, forms) in cases {
            let err = parse(yaml).validate().unwrap_err();
            assert_eq!(err.key(), key, "{yaml}");
            let text = err.to_string();
            assert!(
                text.starts_with(key) && text.contains(forms),
                "{yaml}: {text}"
            );
        }
    }
}
