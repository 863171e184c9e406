//! gpufair and its ablations: each cycle hands `gpufair_core::admission::decide` a snapshot of
//! the simulated cluster and applies what it returns. The snapshot is kept up to date event by
//! event instead of being rebuilt, and the ledger is fed the exact piecewise-constant allocation.

use std::collections::VecDeque;

use gpufair_core::admission::{DecideOptions, decide};
use gpufair_core::labels::{Tier, Urgency};
use gpufair_core::ledger::{QueueLedger, UsageSample};
use gpufair_core::params::{FairShareParams, PreemptionParams};
use gpufair_core::snapshot::{
    LedgerShares, Node, PendingWorkload, PodRequest, Pool, QueueState, ResourceKind, RunningPod,
    Snapshot,
};
use gpufair_core::units::WHOLE_GPU_RESOURCE;

use super::{Actions, Policy};
use crate::engine::world::{JobId, World};
use crate::scenario::{PolicyName, Scenario};

const NONE: u32 = u32::MAX;
const ONE_HOUR_S: f64 = 3600.0;

/// Which mechanisms are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub ledger: bool,
    pub hold: bool,
    pub preemption: bool,
}

impl Variant {
    pub fn of(name: PolicyName) -> Self {
        match name {
            PolicyName::Gpufair => Self { ledger: true, hold: true, preemption: true },
            PolicyName::GpufairNoHold => Self { ledger: true, hold: false, preemption: false },
            PolicyName::StatelessHold => Self { ledger: false, hold: true, preemption: true },
            _ => Self { ledger: false, hold: false, preemption: false },
        }
    }
}

pub struct GpufairPolicy {
    options: DecideOptions,
    snapshot: Snapshot,
    /// Parallel to `snapshot.pending`: the job of each workload.
    pending_job: Vec<JobId>,
    /// Per job: its index in `snapshot.pending`, or NONE.
    pending_pos: Vec<u32>,
    /// Parallel to `snapshot.running`: the job and pod index of each pod.
    running_pod: Vec<(JobId, u32)>,
    /// Per job: the index in `snapshot.running` of each of its pods while it runs.
    running_pos: Vec<Vec<u32>>,
    ledgers: Vec<QueueLedger>,
    pool_capacity: Vec<f64>,
    entitled: Vec<f64>,
    weights: Vec<f64>,
    recent: VecDeque<f64>,
    last_recorded: f64,
}

fn workload_uid(job: JobId) -> String {
    // Zero-padded so UID order is submission order.
    format!("job-{job:07}")
}

impl GpufairPolicy {
    pub fn new(scenario: &Scenario, variant: Variant) -> Self {
        let fairshare: FairShareParams = if variant.ledger {
            scenario.fairshare.clone()
        } else {
            scenario.fairshare.stateless()
        };
        let preemption = PreemptionParams {
            enabled: variant.preemption && scenario.preemption.enabled,
            ..scenario.preemption.clone()
        };
        let options = DecideOptions { fairshare, preemption, hold_capacity: variant.hold };
        let mut nodes = Vec::new();
        for (pool, spec) in scenario.pools.iter().enumerate() {
            for (i, capacity) in spec.node_sizes().into_iter().enumerate() {
                nodes.push(Node {
                    name: format!("{}-node-{i:04}", spec.name),
                    pool,
                    allocatable: vec![capacity],
                    free: vec![capacity],
                });
            }
        }
        let pool_capacity: Vec<f64> = scenario.pools.iter().map(|p| f64::from(p.gpus)).collect();
        let queues = scenario
            .queues
            .iter()
            .map(|q| QueueState {
                name: q.name.clone(),
                pool: q.pool,
                weight: q.weight,
                guaranteed: q.guaranteed,
                limit: q.limit,
                min_run_time_s: q.min_run_time_s,
                shares: LedgerShares::NEUTRAL,
                last_preemption_at: None,
            })
            .collect();
        let ledgers = scenario
            .queues
            .iter()
            .map(|q| QueueLedger::seeded(0.0, &options.fairshare, pool_capacity[q.pool], q.initial_usage))
            .collect();
        let snapshot = Snapshot {
            now: 0.0,
            resources: vec![ResourceKind { name: WHOLE_GPU_RESOURCE.to_string(), gpu_equivalents: 1.0 }],
            pools: scenario.pools.iter().map(|p| Pool { name: p.name.clone() }).collect(),
            nodes,
            queues,
            running: Vec::new(),
            pending: Vec::new(),
            recent_preemptions: Vec::new(),
        };
        Self {
            options,
            snapshot,
            pending_job: Vec::new(),
            pending_pos: vec![NONE; scenario.jobs.len()],
            running_pod: Vec::new(),
            running_pos: vec![Vec::new(); scenario.jobs.len()],
            ledgers,
            pool_capacity,
            entitled: vec![0.0; scenario.queues.len()],
            weights: scenario.queues.iter().map(|q| q.weight).collect(),
            recent: VecDeque::new(),
            last_recorded: 0.0,
        }
    }

    fn add_pending(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let uid = workload_uid(job);
        let pods = spec
            .pods
            .iter()
            .enumerate()
            .map(|(i, &gpus)| PodRequest { uid: format!("{uid}-{i}"), requests: vec![gpus] })
            .collect();
        self.pending_pos[job] = self.snapshot.pending.len() as u32;
        self.pending_job.push(job);
        self.snapshot.pending.push(PendingWorkload {
            uid,
            queue: spec.queue,
            tier: Tier::Elastic,
            deadline: None,
            urgency: Urgency::Medium,
            created_at: world.jobs[job].queued_at,
            min_member: spec.pods.len() as u32,
            pods,
        });
    }

    fn remove_pending(&mut self, job: JobId) {
        let pos = self.pending_pos[job] as usize;
        self.pending_pos[job] = NONE;
        self.snapshot.pending.swap_remove(pos);
        self.pending_job.swap_remove(pos);
        if let Some(&moved) = self.pending_job.get(pos) {
            self.pending_pos[moved] = pos as u32;
        }
    }

    fn add_running(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let state = &world.jobs[job];
        let uid = workload_uid(job);
        for (i, (&node, &gpus)) in state.placement.iter().zip(&spec.pods).enumerate() {
            self.running_pos[job].push(self.snapshot.running.len() as u32);
            self.running_pod.push((job, i as u32));
            self.snapshot.running.push(RunningPod {
                uid: format!("{uid}-{i}"),
                queue: spec.queue,
                node,
                requests: vec![gpus],
                tier: Tier::Elastic,
                started_at: state.started_at,
            });
            self.snapshot.nodes[node].free[0] -= gpus;
        }
    }

    fn remove_running(&mut self, job: JobId) {
        let mut positions = std::mem::take(&mut self.running_pos[job]);
        // Highest first: whatever swap_remove moves down is then never one of this job's pods.
        positions.sort_unstable_by(|a, b| b.cmp(a));
        for pos in positions {
            let pos = pos as usize;
            let pod = &self.snapshot.running[pos];
            self.snapshot.nodes[pod.node].free[0] += pod.requests[0];
            self.snapshot.running.swap_remove(pos);
            self.running_pod.swap_remove(pos);
            if let Some(&(moved_job, moved_pod)) = self.running_pod.get(pos) {
                self.running_pos[moved_job][moved_pod as usize] = pos as u32;
            }
        }
    }
}

impl Policy for GpufairPolicy {
    fn advance(&mut self, world: &World<'_>, until: f64) {
        if until <= self.last_recorded {
            return;
        }
        for (queue, ledger) in self.ledgers.iter_mut().enumerate() {
            let allocated = f64::from(world.allocated[queue]);
            ledger.record(
                &self.options.fairshare,
                until,
                UsageSample {
                    allocated,
                    utilized: allocated,
                    entitled: self.entitled[queue],
                    capacity: self.pool_capacity[world.pool_of_queue(queue)],
                },
            );
        }
        self.last_recorded = until;
    }

    fn on_arrival(&mut self, world: &World<'_>, job: JobId) {
        self.add_pending(world, job);
    }

    fn on_start(&mut self, world: &World<'_>, job: JobId) {
        self.remove_pending(job);
        self.add_running(world, job);
    }

    fn on_stop(&mut self, world: &World<'_>, job: JobId, preempted: bool) {
        self.remove_running(job);
        if preempted {
            self.add_pending(world, job);
        }
    }

    fn cycle(&mut self, world: &World<'_>) -> Actions {
        let now = world.now;
        self.snapshot.now = now;
        while self.recent.front().is_some_and(|&t| t <= now - ONE_HOUR_S) {
            self.recent.pop_front();
        }
        self.snapshot.recent_preemptions.clear();
        self.snapshot.recent_preemptions.extend(self.recent.iter().copied());
        for (queue, ledger) in self.ledgers.iter().enumerate() {
            self.snapshot.queues[queue].shares = ledger.shares(&self.options.fairshare, now);
        }
        let decisions = decide(&self.snapshot, &self.options);
        for outcome in &decisions.queues {
            self.entitled[outcome.queue] = outcome.entitled;
            self.weights[outcome.queue] = outcome.effective_weight;
        }
        let mut actions = Actions::default();
        for preemption in &decisions.preemptions {
            let (job, _) = self.running_pod[preemption.victim];
            if !actions.preempt.contains(&job) {
                actions.preempt.push(job);
                let preemptor = self.snapshot.pending[preemption.for_workload].queue;
                self.snapshot.queues[preemptor].last_preemption_at = Some(now);
            }
            self.recent.push_back(now);
        }
        for release in &decisions.releases {
            actions.start.push((self.pending_job[release.workload], release.placements.clone()));
        }
        actions
    }

    fn weights(&self) -> Option<&[f64]> {
        Some(&self.weights)
    }
}
