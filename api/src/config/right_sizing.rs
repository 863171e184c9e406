//! The `admission.rightSizing` section: which slices each node pool offers in place of a whole
//! GPU, and how much history a family needs first.
//!
//! ```yaml
//! admission:
//!   rightSizing:
//!     minSamples: 5          # pods a family must have reported before it is right-sized
//!     headroomPercent: 20    # prediction x 1.2
//!     alpha: 0.3             # weight of the newest peak in the smoothed peak (controller)
//!     pools:
//!       - nodeSelector: {gpufair.io/pool: h100}   # a Queue's nodePool labels; {} = no nodePool
//!         slices:
//!           - resource: nvidia.com/mig-1g.10gb     # memory from the profile name: 10 GB
//!           - {resource: nvidia.com/mig-3g.40gb, memoryMiB: 40448}
//!           - {resource: nvidia.com/gpu.shared, memoryMiB: 20480}   # required for shared slices
//! ```

use std::collections::BTreeMap;

use gpufair_core::mig_profile::MigProfile;
use gpufair_core::mutation::ResourcePattern;
use gpufair_core::rightsize::{
    DEFAULT_ALPHA, DEFAULT_HEADROOM_PERCENT, PoolSlices, RightSizePolicy, SliceOffer,
};
use gpufair_core::units::WHOLE_GPU_RESOURCE;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ranged};

/// `admission.rightSizing`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RightSizingConfig {
    pub min_samples: u32,
    pub headroom_percent: u32,
    pub alpha: f64,
    pub pools: Vec<PoolSlicesConfig>,
}

impl Default for RightSizingConfig {
    fn default() -> Self {
        Self {
            min_samples: 5,
            headroom_percent: DEFAULT_HEADROOM_PERCENT,
            alpha: DEFAULT_ALPHA,
            pools: Vec::new(),
        }
    }
}

/// One entry of `admission.rightSizing.pools`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolSlicesConfig {
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    pub slices: Vec<SliceConfig>,
}

/// One slice a pool offers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SliceConfig {
    pub resource: String,
    /// GPU memory one unit gives a pod; MIG profiles default to the GB in their name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mi_b: Option<u64>,
}

const SLICE_FORMS: &str = "a GPU resource of admission.gpuResources other than nvidia.com/gpu, \
     with memoryMiB > 0 (optional for nvidia.com/mig-<g>g.<mem>gb, which default to <mem> GB)";
const SELECTOR_FORMS: &str = "a map of node label keys to values, as in a Queue's nodePool";

/// Bytes of a MIG profile's memory from its name: `3g.40gb` → 40 GB (decimal, as the name
/// writes it). `memoryMiB` gives the exact size the device plugin reports.
fn mig_memory_bytes(resource: &str) -> Option<u64> {
    let profile = MigProfile::from_resource_name(resource)?.ok()?;
    Some(profile.memory_gb.saturating_mul(1_000_000_000))
}

impl RightSizingConfig {
    /// The plain policy, after checking every value against the GPU resources admission knows.
    pub fn to_policy(
        &self,
        gpu_resources: &[ResourcePattern],
    ) -> Result<RightSizePolicy, ConfigError> {
        if self.min_samples == 0 {
            return Err(ConfigError::out_of_range(
                "admission.rightSizing.minSamples",
                0,
                "a whole number of pods >= 1",
            ));
        }
        if self.headroom_percent > 1000 {
            return Err(ConfigError::out_of_range(
                "admission.rightSizing.headroomPercent",
                self.headroom_percent,
                "a whole percentage from 0 to 1000",
            ));
        }
        ranged(
            "admission.rightSizing.alpha",
            self.alpha,
            f64::MIN_POSITIVE,
            1.0,
            "a number in (0, 1]",
        )?;
        let mut pools = Vec::new();
        for pool in &self.pools {
            if pool.node_selector.keys().any(|k| k.is_empty()) {
                return Err(ConfigError::out_of_range(
                    "admission.rightSizing.pools.nodeSelector",
                    format!("{:?}", pool.node_selector),
                    SELECTOR_FORMS,
                ));
            }
            let mut slices = Vec::new();
            for slice in &pool.slices {
                let known = gpu_resources.iter().any(|p| p.matches(&slice.resource));
                let memory = slice
                    .memory_mi_b
                    .filter(|m| *m > 0)
                    .map(|m| m.saturating_mul(1 << 20))
                    .or_else(|| match slice.memory_mi_b {
                        None => mig_memory_bytes(&slice.resource),
                        Some(_) => None,
                    });
                match memory {
                    Some(memory_bytes) if known && slice.resource != WHOLE_GPU_RESOURCE => slices
                        .push(SliceOffer {
                            resource: slice.resource.clone(),
                            memory_bytes,
                        }),
                    _ => {
                        return Err(ConfigError::out_of_range(
                            "admission.rightSizing.pools.slices",
                            format!("{:?} (memoryMiB {:?})", slice.resource, slice.memory_mi_b),
                            SLICE_FORMS,
                        ));
                    }
                }
            }
            pools.push(PoolSlices {
                node_selector: pool.node_selector.clone(),
                slices,
            });
        }
        Ok(RightSizePolicy {
            min_samples: self.min_samples,
            headroom_percent: self.headroom_percent,
            whole_gpu_resource: WHOLE_GPU_RESOURCE.to_string(),
            pools,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn the_documented_example_parses() {
        let yaml = "admission:\n  rightSizing:\n    minSamples: 3\n    pools:\n      - nodeSelector: {gpufair.io/pool: h100}\n        slices:\n          - resource: nvidia.com/mig-1g.10gb\n          - {resource: nvidia.com/gpu.shared, memoryMiB: 20480}\n";
        let config = Config::from_yaml(yaml, "c.yaml").unwrap();
        let policy = config.admission.to_policy().unwrap().right_sizing;
        assert_eq!(policy.min_samples, 3);
        assert_eq!(policy.pools[0].slices[0].memory_bytes, 10_000_000_000);
        assert_eq!(policy.pools[0].slices[1].memory_bytes, 20 << 30);
    }

    #[test]
    fn mig_memory_comes_from_every_profile_form() {
        for (resource, gb) in [
            ("nvidia.com/mig-1g.18gb.me", 18),
            ("nvidia.com/mig-1c.3g.71gb", 71),
            ("nvidia.com/mig-1g.23gb-me", 23),
        ] {
            assert_eq!(super::mig_memory_bytes(resource), Some(gb * 1_000_000_000));
        }
        assert_eq!(super::mig_memory_bytes("nvidia.com/mig-1g"), None);
        assert_eq!(super::mig_memory_bytes("nvidia.com/gpu.shared"), None);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (yaml, key) in [
            ("admission: {rightSizing: {minSamples: 0}}", "minSamples"),
            ("admission: {rightSizing: {alpha: 0}}", "alpha"),
            ("admission: {rightSizing: {alpha: 1.5}}", "alpha"),
            (
                "admission: {rightSizing: {headroomPercent: 5000}}",
                "headroomPercent",
            ),
            (
                "admission: {rightSizing: {pools: [{slices: [{resource: nvidia.com/gpu.shared}]}]}}",
                "slices",
            ),
            (
                "admission: {rightSizing: {pools: [{slices: [{resource: nvidia.com/gpu, memoryMiB: 1}]}]}}",
                "slices",
            ),
            (
                "admission: {rightSizing: {pools: [{slices: [{resource: example.com/tpu, memoryMiB: 1}]}]}}",
                "slices",
            ),
            ("admission: {rightSizing: {minSample: 3}}", "minSample"),
        ] {
            let err = Config::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
