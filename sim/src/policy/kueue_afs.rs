//! Kueue's admission fair sharing (fairshare.md §2.1), as a rival. Each queue is a LocalQueue of
//! one ClusterQueue per pool whose quota is the pool:
//! - every `samplingInterval`, `consumed ← (1−α)·consumed + α·admitted`, `α = 1 − 0.5^(Δt/halfLife)`;
//! - on admission, an entry penalty `α(samplingInterval)·requests` is added to `consumed`;
//! - order: lowest `consumed ÷ weight` first (rescored after every admission), then submission
//!   order; BestEffortFIFO: a workload that does not fit is passed over; no preemption.

use super::placement::Planner;
use super::{Actions, Policy, QueueOrder, queue_order};
use crate::engine::world::World;
use crate::scenario::{KueueAfsParams, Scenario};

pub struct KueueAfs {
    params: KueueAfsParams,
    consumed: Vec<f64>,
    next_sample: f64,
    /// α of one sampling interval: the EWMA step and the entry-penalty factor.
    alpha: f64,
}

impl KueueAfs {
    pub fn new(scenario: &Scenario) -> Self {
        let params = scenario.kueue_afs.clone();
        let alpha = 1.0 - 0.5_f64.powf(params.sampling_interval_s / params.half_life_s);
        Self {
            next_sample: params.sampling_interval_s,
            params,
            consumed: vec![0.0; scenario.queues.len()],
            alpha,
        }
    }

    fn score(&self, world: &World<'_>, queue: usize) -> f64 {
        self.consumed[queue] / world.scenario.queues[queue].weight
    }
}

impl Policy for KueueAfs {
    fn advance(&mut self, world: &World<'_>, until: f64) {
        // Samples fall on the sampling grid; the allocation was constant since the last change.
        while self.next_sample <= until {
            for (queue, consumed) in self.consumed.iter_mut().enumerate() {
                *consumed = (1.0 - self.alpha) * *consumed + self.alpha * world.allocated[queue];
            }
            self.next_sample += self.params.sampling_interval_s;
        }
    }

    fn cycle(&mut self, world: &World<'_>) -> Actions {
        let queue_count = world.scenario.queues.len();
        let mut planner = Planner::new(world);
        let mut actions = Actions::default();
        let mut allocated: Vec<f64> = world.allocated.clone();
        let mut cursors: Vec<QueueOrder<'_>> =
            (0..queue_count).map(|q| queue_order(world, q)).collect();
        let mut open: Vec<bool> = world.pending.iter().map(|p| !p.is_empty()).collect();
        loop {
            let next = (0..queue_count).filter(|&q| open[q]).min_by(|&a, &b| {
                self.score(world, a)
                    .total_cmp(&self.score(world, b))
                    .then(a.cmp(&b))
            });
            let Some(queue) = next else { break };
            let pool = world.pool_of_queue(queue);
            if planner.pool_full(pool) {
                open[queue] = false;
                continue;
            }
            let Some(job) = cursors[queue].next() else {
                open[queue] = false;
                continue;
            };
            let gpus = world.spec(job).gpu_equivalents;
            if world.scenario.queues[queue]
                .limit
                .is_some_and(|limit| allocated[queue] + gpus > limit)
            {
                open[queue] = false;
                continue;
            }
            if let Some(nodes) = planner.place(world, job) {
                allocated[queue] += gpus;
                self.consumed[queue] += self.alpha * gpus;
                actions.start.push((job, nodes));
            }
        }
        actions
    }
}
