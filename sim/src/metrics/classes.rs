//! What the policy's labels are for, measured: waits per tier and per urgency, key tasks against
//! the rest, the realtime latency objective, deadlines met, and throughput.

use std::collections::BTreeMap;

use gpufair_core::labels::{Tier, Urgency};
use serde::Serialize;

use super::recorder::Recorder;
use super::stats::{mean, percentile, sorted};
use crate::engine::world::{JobState, World};
use crate::scenario::JobSpec;

/// Realtime work should start within this: the founding document's answer within 5 minutes.
pub const REALTIME_OBJECTIVE_S: f64 = 300.0;
const DAY_S: f64 = 86_400.0;

/// Waits of one class of jobs (submitted after warm-up; a job never started waits until the end).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassWaits {
    pub jobs: usize,
    pub wait_mean_s: Option<f64>,
    pub wait_p50_s: Option<f64>,
    pub wait_p99_s: Option<f64>,
    /// Share started within the class's latency objective (realtime only).
    pub within_objective: Option<f64>,
}

impl ClassWaits {
    fn of(waits: Vec<f64>, objective_s: Option<f64>) -> Self {
        let waits = sorted(waits);
        Self {
            jobs: waits.len(),
            wait_mean_s: mean(&waits),
            wait_p50_s: percentile(&waits, 50.0),
            wait_p99_s: percentile(&waits, 99.0),
            within_objective: objective_s.filter(|_| !waits.is_empty()).map(|limit| {
                waits.iter().filter(|&&w| w <= limit).count() as f64 / waits.len() as f64
            }),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassReport {
    /// By tier: realtime (inference), elastic (train), backfill (processing).
    pub by_tier: BTreeMap<String, ClassWaits>,
    pub by_urgency: BTreeMap<String, ClassWaits>,
    /// High urgency or realtime.
    pub key_tasks: ClassWaits,
    pub other_tasks: ClassWaits,
    /// Jobs with a deadline inside the simulated time (submitted after warm-up).
    pub jobs_with_deadline: usize,
    /// Of those, the share finished by their deadline.
    pub deadline_hit_rate: Option<f64>,
    /// Jobs finished after warm-up, per measured day.
    pub jobs_completed_per_day: f64,
    /// GPU-equivalent hours delivered after warm-up, per measured day.
    pub gpu_hours_per_day: f64,
}

/// Each job submitted after warm-up, with its state and its wait (a job never started waits
/// until the end).
fn measured<'w>(
    world: &'w World<'_>,
    recorder: &Recorder,
) -> impl Iterator<Item = (&'w JobSpec, &'w JobState, f64)> {
    let (warmup, horizon) = (recorder.warmup_s, recorder.horizon_s);
    world
        .scenario
        .jobs
        .iter()
        .zip(&world.jobs)
        .filter(move |(spec, _)| spec.submit_s >= warmup && spec.submit_s < horizon)
        .map(move |(spec, state)| {
            let wait = state.first_start.unwrap_or(horizon) - spec.submit_s;
            (spec, state, wait)
        })
}

/// The waits of key tasks (high urgency or realtime), sorted: the report's key-task wait CDF.
pub fn key_task_waits(world: &World<'_>, recorder: &Recorder) -> Vec<f64> {
    sorted(
        measured(world, recorder)
            .filter(|(spec, _, _)| spec.is_key())
            .map(|(_, _, wait)| wait)
            .collect(),
    )
}

pub fn classes(world: &World<'_>, recorder: &Recorder) -> ClassReport {
    let (warmup, horizon) = (recorder.warmup_s, recorder.horizon_s);
    let mut by_tier: BTreeMap<Tier, Vec<f64>> = BTreeMap::new();
    let mut by_urgency: BTreeMap<Urgency, Vec<f64>> = BTreeMap::new();
    let (mut key, mut other) = (Vec::new(), Vec::new());
    let (mut with_deadline, mut hit) = (0usize, 0usize);
    let completed = world
        .jobs
        .iter()
        .filter(|state| state.finished_at.is_some_and(|t| t >= warmup))
        .count();
    for (spec, state, wait) in measured(world, recorder) {
        by_tier.entry(spec.tier()).or_default().push(wait);
        by_urgency.entry(spec.urgency).or_default().push(wait);
        let class = if spec.is_key() { &mut key } else { &mut other };
        class.push(wait);
        if let Some(deadline) = spec.deadline_s.filter(|&d| d <= horizon) {
            with_deadline += 1;
            if state.finished_at.is_some_and(|t| t <= deadline) {
                hit += 1;
            }
        }
    }
    let days = (horizon - warmup) / DAY_S;
    let objective = |tier: Tier| (tier == Tier::Realtime).then_some(REALTIME_OBJECTIVE_S);
    ClassReport {
        by_tier: by_tier
            .into_iter()
            .map(|(tier, waits)| {
                (
                    tier.as_str().to_string(),
                    ClassWaits::of(waits, objective(tier)),
                )
            })
            .collect(),
        by_urgency: by_urgency
            .into_iter()
            .map(|(urgency, waits)| (urgency.as_str().to_string(), ClassWaits::of(waits, None)))
            .collect(),
        key_tasks: ClassWaits::of(key, None),
        other_tasks: ClassWaits::of(other, None),
        jobs_with_deadline: with_deadline,
        deadline_hit_rate: (with_deadline > 0).then(|| hit as f64 / with_deadline as f64),
        jobs_completed_per_day: completed as f64 / days,
        gpu_hours_per_day: recorder.received.iter().sum::<f64>() / 3600.0 / days,
    }
}
