//! The policies the simulator compares. gpufair's variants drive `gpufair_core::admission::decide`;
//! the rivals are written here from their published definitions (fairshare.md §1, §2.1).

pub mod fifo;
pub mod gpufair;
pub mod kai;
pub mod kueue_afs;
pub mod placement;
pub mod sliding_usage;

use crate::engine::world::{JobId, NodeIndex, World};
use crate::scenario::{PolicyName, Scenario};

/// What a policy wants done at the end of a cycle: evictions first, then starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actions {
    pub preempt: Vec<JobId>,
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
