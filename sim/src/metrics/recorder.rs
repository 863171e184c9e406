//! Integrates what each queue holds and is entitled to, segment by segment, between events.
//! Everything before the warm-up is ignored; time is cut into hourly buckets for the sliding
//! 24h windows and the plots.

use super::entitlement::{
    any_pool_offers_several_kinds, entitlements, whole_capacity_entitlements,
};
use crate::engine::world::{JobId, World};
use crate::policy::EvictionCause;

pub const BUCKET_S: f64 = 3600.0;
/// A queue is starved while it wants more, holds less than (1 − δ) of its entitlement.
pub const STARVATION_DELTA: f64 = 0.1;
/// A starved stretch longer than this is a starvation event.
pub const STARVATION_EVENT_S: f64 = 3600.0;
/// A starved stretch longer than this is a long starvation.
pub const LONG_STARVATION_S: f64 = 86_400.0;

/// Per queue, the running state of starvation.
#[derive(Debug, Clone, Default)]
pub struct Starvation {
    pub since: Option<f64>,
    pub longest_s: f64,
    pub total_s: f64,
    pub events: u32,
    pub long_events: u32,
}

impl Starvation {
    fn close(&mut self, at: f64) {
        if let Some(since) = self.since.take() {
            let length = at - since;
            self.longest_s = self.longest_s.max(length);
            self.total_s += length;
            if length > STARVATION_EVENT_S {
                self.events += 1;
            }
            if length > LONG_STARVATION_S {
                self.long_events += 1;
            }
        }
    }
}

pub struct Recorder {
    pub warmup_s: f64,
    pub horizon_s: f64,
    pub capacity: f64,
    last: f64,
    demand_version: Option<u64>,
    pub entitled_now: Vec<f64>,
    /// `entitled_now` with each pool's whole capacity divided, unusable slices included.
    entitled_whole_now: Vec<f64>,
    /// Some pool offers several resource kinds, so the two entitlements can differ.
    mixed_pools: bool,
    /// GPU-seconds after warm-up, per queue.
    pub received: Vec<f64>,
    pub entitled: Vec<f64>,
    /// `entitled` with each pool's whole capacity divided.
    pub entitled_whole: Vec<f64>,
    pub capacity_seconds: f64,
    /// Hourly buckets from the warm-up on: per bucket, per queue.
    pub bucket_received: Vec<Vec<f64>>,
    pub bucket_entitled: Vec<Vec<f64>>,
    /// The first effective weights seen in each hourly bucket (policies that have them).
    pub bucket_weights: Vec<Option<Vec<f64>>>,
    pub starvation: Vec<Starvation>,
    /// Per queue, waits (first start − submission) of jobs submitted after the warm-up.
    pub waits: Vec<Vec<f64>>,
    pub preemptions: u64,
    pub lost_gpu_seconds: f64,
    /// Of `lost_gpu_seconds`, what the backfill tier's jobs lost.
    pub lost_gap_filling_gpu_seconds: f64,
    /// `lost_gpu_seconds` split by the rule each eviction followed, indexed as
    /// `EvictionCause::ALL`.
    pub lost_gpu_seconds_by_cause: [f64; EvictionCause::ALL.len()],
    pub cycles: u64,
    /// What holding capacity cost, for a policy that holds.
    pub hold_cost: Option<crate::policy::HoldCost>,
}

impl Recorder {
    pub fn new(world: &World<'_>) -> Self {
        let scenario = world.scenario;
        let queues = scenario.queues.len();
        let measured = scenario.duration_s - scenario.warmup_s;
        let buckets = (measured / BUCKET_S).ceil() as usize;
        Self {
            warmup_s: scenario.warmup_s,
            horizon_s: scenario.duration_s,
            capacity: scenario.capacity(),
            last: 0.0,
            demand_version: None,
            entitled_now: vec![0.0; queues],
            entitled_whole_now: vec![0.0; queues],
            mixed_pools: any_pool_offers_several_kinds(world),
            received: vec![0.0; queues],
            entitled: vec![0.0; queues],
            entitled_whole: vec![0.0; queues],
            capacity_seconds: 0.0,
            bucket_received: vec![vec![0.0; queues]; buckets],
            bucket_entitled: vec![vec![0.0; queues]; buckets],
            bucket_weights: vec![None; buckets],
            starvation: vec![Starvation::default(); queues],
            waits: vec![Vec::new(); queues],
            preemptions: 0,
            lost_gpu_seconds: 0.0,
            lost_gap_filling_gpu_seconds: 0.0,
            lost_gpu_seconds_by_cause: [0.0; EvictionCause::ALL.len()],
            cycles: 0,
            hold_cost: None,
        }
    }

    /// Integrates the state of `world` (constant since the last call) up to `until`.
    pub fn advance(&mut self, world: &World<'_>, until: f64) {
        let until = until.min(self.horizon_s);
        if until <= self.last {
            return;
        }
        if self.demand_version != Some(world.demand_version) {
            entitlements(world, &mut self.entitled_now);
            if self.mixed_pools {
                whole_capacity_entitlements(world, &mut self.entitled_whole_now);
            } else {
                self.entitled_whole_now.clone_from(&self.entitled_now);
            }
            self.demand_version = Some(world.demand_version);
        }
        let from = self.last.max(self.warmup_s);
        self.last = until;
        if until <= from {
            return;
        }
        for (queue, state) in self.starvation.iter_mut().enumerate() {
            let allocated = world.allocated[queue];
            let starved = world.demand(queue) > allocated + 1e-9
                && allocated < (1.0 - STARVATION_DELTA) * self.entitled_now[queue];
            match (starved, state.since) {
                (true, None) => state.since = Some(from),
                (false, Some(_)) => state.close(from),
                _ => {}
            }
        }
        let mut t = from;
        while t < until {
            let bucket = ((t - self.warmup_s) / BUCKET_S) as usize;
            let bucket_end = self.warmup_s + (bucket as f64 + 1.0) * BUCKET_S;
            let end = until.min(bucket_end);
            let dt = end - t;
            if bucket < self.bucket_received.len() {
                for queue in 0..self.received.len() {
                    let a = world.allocated[queue] * dt;
                    let e = self.entitled_now[queue] * dt;
                    self.bucket_received[bucket][queue] += a;
                    self.bucket_entitled[bucket][queue] += e;
                }
            }
            t = end;
        }
        let dt = until - from;
        for queue in 0..self.received.len() {
            self.received[queue] += world.allocated[queue] * dt;
            self.entitled[queue] += self.entitled_now[queue] * dt;
            self.entitled_whole[queue] += self.entitled_whole_now[queue] * dt;
        }
        self.capacity_seconds += self.capacity * dt;
    }

    /// A cycle ran at `now`; `weights` are the policy's effective weights, if it has them.
    pub fn on_cycle(&mut self, now: f64, weights: Option<&[f64]>) {
        self.cycles += 1;
        if now < self.warmup_s {
            return;
        }
        let bucket = ((now - self.warmup_s) / BUCKET_S) as usize;
        if let (Some(slot @ None), Some(weights)) = (self.bucket_weights.get_mut(bucket), weights) {
            *slot = Some(weights.to_vec());
        }
    }

    pub fn on_first_start(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        if spec.submit_s >= self.warmup_s {
            self.waits[spec.queue].push(world.now - spec.submit_s);
        }
    }

    /// A job was evicted for `cause`, throwing away `lost_gpu_seconds` of work; `gap_filling`
    /// if it was of the backfill tier, whose owners allowed that.
    pub fn on_preemption(
        &mut self,
        now: f64,
        lost_gpu_seconds: f64,
        gap_filling: bool,
        cause: EvictionCause,
    ) {
        if now >= self.warmup_s {
            self.preemptions += 1;
            self.lost_gpu_seconds += lost_gpu_seconds;
            self.lost_gpu_seconds_by_cause[cause.index()] += lost_gpu_seconds;
            if gap_filling {
                self.lost_gap_filling_gpu_seconds += lost_gpu_seconds;
            }
        }
    }

    /// Closes open starvation stretches and counts jobs that never started as waiting until the end.
    pub fn finish(&mut self, world: &World<'_>) {
        for state in &mut self.starvation {
            state.close(self.horizon_s);
        }
        for (job, state) in world.jobs.iter().enumerate() {
            let spec = world.spec(job);
            if state.first_start.is_none()
                && spec.submit_s >= self.warmup_s
                && spec.submit_s < self.horizon_s
            {
                self.waits[spec.queue].push(self.horizon_s - spec.submit_s);
            }
        }
    }
}
