use gpufair_core::params::PreemptionParams;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ConfigError, duration_key, ranged};

/// The `preemption` section.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PreemptionConfig {
    pub enabled: bool,
    /// Least time between two preemptions triggered by one queue (at least 10m is advised).
    pub cooldown: String,
    /// Cluster-wide cap on pods preempted per rolling hour.
    pub max_victims_per_hour: u32,
    /// allocated ÷ fair share below which a queue counts as far below its share, in [0, 1].
    pub fair_share_threshold: f64,
    /// Victims come only from queues above (1 + hysteresis) × their fair share, >= 0.
    pub hysteresis: f64,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        let params = PreemptionParams::default();
        Self {
            enabled: params.enabled,
            cooldown: "10m".into(),
            max_victims_per_hour: params.max_victims_per_hour,
            fair_share_threshold: params.fair_share_threshold,
            hysteresis: params.hysteresis,
        }
    }
}

impl PreemptionConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.to_params().map(|_| ())
    }

    pub fn to_params(&self) -> Result<PreemptionParams, ConfigError> {
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
