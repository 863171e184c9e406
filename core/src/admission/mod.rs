//! One admission cycle: which gated workloads to release, what capacity to hold, whom to preempt.

// The stages of a cycle, all private. What callers use is re-exported here: `decide`, its
// options and decisions, the memory one cycle hands the next, the workload order (for the
// release-score tests), placement's best fit (which the simulator's rivals share) and where
// waiting workloads stand (for Queue status); holds, preemption and victims are the cycle's own
// business.
mod decide;
mod decision;
mod hold;
mod hold_cost;
mod memory;
mod options;
mod order;
mod placement;
mod preempt;
mod score;
mod standing;
mod victims;

pub use decide::{REACHABLE_FRACTION, decide, earning_bound_s};
pub use decision::{
    Decisions, DescribeWorkloads, GivenUp, Hold, Preemption, PreemptionReason, QueueOutcome,
    Release, ReleaseReason, WaitReason, Waiting,
};
pub use hold_cost::HoldCost;
pub use memory::{
    CycleMemory, KeptHold, MAX_BLOCKERS_PER_GIVEN_UP, MAX_GIVEN_UP_PER_QUEUE, PREEMPTION_WINDOW_S,
    QueueMemory, StoredGivenUp, StoredHold,
};
pub use options::DecideOptions;
pub use order::compare_workloads;
pub use placement::best_fit;
pub use score::ReleaseScore;
pub use standing::{ReleaseCondition, Room, release_condition, service_order};
