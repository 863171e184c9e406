//! The right-sizing scenario file.
//!
//! ```yaml
//! name: right-size-families
//! seed: 7
//! duration: 14d
//! rightSizing: {minSamples: 5, headroomPercent: 20, alpha: 0.3}
//! sharedReplicas: 4                 # nvidia.com/gpu.shared is 1/4 of a GPU
//! slices:                           # what the pool offers instead of a whole GPU
//!   - {resource: nvidia.com/mig-1g.10gb, memoryMiB: 9856}
//!   - {resource: nvidia.com/gpu.shared, memoryMiB: 20480}
//! families:
//!   - {name: bert-serving, rightSize: true, every: 20m, runtime: 3h, peakMemoryGiB: 7.5, spread: 0.15}
//! ```

use std::path::Path;

use gpufair_core::units::ResourceTable;
use serde::Deserialize;

use crate::scenario::duration::Seconds;

/// A right-sizing scenario gpufair-sim cannot run, naming the file or field.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RightSizeScenario {
    pub name: String,
    #[serde(default)]
    pub seed: u64,
    pub duration: Seconds,
    #[serde(default)]
    pub right_sizing: Settings,
    #[serde(default = "default_replicas")]
    pub shared_replicas: u32,
    pub slices: Vec<SliceSpec>,
    pub families: Vec<FamilySpec>,
}

fn default_replicas() -> u32 {
    4
}

/// The same keys as the config file's `admission.rightSizing`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    pub min_samples: u32,
    pub headroom_percent: u32,
    pub alpha: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            min_samples: 5,
            headroom_percent: gpufair_core::rightsize::DEFAULT_HEADROOM_PERCENT,
            alpha: gpufair_core::rightsize::DEFAULT_ALPHA,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SliceSpec {
    pub resource: String,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FamilySpec {
    /// Also its `gpufair.io/family` label.
    pub name: String,
    /// Whether its pods carry `gpufair.io/right-size: "true"`.
    pub right_size: bool,
    /// Mean time between arrivals.
    pub every: Seconds,
    /// Mean run time (exponential).
    pub runtime: Seconds,
    /// Typical peak GPU memory of one job.
    #[serde(rename = "peakMemoryGiB")]
    pub peak_memory_gib: f64,
    /// Each job's peak is uniform within ± this fraction of the typical one.
    #[serde(default)]
    pub spread: f64,
}

fn bad(field: &str, message: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::Invalid(format!("{field}: {message}"))
}

impl RightSizeScenario {
    /// Checks every value, naming the field.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.duration.get() <= 0.0 {
            return Err(bad("duration", "must be > 0"));
        }
        if self.right_sizing.min_samples == 0 {
            return Err(bad("rightSizing.minSamples", "must be >= 1"));
        }
        gpufair_core::rightsize::check_alpha(self.right_sizing.alpha)
            .map_err(|e| bad("rightSizing.alpha", e))?;
        let table = self.resource_table()?;
        for slice in &self.slices {
            table
                .gpu_equivalents(&slice.resource)
                .map_err(|e| bad("slices.resource", e))?;
            if slice.memory_mib == 0 {
                return Err(bad(
                    "slices.memoryMiB",
                    format!("{} must be > 0", slice.resource),
                ));
            }
        }
        if self.families.is_empty() {
            return Err(bad("families", "at least one family is needed"));
        }
        for family in &self.families {
            let field = |f: &str| format!("families[{}].{f}", family.name);
            if family.every.get() <= 0.0 {
                return Err(bad(&field("every"), "must be > 0"));
            }
            if family.runtime.get() <= 0.0 {
                return Err(bad(&field("runtime"), "must be > 0"));
            }
            if !(family.peak_memory_gib.is_finite() && family.peak_memory_gib > 0.0) {
                return Err(bad(&field("peakMemoryGiB"), "must be a number > 0"));
            }
            if !(0.0..1.0).contains(&family.spread) {
                return Err(bad(&field("spread"), "must be in [0, 1)"));
            }
        }
        Ok(())
    }

    pub fn resource_table(&self) -> Result<ResourceTable, ScenarioError> {
        ResourceTable::new(self.shared_replicas, Default::default())
            .map_err(|e| bad("sharedReplicas", e))
    }
}

/// Reads and checks a right-sizing scenario.
pub fn load(path: &Path) -> Result<RightSizeScenario, ScenarioError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: shown.clone(),
        source,
    })?;
    let scenario: RightSizeScenario =
        serde_yaml::from_str(&text).map_err(|e| ScenarioError::Syntax {
            path: shown,
            message: e.to_string(),
        })?;
    scenario.validate()?;
    Ok(scenario)
}
