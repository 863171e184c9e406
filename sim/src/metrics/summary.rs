//! The numbers reported per policy.

use std::collections::BTreeMap;

use serde::Serialize;

use super::classes::{ClassReport, classes, key_task_waits};
use super::fairness::{fairness_deviation, jain_index, total_variation, windowed_deviation};
use super::recorder::{BUCKET_S, Recorder};
use super::starved_unstarted::{Unstarted, starved, starved_unstarted_past_bound};
use super::stats::{mean, percentile, sorted};
use crate::engine::world::World;
use crate::policy::EvictionCause;
use crate::scenario::{JobSpec, Scenario};
use gpufair_core::admission::earning_bound_s;

/// Sliding windows of 24 hourly buckets.
pub const WINDOW_BUCKETS: usize = 24;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueReport {
    pub received_gpu_hours: f64,
    pub entitled_gpu_hours: f64,
    /// received ÷ entitled (null when nothing was entitled).
    pub received_over_entitled: Option<f64>,
    pub jobs: usize,
    pub wait_p50_s: Option<f64>,
    pub wait_p99_s: Option<f64>,
    pub wait_max_s: Option<f64>,
    pub longest_starved_s: f64,
    pub starved_fraction: f64,
    pub starvation_events: u32,
    pub starvations_over_24h: u32,
    /// Of the queue's jobs submitted within the horizon, those that never started: with
    /// `gpu_hours_never_started`, whose work an overloaded pool's backlog is made of.
    pub jobs_never_started: usize,
    /// GPU-equivalent-hours those jobs asked for (size times run time).
    pub gpu_hours_never_started: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NamedJobReport {
    pub queue: String,
    pub gpus: u32,
    pub submit_s: f64,
    /// Seconds from the start of the simulation of its first start; null if it never started.
    pub start_s: Option<f64>,
    pub wait_s: Option<f64>,
    pub end_s: Option<f64>,
    pub preemptions: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PolicyReport {
    pub name: String,
    /// M1, cumulative over the measured horizon: mean over active queues of |A−E|/E.
    pub fairness_deviation: f64,
    /// The same with each pool's whole capacity entitled, MIG instances and shared replicas
    /// nobody asks for included; equal to `fairness_deviation` where every kind's capacity is
    /// usable by the demand for it.
    pub fairness_deviation_whole_capacity: f64,
    pub fairness_deviation_24h_mean: f64,
    pub fairness_deviation_24h_p95: f64,
    pub total_variation: f64,
    pub jain_index: f64,
    /// Allocated GPU-seconds ÷ capacity GPU-seconds.
    pub utilization: f64,
    pub wait_mean_s: Option<f64>,
    pub wait_p99_s: Option<f64>,
    pub jobs_submitted: usize,
    pub jobs_started: usize,
    pub jobs_completed: usize,
    pub jobs_never_started: usize,
    /// GPU-equivalent-hours the jobs that never started asked for (their size times their run
    /// time): the backlog left at the end, which job counts weigh by number alone, so that a
    /// policy leaving many small jobs and one leaving a few large ones can be compared.
    pub gpu_hours_never_started: f64,
    /// Of those, the jobs a starvation-free policy owed a start: in a queue that ended the
    /// horizon starved (received less than half its entitlement), having waited longer than
    /// their pool's earning bound (see `starved_unstarted`).
    pub starved_jobs_unstarted_past_bound: usize,
    pub starvation_events: u32,
    pub starvations_over_24h: u32,
    pub longest_starved_s: f64,
    pub preemptions: u64,
    pub preemptions_per_hour: f64,
    pub gpu_hours_lost: f64,
    /// Of `gpu_hours_lost`, what jobs of the backfill tier (`taskType: processing`) lost: work
    /// its owners declared gap-filling, evicted as they allowed, most often from capacity held
    /// for a larger job.
    pub gpu_hours_lost_backfill_tier: f64,
    /// `gpu_hours_lost` split by the rule each eviction followed (`EvictionCause::key`), for
    /// the causes that lost any work: which of a policy's preemption rules cost what.
    pub gpu_hours_lost_by_cause: BTreeMap<&'static str, f64>,
    /// GPU-seconds thrown away by preemption ÷ GPU-seconds delivered.
    pub work_lost_over_delivered: f64,
    /// GPU-hours held capacity stood idle (held, used by nobody); null for policies that
    /// never hold.
    pub held_idle_gpu_hours: Option<f64>,
    /// Of those, GPU-hours of holds whose workload then started.
    pub held_idle_paid_off_gpu_hours: Option<f64>,
    /// Of those, GPU-hours no waiting workload could have used (nothing left waiting fitted what
    /// the held nodes had free).
    pub held_idle_unwanted_gpu_hours: Option<f64>,
    /// Holds made after warm-up.
    pub holds: Option<u64>,
    /// Holds that ended without their workload starting: held, then given to others.
    pub holds_abandoned: Option<u64>,
    pub cycles: u64,
    /// Waits by tier and urgency, deadlines and throughput: for scenarios whose jobs carry
    /// labels or ask for slices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<ClassReport>,
    pub queues: BTreeMap<String, QueueReport>,
    pub named_jobs: BTreeMap<String, NamedJobReport>,
}

/// Curves for the plots (not part of the JSON).
#[derive(Debug, Clone, Default)]
pub struct Curves {
    /// Per hourly bucket, per queue: share of cluster capacity held (0..1).
    pub share: Vec<Vec<f64>>,
    /// Per hourly bucket, per queue: the policy's effective weight, if it has one.
    pub weights: Vec<Option<Vec<f64>>>,
    /// Every wait, sorted.
    pub waits: Vec<f64>,
    /// The waits of key tasks (high urgency or realtime), sorted; empty for a scenario whose
    /// jobs carry no such labels.
    pub key_task_waits: Vec<f64>,
}

pub fn summarize(name: &str, world: &World<'_>, recorder: &Recorder) -> (PolicyReport, Curves) {
    let scenario = world.scenario;
    let windows = sorted(windowed_deviation(
        &recorder.bucket_received,
        &recorder.bucket_entitled,
        WINDOW_BUCKETS,
    ));
    let measured_s = recorder.horizon_s - recorder.warmup_s;
    let in_horizon = |t: f64| t < recorder.horizon_s;
    let never_started: Vec<_> = scenario
        .jobs
        .iter()
        .zip(&world.jobs)
        .filter(|(spec, state)| in_horizon(spec.submit_s) && state.first_start.is_none())
        .map(|(spec, _)| spec)
        .collect();
    let mut never_started_by_queue: Vec<Vec<&JobSpec>> = vec![Vec::new(); scenario.queues.len()];
    for &job in &never_started {
        never_started_by_queue[job.queue].push(job);
    }
    let mut queues = BTreeMap::new();
    let mut all_waits = Vec::new();
    for (q, spec) in scenario.queues.iter().enumerate() {
        let waits = sorted(recorder.waits[q].clone());
        all_waits.extend_from_slice(&waits);
        let starvation = &recorder.starvation[q];
        queues.insert(
            spec.name.clone(),
            QueueReport {
                received_gpu_hours: recorder.received[q] / 3600.0,
                entitled_gpu_hours: recorder.entitled[q] / 3600.0,
                received_over_entitled: (recorder.entitled[q] > 0.0)
                    .then(|| recorder.received[q] / recorder.entitled[q]),
                jobs: waits.len(),
                wait_p50_s: percentile(&waits, 50.0),
                wait_p99_s: percentile(&waits, 99.0),
                wait_max_s: waits.last().copied(),
                longest_starved_s: starvation.longest_s,
                starved_fraction: starvation.total_s / measured_s,
                starvation_events: starvation.events,
                starvations_over_24h: starvation.long_events,
                jobs_never_started: never_started_by_queue[q].len(),
                gpu_hours_never_started: gpu_hours_asked(never_started_by_queue[q].iter().copied()),
            },
        );
    }
    let all_waits = sorted(all_waits);
    let mut named_jobs = BTreeMap::new();
    for (job, spec) in scenario.jobs.iter().enumerate() {
        if let Some(job_name) = &spec.name {
            let state = &world.jobs[job];
            named_jobs.insert(
                job_name.clone(),
                NamedJobReport {
                    queue: scenario.queues[spec.queue].name.clone(),
                    gpus: spec.gpus(),
                    submit_s: spec.submit_s,
                    start_s: state.first_start,
                    wait_s: state.first_start.map(|s| s - spec.submit_s),
                    end_s: state.finished_at,
                    preemptions: state.preemptions,
                },
            );
        }
    }
    let report = PolicyReport {
        name: name.to_string(),
        fairness_deviation: fairness_deviation(&recorder.received, &recorder.entitled),
        fairness_deviation_whole_capacity: fairness_deviation(
            &recorder.received,
            &recorder.entitled_whole,
        ),
        fairness_deviation_24h_mean: mean(&windows).unwrap_or(0.0),
        fairness_deviation_24h_p95: percentile(&windows, 95.0).unwrap_or(0.0),
        total_variation: total_variation(&recorder.received, &recorder.entitled),
        jain_index: jain_index(&recorder.received, &recorder.entitled),
        utilization: if recorder.capacity_seconds > 0.0 {
            recorder.received.iter().sum::<f64>() / recorder.capacity_seconds
        } else {
            0.0
        },
        wait_mean_s: mean(&all_waits),
        wait_p99_s: percentile(&all_waits, 99.0),
        jobs_submitted: scenario
            .jobs
            .iter()
            .filter(|j| in_horizon(j.submit_s))
            .count(),
        jobs_started: world
            .jobs
            .iter()
            .filter(|j| j.first_start.is_some())
            .count(),
        jobs_completed: world
            .jobs
            .iter()
            .filter(|j| j.finished_at.is_some())
            .count(),
        jobs_never_started: never_started.len(),
        gpu_hours_never_started: gpu_hours_asked(never_started.iter().copied()),
        starved_jobs_unstarted_past_bound: starved_unstarted_past_bound(
            never_started.iter().map(|job| Unstarted {
                queue: job.queue,
                submit_s: job.submit_s,
            }),
            &(0..scenario.queues.len())
                .map(|q| starved(recorder.received[q], recorder.entitled[q]))
                .collect::<Vec<_>>(),
            &earning_bounds(scenario),
            recorder.horizon_s,
        ),
        starvation_events: recorder.starvation.iter().map(|s| s.events).sum(),
        starvations_over_24h: recorder.starvation.iter().map(|s| s.long_events).sum(),
        longest_starved_s: recorder
            .starvation
            .iter()
            .map(|s| s.longest_s)
            .fold(0.0, f64::max),
        preemptions: recorder.preemptions,
        preemptions_per_hour: recorder.preemptions as f64 / (measured_s / 3600.0),
        gpu_hours_lost: recorder.lost_gpu_seconds / 3600.0,
        gpu_hours_lost_backfill_tier: recorder.lost_gap_filling_gpu_seconds / 3600.0,
        gpu_hours_lost_by_cause: EvictionCause::ALL
            .iter()
            .filter_map(|&cause| {
                let lost = recorder.lost_gpu_seconds_by_cause[cause.index()];
                (lost > 0.0).then(|| (cause.key(), lost / 3600.0))
            })
            .collect(),
        held_idle_gpu_hours: recorder.hold_cost.map(|c| c.idle_gpu_seconds / 3600.0),
        held_idle_paid_off_gpu_hours: recorder
            .hold_cost
            .map(|c| c.paid_off_idle_gpu_seconds / 3600.0),
        held_idle_unwanted_gpu_hours: recorder
            .hold_cost
            .map(|c| c.unwanted_idle_gpu_seconds / 3600.0),
        holds: recorder.hold_cost.map(|c| c.holds),
        holds_abandoned: recorder.hold_cost.map(|c| c.abandoned),
        work_lost_over_delivered: {
            let delivered: f64 = recorder.received.iter().sum();
            if delivered > 0.0 {
                recorder.lost_gpu_seconds / delivered
            } else {
                0.0
            }
        },
        cycles: recorder.cycles,
        classes: (scenario.labelled || scenario.has_slices()).then(|| classes(world, recorder)),
        queues,
        named_jobs,
    };
    let curves = Curves {
        share: recorder
            .bucket_received
            .iter()
            .enumerate()
            .map(|(b, row)| {
                let start = recorder.warmup_s + b as f64 * BUCKET_S;
                let length = (recorder.horizon_s - start).min(BUCKET_S);
                row.iter()
                    .map(|a| a / (recorder.capacity * length))
                    .collect()
            })
            .collect(),
        weights: recorder.bucket_weights.clone(),
        waits: all_waits,
        key_task_waits: if scenario.labelled {
            key_task_waits(world, recorder)
        } else {
            Vec::new()
        },
    };
    (report, curves)
}

/// Per queue, its pool's earning bound in seconds (core's `earning_bound_s` for the pool's
/// fair-share parameters).
fn earning_bounds(scenario: &Scenario) -> Vec<f64> {
    scenario
        .queues
        .iter()
        .map(|queue| {
            let pool = &scenario.pools[queue.pool].name;
            earning_bound_s(
                scenario
                    .pool_fairshare
                    .get(pool)
                    .unwrap_or(&scenario.fairshare),
            )
        })
        .collect()
}

/// GPU-equivalent-hours the jobs asked for: each one's size times its run time.
fn gpu_hours_asked<'a>(jobs: impl Iterator<Item = &'a JobSpec>) -> f64 {
    jobs.map(|spec| spec.gpu_equivalents * spec.duration_s / 3600.0)
        // Not `sum`, whose empty total is -0.0.
        .fold(0.0, |total, gpu_hours| total + gpu_hours)
}

/// A report with the given name, fairness deviation and GPU-hours lost, and neutral figures
/// elsewhere, for tests of what is computed across reports.
#[cfg(test)]
impl PolicyReport {
    pub(crate) fn for_test(name: &str, fd: f64, lost: f64) -> Self {
        Self {
            name: name.into(),
            fairness_deviation: fd,
            fairness_deviation_whole_capacity: fd,
            fairness_deviation_24h_mean: 0.0,
            fairness_deviation_24h_p95: 0.0,
            total_variation: 0.0,
            jain_index: 1.0,
            utilization: 0.5,
            wait_mean_s: None,
            wait_p99_s: None,
            jobs_submitted: 0,
            jobs_started: 0,
            jobs_completed: 0,
            jobs_never_started: 0,
            gpu_hours_never_started: 0.0,
            starved_jobs_unstarted_past_bound: 0,
            starvation_events: 0,
            starvations_over_24h: 0,
            longest_starved_s: 0.0,
            preemptions: 0,
            preemptions_per_hour: 0.0,
            gpu_hours_lost: lost,
            gpu_hours_lost_backfill_tier: 0.0,
            gpu_hours_lost_by_cause: BTreeMap::new(),
            work_lost_over_delivered: 0.0,
            held_idle_gpu_hours: None,
            held_idle_paid_off_gpu_hours: None,
            held_idle_unwanted_gpu_hours: None,
            holds: None,
            holds_abandoned: None,
            cycles: 0,
            classes: None,
            queues: BTreeMap::new(),
            named_jobs: BTreeMap::new(),
        }
    }
}
