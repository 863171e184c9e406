//! The instantaneous entitlement e_i(t) of fairshare.md §7: per pool, the demand-capped
//! division with base weights (K = 0), computed by the same `divide` the policy uses, of the
//! capacity C(t) its queues' demand can use. In a pool of one resource kind that is its whole
//! capacity. In a pool that also offers MIG instances or shared replicas, a kind counts only up
//! to the demand for it (see `usable_capacity`): work on whole GPUs cannot run on a slice, so
//! idle slices would otherwise entitle the queues waiting for whole GPUs to capacity none of
//! their work can use, and every policy would score as owing them for ever.

use gpufair_core::division::{Claim, divide, usable_capacity};

use crate::engine::world::World;

/// The entitlement that dividing each pool's whole capacity gives, slices nobody asks for
/// included: reported beside the measure, so what the usable capacity changes is shown.
pub fn whole_capacity_entitlements(world: &World<'_>, out: &mut [f64]) {
    divide_pools(world, out, |_, capacity| capacity);
}

/// Entitlement per queue (global queue order), GPU-equivalents: the measure every policy is
/// scored against, and what gpufair's ledger records, as its controller computes it.
pub fn entitlements(world: &World<'_>, out: &mut [f64]) {
    let resources = world.scenario.resources.len();
    let mut demand = vec![0.0; resources];
    divide_pools(world, out, |pool, capacity| {
        // A pool of one kind can use all of it.
        if !offers_several_kinds(world, pool) {
            return capacity;
        }
        let offered = &world.group_capacity[world.groups_of_pool(pool)];
        demand.iter_mut().for_each(|d| *d = 0.0);
        for (q, queue) in world.scenario.queues.iter().enumerate() {
            if queue.pool == pool {
                for (d, x) in demand.iter_mut().zip(&world.demand_by_resource[q]) {
                    *d += x;
                }
            }
        }
        usable_capacity(offered, &demand).unwrap_or(capacity)
    });
}

/// Whether `pool` offers more than one resource kind (whole GPUs besides MIG instances or
/// shared replicas): only there can the usable capacity fall short of the whole.
fn offers_several_kinds(world: &World<'_>, pool: usize) -> bool {
    let offered = &world.group_capacity[world.groups_of_pool(pool)];
    offered.iter().filter(|&&c| c > 0.0).count() > 1
}

/// Whether any pool offers several kinds: elsewhere [`entitlements`] and
/// [`whole_capacity_entitlements`] agree, and one division serves both.
pub fn any_pool_offers_several_kinds(world: &World<'_>) -> bool {
    (0..world.scenario.pools.len()).any(|pool| offers_several_kinds(world, pool))
}

fn divide_pools(
    world: &World<'_>,
    out: &mut [f64],
    mut capacity_of: impl FnMut(usize, f64) -> f64,
) {
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
        let shares = divide(capacity_of(pool, spec.capacity), &claims);
        for (&q, share) in members.iter().zip(shares) {
            out[q] = share;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario;

    /// One node of 6 whole GPUs, one GPU as 7 MIG 1g.10gb instances and one shared 4 ways; two
    /// queues, each with whole-GPU jobs waiting beyond the 6, and `a` with `slices` 1g.10gb jobs.
    fn mixed_pool_world(scenario: &scenario::Scenario) -> World<'_> {
        let mut world = World::new(scenario);
        for job in 0..scenario.jobs.len() {
            world.arrive(job);
        }
        world
    }

    fn mixed_pool_scenario(slices: usize) -> scenario::Scenario {
        let mut text = String::from(
            "name: t\nduration: 1d\ncluster: { pools: [ { name: p, gpus: 6, gpusPerNode: 6, \
             mig: { \"1g.10gb\": 7 }, sharedReplicas: 4 } ] }\n\
             queues:\n  - { name: a }\n  - { name: b }\nworkload:\n  jobs:\n\
             \x20   - { queue: a, submit: 0s, gpus: 4, duration: 1h }\n\
             \x20   - { queue: b, submit: 0s, gpus: 4, duration: 1h }\n",
        );
        for _ in 0..slices {
            text.push_str(
                "    - { queue: a, submit: 0s, gpus: 1, duration: 1h, \
                 resource: nvidia.com/mig-1g.10gb }\n",
            );
        }
        scenario::parse(Path::new("t.yaml"), &text).unwrap()
    }

    #[test]
    fn slices_nobody_asks_for_are_not_entitled() {
        let scenario = mixed_pool_scenario(0);
        let world = mixed_pool_world(&scenario);
        let (mut usable, mut whole) = (vec![0.0; 2], vec![0.0; 2]);
        entitlements(&world, &mut usable);
        whole_capacity_entitlements(&world, &mut whole);
        assert_eq!(usable, vec![3.0, 3.0]);
        assert_eq!(whole, vec![4.0, 4.0]);
    }

    #[test]
    fn slices_asked_for_are_entitled_up_to_what_there_is() {
        // Two instances wanted: 2/7 of a GPU joins the six whole GPUs.
        let scenario = mixed_pool_scenario(2);
        let world = mixed_pool_world(&scenario);
        let mut usable = vec![0.0; 2];
        entitlements(&world, &mut usable);
        let total: f64 = usable.iter().sum();
        assert!((total - (6.0 + 2.0 / 7.0)).abs() < 1e-9, "{usable:?}");
    }
}
