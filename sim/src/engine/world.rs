//! The simulated cluster: nodes, jobs and what each queue holds and waits for.
//!
//! A node that offers MIG instances or shared replicas besides whole GPUs is simulated as one
//! slot per resource it offers (`NodeState::machine` names the node): a pod asks for one
//! resource, and per-node placement of such a pod only ever looks at that resource's count on
//! each node. Slots are grouped by (pool, resource); with whole GPUs only, a group is a pool
//! and a slot is a node.

use std::collections::BTreeSet;
use std::ops::Range;

use crate::scenario::{JobSpec, Scenario};

/// Index into `Scenario::jobs`; jobs are numbered in submission order, so a smaller id was
/// submitted earlier (ties in file order).
pub type JobId = usize;
pub type NodeIndex = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    NotArrived,
    Pending,
    Running,
    Done,
}

#[derive(Debug, Clone)]
pub struct JobState {
    pub phase: Phase,
    /// When it last entered the pending set (submission, or its last preemption).
    pub queued_at: f64,
    pub started_at: f64,
    pub first_start: Option<f64>,
    pub finished_at: Option<f64>,
    /// The node of each pod while running.
    pub placement: Vec<NodeIndex>,
    /// Bumped on every start, so an end event of an evicted run is recognised as stale.
    pub epoch: u32,
    pub preemptions: u32,
}

#[derive(Debug, Clone)]
pub struct NodeState {
    pub pool: usize,
    /// The resource this slot counts (`Scenario::resources`).
    pub resource: usize,
    /// The node it is part of, numbered across pools in node order.
    pub machine: usize,
    pub capacity: u32,
    pub free: u32,
}

/// A start the world refused: the plan did not fit what is free.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("job {job} cannot start as planned: {reason}")]
pub struct StartError {
    pub job: JobId,
    pub reason: String,
}

pub struct World<'s> {
    pub scenario: &'s Scenario,
    pub now: f64,
    pub nodes: Vec<NodeState>,
    /// The slots of each (pool, resource) group, as a contiguous range of `nodes`; group
    /// `pool × resources + resource`.
    pub group_nodes: Vec<Range<usize>>,
    /// Per node (machine), its slot of each resource, if it offers that resource.
    pub machine_slots: Vec<Vec<Option<usize>>>,
    pub jobs: Vec<JobState>,
    /// Per queue, pending jobs in FIFO order.
    pub pending: Vec<BTreeSet<JobId>>,
    /// Per queue, running jobs.
    pub running: Vec<BTreeSet<JobId>>,
    /// Pending jobs of all queues, in FIFO order.
    pub pending_all: BTreeSet<JobId>,
    /// Per queue, GPU-equivalents held by running jobs.
    pub allocated: Vec<f64>,
    /// Per queue, GPU-equivalents requested by pending jobs.
    pub pending_gpus: Vec<f64>,
    /// Per queue, running plus pending GPU-equivalents of each resource (uncapped).
    pub demand_by_resource: Vec<Vec<f64>>,
    /// Per (pool, resource) group, its capacity in GPU-equivalents.
    pub group_capacity: Vec<f64>,
    /// Per (pool, resource) group, units free.
    pub group_free: Vec<u32>,
    /// Bumped whenever some queue's demand (running + pending) changes.
    pub demand_version: u64,
}

impl<'s> World<'s> {
    pub fn new(scenario: &'s Scenario) -> Self {
        let resources = scenario.resources.len();
        let mut nodes = Vec::new();
        let mut group_nodes = Vec::new();
        let mut group_free = Vec::new();
        let mut machine_slots: Vec<Vec<Option<usize>>> = Vec::new();
        for (pool, spec) in scenario.pools.iter().enumerate() {
            let sizes = spec.node_sizes();
            let first_machine = machine_slots.len();
            machine_slots.extend(sizes.iter().map(|_| vec![None; resources]));
            for resource in 0..resources {
                let start = nodes.len();
                let mut free = 0;
                for (i, &whole) in sizes.iter().enumerate() {
                    let capacity = if resource == 0 {
                        whole
                    } else {
                        spec.units_per_node(resource)
                    };
                    if capacity == 0 {
                        continue;
                    }
                    nodes.push(NodeState {
                        pool,
                        resource,
                        machine: first_machine + i,
                        capacity,
                        free: capacity,
                    });
                    free += capacity;
                }
                group_nodes.push(start..nodes.len());
                group_free.push(free);
            }
        }
        for (index, node) in nodes.iter().enumerate() {
            machine_slots[node.machine][node.resource] = Some(index);
        }
        let group_capacity: Vec<f64> = group_nodes
            .iter()
            .enumerate()
            .map(|(group, range)| {
                let per_unit = scenario.resources[group % resources].gpu_equivalents;
                nodes[range.clone()]
                    .iter()
                    .map(|n| f64::from(n.capacity) * per_unit)
                    .sum()
            })
            .collect();
        let queues = scenario.queues.len();
        Self {
            scenario,
            now: 0.0,
            nodes,
            group_nodes,
            machine_slots,
            jobs: scenario
                .jobs
                .iter()
                .map(|_| JobState {
                    phase: Phase::NotArrived,
                    queued_at: 0.0,
                    started_at: 0.0,
                    first_start: None,
                    finished_at: None,
                    placement: Vec::new(),
                    epoch: 0,
                    preemptions: 0,
                })
                .collect(),
            pending: vec![BTreeSet::new(); queues],
            running: vec![BTreeSet::new(); queues],
            pending_all: BTreeSet::new(),
            allocated: vec![0.0; queues],
            pending_gpus: vec![0.0; queues],
            demand_by_resource: vec![vec![0.0; resources]; queues],
            group_capacity,
            group_free,
            demand_version: 0,
        }
    }

    pub fn spec(&self, job: JobId) -> &'s JobSpec {
        &self.scenario.jobs[job]
    }

    pub fn pool_of_queue(&self, queue: usize) -> usize {
        self.scenario.queues[queue].pool
    }

    /// The (pool, resource) group a job's pods are placed in.
    pub fn group_of(&self, job: JobId) -> usize {
        let spec = self.spec(job);
        self.pool_of_queue(spec.queue) * self.scenario.resources.len() + spec.resource
    }

    /// The groups of a pool.
    pub fn groups_of_pool(&self, pool: usize) -> Range<usize> {
        let resources = self.scenario.resources.len();
        pool * resources..(pool + 1) * resources
    }

    /// Free units of each slot in a group, in node order.
    pub fn free_in_group(&self, group: usize) -> Vec<u32> {
        self.nodes[self.group_nodes[group].clone()]
            .iter()
            .map(|n| n.free)
            .collect()
    }

    /// Running plus pending GPU-equivalents of a queue, capped by its limit.
    pub fn demand(&self, queue: usize) -> f64 {
        let raw = self.allocated[queue] + self.pending_gpus[queue];
        match self.scenario.queues[queue].limit {
            Some(limit) => raw.min(limit),
            None => raw,
        }
    }

    pub fn arrive(&mut self, job: JobId) {
        let spec = &self.scenario.jobs[job];
        let state = &mut self.jobs[job];
        state.phase = Phase::Pending;
        state.queued_at = self.now;
        self.pending[spec.queue].insert(job);
        self.pending_all.insert(job);
        self.pending_gpus[spec.queue] += spec.gpu_equivalents;
        self.demand_by_resource[spec.queue][spec.resource] += spec.gpu_equivalents;
        self.demand_version += 1;
    }

    /// Starts a pending job with pod `i` on node `placement[i]` (global node indices).
    pub fn start(&mut self, job: JobId, placement: Vec<NodeIndex>) -> Result<(), StartError> {
        let spec = &self.scenario.jobs[job];
        let fail = |reason: String| StartError { job, reason };
        if self.jobs[job].phase != Phase::Pending {
            return Err(fail(format!(
                "it is {:?}, not pending",
                self.jobs[job].phase
            )));
        }
        if placement.len() != spec.pods.len() {
            return Err(fail(format!(
                "{} nodes planned for {} pods",
                placement.len(),
                spec.pods.len()
            )));
        }
        let group = self.group_of(job);
        let mut need: Vec<(NodeIndex, u32)> = Vec::with_capacity(placement.len());
        for (&node, &gpus) in placement.iter().zip(&spec.pods) {
            if !self.group_nodes[group].contains(&node) {
                return Err(fail(format!(
                    "node {node} is not a node of its pool offering its resource"
                )));
            }
            match need.iter_mut().find(|(n, _)| *n == node) {
                Some((_, total)) => *total += gpus,
                None => need.push((node, gpus)),
            }
        }
        if let Some((node, gpus)) = need.iter().find(|(n, g)| self.nodes[*n].free < *g) {
            return Err(fail(format!(
                "node {node} has {} GPUs free, {gpus} planned",
                self.nodes[*node].free
            )));
        }
        for (node, gpus) in need {
            self.nodes[node].free -= gpus;
        }
        self.group_free[group] -= spec.gpus();
        self.allocated[spec.queue] += spec.gpu_equivalents;
        self.pending_gpus[spec.queue] -= spec.gpu_equivalents;
        self.pending[spec.queue].remove(&job);
        self.pending_all.remove(&job);
        self.running[spec.queue].insert(job);
        let state = &mut self.jobs[job];
        state.phase = Phase::Running;
        state.started_at = self.now;
        state.first_start.get_or_insert(self.now);
        state.placement = placement;
        state.epoch += 1;
        Ok(())
    }

    fn release_nodes(&mut self, job: JobId) {
        let spec = &self.scenario.jobs[job];
        let placement = std::mem::take(&mut self.jobs[job].placement);
        for (&node, &gpus) in placement.iter().zip(&spec.pods) {
            self.nodes[node].free += gpus;
        }
        let group = self.group_of(job);
        self.group_free[group] += spec.gpus();
        self.allocated[spec.queue] -= spec.gpu_equivalents;
        self.running[spec.queue].remove(&job);
    }

    /// A running job completes.
    pub fn finish(&mut self, job: JobId) {
        self.release_nodes(job);
        let spec = &self.scenario.jobs[job];
        self.demand_by_resource[spec.queue][spec.resource] -= spec.gpu_equivalents;
        let state = &mut self.jobs[job];
        state.phase = Phase::Done;
        state.finished_at = Some(self.now);
        self.demand_version += 1;
    }

    /// Evicts a running job: it loses its progress and waits again. Returns the GPU-seconds lost.
    pub fn preempt(&mut self, job: JobId) -> f64 {
        let spec = &self.scenario.jobs[job];
        let lost = spec.gpu_equivalents * (self.now - self.jobs[job].started_at);
        self.release_nodes(job);
        let state = &mut self.jobs[job];
        state.phase = Phase::Pending;
        state.queued_at = self.now;
        state.preemptions += 1;
        self.pending[spec.queue].insert(job);
        self.pending_all.insert(job);
        self.pending_gpus[spec.queue] += spec.gpu_equivalents;
        lost
    }
}
