//! The instantaneous entitlement e_i(t) of fairshare.md §7: per pool, the demand-capped
//! division with base weights (K = 0), computed by the same `divide` the policy uses.

use gpufair_core::division::{Claim, divide};

use crate::engine::world::World;

/// Entitlement per queue (global queue order), GPU-equivalents.
pub fn entitlements(world: &World<'_>, out: &mut [f64]) {
    let scenario = world.scenario;
    for (pool, spec) in scenario.pools.iter().enumerate() {
        let members: Vec<usize> = (0..scenario.queues.len())
            .filter(|&q| scenario.queues[q].pool == pool)
            .collect();
        let claims: Vec<Claim> = members
            .iter()
            .map(|&q| {
                let queue = &scenario.queues[q];
                Claim {
                    demand: world.demand(q),
                    guaranteed: queue.guaranteed,
                    limit: queue.limit,
                    weight: queue.weight,
                }
            })
            .collect();
        let shares = divide(spec.capacity, &claims);
        for (&q, share) in members.iter().zip(shares) {
            out[q] = share;
        }
    }
}
