//! GPU-equivalents: the one unit every queue, ledger and decision counts in.
//!
//! A whole GPU is 1. A MIG slice is worth its compute slices over seven (`3g.40gb` is 3/7,
//! `1c.3g.71gb` and `1g.18gb.me` are 1/7): an A100/H100/H200 has seven compute slices, and
//! compute is what fair share divides. MIG names are read by [`crate::mig_profile`]. A time-sliced replica of a GPU shared `n` ways
//! is `1/n`. Admins can override any resource's value in the config table, e.g. to price a
//! memory-heavy profile higher.

use std::collections::BTreeMap;

pub use crate::mig_profile::MIG_RESOURCE_PREFIX;
use crate::mig_profile::{MigProfile, MigProfileError};

/// Resource name of whole GPUs, as advertised by NVIDIA's and gpufair's device plugins.
pub const WHOLE_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Resource name of time-sliced GPU replicas.
pub const SHARED_GPU_RESOURCE: &str = "nvidia.com/gpu.shared";
/// Compute slices of a full GPU in MIG terms.
pub const MIG_COMPUTE_SLICES: f64 = 7.0;

/// A count (GPU-equivalents, GPU-seconds, a share of them) as sums may use it: negative, NaN
/// or infinite is none, since one such value would poison every sum it enters for good.
pub fn non_negative(count: f64) -> f64 {
    if count.is_finite() && count > 0.0 {
        count
    } else {
        0.0
    }
}

/// A resource name gpufair could not value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnitError {
    #[error(
        "unknown GPU resource {name:?}: expected nvidia.com/gpu, nvidia.com/gpu.shared, \
         nvidia.com/mig-<profile> (e.g. nvidia.com/mig-1g.10gb) or an entry of the \
         resource table"
    )]
    UnknownResource { name: String },
    #[error(transparent)]
    BadMigProfile(#[from] MigProfileError),
    #[error(
        "MIG resource {name:?} has {compute_slices} compute slices: only profiles of GPUs with \
         seven slices (1 to 7) have a default value; give it one in the resource table"
    )]
    UnvaluedMigProfile { name: String, compute_slices: u32 },
    #[error("GPU-equivalent value for {name:?} must be a finite number > 0, got {value}")]
    BadValue { name: String, value: f64 },
    #[error("shared GPU replicas must be >= 1, got {replicas}")]
    BadReplicas { replicas: u32 },
}

/// Maps resource names to GPU-equivalents per unit requested.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceTable {
    shared_replicas: u32,
    overrides: BTreeMap<String, f64>,
}

impl Default for ResourceTable {
    fn default() -> Self {
        Self {
            shared_replicas: 4,
            overrides: BTreeMap::new(),
        }
    }
}

impl ResourceTable {
    /// A table where shared slices are `1/shared_replicas` and `overrides` win over the rules.
    pub fn new(shared_replicas: u32, overrides: BTreeMap<String, f64>) -> Result<Self, UnitError> {
        if shared_replicas == 0 {
            return Err(UnitError::BadReplicas {
                replicas: shared_replicas,
            });
        }
        if let Some((name, value)) = overrides
            .iter()
            .find(|(_, v)| !(v.is_finite() && **v > 0.0))
        {
            return Err(UnitError::BadValue {
                name: name.clone(),
                value: *value,
            });
        }
        Ok(Self {
            shared_replicas,
            overrides,
        })
    }

    /// GPU-equivalents of one unit of `name`.
    pub fn gpu_equivalents(&self, name: &str) -> Result<f64, UnitError> {
        if let Some(value) = self.overrides.get(name) {
            return Ok(*value);
        }
        if name == WHOLE_GPU_RESOURCE {
            return Ok(1.0);
        }
        if name == SHARED_GPU_RESOURCE {
            return Ok(1.0 / f64::from(self.shared_replicas));
        }
        if let Some(profile) = MigProfile::from_resource_name(name) {
            let compute_slices = profile?.compute_slices;
            if f64::from(compute_slices) > MIG_COMPUTE_SLICES {
                return Err(UnitError::UnvaluedMigProfile {
                    name: name.to_string(),
                    compute_slices,
                });
            }
            return Ok(f64::from(compute_slices) / MIG_COMPUTE_SLICES);
        }
        Err(UnitError::UnknownResource {
            name: name.to_string(),
        })
    }

    /// Whether `name` is a GPU resource this table can value.
    pub fn is_gpu_resource(&self, name: &str) -> bool {
        self.gpu_equivalents(name).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_whole_mig_and_shared() {
        let table = ResourceTable::default();
        assert_eq!(table.gpu_equivalents("nvidia.com/gpu"), Ok(1.0));
        assert_eq!(table.gpu_equivalents("nvidia.com/gpu.shared"), Ok(0.25));
        assert_eq!(
            table.gpu_equivalents("nvidia.com/mig-1g.10gb"),
            Ok(1.0 / 7.0)
        );
        assert_eq!(
            table.gpu_equivalents("nvidia.com/mig-3g.40gb"),
            Ok(3.0 / 7.0)
        );
        assert_eq!(table.gpu_equivalents("nvidia.com/mig-7g.80gb"), Ok(1.0));
        // The forms H100/H200 nodes advertise: media extensions, and a compute instance
        // smaller than its GPU instance, which is charged for its compute slices.
        for one_slice in [
            "nvidia.com/mig-1g.18gb.me",
            "nvidia.com/mig-1g.18gb.me.all",
            "nvidia.com/mig-1g.23gb-me",
            "nvidia.com/mig-1c.3g.71gb",
        ] {
            assert_eq!(
                table.gpu_equivalents(one_slice),
                Ok(1.0 / 7.0),
                "{one_slice}"
            );
        }
        assert_eq!(
            table.gpu_equivalents("nvidia.com/mig-2c.4g.71gb.gfx"),
            Ok(2.0 / 7.0)
        );
    }

    #[test]
    fn overrides_win_and_are_validated() {
        let table = ResourceTable::new(
            2,
            BTreeMap::from([("nvidia.com/mig-1g.10gb".to_string(), 0.2)]),
        )
        .unwrap();
        assert_eq!(table.gpu_equivalents("nvidia.com/mig-1g.10gb"), Ok(0.2));
        assert_eq!(table.gpu_equivalents("nvidia.com/gpu.shared"), Ok(0.5));
        let bad = ResourceTable::new(1, BTreeMap::from([("x".to_string(), f64::NAN)]));
        assert!(matches!(bad, Err(UnitError::BadValue { .. })));
        assert_eq!(
            ResourceTable::new(0, BTreeMap::new()),
            Err(UnitError::BadReplicas { replicas: 0 })
        );
    }

    #[test]
    fn rejects_unknown_and_malformed_names() {
        let table = ResourceTable::default();
        assert!(matches!(
            table.gpu_equivalents("cpu"),
            Err(UnitError::UnknownResource { .. })
        ));
        assert!(matches!(
            table.gpu_equivalents("nvidia.com/mig-8g.192gb"),
            Err(UnitError::UnvaluedMigProfile {
                compute_slices: 8,
                ..
            })
        ));
        for bad in [
            "nvidia.com/mig-9g.80gb",
            "nvidia.com/mig-0g.5gb",
            "nvidia.com/mig-xg.5gb",
            "nvidia.com/mig-1g.gb",
            "nvidia.com/mig-1g",
        ] {
            assert!(
                matches!(table.gpu_equivalents(bad), Err(UnitError::BadMigProfile(_))),
                "{bad}"
            );
        }
        assert!(!table.is_gpu_resource("memory"));
    }
}
