//! The policies the simulator compares. gpufair's variants drive `gpufair_core::admission::decide`;
//! the rivals are written here from their published definitions (fairshare.md §1, §2.1).

pub mod eviction_cause;
pub mod fifo;
pub mod gpufair;
pub mod kai;
pub mod kueue_afs;
pub mod placement;
pub mod sliding_usage;

pub use eviction_cause::EvictionCause;

use crate::engine::world::{JobId, NodeIndex, World};
use crate::scenario::{PolicyName, Scenario};

/// What a policy wants done at the end of a cycle: evictions first, then starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actions {
    /// A job to evict and the rule it follows.
    pub preempt: Vec<(JobId, EvictionCause)>,
    /// A job and the node (global index) of each of its pods.
    pub start: Vec<(JobId, Vec<NodeIndex>)>,
}

/// What holding capacity cost a policy that holds, after warm-up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HoldCost {
    /// Holds made.
    pub holds: u64,
    /// GPU-seconds held capacity stood idle: held, and used by nobody.
    pub idle_gpu_seconds: f64,
    /// Of those, GPU-seconds of holds whose workload then started: the price of starting it.
    pub paid_off_idle_gpu_seconds: f64,
    /// Of those, GPU-seconds no waiting workload could have used: nothing left waiting fitted
    /// what the held nodes had free.
    pub unwanted_idle_gpu_seconds: f64,
    /// Holds that ended without their workload starting: held, then given to others.
    pub abandoned: u64,
}

/// A gate-release policy driven by the event loop.
pub trait Policy {
    /// The world is about to change at `until`; state was constant since the last call.
    fn advance(&mut self, _world: &World<'_>, _until: f64) {}
    /// A job arrived (it is pending in `world`).
    fn on_arrival(&mut self, _world: &World<'_>, _job: JobId) {}
    /// A job started (it is running in `world`).
    fn on_start(&mut self, _world: &World<'_>, _job: JobId) {}
    /// A job stopped: completed, or evicted and pending again.
    fn on_stop(&mut self, _world: &World<'_>, _job: JobId, _preempted: bool) {}
    /// One decision cycle at `world.now`.
    fn cycle(&mut self, world: &World<'_>) -> Actions;
    /// Per queue, the weight the policy divided by in its last cycle (for the plots).
    fn weights(&self) -> Option<&[f64]> {
        None
    }
    /// What holding capacity cost, up to `horizon`, for a policy that holds.
    fn hold_cost(&self, _horizon: f64) -> Option<HoldCost> {
        None
    }
}

/// The policy called `name`, configured from the scenario.
pub fn build(name: PolicyName, scenario: &Scenario) -> Box<dyn Policy> {
    match name {
        PolicyName::Gpufair
        | PolicyName::Stateless
        | PolicyName::GpufairNoHold
        | PolicyName::StatelessHold => Box::new(gpufair::GpufairPolicy::new(
            scenario,
            gpufair::Variant::of(name),
        )),
        PolicyName::Fifo => Box::new(fifo::Fifo),
        PolicyName::Kai => Box::new(kai::Kai::new(scenario)),
        PolicyName::KueueAfs => Box::new(kueue_afs::KueueAfs::new(scenario)),
    }
}

/// A rival's priority for a job: what an admin maps task types and urgency to in priority
/// classes (KAI's PriorityClass, Kueue's WorkloadPriorityClass). Smaller goes first: the tier
/// (realtime, elastic, backfill), then urgency.
pub fn rival_priority(world: &World<'_>, job: JobId) -> (gpufair_core::labels::Tier, u8) {
    let spec = world.spec(job);
    (spec.tier(), spec.urgency as u8)
}

/// The pending jobs of a queue in the order a rival with priorities takes them: by
/// [`rival_priority`], then submission. Without labels every job has the same priority and
/// this is submission order, read straight from the pending set.
pub enum QueueOrder<'a> {
    Submission(std::collections::btree_set::Iter<'a, JobId>),
    Priority(std::vec::IntoIter<JobId>),
}

impl Iterator for QueueOrder<'_> {
    type Item = JobId;

    fn next(&mut self) -> Option<JobId> {
        match self {
            Self::Submission(jobs) => jobs.next().copied(),
            Self::Priority(jobs) => jobs.next(),
        }
    }
}

pub fn queue_order<'a>(world: &'a World<'_>, queue: usize) -> QueueOrder<'a> {
    let pending = &world.pending[queue];
    if !world.scenario.labelled {
        return QueueOrder::Submission(pending.iter());
    }
    let mut jobs: Vec<JobId> = pending.iter().copied().collect();
    jobs.sort_by_key(|&job| (rival_priority(world, job), job));
    QueueOrder::Priority(jobs.into_iter())
}
