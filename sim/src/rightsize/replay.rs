//! The replay: arrivals, right-sizing decisions through core, history folded in at each finish.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use gpufair_core::mutation::{AdmissionPolicy, ContainerResources, PodFacts, QueueFacts};
use gpufair_core::rightsize::{
    FAMILY_LABEL, FamilyHistory, PoolSlices, RIGHT_SIZE_LABEL, RightSize, RightSizePolicy,
    SliceOffer, right_size,
};
use gpufair_core::units::WHOLE_GPU_RESOURCE;
use rand_core::SeedableRng;
use rand_pcg::Pcg64;

use super::scenario::{RightSizeScenario, ScenarioError};
use crate::scenario::workload::{exponential, uniform};

const GIB: f64 = (1u64 << 30) as f64;

/// What happened to one family's jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FamilyOutcome {
    pub name: String,
    pub jobs: u32,
    pub rewritten: u32,
    /// Declined for too little history (the family's first jobs).
    pub declined_history: u32,
    /// Declined because no offered slice holds the prediction with headroom.
    pub declined_no_fit: u32,
    /// Rewritten jobs whose true peak exceeded their slice: they would fail and rerun on a
    /// whole GPU, which is what they are charged here.
    pub too_small: u32,
    /// GPU-equivalent-hours asked for as whole GPUs.
    pub whole_gpu_hours: f64,
    /// GPU-equivalent-hours asked for after right-sizing (failed jobs: slice time + whole GPU).
    pub right_sized_gpu_hours: f64,
}

/// The whole replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RightSizeReport {
    pub families: Vec<FamilyOutcome>,
}

impl RightSizeReport {
    pub fn total(&self) -> FamilyOutcome {
        let mut total = FamilyOutcome {
            name: "all".into(),
            ..FamilyOutcome::default()
        };
        for f in &self.families {
            total.jobs += f.jobs;
            total.rewritten += f.rewritten;
            total.declined_history += f.declined_history;
            total.declined_no_fit += f.declined_no_fit;
            total.too_small += f.too_small;
            total.whole_gpu_hours += f.whole_gpu_hours;
            total.right_sized_gpu_hours += f.right_sized_gpu_hours;
        }
        total
    }

    /// A plain-text table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<18} {:>6} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12} {:>7}\n",
            "family",
            "jobs",
            "rewritten",
            "no-hist",
            "no-fit",
            "too-small",
            "whole GPU-h",
            "sized GPU-h",
            "freed"
        );
        out.push_str(&"-".repeat(101));
        out.push('\n');
        for f in self.families.iter().chain(std::iter::once(&self.total())) {
            let freed = if f.whole_gpu_hours > 0.0 {
                100.0 * (1.0 - f.right_sized_gpu_hours / f.whole_gpu_hours)
            } else {
                0.0
            };
            out.push_str(&format!(
                "{:<18} {:>6} {:>9} {:>9} {:>9} {:>9} {:>12.0} {:>12.0} {:>6.1}%\n",
                f.name,
                f.jobs,
                f.rewritten,
                f.declined_history,
                f.declined_no_fit,
                f.too_small,
                f.whole_gpu_hours,
                f.right_sized_gpu_hours,
                freed
            ));
        }
        out
    }
}

/// A job finishing, ordered earliest first in the heap.
struct Finish {
    at: f64,
    family: usize,
    peak_bytes: f64,
}

impl PartialEq for Finish {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Finish {}
impl PartialOrd for Finish {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Finish {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .total_cmp(&self.at)
            .then(other.family.cmp(&self.family))
    }
}

/// Replays the scenario; deterministic for a given seed.
pub fn replay(scenario: &RightSizeScenario) -> Result<RightSizeReport, ScenarioError> {
    scenario.validate()?;
    let table = scenario.resource_table()?;
    let policy = RightSizePolicy {
        min_samples: scenario.right_sizing.min_samples,
        headroom_percent: scenario.right_sizing.headroom_percent,
        whole_gpu_resource: WHOLE_GPU_RESOURCE.to_string(),
        pools: vec![PoolSlices {
            node_selector: BTreeMap::new(),
            slices: scenario
                .slices
                .iter()
                .map(|s| SliceOffer {
                    resource: s.resource.clone(),
                    memory_bytes: s.memory_mib << 20,
                })
                .collect(),
        }],
    };
    let admission = AdmissionPolicy::bare();
    let queue = QueueFacts {
        name: "sim".into(),
        namespaces: vec!["sim".into()],
        ..QueueFacts::default()
    };
    let mut rng = Pcg64::seed_from_u64(scenario.seed);
    // Every arrival, in time order, with its family, run time and true peak.
    let mut arrivals: Vec<(f64, usize, f64, f64)> = Vec::new();
    for (index, family) in scenario.families.iter().enumerate() {
        let mut at = exponential(&mut rng, family.every.get());
        while at < scenario.duration.get() {
            let runtime = exponential(&mut rng, family.runtime.get());
            let jitter = 1.0 + family.spread * (2.0 * uniform(&mut rng) - 1.0);
            arrivals.push((at, index, runtime, family.peak_memory_gib * jitter * GIB));
            at += exponential(&mut rng, family.every.get());
        }
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));

    let mut outcomes: Vec<FamilyOutcome> = scenario
        .families
        .iter()
        .map(|f| FamilyOutcome {
            name: f.name.clone(),
            ..FamilyOutcome::default()
        })
        .collect();
    let mut histories: BTreeMap<(String, String), FamilyHistory> = BTreeMap::new();
    let mut finishing: BinaryHeap<Finish> = BinaryHeap::new();
    let fold = |histories: &mut BTreeMap<(String, String), FamilyHistory>, finish: Finish| {
        let key = (
            "sim".to_string(),
            scenario.families[finish.family].name.clone(),
        );
        let entry = histories.entry(key).or_default();
        *entry = entry.observe(finish.peak_bytes, scenario.right_sizing.alpha);
    };
    for (at, index, runtime, peak_bytes) in arrivals {
        while finishing.peek().is_some_and(|f| f.at <= at) {
            if let Some(finish) = finishing.pop() {
                fold(&mut histories, finish);
            }
        }
        let family = &scenario.families[index];
        let mut labels = BTreeMap::from([(FAMILY_LABEL.to_string(), family.name.clone())]);
        if family.right_size {
            labels.insert(RIGHT_SIZE_LABEL.to_string(), "true".to_string());
        }
        let pod = PodFacts {
            namespace: "sim".into(),
            labels,
            containers: vec![ContainerResources {
                name: "main".into(),
                limits: BTreeMap::from([(WHOLE_GPU_RESOURCE.to_string(), "1".to_string())]),
                ..ContainerResources::default()
            }],
            ..PodFacts::default()
        };
        let decision = right_size(&pod, &queue, &admission, &policy, &histories)
            .map_err(|e| ScenarioError::Invalid(format!("families[{}].name: {e}", family.name)))?;
        let hours = runtime / 3600.0;
        let outcome = &mut outcomes[index];
        outcome.jobs += 1;
        outcome.whole_gpu_hours += hours;
        match decision {
            RightSize::Rewrite(rewrite) => {
                outcome.rewritten += 1;
                let equivalents = table
                    .gpu_equivalents(&rewrite.to)
                    .map_err(|e| ScenarioError::Invalid(format!("slices.resource: {e}")))?;
                if peak_bytes > rewrite.slice_bytes as f64 {
                    // Fails at its peak (taken as the end of its run, the worst case) and
                    // reruns on a whole GPU.
                    outcome.too_small += 1;
                    outcome.right_sized_gpu_hours += hours * equivalents + hours;
                } else {
                    outcome.right_sized_gpu_hours += hours * equivalents;
                }
            }
            RightSize::Declined(decline) => {
                if decline.reason.contains("history") {
                    outcome.declined_history += 1;
                } else {
                    outcome.declined_no_fit += 1;
                }
                outcome.right_sized_gpu_hours += hours;
            }
            RightSize::NotRequested => outcome.right_sized_gpu_hours += hours,
        }
        finishing.push(Finish {
            at: at + runtime,
            family: index,
            peak_bytes,
        });
    }
    Ok(RightSizeReport { families: outcomes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(yaml: &str) -> RightSizeScenario {
        serde_yaml::from_str(yaml).unwrap()
    }

    const BASE: &str = "name: t\nseed: 3\nduration: 2d\nrightSizing: {minSamples: 3}\nslices:\n  - {resource: nvidia.com/mig-1g.10gb, memoryMiB: 9856}\n  - {resource: nvidia.com/mig-3g.40gb, memoryMiB: 40192}\n";

    #[test]
    fn small_families_move_to_slices_after_their_history() {
        let s = scenario(&format!(
            "{BASE}families:\n  - {{name: small, rightSize: true, every: 30m, runtime: 1h, peakMemoryGiB: 6, spread: 0.1}}\n  - {{name: big, rightSize: true, every: 1h, runtime: 1h, peakMemoryGiB: 70}}\n  - {{name: out, rightSize: false, every: 1h, runtime: 1h, peakMemoryGiB: 2}}\n"
        ));
        let report = replay(&s).unwrap();
        let [small, big, out] = &report.families[..] else {
            panic!("three families");
        };
        assert!(
            small.rewritten > 0 && small.declined_history >= 3,
            "{small:?}"
        );
        assert_eq!(small.too_small, 0, "6 GiB ± 10% x 1.2 fits 9856 MiB");
        assert!(small.right_sized_gpu_hours < small.whole_gpu_hours / 2.0);
        assert_eq!(big.rewritten, 0);
        assert!(big.declined_no_fit > 0);
        assert_eq!(
            out.rewritten + out.declined_history + out.declined_no_fit,
            0
        );
        assert_eq!(out.right_sized_gpu_hours, out.whole_gpu_hours);
        assert_eq!(replay(&s).unwrap(), report, "deterministic");
        assert!(report.table().contains("small"));
    }

    #[test]
    fn bad_values_name_the_field() {
        for (family, field) in [
            (
                "{name: Bad_Name, rightSize: true, every: 1h, runtime: 1h, peakMemoryGiB: 1}",
                "name",
            ),
            (
                "{name: a, rightSize: true, every: 0s, runtime: 1h, peakMemoryGiB: 1}",
                "every",
            ),
            (
                "{name: a, rightSize: true, every: 1h, runtime: 1h, peakMemoryGiB: -1}",
                "peakMemoryGiB",
            ),
            (
                "{name: a, rightSize: true, every: 1h, runtime: 1h, peakMemoryGiB: 1, spread: 2}",
                "spread",
            ),
        ] {
            let s = scenario(&format!("{BASE}families:\n  - {family}\n"));
            let err = replay(&s).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
    }
}
