//! The world as one decision cycle sees it: plain data, indexed by position.
//!
//! The controller builds a snapshot from its Kubernetes caches; the simulator builds one from its
//! event state. Both hand it to [`crate::admission::decide`]. Identifiers are indices into the
//! snapshot's vectors; names and UIDs are carried so decisions are independent of input order
//! (everything is put in a canonical order by name/UID before deciding). Pools, nodes and queues
//! each have an index type of their own, so one is never taken for another.

use crate::admission::HoldCost;
use crate::index::{IndexVec, index_type};
use crate::labels::{Tier, Urgency, UserTier};

index_type!(
    /// Index into [`Snapshot::pools`].
    PoolId
);
index_type!(
    /// Index into [`Snapshot::nodes`].
    NodeId
);
index_type!(
    /// Index into [`Snapshot::queues`].
    QueueId
);
/// Index into [`Snapshot::resources`]; a request is a `Vec<u32>` with one count per resource.
pub type ResourceId = usize;

/// A GPU resource kind, e.g. `nvidia.com/gpu` (1.0) or `nvidia.com/mig-1g.10gb` (1/7).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceKind {
    pub name: String,
    pub gpu_equivalents: f64,
}

/// A set of nodes divided on its own (a node pool).
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
}

/// A node and its GPU resources, counted per [`ResourceKind`].
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub pool: PoolId,
    /// What the node offers in total (kubelet's allocatable).
    pub allocatable: Vec<u32>,
    /// What is not taken by running or bound pods.
    pub free: Vec<u32>,
}

/// What the ledger says about a queue right now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LedgerShares {
    /// Decayed entitled GPU-seconds ÷ decayed capacity.
    pub fair_share: f64,
    /// Decayed charged GPU-seconds ÷ decayed capacity.
    pub usage_share: f64,
    /// Decayed capacity, GPU-seconds: the denominator of both shares, so
    /// `(fair_share − usage_share) × decayed_capacity` is the queue's decayed deficit in
    /// GPU-seconds (what it is owed, or, negative, what it owes).
    pub decayed_capacity: f64,
    /// What the queue was entitled to lately, GPU-equivalents (the last full ledger bucket's
    /// average; 0 when unknown). Steadier than the cycle's own division, which moves with every
    /// arrival in other queues.
    pub recent_entitled: f64,
}

impl LedgerShares {
    /// No history: neither ahead nor behind.
    pub const NEUTRAL: Self = Self {
        fair_share: 0.0,
        usage_share: 0.0,
        decayed_capacity: 0.0,
        recent_entitled: 0.0,
    };

    /// The part of its entitlement over the window the queue did not receive, from 0 (received
    /// all of it, or more) to 1 (received nothing); 0 without entitlement or for non-finite
    /// input.
    pub fn shortfall(&self) -> f64 {
        let shortfall = 1.0 - self.usage_share / self.fair_share;
        if self.fair_share > 0.0 && shortfall.is_finite() {
            shortfall.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// Whether the queue received at least its entitlement over the window: false without
    /// history, where nothing is known either way.
    pub fn received_entitlement(&self) -> bool {
        self.fair_share > 0.0 && self.usage_share >= self.fair_share
    }

    /// Decayed entitled minus decayed charged GPU-seconds; 0 for non-finite input.
    pub fn deficit_gpu_s(&self) -> f64 {
        let deficit = (self.fair_share - self.usage_share) * self.decayed_capacity;
        if deficit.is_finite() { deficit } else { 0.0 }
    }
}

/// A queue's spec and history, as the policy needs them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueState {
    pub name: String,
    /// The pool this queue's pods run in (its `nodePool`, or the default pool).
    pub pool: PoolId,
    /// Base weight (> 0 for a queue that should receive over-quota capacity).
    pub weight: f64,
    /// GPU-equivalents given first when the queue has the demand.
    pub guaranteed: f64,
    /// Cap on GPU-equivalents held at once.
    pub limit: Option<f64>,
    /// Pods of this queue younger than this are never preempted.
    pub min_run_time_s: f64,
    pub shares: LedgerShares,
    /// When this queue last caused a preemption (for the cooldown).
    pub last_preemption_at: Option<f64>,
    /// When a workload of this queue was last evicted by preemption. For one cooldown after it
    /// the queue gets no releases, so the next cycle never undoes an eviction.
    pub last_evicted_at: Option<f64>,
}

#[cfg(test)]
impl LedgerShares {
    /// These shares over a decayed capacity of one GPU-second, no recent entitlement.
    pub(crate) fn of_unit_capacity(fair_share: f64, usage_share: f64) -> Self {
        Self {
            fair_share,
            usage_share,
            decayed_capacity: 1.0,
            recent_entitled: 0.0,
        }
    }
}

#[cfg(test)]
impl QueueState {
    /// A queue of weight 1 with no guarantee, limit or history, in `pool`.
    pub(crate) fn neutral(name: &str, pool: usize) -> Self {
        Self {
            name: name.into(),
            pool: PoolId::new(pool),
            weight: 1.0,
            guaranteed: 0.0,
            limit: None,
            min_run_time_s: 0.0,
            shares: LedgerShares::NEUTRAL,
            last_preemption_at: None,
            last_evicted_at: None,
        }
    }
}

/// A pod that holds GPUs now.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningPod {
    pub uid: String,
    /// The workload the pod belongs to: `<namespace>/<pod-group>` for a gang, else the pod's
    /// UID. Preemption takes or spares a workload whole, so every pod of a gang carries the same
    /// value.
    pub workload: String,
    pub queue: QueueId,
    pub node: NodeId,
    pub requests: Vec<u32>,
    pub tier: Tier,
    pub started_at: f64,
    /// When its workload was queued, as `PendingWorkload::created_at` counts it: a hold may
    /// end its drain by evicting its own queue's work queued after the held workload, which
    /// started out of its queue's order only because the held workload did not fit yet.
    pub queued_at: f64,
}

impl RunningPod {
    /// The workload it belongs to as preemption, backfill and holds name it: `workload`, or the
    /// pod's UID for a pod without one, which stands alone.
    pub fn workload_id(&self) -> &str {
        if self.workload.is_empty() {
            &self.uid
        } else {
            &self.workload
        }
    }
}

/// One pod of a pending workload: what it asks for. Decisions place a workload's pods by
/// their position in `PendingWorkload::pods`, so which pod is which stays with the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRequest {
    pub requests: Vec<u32>,
}

/// Pods that are released together: one pod, or a gang.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingWorkload {
    /// A stable identity: the pod UID, or `<namespace>/<pod-group>` for a gang.
    pub uid: String,
    pub queue: QueueId,
    pub tier: Tier,
    /// Seconds since the Unix epoch (or simulation start).
    pub deadline: Option<f64>,
    pub urgency: Urgency,
    /// The submitter's `user-tier`.
    pub user_tier: UserTier,
    pub created_at: f64,
    /// Gang size; the workload is not releasable until this many pods exist.
    pub min_member: u32,
    pub pods: Vec<PodRequest>,
}

/// Capacity the previous cycle held for a workload that still waits. Holds are decided afresh
/// each cycle, but a workload keeps the hold its queue earned until it starts, and keeps the
/// same nodes, so what drained for it is not handed to others because a share wobbled.
///
/// `cost` carries the hold's cost from cycle to cycle: copy it from the previous cycle's
/// [`Hold`](crate::admission::Hold), with `Snapshot::now` then in `at`. Left at zero, a hold is
/// treated as having cost nothing so far.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PreviousHold {
    /// `PendingWorkload::uid` of the held workload.
    pub workload: String,
    /// The nodes held for it, preferred again in the same order.
    pub nodes: Vec<NodeId>,
    /// What the hold had cost by `at`, and what of it stood idle or lent then: that counts
    /// from `at` until now.
    pub cost: HoldCost,
    /// When the previous cycle ran, on the snapshot's clock.
    pub at: f64,
}

/// A workload whose last hold was given up because what stood on its held nodes outlasted the
/// hold's idle budget and could not be evicted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GivenUpHold {
    /// `PendingWorkload::uid` of the workload.
    pub workload: String,
    /// The running workloads that blocked the drain (as in `Snapshot::refused_victims`). While
    /// any of them runs, a new hold for the workload is planned around its pods: they have
    /// already outlasted one whole idle budget, and draining for them again would only repeat it.
    pub blockers: Vec<String>,
    /// GPU-seconds the workload's holds given up after its first one spent of their idle
    /// budgets, all together.
    pub spent_gpu_s: f64,
    /// When its first hold was given up, on the snapshot's clock.
    pub first_given_up_at: f64,
}

/// Everything one decision cycle looks at.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    pub now: f64,
    pub resources: Vec<ResourceKind>,
    pub pools: IndexVec<PoolId, Pool>,
    pub nodes: IndexVec<NodeId, Node>,
    pub queues: IndexVec<QueueId, QueueState>,
    pub running: Vec<RunningPod>,
    pub pending: Vec<PendingWorkload>,
    /// Times of preemptions (one per victim) within the last hour, for the rate limit.
    pub recent_preemptions: Vec<f64>,
    /// The previous cycle's holds (`Decisions::holds`, by workload UID and node).
    pub previous_holds: Vec<PreviousHold>,
    /// Running workloads (`RunningPod::workload`, or the pod UID for one without) whose
    /// eviction was refused recently, by a disruption budget or a 429. They are not chosen as
    /// victims while listed, so a preemptor turns to another victim instead of asking for the
    /// same refused one every cycle; the caller decides how long a refusal lasts.
    pub refused_victims: Vec<String>,
    /// Running workloads (as in `refused_victims`) that were released into capacity held for
    /// another workload ([`ReleaseReason::Backfill`](crate::admission::ReleaseReason::Backfill))
    /// and whose hold still stands. They run on that condition: once the rest of the held nodes
    /// has drained, the held workload evicts them, whatever their age or queue. The caller
    /// drops a workload from the list when the hold it went into ends.
    pub backfill: Vec<String>,
    /// Workloads whose last hold was given up, with what blocked its drain.
    pub given_up_holds: Vec<GivenUpHold>,
}

impl Snapshot {
    /// GPU-equivalents of a request vector.
    pub fn gpu_equivalents(&self, requests: &[u32]) -> f64 {
        requests
            .iter()
            .zip(&self.resources)
            .map(|(count, kind)| f64::from(*count) * kind.gpu_equivalents)
            .sum()
    }

    /// GPU-equivalents of a pending workload: all its pods' requests.
    pub fn workload_gpu_equivalents(&self, workload: &PendingWorkload) -> f64 {
        workload
            .pods
            .iter()
            .map(|pod| self.gpu_equivalents(&pod.requests))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::LedgerShares;

    fn shares(fair_share: f64, usage_share: f64) -> LedgerShares {
        LedgerShares::of_unit_capacity(fair_share, usage_share)
    }

    #[test]
    fn shortfall_is_the_part_of_the_entitlement_not_received() {
        assert!((shares(0.5, 0.4).shortfall() - 0.2).abs() < 1e-12);
        assert_eq!(shares(0.5, 0.0).shortfall(), 1.0);
        // Received more than its entitlement, none at all, or nonsense: short of nothing.
        assert_eq!(shares(0.5, 0.7).shortfall(), 0.0);
        assert_eq!(shares(0.0, 0.0).shortfall(), 0.0);
        assert_eq!(shares(f64::NAN, 0.1).shortfall(), 0.0);
        assert_eq!(shares(0.5, f64::INFINITY).shortfall(), 0.0);
        assert_eq!(LedgerShares::NEUTRAL.shortfall(), 0.0);
    }

    #[test]
    fn a_queue_received_its_entitlement_only_where_history_shows_it() {
        assert!(shares(0.5, 0.5).received_entitlement());
        assert!(shares(0.5, 0.7).received_entitlement());
        assert!(!shares(0.5, 0.49).received_entitlement());
        assert!(!LedgerShares::NEUTRAL.received_entitlement());
        assert!(!shares(f64::NAN, 0.5).received_entitlement());
        assert!(!shares(0.5, f64::NAN).received_entitlement());
    }
}
