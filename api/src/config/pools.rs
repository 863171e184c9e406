//! `fairshare.pools`: fair-share settings of one node pool, overriding the shared ones.
//!
//! A queue runs in exactly one pool (its `nodePool`, else `default`), and its ledger records
//! only what it used and was entitled to there. So each pool's queues are judged by that pool's
//! own history, parameters and switch; a team with queues in two pools has two ledgers, and
//! usage in pool A never lowers its weight in pool B. How a pool's keys are put over the shared
//! section is `fairshare`'s (`FairShareConfig::pool_params`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What one pool may set differently; an absent key keeps the shared `fairshare` value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
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

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn a_pool_overrides_only_what_it_names() {
        let yaml = "fairshare:\n  k: 2\n  window: 72h\n  pools:\n    inference: {enabled: false}\n    gpu-type=a100: {k: 0.5, window: 24h, minWeight: 0.3}\n";
        let config = Config::from_yaml(yaml, "c.yaml").unwrap();
        let options = config.decide_options().unwrap();
        let inference = options.fairshare_of("inference");
        assert!(!inference.time_aware);
        assert_eq!((inference.k, inference.window_s), (2.0, 72.0 * 3600.0));
        let a100 = options.fairshare_of("gpu-type=a100");
        assert!(a100.time_aware);
        assert_eq!(
            (a100.k, a100.window_s, a100.min_weight),
            (0.5, 24.0 * 3600.0, 0.3)
        );
        assert_eq!(options.fairshare_of("default").k, 2.0);
    }

    #[test]
    fn bad_pool_values_name_the_pool_and_key() {
        let cases = [
            ("fairshare: {pools: {a: {k: -1}}}", "fairshare.pools.a.k"),
            (
                "fairshare: {pools: {a: {decay: 2}}}",
                "fairshare.pools.a.decay",
            ),
            (
                "fairshare: {pools: {a: {window: 30m}}}",
                "fairshare.pools.a.window",
            ),
            (
                "fairshare: {pools: {a: {catchUpPeriod: later}}}",
                "fairshare.pools.a.catchUpPeriod",
            ),
            (
                "fairshare: {pools: {a: {holdIdleLimit: soon}}}",
                "fairshare.pools.a.holdIdleLimit",
            ),
            (
                "fairshare: {pools: {a: {minWeight: 1.5}}}",
                "fairshare.pools.a.minWeight",
            ),
            ("fairshare: {pools: {a: {bucket: 1h}}}", "bucket"),
            ("fairshare: {pools: {'': {k: 1}}}", "fairshare.pools"),
        ];
        for (yaml, key) in cases {
            let err = Config::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
