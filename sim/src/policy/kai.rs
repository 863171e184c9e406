//! KAI-Scheduler's time-based fair share (fairshare.md §1), as a rival:
//! - division per pool: deserved quota first (`min(guaranteed, requestable)`), then rounds over
//!   the queues still short, each given `R·P_i/ΣP` with `P_i = max(0, W'_i + k·(W'_i − U'_i))`,
//!   `W'` the over-quota weight normalised over the short queues, `U'` the capacity-normalised
//!   sliding-window usage; fractional shares (KAI's integer rounding is left out);
//! - allocation: the queue furthest below its fair share (smallest allocated ÷ fair share)
//!   goes next, its jobs in submission order; idle capacity may be used beyond the fair share;
//! - reclaim (MaintainFairShare): a queue whose next job keeps it within its fair share may evict
//!   the most recently submitted jobs of queues above their fair share, as long as each such
//!   queue stays at or above its own fair share and the victims ran at least reclaimMinRuntime.

use super::placement::Planner;
use super::sliding_usage::SlidingUsage;
use gpufair_core::labels::Tier;

use super::{Actions, EvictionCause, Policy, QueueOrder, queue_order, rival_priority};
use crate::engine::world::{JobId, World};
use crate::scenario::{KaiParams, Scenario};

const EPS: f64 = 1e-9;
/// KAI's query resolution: usage is known per minute.
const BUCKET_S: f64 = 60.0;

pub struct Kai {
    params: KaiParams,
    /// One usage tracker per pool, normalised by that pool's capacity.
    usage: Vec<SlidingUsage>,
    /// Per pool, the queues in it (a queue's position there is its series in the tracker).
    pool_queues: Vec<Vec<usize>>,
    weights: Vec<f64>,
}

impl Kai {
    pub fn new(scenario: &Scenario) -> Self {
        let mut pool_queues = vec![Vec::new(); scenario.pools.len()];
        for (q, spec) in scenario.queues.iter().enumerate() {
            pool_queues[spec.pool].push(q);
        }
        let usage = pool_queues
            .iter()
            .map(|queues| {
                SlidingUsage::new(
                    queues.len(),
                    scenario.kai.window_s,
                    BUCKET_S,
                    scenario.kai.half_life_s,
                )
            })
            .collect();
        Self {
            params: scenario.kai.clone(),
            usage,
            pool_queues,
            weights: scenario.queues.iter().map(|q| q.weight).collect(),
        }
    }

    /// Fair share per queue (global queue order) for one pool.
    fn divide(&mut self, world: &World<'_>, pool: usize, fair: &mut [f64]) {
        let capacity = world.scenario.pools[pool].capacity;
        let queues = &self.pool_queues[pool];
        let specs = &world.scenario.queues;
        let requestable: Vec<f64> = queues.iter().map(|&q| world.demand(q)).collect();
        let mut share: Vec<f64> = queues
            .iter()
            .zip(&requestable)
            .map(|(&q, &r)| specs[q].guaranteed.min(r))
            .collect();
        let deserved: f64 = share.iter().sum();
        if deserved > capacity {
            share.iter_mut().for_each(|s| *s *= capacity / deserved);
        }
        let mut remaining = (capacity - share.iter().sum::<f64>()).max(0.0);
        let mut first_round = true;
        while remaining > EPS {
            let active: Vec<usize> = (0..queues.len())
                .filter(|&i| requestable[i] - share[i] > EPS && specs[queues[i]].weight > 0.0)
                .collect();
            if active.is_empty() {
                break;
            }
            let total_weight: f64 = active.iter().map(|&i| specs[queues[i]].weight).sum();
            let mut p: Vec<f64> = active
                .iter()
                .map(|&i| {
                    let w = specs[queues[i]].weight / total_weight;
                    (w + self.params.k * (w - self.usage[pool].share(i))).max(0.0)
                })
                .collect();
            if p.iter().sum::<f64>() <= EPS {
                p = active
                    .iter()
                    .map(|&i| specs[queues[i]].weight / total_weight)
                    .collect();
            }
            let total_p: f64 = p.iter().sum();
            if first_round {
                for (&i, &pi) in active.iter().zip(&p) {
                    self.weights[queues[i]] = pi * total_weight;
                }
                first_round = false;
            }
            let mut given = 0.0;
            for (&i, &pi) in active.iter().zip(&p) {
                let give = (remaining * pi / total_p).min(requestable[i] - share[i]);
                share[i] += give;
                given += give;
            }
            remaining -= given;
            if given <= EPS {
                break;
            }
        }
        for (i, &q) in queues.iter().enumerate() {
            fair[q] = share[i];
        }
    }

    /// Tries to make room for `job` by evicting jobs of queues above their fair share.
    #[allow(clippy::too_many_arguments)]
    fn reclaim(
        &self,
        world: &World<'_>,
        job: JobId,
        fair: &[f64],
        allocated: &mut [f64],
        planner: &mut Planner,
        evicted: &mut Vec<JobId>,
        actions: &mut Actions,
    ) -> bool {
        let spec = world.spec(job);
        let pool = world.pool_of_queue(spec.queue);
        let gpus = spec.gpu_equivalents;
        let surplus: f64 = self.pool_queues[pool]
            .iter()
            .filter(|&&r| r != spec.queue)
            .map(|&r| (allocated[r] - fair[r]).max(0.0))
            .sum();
        if planner.pool_free(world, pool) + surplus < gpus {
            return false;
        }
        let mut donors: Vec<usize> = self.pool_queues[pool]
            .iter()
            .copied()
            .filter(|&r| r != spec.queue && allocated[r] > fair[r] + EPS)
            .collect();
        donors.sort_by(|&a, &b| {
            let ra = allocated[a] / fair[a].max(EPS);
            let rb = allocated[b] / fair[b].max(EPS);
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        let mut scratch = planner.scratch();
        let mut taken: Vec<JobId> = Vec::new();
        let mut left = allocated.to_vec();
        for r in donors {
            for &victim in world.running[r].iter().rev() {
                if evicted.contains(&victim) {
                    continue;
                }
                let victim_gpus = world.spec(victim).gpu_equivalents;
                if world.now - world.jobs[victim].started_at < self.params.reclaim_min_runtime_s {
                    continue;
                }
                if left[r] - victim_gpus < fair[r] - EPS {
                    continue;
                }
                left[r] -= victim_gpus;
                scratch.free_job(world, victim);
                taken.push(victim);
                let mut attempt = scratch.scratch();
                if let Some(nodes) = attempt.place(world, job) {
                    evicted.extend(&taken);
                    actions
                        .preempt
                        .extend(taken.iter().map(|&v| (v, EvictionCause::Reclaim)));
                    actions.start.push((job, nodes));
                    left[spec.queue] += gpus;
                    allocated.copy_from_slice(&left);
                    *planner = attempt;
                    return true;
                }
            }
        }
        false
    }
}

/// KAI's preempt action: a job may evict running jobs of its own queue with a lower priority,
/// lowest priority and latest started first, unless they are realtime (KAI's inference priority
/// class is non-preemptible). The queue trades its own jobs, so other queues are untouched.
fn preempt_lower_priority(
    world: &World<'_>,
    job: JobId,
    allocated: &mut [f64],
    planner: &mut Planner,
    evicted: &mut Vec<JobId>,
    actions: &mut Actions,
) -> bool {
    let spec = world.spec(job);
    let priority = rival_priority(world, job);
    let mut victims: Vec<JobId> = world.running[spec.queue]
        .iter()
        .copied()
        .filter(|&v| {
            !evicted.contains(&v)
                && world.spec(v).tier() != Tier::Realtime
                && rival_priority(world, v) > priority
        })
        .collect();
    if victims.is_empty() {
        return false;
    }
    victims.sort_by(|&a, &b| {
        rival_priority(world, b)
            .cmp(&rival_priority(world, a))
            .then(
                world.jobs[b]
                    .started_at
                    .total_cmp(&world.jobs[a].started_at),
            )
            .then(b.cmp(&a))
    });
    let mut scratch = planner.scratch();
    for (i, &victim) in victims.iter().enumerate() {
        scratch.free_job(world, victim);
        let mut attempt = scratch.scratch();
        if let Some(nodes) = attempt.place(world, job) {
            let freed: f64 = victims[..=i]
                .iter()
                .map(|&v| world.spec(v).gpu_equivalents)
                .sum();
            allocated[spec.queue] += spec.gpu_equivalents - freed;
            evicted.extend(&victims[..=i]);
            actions
                .preempt
                .extend(victims[..=i].iter().map(|&v| (v, EvictionCause::Priority)));
            actions.start.push((job, nodes));
            *planner = attempt;
            return true;
        }
    }
    false
}

impl Policy for Kai {
    fn advance(&mut self, world: &World<'_>, until: f64) {
        for (pool, usage) in self.usage.iter_mut().enumerate() {
            let queues = &self.pool_queues[pool];
            let capacity = world.scenario.pools[pool].capacity;
            usage.add(until, |i| world.allocated[queues[i]], capacity);
        }
    }

    fn cycle(&mut self, world: &World<'_>) -> Actions {
        let queue_count = world.scenario.queues.len();
        let mut fair = vec![0.0; queue_count];
        for pool in 0..self.pool_queues.len() {
            self.divide(world, pool, &mut fair);
        }
        let mut allocated: Vec<f64> = world.allocated.clone();
        let mut planner = Planner::new(world);
        let mut actions = Actions::default();
        let mut evicted: Vec<JobId> = Vec::new();
        let mut cursors: Vec<QueueOrder<'_>> =
            (0..queue_count).map(|q| queue_order(world, q)).collect();
        let mut open: Vec<bool> = world.pending.iter().map(|p| !p.is_empty()).collect();
        let mut tried_reclaim = vec![false; queue_count];
        loop {
            // The open queue furthest below its fair share.
            let next = (0..queue_count).filter(|&q| open[q]).min_by(|&a, &b| {
                let ra = allocated[a] / fair[a].max(EPS);
                let rb = allocated[b] / fair[b].max(EPS);
                ra.total_cmp(&rb).then(a.cmp(&b))
            });
            let Some(queue) = next else { break };
            let Some(job) = cursors[queue].next() else {
                open[queue] = false;
                continue;
            };
            let spec = world.spec(job);
            let pool = world.pool_of_queue(queue);
            let gpus = spec.gpu_equivalents;
            let within_limit = world.scenario.queues[queue]
                .limit
                .is_none_or(|limit| allocated[queue] + gpus <= limit + EPS);
            if !within_limit {
                open[queue] = false;
                continue;
            }
            if let Some(nodes) = planner.place(world, job) {
                allocated[queue] += gpus;
                actions.start.push((job, nodes));
                continue;
            }
            let within_fair_share = allocated[queue] + gpus <= fair[queue] + EPS;
            if self.params.reclaim && within_fair_share && !tried_reclaim[queue] {
                tried_reclaim[queue] = true;
                if self.reclaim(
                    world,
                    job,
                    &fair,
                    &mut allocated,
                    &mut planner,
                    &mut evicted,
                    &mut actions,
                ) {
                    continue;
                }
            }
            if world.scenario.labelled
                && preempt_lower_priority(
                    world,
                    job,
                    &mut allocated,
                    &mut planner,
                    &mut evicted,
                    &mut actions,
                )
            {
                continue;
            }
            if planner.pool_full(pool) && (tried_reclaim[queue] || !within_fair_share) {
                // Nothing more fits in this pool for this queue this cycle.
                open[queue] = false;
            }
        }
        actions
    }

    fn weights(&self) -> Option<&[f64]> {
        Some(&self.weights)
    }
}
