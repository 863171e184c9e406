//! The parts of a [`Snapshot`] the policy's tests build again and again, written once: whole-GPU
//! nodes, neutral queues, running pods and pending workloads with the plainest labels. A test
//! that needs another field sets it with struct update syntax (`..pending(..)`), so what it
//! changes is all it spells out.
//!
//! For tests, benches and fuzz targets only (the `test-support` feature).

use crate::index::IndexVec;
use crate::labels::{Tier, Urgency, UserTier};
use crate::snapshot::{
    LedgerShares, Node, NodeId, PendingWorkload, PodRequest, Pool, PoolId, QueueId, QueueState,
    ResourceKind, RunningPod, Snapshot,
};

/// A node of pool 0 with `gpus` whole GPUs, `free` of them not taken.
pub fn node(name: &str, gpus: u32, free: u32) -> Node {
    Node {
        name: name.into(),
        pool: PoolId::new(0),
        allocatable: vec![gpus],
        free: vec![free],
    }
}

/// A queue of pool 0 with no limit, no minimum run time, neutral ledger shares and no
/// preemption history.
pub fn queue(name: &str, weight: f64, guaranteed: f64) -> QueueState {
    QueueState {
        name: name.into(),
        pool: PoolId::new(0),
        weight,
        guaranteed,
        limit: None,
        min_run_time_s: 0.0,
        shares: LedgerShares::NEUTRAL,
        last_preemption_at: None,
        last_evicted_at: None,
    }
}

/// A pod that is its own workload, holding `gpus` whole GPUs on `node`, in the elastic tier,
/// queued and started at `started_at`.
pub fn running(uid: &str, queue: usize, node: usize, gpus: u32, started_at: f64) -> RunningPod {
    RunningPod {
        uid: uid.into(),
        workload: uid.into(),
        queue: QueueId::new(queue),
        node: NodeId::new(node),
        requests: vec![gpus],
        tier: Tier::Elastic,
        started_at,
        queued_at: started_at,
    }
}

/// A workload of one pod per entry of `pods`, each asking for that many whole GPUs, released
/// only whole (a gang of all its pods); elastic tier, medium urgency, standard user tier, no
/// deadline, created at 0.
pub fn pending(uid: &str, queue: usize, pods: &[u32]) -> PendingWorkload {
    workload(uid, queue, pods.iter().map(|&gpus| vec![gpus]))
}

/// [`pending`], with each pod's request given in full: one count per resource of the snapshot.
pub fn pending_of(uid: &str, queue: usize, pods: &[&[u32]]) -> PendingWorkload {
    workload(uid, queue, pods.iter().map(|requests| requests.to_vec()))
}

fn workload(
    uid: &str,
    queue: usize,
    requests: impl ExactSizeIterator<Item = Vec<u32>>,
) -> PendingWorkload {
    PendingWorkload {
        uid: uid.into(),
        queue: QueueId::new(queue),
        tier: Tier::Elastic,
        deadline: None,
        urgency: Urgency::Medium,
        user_tier: UserTier::Standard,
        created_at: 0.0,
        min_member: requests.len() as u32,
        pods: requests.map(|requests| PodRequest { requests }).collect(),
    }
}

/// A snapshot at 10,000 s (past every cooldown and window start) of one pool named `pool` of
/// whole-GPU `nodes`, and nothing else.
pub fn one_gpu_pool(pool: &str, nodes: impl Into<IndexVec<NodeId, Node>>) -> Snapshot {
    Snapshot {
        now: 10_000.0,
        resources: vec![ResourceKind {
            name: crate::units::WHOLE_GPU_RESOURCE.into(),
            gpu_equivalents: 1.0,
        }],
        pools: vec![Pool { name: pool.into() }].into(),
        nodes: nodes.into(),
        ..Snapshot::default()
    }
}
