//! Per-node, all-or-nothing placement for the rival policies, using the controller's placement
//! model from `gpufair-core`, on a scratch copy of the free GPUs that a cycle uses up as it plans.

use gpufair_core::admission::placement::best_fit;

use crate::engine::world::{JobId, NodeIndex, World};

/// Places pods (GPUs each) on nodes with the given free GPUs: the node index of each pod, by
/// core's best fit (the controller's placement model).
pub fn fit(free: &[u32], pods: &[u32]) -> Option<Vec<usize>> {
    let candidates: Vec<usize> = (0..free.len()).filter(|&n| free[n] > 0).collect();
    let pod_requests: Vec<[u32; 1]> = pods.iter().map(|&p| [p]).collect();
    let pod_refs: Vec<&[u32]> = pod_requests.iter().map(|p| p.as_slice()).collect();
    best_fit(
        &candidates,
        |node| std::slice::from_ref(&free[node]),
        &pod_refs,
        &[1.0],
    )
}

/// A cycle's plan: free GPUs per node, reduced as jobs are placed.
pub struct Planner {
    /// Free GPUs per pool, per node in pool order.
    free: Vec<Vec<u32>>,
    pool_free: Vec<u32>,
    /// First global node index of each pool.
    offsets: Vec<usize>,
}

impl Planner {
    pub fn new(world: &World<'_>) -> Self {
        Self {
            free: (0..world.pool_nodes.len())
                .map(|p| world.free_in_pool(p))
                .collect(),
            pool_free: world.pool_free.clone(),
            offsets: world.pool_nodes.iter().map(|r| r.start).collect(),
        }
    }

    pub fn all_full(&self) -> bool {
        self.pool_free.iter().all(|&f| f == 0)
    }

    pub fn pool_free(&self, pool: usize) -> u32 {
        self.pool_free[pool]
    }

    /// Plans a job if it fits now; the plan's GPUs are taken from the scratch state.
    pub fn place(&mut self, world: &World<'_>, job: JobId) -> Option<Vec<NodeIndex>> {
        let spec = world.spec(job);
        let pool = world.pool_of_queue(spec.queue);
        if spec.gpus() > self.pool_free[pool] {
            return None;
        }
        let local = fit(&self.free[pool], &spec.pods)?;
        for (&node, &gpus) in local.iter().zip(&spec.pods) {
            self.free[pool][node] -= gpus;
        }
        self.pool_free[pool] -= spec.gpus();
        Some(local.into_iter().map(|n| n + self.offsets[pool]).collect())
    }

    /// Gives a running job's GPUs back to the scratch state (a planned eviction).
    pub fn free_job(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let pool = world.pool_of_queue(spec.queue);
        for (&node, &gpus) in world.jobs[job].placement.iter().zip(&spec.pods) {
            self.free[pool][node - self.offsets[pool]] += gpus;
        }
        self.pool_free[pool] += spec.gpus();
    }

    /// A copy to try a plan on and throw away.
    pub fn scratch(&self) -> Self {
        Self {
            free: self.free.clone(),
            pool_free: self.pool_free.clone(),
            offsets: self.offsets.clone(),
        }
    }
}
