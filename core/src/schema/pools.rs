//! `fairshare.pools`: fair-share settings of one node pool, overriding the shared ones.
//!
//! A queue runs in exactly one pool, and its ledger records only what it used and was entitled
//! to there. So each pool's queues are judged by that pool's own history, parameters and
//! switch; a team with queues in two pools has two ledgers, and usage in pool A never lowers its
//! weight in pool B. `bucket`, `chargeBasis`, `utilizationFloor` and `deficit` are shared by all
//! pools: a pool cannot set them.

use serde::{Deserialize, Serialize};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_lead: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_backfill: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_cannot_set_the_shared_keys() {
        for key in ["bucket: 1h", "chargeBasis: utilized", "deficit: capacity"] {
            let yaml = format!("{{{key}}}");
            let err = serde_yaml::from_str::<PoolFairShareConfig>(&yaml)
                .unwrap_err()
                .to_string();
            assert!(err.contains("unknown field"), "{key}: {err}");
        }
    }
}
