//! The `fairshare` block checked whole: the shared keys, and each pool's keys laid over them.
//!
//! Its own module so that the block's type (`fairshare`) and a pool's overrides (`pools`) do not
//! import each other: both are read here.

use std::collections::BTreeMap;

use super::error::SchemaError;
use super::fairshare::FairShareConfig;
use super::pools::{POOL_NAME_FORMS, PoolFairShareConfig};
use crate::params::FairShareParams;

/// The shared block with `pool`'s keys put in.
fn over(pool: &PoolFairShareConfig, shared: &FairShareConfig) -> FairShareConfig {
    let mut merged = shared.clone();
    merged.pools.clear();
    if let Some(v) = pool.enabled {
        merged.enabled = v;
    }
    if let Some(v) = pool.k {
        merged.k = v;
    }
    if let Some(v) = &pool.window {
        merged.window.clone_from(v);
    }
    if let Some(v) = pool.decay {
        merged.decay = v;
    }
    if let Some(v) = &pool.decay_period {
        merged.decay_period.clone_from(v);
    }
    if let Some(v) = pool.min_weight {
        merged.min_weight = v;
    }
    if let Some(v) = &pool.catch_up_period {
        merged.catch_up_period.clone_from(v);
    }
    if let Some(v) = &pool.hold_idle_limit {
        merged.hold_idle_limit.clone_from(v);
    }
    if let Some(v) = &pool.hold_lead {
        merged.hold_lead.clone_from(v);
    }
    if let Some(v) = pool.hold_backfill {
        merged.hold_backfill = v;
    }
    merged
}

impl FairShareConfig {
    /// Checks every key, the pools' included.
    pub fn validate(&self) -> Result<(), SchemaError> {
        self.to_params()?;
        self.pool_params().map(|_| ())
    }

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
            let merged = over(pool, self);
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
             gpu-type=a100: {k: 0.5, window: 24h, minWeight: 0.3, holdIdleLimit: 1h, \
             holdLead: 45m, holdBackfill: true}}}",
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
                hold_lead_s: 2700.0,
                hold_backfill: true,
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
                "{pools: {a: {holdLead: -1h}}}",
                "fairshare.pools.a.holdLead",
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
}
