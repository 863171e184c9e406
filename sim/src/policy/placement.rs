//! Per-node, all-or-nothing placement for the rival policies, using the controller's placement
//! model from `gpufair-core`, on a scratch copy of the free GPUs that a cycle uses up as it plans.

use gpufair_core::admission::best_fit;
use gpufair_core::snapshot::NodeId;

use crate::engine::world::{JobId, NodeIndex, World};

/// Places pods (GPUs each) on nodes with the given free GPUs: the node index of each pod, by
/// core's best fit (the controller's placement model).
pub fn fit(free: &[u32], pods: &[u32]) -> Option<Vec<usize>> {
    let candidates: Vec<NodeId> = (0..free.len())
        .filter(|&n| free[n] > 0)
        .map(NodeId::new)
        .collect();
    let pod_requests: Vec<[u32; 1]> = pods.iter().map(|&p| [p]).collect();
    let pod_refs: Vec<&[u32]> = pod_requests.iter().map(|p| p.as_slice()).collect();
    let placed = best_fit(
        &candidates,
        |node| std::slice::from_ref(&free[node.get()]),
        &pod_refs,
        &[1.0],
    )?;
    Some(placed.into_iter().map(NodeId::get).collect())
}

/// A cycle's plan: free units per slot, reduced as jobs are placed.
pub struct Planner {
    /// Free units per (pool, resource) group, per slot in group order.
    free: Vec<Vec<u32>>,
    group_free: Vec<u32>,
    /// First global node index of each group.
    offsets: Vec<usize>,
    resources: usize,
}

impl Planner {
    pub fn new(world: &World<'_>) -> Self {
        let resources = world.scenario.resources.len();
        Self {
            free: (0..world.group_nodes.len())
                .map(|g| world.free_in_group(g))
                .collect(),
            group_free: world.group_free.clone(),
            offsets: world.group_nodes.iter().map(|r| r.start).collect(),
            resources,
        }
    }

    pub fn all_full(&self) -> bool {
        self.group_free.iter().all(|&f| f == 0)
    }

    /// Whether nothing of any resource is free in a pool.
    pub fn pool_full(&self, pool: usize) -> bool {
        self.group_free[pool * self.resources..(pool + 1) * self.resources]
            .iter()
            .all(|&f| f == 0)
    }

    /// What is free in a pool, in GPU-equivalents.
    pub fn pool_free(&self, world: &World<'_>, pool: usize) -> f64 {
        let groups = &self.group_free[pool * self.resources..(pool + 1) * self.resources];
        groups
            .iter()
            .zip(&world.scenario.resources)
            .map(|(&free, resource)| f64::from(free) * resource.gpu_equivalents)
            .sum()
    }

    /// Plans a job if it fits now; the plan's units are taken from the scratch state.
    pub fn place(&mut self, world: &World<'_>, job: JobId) -> Option<Vec<NodeIndex>> {
        let spec = world.spec(job);
        let group = world.group_of(job);
        if spec.gpus() > self.group_free[group] {
            return None;
        }
        let local = fit(&self.free[group], &spec.pods)?;
        for (&node, &gpus) in local.iter().zip(&spec.pods) {
            self.free[group][node] -= gpus;
        }
        self.group_free[group] -= spec.gpus();
        Some(local.into_iter().map(|n| n + self.offsets[group]).collect())
    }

    /// Gives a running job's units back to the scratch state (a planned eviction).
    pub fn free_job(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let group = world.group_of(job);
        for (&node, &gpus) in world.jobs[job].placement.iter().zip(&spec.pods) {
            self.free[group][node - self.offsets[group]] += gpus;
        }
        self.group_free[group] += spec.gpus();
    }

    /// A copy to try a plan on and throw away.
    pub fn scratch(&self) -> Self {
        Self {
            free: self.free.clone(),
            group_free: self.group_free.clone(),
            offsets: self.offsets.clone(),
            resources: self.resources,
        }
    }
}
