//! The scenario file as written: every key, with `deny_unknown_fields` so a typo is an error.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpufair_core::schema::{FairShareConfig, PreemptionConfig, ReleaseScoreConfig};
use serde::Deserialize;

use super::duration::Seconds;
use super::policy_name::PolicyName;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Simulated time; nothing happens after it.
    pub duration: Seconds,
    /// Metrics ignore everything before this (the ledger still learns from it).
    #[serde(default)]
    pub warmup: Option<Seconds>,
    #[serde(default)]
    pub seed: u64,
    /// Gate-release cycle: decisions are taken on this grid after something changed.
    #[serde(default)]
    pub cycle: Option<Seconds>,
    /// While workloads wait, a cycle also runs this often even if nothing changed.
    #[serde(default)]
    pub resync: Option<Seconds>,
    pub cluster: ClusterFile,
    pub queues: Vec<QueueFile>,
    /// The gpufair config file's `fairshare` block (core's schema); `fairshare.pools` is keyed
    /// by `cluster.pools[].name`.
    #[serde(default)]
    pub fairshare: FairShareConfig,
    /// The gpufair config file's `preemption` block (core's schema).
    #[serde(default)]
    pub preemption: PreemptionConfig,
    #[serde(default)]
    pub policies: Option<Vec<PolicyName>>,
    #[serde(default)]
    pub rivals: RivalsFile,
    /// The release score's weights: the config file's `releaseScore` block (core's schema).
    #[serde(default)]
    pub release_score: Option<ReleaseScoreConfig>,
    pub workload: WorkloadFile,
}

/// What a workload says about itself, as the labels and annotations of its pods would: the
/// same keys on streams and explicit jobs, each read by core's label grammar.
#[derive(Debug, Clone, Default)]
pub struct WorkloadLabelsFile {
    /// `ai-task-type`: train, inference or processing.
    pub task_type: Option<String>,
    /// `urgency-level`: high, medium or low.
    pub urgency: Option<String>,
    /// `user-tier`: premium, standard or basic.
    pub user_tier: Option<String>,
    /// Deadline as an offset from submission.
    pub deadline: Option<Seconds>,
    /// Deadline as a time of the scenario (from its start).
    pub deadline_at: Option<Seconds>,
    /// The GPU resource each pod asks for: nvidia.com/gpu (default), nvidia.com/mig-<profile>
    /// or nvidia.com/gpu.shared; `gpus` then counts units of it.
    pub resource: Option<String>,
}

macro_rules! labels_of {
    ($t:ty) => {
        impl $t {
            pub fn labels(&self) -> WorkloadLabelsFile {
                WorkloadLabelsFile {
                    task_type: self.task_type.clone(),
                    urgency: self.urgency.clone(),
                    user_tier: self.user_tier.clone(),
                    deadline: self.deadline,
                    deadline_at: self.deadline_at,
                    resource: self.resource.clone(),
                }
            }
        }
    };
}
labels_of!(StreamFile);
labels_of!(JobFile);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterFile {
    pub pools: Vec<PoolFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolFile {
    pub name: String,
    pub gpus: u32,
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
    /// MIG instances each node offers besides its whole GPUs, by profile (`3g.40gb: 2`).
    #[serde(default)]
    pub mig: BTreeMap<String, u32>,
    /// Time-sliced replicas (`nvidia.com/gpu.shared`) each node offers besides its whole GPUs.
    #[serde(default)]
    pub shared_replicas: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueueFile {
    pub name: String,
    #[serde(default)]
    pub weight: Option<f64>,
    #[serde(default)]
    pub guaranteed: Option<f64>,
    #[serde(default)]
    pub limit: Option<f64>,
    /// The pool its jobs run in; the first pool when absent.
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub min_run_time: Option<Seconds>,
    /// Cold start: the usage share the ledger starts from (0..1).
    #[serde(default)]
    pub initial_usage: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RivalsFile {
    #[serde(default)]
    pub kai: KaiFile,
    #[serde(default)]
    pub kueue_afs: KueueAfsFile,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KaiFile {
    /// KAI's kValue; defaults to the scenario's fairshare k.
    #[serde(default)]
    pub k: Option<f64>,
    /// Sliding usage window; defaults to the scenario's fairshare window.
    #[serde(default)]
    pub window: Option<Seconds>,
    /// Half-life of usage inside the window; KAI's default is none.
    #[serde(default)]
    pub half_life: Option<Seconds>,
    /// Reclaim (preempt) for queues below their fair share; on by default.
    #[serde(default)]
    pub reclaim: Option<bool>,
    /// KAI's reclaimMinRuntime: running jobs younger than this are not reclaimed.
    #[serde(default)]
    pub reclaim_min_runtime: Option<Seconds>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KueueAfsFile {
    /// usageHalfLifeTime; defaults to the half-life of the scenario's fairshare decay.
    #[serde(default)]
    pub half_life: Option<Seconds>,
    /// usageSamplingInterval (Kueue's default 5m).
    #[serde(default)]
    pub sampling_interval: Option<Seconds>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadFile {
    #[serde(default)]
    pub streams: Vec<StreamFile>,
    #[serde(default)]
    pub jobs: Vec<JobFile>,
    #[serde(default)]
    pub traces: Vec<TraceFile>,
}

/// Poisson arrivals of identical jobs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StreamFile {
    pub queue: String,
    #[serde(default)]
    pub start: Option<Seconds>,
    #[serde(default)]
    pub end: Option<Seconds>,
    /// Mean time between arrivals.
    pub interarrival: Seconds,
    pub gpus: u32,
    #[serde(default)]
    pub pods: Option<u32>,
    pub duration: Seconds,
    /// `fixed` (default) or `exponential` run times with `duration` as the mean.
    #[serde(default)]
    pub duration_distribution: Option<DurationDistribution>,
    /// `ai-task-type`: train, inference or processing.
    #[serde(default)]
    pub task_type: Option<String>,
    /// `urgency-level`: high, medium or low.
    #[serde(default)]
    pub urgency: Option<String>,
    /// `user-tier`: premium, standard or basic.
    #[serde(default)]
    pub user_tier: Option<String>,
    /// Deadline as an offset from submission.
    #[serde(default)]
    pub deadline: Option<Seconds>,
    /// Deadline as a time of the scenario (from its start).
    #[serde(default)]
    pub deadline_at: Option<Seconds>,
    /// The GPU resource each pod asks for: nvidia.com/gpu (default), nvidia.com/mig-<profile>
    /// or nvidia.com/gpu.shared; `gpus` then counts units of it.
    #[serde(default)]
    pub resource: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurationDistribution {
    Fixed,
    Exponential,
}

/// One explicit job.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobFile {
    #[serde(default)]
    pub name: Option<String>,
    pub queue: String,
    pub submit: Seconds,
    pub gpus: u32,
    #[serde(default)]
    pub pods: Option<u32>,
    pub duration: Seconds,
    /// `ai-task-type`: train, inference or processing.
    #[serde(default)]
    pub task_type: Option<String>,
    /// `urgency-level`: high, medium or low.
    #[serde(default)]
    pub urgency: Option<String>,
    /// `user-tier`: premium, standard or basic.
    #[serde(default)]
    pub user_tier: Option<String>,
    /// Deadline as an offset from submission.
    #[serde(default)]
    pub deadline: Option<Seconds>,
    /// Deadline as a time of the scenario (from its start).
    #[serde(default)]
    pub deadline_at: Option<Seconds>,
    /// The GPU resource each pod asks for: nvidia.com/gpu (default), nvidia.com/mig-<profile>
    /// or nvidia.com/gpu.shared; `gpus` then counts units of it.
    #[serde(default)]
    pub resource: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    Philly,
    Helios,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueBy {
    /// Philly's virtual cluster id.
    Cluster,
    /// Helios' user id.
    User,
}

/// A real trace replayed as arrivals.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TraceFile {
    pub file: PathBuf,
    pub format: TraceFormat,
    pub queue_by: QueueBy,
    /// Trace key (a cluster id, a user id, or an inclusive user range `a-b`) → queue name.
    /// Without a map, the key itself is the queue name.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
    /// Queue for keys the map does not name; without it such a key is an error.
    #[serde(default)]
    pub default_queue: Option<String>,
    /// Only jobs submitted in [from, until) after the trace's first submission.
    #[serde(default)]
    pub from: Option<Seconds>,
    #[serde(default)]
    pub until: Option<Seconds>,
    /// Moves the trace's first submission to this simulated time.
    #[serde(default)]
    pub offset: Option<Seconds>,
}
