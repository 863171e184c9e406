//! The `preemption` block: the guards that keep preemption rare and safe.

use serde::{Deserialize, Serialize};

use super::error::{SchemaError, duration_key, ranged};
use crate::duration::format_duration;
use crate::params::PreemptionParams;

/// The `preemption` block. An absent key keeps core's [`PreemptionParams`] default.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PreemptionConfig {
    pub enabled: bool,
    /// Least time between two preemptions triggered by one queue (at least 10m is advised).
    pub cooldown: String,
    /// Cluster-wide cap on pods preempted per rolling hour.
    pub max_victims_per_hour: u32,
    /// allocated ÷ fair share below which a queue counts as far below its share, in [0, 1].
    pub fair_share_threshold: f64,
    /// Victims come only from queues above (1 + hysteresis) × their fair share, which keep
    /// their share (one that received its entitlement, for a starved queue, at least
    /// fairShareThreshold × it), >= 0.
    pub hysteresis: f64,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        let params = PreemptionParams::default();
        Self {
            enabled: params.enabled,
            cooldown: format_duration(params.cooldown_s),
            max_victims_per_hour: params.max_victims_per_hour,
            fair_share_threshold: params.fair_share_threshold,
            hysteresis: params.hysteresis,
        }
    }
}

impl PreemptionConfig {
    pub fn validate(&self) -> Result<(), SchemaError> {
        self.to_params().map(|_| ())
    }

    /// The validated guards.
    pub fn to_params(&self) -> Result<PreemptionParams, SchemaError> {
        Ok(PreemptionParams {
            enabled: self.enabled,
            cooldown_s: duration_key("preemption.cooldown", &self.cooldown)?,
            max_victims_per_hour: self.max_victims_per_hour,
            fair_share_threshold: ranged(
                "preemption.fairShareThreshold",
                self.fair_share_threshold,
                0.0,
                1.0,
                "a ratio in [0, 1], e.g. 0.5",
            )?,
            hysteresis: ranged(
                "preemption.hysteresis",
                self.hysteresis,
                0.0,
                f64::MAX,
                "a finite number >= 0, e.g. 0.1",
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> PreemptionConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn an_empty_block_gives_core_s_defaults_and_every_key_is_read() {
        assert_eq!(
            parse("{}").to_params().unwrap(),
            PreemptionParams::default()
        );
        let params = parse(
            "{enabled: false, cooldown: 30m, maxVictimsPerHour: 5, fairShareThreshold: 0.25, \
             hysteresis: 0.5}",
        )
        .to_params()
        .unwrap();
        assert_eq!(
            params,
            PreemptionParams {
                enabled: false,
                cooldown_s: 1800.0,
                max_victims_per_hour: 5,
                fair_share_threshold: 0.25,
                hysteresis: 0.5,
            }
        );
    }

    #[test]
    fn bad_values_name_the_key_and_the_accepted_forms() {
        let cases = [
            (
                "{cooldown: soon}",
                "preemption.cooldown",
                "ms, s, m, h or d",
            ),
            ("{cooldown: 600}", "preemption.cooldown", "bare 0"),
            (
                "{fairShareThreshold: 1.5}",
                "preemption.fairShareThreshold",
                "[0, 1]",
            ),
            ("{hysteresis: -1}", "preemption.hysteresis", ">= 0"),
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
        let err = serde_yaml::from_str::<PreemptionConfig>("{maxVictimsPerHour: -1}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("u32") || err.contains("-1"), "{err}");
    }
}
