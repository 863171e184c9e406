//! What the controller's decision cycles hand one another, stored per queue in
//! `Queue.status.carried` so that a new leader carries on where the last one stopped: a hold
//! keeps the idle budget it has spent and the backfill standing in it, and cool-downs and the
//! hourly preemption cap keep the evictions they count.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One queue's part of what the decision cycles carry. Every field is written at every status
/// write (null or empty when there is nothing), so a merge patch never leaves an older one behind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarriedStatus {
    /// Capacity held for the queue's workloads while their nodes drain.
    #[serde(default)]
    pub holds: Vec<HoldStatus>,
    /// When a workload was last evicted to make room for one of the queue's, seconds since the
    /// Unix epoch.
    #[serde(default)]
    pub last_preemption: Option<f64>,
    /// When the queue last lost a workload to preemption, seconds since the Unix epoch.
    #[serde(default)]
    pub last_eviction: Option<f64>,
    /// When each of the queue's pods evicted within the last hour went, seconds since the Unix
    /// epoch, oldest first.
    #[serde(default)]
    pub evictions: Vec<f64>,
    /// The queue's workloads whose last hold was given up, with the running workloads that
    /// blocked its drain: the next hold for such a workload is planned around them while they run.
    #[serde(default)]
    pub given_up: Vec<GivenUpStatus>,
}

/// A workload whose last hold was given up.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GivenUpStatus {
    /// The workload: its pod group's key, or a lone pod's UID.
    pub workload: String,
    /// What stood on its held nodes, could not be evicted and outlasted the hold's idle budget:
    /// pod group keys or pod UIDs.
    pub blockers: Vec<String>,
    /// When the hold was given up, seconds since the Unix epoch. Absent in a status written
    /// before it was recorded, and then read as the oldest: a queue remembers only its most
    /// recently given-up holds, so that its status stays within the API server's object size.
    #[serde(default)]
    pub at: Option<f64>,
    /// When its first hold was given up, seconds since the Unix epoch. Absent in a status
    /// written before it was recorded, and then read as the epoch: no idle time of earlier
    /// give-ups is counted against it.
    #[serde(default)]
    pub first_at: Option<f64>,
    /// GPU-seconds of idle budget its holds given up after the first spent, all together: while
    /// that exceeds the share of its pool's GPU-time since `firstAt` such holds may spend, it
    /// is not held again.
    #[serde(default)]
    pub later_idle_gpu_seconds: f64,
}

/// Capacity held for one waiting workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HoldStatus {
    /// The held workload: its pod group's key, or a lone pod's UID.
    pub workload: String,
    /// The nodes held for it, in the order it prefers them.
    pub nodes: Vec<String>,
    /// GPU-seconds counted against the hold's idle budget (left idle or lent) up to `at`.
    pub idle_gpu_seconds: f64,
    /// GPU-equivalents the hold left idle at `at`.
    pub idle_gpu_equivalents: f64,
    /// GPU-equivalents of the hold lent to other work at `at`.
    pub lent_gpu_equivalents: f64,
    /// Of `idleGpuSeconds`, the GPU-seconds no waiting workload could have used: a hold whose
    /// drain cannot be ended is given up only once the rest makes up its budget.
    #[serde(default)]
    pub unwanted_idle_gpu_seconds: f64,
    /// Of `idleGpuEquivalents`, those no waiting workload could use at `at`.
    #[serde(default)]
    pub unwanted_idle_gpu_equivalents: f64,
    /// When the cycle that last kept the hold ran, seconds since the Unix epoch.
    pub at: f64,
    /// Running workloads released as backfill into the hold: pod group keys or pod UIDs.
    #[serde(default)]
    pub backfill: Vec<String>,
}

/// A stored `status.carried` that does not hold together, naming the field and what it accepts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("status.carried.{field} = {value} is invalid: expected {expected}")]
pub struct CarriedStatusError {
    pub field: String,
    pub value: String,
    pub expected: &'static str,
}
