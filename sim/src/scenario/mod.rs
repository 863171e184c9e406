//! Scenarios: the cluster, the queues, the parameters and the workload of one simulation.

mod check;
pub mod duration;
pub mod error;
pub mod gang;
mod load;
pub mod model;
pub mod policy_name;
mod trace_files;
pub(crate) mod workload;

use std::path::PathBuf;

use gpufair_core::params::{FairShareParams, PreemptionParams};

pub use error::ScenarioError;
pub use load::MAX_NODES_PER_POOL;
pub use load::{load, parse, parse_with_traces};
pub use policy_name::PolicyName;
pub use trace_files::{TraceReader, read_trace_file};
pub use workload::{MAX_JOBS, MAX_STREAM_PODS};

/// A node pool: `gpus` spread over nodes of `gpus_per_node`, the last node taking the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    pub gpus: u32,
    pub gpus_per_node: u32,
}

impl PoolSpec {
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
    pub pods: Vec<u32>,
}

impl JobSpec {
    pub fn gpus(&self) -> u32 {
        self.pods.iter().sum()
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
    pub kai: KaiParams,
    pub kueue_afs: KueueAfsParams,
    /// Sorted by submission time (ties in file order).
    pub jobs: Vec<JobSpec>,
}

impl Scenario {
    pub fn total_gpus(&self) -> u32 {
        self.pools.iter().map(|p| p.gpus).sum()
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
        };
        let sizes = pool.node_sizes();
        assert_eq!(sizes.len(), 13);
        assert_eq!(sizes[12], 4);
        assert_eq!(sizes.iter().sum::<u32>(), 100);
    }
}
