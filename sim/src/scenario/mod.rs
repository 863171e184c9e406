//! Scenarios: the cluster, the queues, the parameters and the workload of one simulation.

mod check;
pub mod duration;
pub mod error;
pub mod gang;
mod labels;
mod load;
pub mod model;
mod node_shape;
pub mod policy_name;
mod trace_files;
pub(crate) mod workload;

use std::path::PathBuf;

use gpufair_core::labels::{TaskType, Tier, Urgency, UserTier};
use gpufair_core::params::{FairShareParams, PreemptionParams, ReleaseScoreParams};

pub use error::ScenarioError;
pub use load::MAX_NODES_PER_POOL;
pub use load::{load, parse, parse_with_traces};
pub use policy_name::PolicyName;
pub use trace_files::{TraceReader, read_trace_file};
pub use workload::{MAX_JOBS, MAX_STREAM_PODS};

/// Index into `Scenario::resources`; 0 is always `nvidia.com/gpu`.
pub type ResourceIndex = usize;

/// A GPU resource some node offers or some job asks for, valued by core's unit table.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSpec {
    pub name: String,
    pub gpu_equivalents: f64,
}

/// A node pool: `gpus` spread over nodes of `gpus_per_node`, the last node taking the rest.
/// Every node also offers `slices` (MIG instances, shared replicas): units of a resource each.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    pub gpus: u32,
    pub gpus_per_node: u32,
    /// Per node: (resource, units) besides the whole GPUs, in resource order.
    pub slices: Vec<(ResourceIndex, u32)>,
    /// Whole GPUs plus every node's slices, in GPU-equivalents.
    pub capacity: f64,
}

impl PoolSpec {
    /// Units of `resource` one node offers at most.
    pub fn units_per_node(&self, resource: ResourceIndex) -> u32 {
        if resource == 0 {
            return self.gpus_per_node;
        }
        self.slices
            .iter()
            .find(|(r, _)| *r == resource)
            .map_or(0, |(_, units)| *units)
    }

    /// GPUs per node, in node order.
    pub fn node_sizes(&self) -> Vec<u32> {
        let mut sizes = vec![self.gpus_per_node; (self.gpus / self.gpus_per_node) as usize];
        let rest = self.gpus % self.gpus_per_node;
        if rest > 0 {
            sizes.push(rest);
        }
        sizes
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    pub name: String,
    pub weight: f64,
    pub guaranteed: f64,
    pub limit: Option<f64>,
    pub pool: usize,
    pub min_run_time_s: f64,
    pub initial_usage: f64,
}

/// A job: pods (GPUs each) released all-or-nothing, running `duration_s` once started.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Reported by name when set.
    pub name: Option<String>,
    pub queue: usize,
    pub submit_s: f64,
    pub duration_s: f64,
    /// Units of `resource` per pod.
    pub pods: Vec<u32>,
    pub resource: ResourceIndex,
    /// All its pods together, in GPU-equivalents.
    pub gpu_equivalents: f64,
    pub task_type: TaskType,
    pub urgency: Urgency,
    pub user_tier: UserTier,
    /// When it should be finished, seconds of the scenario.
    pub deadline_s: Option<f64>,
}

impl JobSpec {
    /// Units of its resource, all pods together (whole GPUs for most jobs).
    pub fn gpus(&self) -> u32 {
        self.pods.iter().sum()
    }

    pub fn tier(&self) -> Tier {
        self.task_type.tier()
    }

    /// A key task: high urgency or realtime.
    pub fn is_key(&self) -> bool {
        self.urgency == Urgency::High || self.tier() == Tier::Realtime
    }
}

/// KAI-Scheduler's parameters (fairshare.md §1).
#[derive(Debug, Clone, PartialEq)]
pub struct KaiParams {
    pub k: f64,
    pub window_s: f64,
    pub half_life_s: Option<f64>,
    pub reclaim: bool,
    pub reclaim_min_runtime_s: f64,
}

/// Kueue admission fair sharing's parameters (fairshare.md §2.1).
#[derive(Debug, Clone, PartialEq)]
pub struct KueueAfsParams {
    pub half_life_s: f64,
    pub sampling_interval_s: f64,
}

/// A validated scenario, ready to simulate.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: Option<String>,
    pub path: PathBuf,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
    pub cycle_s: f64,
    pub resync_s: f64,
    pub pools: Vec<PoolSpec>,
    pub queues: Vec<QueueSpec>,
    pub fairshare: FairShareParams,
    /// Per pool name, the parameters of pools that set their own (`fairshare.pools`).
    pub pool_fairshare: std::collections::BTreeMap<String, FairShareParams>,
    pub preemption: PreemptionParams,
    pub policies: Vec<PolicyName>,
    /// The resources nodes offer and jobs ask for; `nvidia.com/gpu` first.
    pub resources: Vec<ResourceSpec>,
    /// Weights of the release score inside a queue.
    pub release_score: ReleaseScoreParams,
    /// Whether any job sets a task type, urgency, user tier or deadline (the reports then show
    /// them, and the rivals order by priority).
    pub labelled: bool,
    pub kai: KaiParams,
    pub kueue_afs: KueueAfsParams,
    /// Sorted by submission time (ties in file order).
    pub jobs: Vec<JobSpec>,
}

impl Scenario {
    pub fn total_gpus(&self) -> u32 {
        self.pools.iter().map(|p| p.gpus).sum()
    }

    /// Every pool's capacity, in GPU-equivalents.
    pub fn capacity(&self) -> f64 {
        self.pools.iter().map(|p| p.capacity).sum()
    }

    /// Whether some node offers something other than whole GPUs.
    pub fn has_slices(&self) -> bool {
        self.resources.len() > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_node_takes_the_rest() {
        let pool = PoolSpec {
            name: "p".into(),
            gpus: 100,
            gpus_per_node: 8,
            slices: Vec::new(),
            capacity: 100.0,
        };
        let sizes = pool.node_sizes();
        assert_eq!(sizes.len(), 13);
        assert_eq!(sizes[12], 4);
        assert_eq!(sizes.iter().sum::<u32>(), 100);
    }
}
