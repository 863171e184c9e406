//! What one decision cycle returns. Every entry carries a reason, so gpufair can explain itself
//! in Events, logs, metrics and the simulator's report.

use std::fmt;

use super::hold_cost::HoldCost;
use super::score::ReleaseScore;
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId, PreviousHold, QueueId};

/// Release a pending workload: remove its scheduling gates.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    /// Index into `Snapshot::pending`.
    pub workload: usize,
    /// The node each pod (in `PendingWorkload::pods` order) was placed on in the plan.
    /// kube-scheduler makes the real binding; the plan proves a placement exists.
    pub placements: Vec<NodeId>,
    pub reason: ReleaseReason,
}

/// Why a workload was released.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReleaseReason {
    /// Its queue was within its fair share after the release.
    WithinFairShare {
        allocated_after: f64,
        fair_share: f64,
    },
    /// Its queue was over its fair share, but the capacity was idle and held for no one.
    IdleCapacity {
        allocated_after: f64,
        fair_share: f64,
    },
    /// It fits only in capacity held for another workload (`for_workload`, an index into
    /// `Snapshot::pending`), which would stand idle until that workload's nodes drain. It runs
    /// there on condition: list it in `Snapshot::backfill` while the hold lasts, and it is
    /// evicted once the rest of the held nodes has drained.
    Backfill {
        for_workload: usize,
        allocated_after: f64,
        fair_share: f64,
    },
    /// It took idle capacity held for another workload (`for_workload`, an index into
    /// `Snapshot::pending`) because its queue stands further below its time-aware share than
    /// the holder's queue: `standing` and `holder_standing` are each queue's allocation over
    /// that share, before the release. It runs as any release does, never evicted for the hold.
    Lent {
        for_workload: usize,
        standing: f64,
        holder_standing: f64,
        allocated_after: f64,
        fair_share: f64,
    },
    /// Realtime work (`ai-task-type: inference`) that keeps its queue within its time-aware
    /// share took idle capacity held for a workload of a lower tier (`for_workload`, an index
    /// into `Snapshot::pending`): a latency-bound answer does not wait for another workload's
    /// drain. It runs as any release does, never evicted for the hold (no preemption takes work
    /// of a more important tier than the preemptor's).
    RealtimePastHold {
        for_workload: usize,
        allocated_after: f64,
        claim: f64,
    },
}

/// A reason that mentions pending workloads by their index in `Snapshot::pending`, and can be
/// put in words with them named otherwise: the controller names a pod or pod group, the
/// simulator and `Display` the index.
pub trait DescribeWorkloads {
    /// Writes the reason, naming each workload it mentions with `name`.
    fn write_named(
        &self,
        f: &mut fmt::Formatter<'_>,
        name: &dyn Fn(usize) -> String,
    ) -> fmt::Result;

    /// The reason in words, naming each workload it mentions with `name`.
    fn describe(&self, name: &dyn Fn(usize) -> String) -> String {
        Named(self, name).to_string()
    }
}

impl DescribeWorkloads for ReleaseReason {
    fn write_named(
        &self,
        f: &mut fmt::Formatter<'_>,
        name: &dyn Fn(usize) -> String,
    ) -> fmt::Result {
        match self {
            Self::WithinFairShare {
                allocated_after,
                fair_share,
            } => write!(
                f,
                "queue stays within its fair share ({allocated_after:.2} of {fair_share:.2} GPU-equivalents)"
            ),
            Self::IdleCapacity {
                allocated_after,
                fair_share,
            } => write!(
                f,
                "capacity is idle: queue goes above its fair share ({allocated_after:.2} of {fair_share:.2} GPU-equivalents) until others need it"
            ),
            Self::Backfill {
                for_workload,
                allocated_after,
                fair_share,
            } => write!(
                f,
                "backfill: runs in capacity held for {} ({allocated_after:.2} of {fair_share:.2} GPU-equivalents) and is evicted once that workload's nodes have drained otherwise",
                name(*for_workload)
            ),
            Self::Lent {
                for_workload,
                standing,
                holder_standing,
                allocated_after,
                fair_share,
            } => write!(
                f,
                "lent capacity held for {}: queue holds {standing:.2} of its time-aware share, the holder's {holder_standing:.2}, so it is the more deserving ({allocated_after:.2} of a fair share of {fair_share:.2} GPU-equivalents after release); it is not evicted for the hold",
                name(*for_workload)
            ),
            Self::RealtimePastHold {
                for_workload,
                allocated_after,
                claim,
            } => write!(
                f,
                "realtime work took capacity held for {}, a workload of a lower tier: its queue stays within its time-aware share ({allocated_after:.2} of {claim:.2} GPU-equivalents after release); it is not evicted for the hold",
                name(*for_workload)
            ),
        }
    }
}

impl fmt::Display for ReleaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_named(f, &by_index)
    }
}

/// Names a pending workload by its index, where nothing better is known.
fn by_index(workload: usize) -> String {
    format!("workload #{workload}")
}

/// A reason displayed with a way to name the workloads it mentions.
struct Named<'a, R: ?Sized>(&'a R, &'a dyn Fn(usize) -> String);

impl<R: DescribeWorkloads + ?Sized> fmt::Display for Named<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write_named(f, self.1)
    }
}

/// Capacity kept free for a workload that does not fit yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// Index into `Snapshot::pending`.
    pub workload: usize,
    pub pool: PoolId,
    /// Per node, the resource counts held (free now and reserved), by resource index.
    pub nodes: Vec<(NodeId, Vec<u32>)>,
    /// GPU-equivalents still missing on the held nodes (running pods must finish or be preempted).
    pub missing_gpu_equivalents: f64,
    /// Per held node, the resource counts still missing there.
    pub missing: Vec<(NodeId, Vec<u32>)>,
    /// What the hold has cost, this hold's earlier cycles included, and what of it stands idle
    /// or lent after this cycle's releases (pass it back in `PreviousHold::cost`).
    pub cost: HoldCost,
}

impl Hold {
    /// What the next cycle needs of this hold (`Snapshot::previous_holds`): `workload` is the
    /// held workload's UID and `at` this cycle's `Snapshot::now`.
    pub fn carried(&self, workload: String, at: f64) -> PreviousHold {
        PreviousHold {
            workload,
            nodes: self.nodes.iter().map(|(n, _)| *n).collect(),
            cost: self.cost,
            at,
        }
    }
}

/// Evict a running workload, all of its pods, so a held workload can start.
#[derive(Debug, Clone, PartialEq)]
pub struct Preemption {
    /// The victim workload's identity (`RunningPod::workload`).
    pub victim_workload: String,
    /// Every running pod of the victim workload: indices into `Snapshot::running`.
    pub pods: Vec<usize>,
    /// GPU-equivalents the victim workload holds in total.
    pub size: f64,
    /// Index into `Snapshot::pending`: the workload it makes room for.
    pub for_workload: usize,
    pub reason: PreemptionReason,
}

/// Why a preemption was allowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PreemptionReason {
    /// The preemptor's queue is below its guarantee; the victim's queue stays at or above its own.
    BelowGuarantee {
        preemptor_allocated: f64,
        preemptor_guaranteed: f64,
    },
    /// The preemptor's queue is far below its fair share, for a workload that fits within that
    /// share or, larger, whose hold is earned; the victim's queue stands well above its own.
    FarBelowFairShare {
        preemptor_ratio: f64,
        victim_ratio: f64,
    },
    /// The victim was released as backfill into capacity held for the preemptor, and the rest
    /// of the held nodes has drained: it was started on the condition that it leaves now.
    Backfill,
    /// The preemptor's hold has left what it may before eviction (its idle budget, its size ×
    /// `holdIdleLimit`; less for a hold of more than half its pool) standing free while the
    /// victims still run on its held nodes, and evicting them loses no more than a few times
    /// what it kept idle: given up, that idle time would be thrown away and the drain begun
    /// again later. The victim's queue stays at or above its guarantee.
    StalledDrain {
        /// GPU-hours the hold has left idle so far.
        idle_gpu_hours: f64,
        /// GPU-hours the hold may leave idle before its drain may end by eviction: its idle
        /// budget, or a share of it for a hold of more than half its pool.
        budget_gpu_hours: f64,
    },
    /// The preemptor's hold, at least half assembled and still within its idle budget, has
    /// already left idle or lent at least twice the GPU-hours of work evicting the victims
    /// throws away: waiting on would cost more again, with no bound on how long the victims
    /// still run. The victim's queue keeps its guarantee and is left standing no lower than the
    /// preemptor's.
    IdleOutweighsLoss {
        /// GPU-hours the hold has left idle or lent so far (as its idle budget counts them).
        idle_gpu_hours: f64,
        /// The preemptor's queue's allocation over the larger of its time-aware and fair share.
        holder_standing: f64,
    },
}

impl fmt::Display for PreemptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BelowGuarantee {
                preemptor_allocated,
                preemptor_guaranteed,
            } => write!(
                f,
                "preemptor's queue holds {preemptor_allocated:.2} of its {preemptor_guaranteed:.2} guaranteed GPU-equivalents"
            ),
            Self::FarBelowFairShare {
                preemptor_ratio,
                victim_ratio,
            } => write!(
                f,
                "preemptor's queue holds {:.0}% of its fair share; victim's queue holds {:.0}% of its own",
                preemptor_ratio * 100.0,
                victim_ratio * 100.0
            ),
            Self::Backfill => f.write_str(
                "victim ran as backfill in capacity held for the preemptor, whose nodes have drained otherwise",
            ),
            Self::StalledDrain {
                idle_gpu_hours,
                budget_gpu_hours,
            } => write!(
                f,
                "the preemptor's hold has kept {idle_gpu_hours:.1} GPU-hours idle waiting for the victims, past the {budget_gpu_hours:.1} it waits before evicting"
            ),
            Self::IdleOutweighsLoss {
                idle_gpu_hours,
                holder_standing,
            } => write!(
                f,
                "the preemptor's hold has kept {idle_gpu_hours:.1} GPU-hours idle waiting for the victims, at least twice the work evicting them loses; the preemptor's queue holds {:.0}% of its time-aware share, the victims' no less after eviction",
                holder_standing * 100.0
            ),
        }
    }
}

/// Why a pending workload stays gated this cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WaitReason {
    /// Fewer pods exist than the gang's `min-member`.
    GangIncomplete { present: u32, min_member: u32 },
    /// No placement of all its pods exists in the free capacity.
    NoFit,
    /// It would fit, but only in capacity held for another workload.
    CapacityHeld { for_workload: usize },
    /// Capacity is being held for this workload until enough frees up.
    Holding,
    /// Its queue is at its `limit`.
    QueueLimit { limit: f64 },
    /// It can never fit: a pod is larger than any node of its pool, or the gang larger than the pool.
    NeverFits,
    /// It does not fit, and its queue has not earned a hold for it yet: its time-aware share
    /// (fair share plus what it is owed, spread over the catch-up period) is below what the
    /// queue would hold with it, and will not cover it within the pool's `holdLead`; nor has
    /// it waited long enough to have earned its hold by waiting.
    NotEarned {
        needed: f64,
        earned: f64,
        /// Seconds until capacity is held for it, the sooner of two: until the time-aware share,
        /// at the pace it grows now (what the queue is owed grows by its entitlement less what
        /// it runs), comes within the pool's `holdLead` of covering `needed`; and until it has
        /// waited long enough for its queue's shortfall. `None` while neither comes: the queue
        /// runs at least what it is entitled to and received its entitlement over the window,
        /// or its pool keeps no history.
        eta_s: Option<f64>,
    },
    /// Its queue would hold more than the pool leaves beside the guarantees of other queues that
    /// have demand, so it would only start to be evicted again.
    BeyondGuarantees { needed: f64, available: f64 },
    /// Its last hold was given up waiting for `blockers` running workloads that could not be
    /// evicted, and only nodes where any of them still runs could take it: it is held again
    /// once they end, or once other nodes can be drained for it.
    HoldGivenUp { blockers: u32 },
    /// Its holds given up after its first have left `spent_gpu_s` GPU-seconds idle, more than
    /// the share of its pool's GPU-time since then that such holds may (`allowed_gpu_s`): it is
    /// held again in `resumes_in_s`, or starts before wherever it fits.
    GivenUpTooOften {
        spent_gpu_s: f64,
        allowed_gpu_s: f64,
        resumes_in_s: f64,
    },
    /// Its queue lost a workload to preemption less than a cooldown ago; releasing now could undo
    /// that eviction. `at` is the snapshot's clock; the message gives the relative times, which
    /// read the same whether the clock is the Unix epoch (the controller) or a simulation's.
    RecentlyPreempted {
        at: f64,
        ago_s: f64,
        resumes_in_s: f64,
    },
}

impl DescribeWorkloads for WaitReason {
    fn write_named(
        &self,
        f: &mut fmt::Formatter<'_>,
        name: &dyn Fn(usize) -> String,
    ) -> fmt::Result {
        match self {
            Self::GangIncomplete {
                present,
                min_member,
            } => {
                write!(f, "gang has {present} of {min_member} pods")
            }
            Self::NoFit => f.write_str("no placement of all its pods exists in free capacity"),
            Self::CapacityHeld { for_workload } => {
                write!(
                    f,
                    "free capacity is held for a more deserving workload ({})",
                    name(*for_workload)
                )
            }
            Self::Holding => f.write_str("capacity is being held for it as it frees up"),
            Self::QueueLimit { limit } => {
                write!(f, "queue is at its limit of {limit:.2} GPU-equivalents")
            }
            Self::NeverFits => f.write_str("it cannot fit in its pool even when empty"),
            Self::NotEarned { needed, earned, .. } => write!(
                f,
                "queue has not earned capacity for it yet: it would hold {needed:.2} GPU-equivalents, its time-aware share is {earned:.2}"
            ),
            Self::BeyondGuarantees { needed, available } => write!(
                f,
                "queue would hold {needed:.2} GPU-equivalents, but other queues' guarantees leave it {available:.2}"
            ),
            Self::HoldGivenUp { blockers } => write!(
                f,
                "its last hold was given up waiting for {blockers} running workload{} that could not be evicted, and no nodes without them can take it",
                if *blockers == 1 { "" } else { "s" }
            ),
            Self::GivenUpTooOften {
                spent_gpu_s,
                allowed_gpu_s,
                resumes_in_s,
            } => write!(
                f,
                "its holds given up after the first left {:.1} GPU-hours idle, more than the {:.1} its pool allows by now; it is held again {}",
                spent_gpu_s / 3600.0,
                allowed_gpu_s / 3600.0,
                crate::time_text::from_now(*resumes_in_s)
            ),
            Self::RecentlyPreempted {
                ago_s,
                resumes_in_s,
                ..
            } => write!(
                f,
                "a workload of its queue was preempted {}; its releases resume {} (the preemption cooldown)",
                crate::time_text::ago(*ago_s),
                crate::time_text::from_now(*resumes_in_s)
            ),
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_named(f, &by_index)
    }
}

/// A pending workload left gated, with the reason and where it stands in its queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waiting {
    pub workload: usize,
    pub reason: WaitReason,
    /// Its release score this cycle, part by part.
    pub score: ReleaseScore,
    /// Its 1-based place in its queue's release order (tier, then score).
    pub position: usize,
    /// How many workloads wait in its queue.
    pub queue_length: usize,
}

/// Per queue, the numbers behind the decisions (written to Queue status and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueOutcome {
    pub queue: QueueId,
    /// Running plus pending GPU-equivalents, capped by the limit.
    pub demand: f64,
    /// Running GPU-equivalents before this cycle's releases.
    pub allocated: f64,
    /// Pending GPU-equivalents before this cycle's releases.
    pub pending: f64,
    /// Instantaneous entitlement: the division with K = 0 (what the ledger's fair share integrates).
    pub entitled: f64,
    /// The history-corrected effective weight.
    pub effective_weight: f64,
    /// This cycle's fair share: the division by effective weight.
    pub fair_share: f64,
    /// Running GPU-equivalents after this cycle's releases (before preemptions take effect).
    pub allocated_after: f64,
}

/// A hold given up: what it was for, and what stood in the way of its drain.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GivenUp {
    /// Index into `Snapshot::pending` of the workload held for.
    pub workload: usize,
    /// Running workloads (`RunningPod::workload`, or the pod UID for one without) on the held
    /// nodes where capacity was still missing, none of which could be evicted: they outlasted
    /// the whole idle budget. Empty when the hold was given up because its queue no longer
    /// earned it. Carried to later cycles as [`Snapshot::given_up_holds`](crate::snapshot::Snapshot).
    pub blockers: Vec<String>,
    /// GPU-seconds the hold had spent of its idle budget.
    pub spent_gpu_s: f64,
}

/// The whole outcome of a cycle.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decisions {
    pub releases: Vec<Release>,
    pub holds: Vec<Hold>,
    pub preemptions: Vec<Preemption>,
    pub waiting: Vec<Waiting>,
    /// Holds given up this cycle: each had left its capacity idle for as long as
    /// `FairShareParams::hold_idle_limit_s` allows.
    pub given_up: Vec<GivenUp>,
    /// One per queue, in `Snapshot::queues` order.
    pub queues: IndexVec<QueueId, QueueOutcome>,
}
