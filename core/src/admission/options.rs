use std::collections::BTreeMap;

use crate::params::{FairShareParams, PreemptionParams, ReleaseScoreParams};

/// How a decision cycle behaves. The controller uses the defaults; the simulator switches parts
/// off to compare against stateless fair share and to tell the mechanisms apart.
#[derive(Debug, Clone, PartialEq)]
pub struct DecideOptions {
    /// Fair-share parameters of every pool without its own entry in `pool_fairshare`.
    pub fairshare: FairShareParams,
    /// Per node pool, by [`crate::snapshot::Pool::name`]: the parameters that pool uses instead.
    pub pool_fairshare: BTreeMap<String, FairShareParams>,
    pub preemption: PreemptionParams,
    /// Keep capacity free for the most deserving workload that does not fit yet (in pools with
    /// time-aware sharing on).
    pub hold_capacity: bool,
    /// Weights of the release score inside a queue.
    pub score: ReleaseScoreParams,
}

impl Default for DecideOptions {
    fn default() -> Self {
        Self {
            fairshare: FairShareParams::default(),
            pool_fairshare: BTreeMap::new(),
            preemption: PreemptionParams::default(),
            hold_capacity: true,
            score: ReleaseScoreParams::default(),
        }
    }
}

/// What one pool's division runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    /// The parameters as the division uses them: stateless (K = 0, no catch-up) when the pool's
    /// time-aware sharing is off.
    pub fairshare: FairShareParams,
    /// Whether capacity may be held (and so preempted for) in the pool.
    pub hold_capacity: bool,
    /// Whether the queues' ledger history counts in the pool: off, every queue is divided as
    /// if it had none.
    pub time_aware: bool,
}

impl DecideOptions {
    /// The fair-share parameters the ledgers of queues in pool `pool` record with: the pool's
    /// own entry, else the shared ones.
    pub fn fairshare_of(&self, pool: &str) -> &FairShareParams {
        self.pool_fairshare.get(pool).unwrap_or(&self.fairshare)
    }

    /// How pool `pool` is divided. With time-aware sharing off it is stateless fair share, the
    /// same as the simulator's `stateless` policy: base weights and no capacity held.
    pub fn pool_settings(&self, pool: &str) -> PoolSettings {
        let params = self.fairshare_of(pool);
        if params.time_aware {
            PoolSettings {
                fairshare: params.clone(),
                hold_capacity: self.hold_capacity,
                time_aware: true,
            }
        } else {
            PoolSettings {
                fairshare: params.stateless(),
                hold_capacity: false,
                time_aware: false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_entry_replaces_the_shared_parameters_and_can_switch_time_awareness_off() {
        let mut options = DecideOptions::default();
        options.pool_fairshare.insert(
            "inference".into(),
            FairShareParams {
                k: 3.0,
                time_aware: false,
                ..FairShareParams::default()
            },
        );
        options.pool_fairshare.insert(
            "research".into(),
            FairShareParams {
                k: 2.0,
                ..FairShareParams::default()
            },
        );
        assert_eq!(options.fairshare_of("default").k, 1.0);
        assert_eq!(options.fairshare_of("inference").k, 3.0);
        let off = options.pool_settings("inference");
        assert!(!off.hold_capacity && !off.time_aware);
        assert_eq!((off.fairshare.k, off.fairshare.catch_up_s), (0.0, 0.0));
        let research = options.pool_settings("research");
        assert!(research.hold_capacity);
        assert_eq!(research.fairshare.k, 2.0);
        let default = options.pool_settings("default");
        assert_eq!(default.fairshare, FairShareParams::default());
    }
}
