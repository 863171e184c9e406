//! `fairshare.pools`: fair-share settings of one node pool, overriding the shared ones.
//!
//! A queue runs in exactly one pool, and its ledger records only what it used and was entitled
//! to there. So each pool's queues are judged by that pool's own history, parameters and
//! switch; a team with queues in two pools has two ledgers, and usage in pool A never lowers its
//! weight in pool B. `bucket`, `chargeBasis`, `utilizationFloor` and `deficit` are shared by all
//! pools: a pool cannot set them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::SchemaError;
use super::fairshare::FairShareConfig;
use crate::params::FairShareParams;

/// How a pool is named under `fairshare.pools`, for error messages.
pub const POOL_NAME_FORMS: &str = "`default` or a Queue's nodePool selector as kubectl prints \
                                   it, e.g. gpu-type=a100 or gpu-type in (a100,h100)";

/// What one pool may set differently; an absent key keeps the shared `fairshare` value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolFairShareConfig {
    /// Time-aware sharing in this pool; `false` makes it stateless fair share (base weights, no
    /// capacity held, no preemption for its workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decay: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decay_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_idle_limit: Option<String>,
}

impl PoolFairShareConfig {
    /// The shared block with this pool's keys put in.
    fn over(&self, shared: &FairShareConfig) -> FairShareConfig {
        let mut merged = shared.clone();
        merged.pools.clear();
        if let Some(v) = self.enabled {
            merged.enabled = v;
        }
        if let Some(v) = self.k {
            merged.k = v;
        }
        if let Some(v) = &self.window {
            merged.window.clone_from(v);
        }
        if let Some(v) = self.decay {
            merged.decay = v;
        }
        if let Some(v) = &self.decay_period {
            merged.decay_period.clone_from(v);
        }
        if let Some(v) = self.min_weight {
            merged.min_weight = v;
        }
        if let Some(v) = &self.catch_up_period {
            merged.catch_up_period.clone_from(v);
        }
        if let Some(v) = &self.hold_idle_limit {
            merged.hold_idle_limit.clone_from(v);
        }
        merged
    }
}

impl FairShareConfig {
    /// The parameters of each pool named under `pools`, by pool name: its keys laid over the
    /// shared ones. Errors name the key under `fairshare.pools.<pool>`.
    pub fn pool_params(&self) -> Result<BTreeMap<String, FairShareParams>, SchemaError> {
        let mut out = BTreeMap::new();
        for (name, pool) in &self.pools {
            if name.trim().is_empty() || name.trim() != name {
                return Err(SchemaError::BadPoolName {
                    name: name.clone(),
                    expected: POOL_NAME_FORMS,
                });
            }
            let merged = pool.over(self);
            let params = merged.to_params().map_err(|err| match err {
                // The bucket is shared; it can only be out of range here because this pool's
                // window is shorter than it.
                SchemaError::OutOfRange { key, .. } if key == "fairshare.bucket" => {
                    SchemaError::out_of_range(
                        format!("fairshare.pools.{name}.window"),
                        format!("{:?}", merged.window),
                        "a duration > 0 and no shorter than fairshare.bucket, e.g. 24h",
                    )
                }
                SchemaError::OutOfRange {
                    key,
                    value,
                    expected,
                } => SchemaError::OutOfRange {
                    key: format!(
                        "fairshare.pools.{name}.{}",
                        key.strip_prefix("fairshare.").unwrap_or(&key)
                    ),
                    value,
                    expected,
                },
                other => other,
            })?;
            out.insert(name.clone(), params);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> FairShareConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn a_pool_overrides_only_what_it_names() {
        let config = parse(
            "{k: 2, window: 72h, bucket: 30m, pools: {inference: {enabled: false}, \
             gpu-type=a100: {k: 0.5, window: 24h, minWeight: 0.3, holdIdleLimit: 1h}}}",
        );
        let shared = config.to_params().unwrap();
        let pools = config.pool_params().unwrap();
        assert_eq!(
            pools["inference"],
            FairShareParams {
                time_aware: false,
                ..shared.clone()
            }
        );
        assert_eq!(
            pools["gpu-type=a100"],
            FairShareParams {
                k: 0.5,
                window_s: 24.0 * 3600.0,
                min_weight: 0.3,
                hold_idle_limit_s: 3600.0,
                ..shared
            }
        );
    }

    #[test]
    fn bad_pool_values_name_the_pool_and_the_key() {
        let cases = [
            ("{pools: {a: {k: -1}}}", "fairshare.pools.a.k", ">= 0"),
            (
                "{pools: {a: {decay: 2}}}",
                "fairshare.pools.a.decay",
                "(0, 1]",
            ),
            (
                "{pools: {a: {window: 30m}}}",
                "fairshare.pools.a.window",
                "no shorter than fairshare.bucket",
            ),
            (
                "{pools: {a: {catchUpPeriod: later}}}",
                "fairshare.pools.a.catchUpPeriod",
                "ms, s, m, h or d",
            ),
            (
                "{pools: {a: {holdIdleLimit: soon}}}",
                "fairshare.pools.a.holdIdleLimit",
                "ms, s, m, h or d",
            ),
            (
                "{pools: {a: {minWeight: 1.5}}}",
                "fairshare.pools.a.minWeight",
                "[0, 1]",
            ),
            (
                "{pools: {'': {k: 1}}}",
                "fairshare.pools",
                "nodePool selector",
            ),
            (
                "{pools: {' a': {k: 1}}}",
                "fairshare.pools",
                "nodePool selector",
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

    #[test]
    fn a_pool_cannot_set_the_shared_keys() {
        for key in ["bucket: 1h", "chargeBasis: utilized", "deficit: capacity"] {
            let yaml = format!("{{pools: {{a: {{{key}}}}}}}");
            let err = serde_yaml::from_str::<FairShareConfig>(&yaml)
                .unwrap_err()
                .to_string();
            assert!(err.contains("unknown field"), "{key}: {err}");
        }
    }
}
