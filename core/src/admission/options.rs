use crate::params::{FairShareParams, PreemptionParams};

/// How a decision cycle behaves. The controller uses the defaults; the simulator switches parts
/// off to compare against stateless fair share and to tell the mechanisms apart.
#[derive(Debug, Clone, PartialEq)]
pub struct DecideOptions {
    pub fairshare: FairShareParams,
    pub preemption: PreemptionParams,
    /// Keep capacity free for the most deserving workload that does not fit yet.
    pub hold_capacity: bool,
}

impl Default for DecideOptions {
    fn default() -> Self {
        Self {
            fairshare: FairShareParams::default(),
            preemption: PreemptionParams::default(),
            hold_capacity: true,
        }
    }
}
