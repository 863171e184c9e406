//! Starvation freedom, as a property over generated scenarios: small pools shared by many
//! queues, filler queues that keep the pool busy with short jobs, and queues each waiting with
//! one job of 1 GPU up to the whole pool. Every such job starts within a bound derived from the
//! ledger's window and decay, the catch-up rule and the jobs' run times, whatever the pool, the
//! number of queues or the job's size; and so does one whose queue keeps receiving part of its
//! entitlement through smaller work meanwhile, within a bound that grows as its shortfall
//! shrinks.

mod common;

use std::path::Path;

use common::run;
use gpufair_core::admission::earning_bound_s;
use gpufair_core::params::FairShareParams;
use gpufair_sim::scenario::{self, PolicyName};
use proptest::prelude::*;

/// The run time of every job (fixed), hours: no running job holds a node longer.
const RUN_H: f64 = 2.0;
/// Slack for cycles, the ledger's hourly buckets and the last drain, hours.
const SLACK_H: f64 = 2.0;

/// Hours a queue given nothing takes to claim its whole pool (core's `earning_bound_s`, about
/// 69 with the defaults): how long earning a hold for any job that fits the pool takes,
/// independent of the share and of the job's size.
fn earning_bound_h(params: &FairShareParams) -> f64 {
    earning_bound_s(params) / 3600.0
}

/// The bound on a waiting job's start: earning its hold, then at most one run time for the held
/// nodes to drain for it and for each job held before it, and for each job held before it as
/// long again: while an earlier job drains the pool and runs, the filler queues it displaces are
/// owed what they lost, and they take that back (at most the same drain and run time) before a
/// later hold outranks them.
fn start_bound_h(big_jobs: usize) -> f64 {
    let earlier = big_jobs.saturating_sub(1) as f64;
    earning_bound_h(&FairShareParams::default())
        + big_jobs as f64 * RUN_H
        + earlier * 2.0 * RUN_H
        + SLACK_H
}

/// A pool of `nodes` nodes of `per_node` GPUs; `fillers` queues submitting 1-GPU jobs at about
/// 1.5 times the pool's capacity between them; one queue per entry of `big` (GPUs, submit hour)
/// with that one job; `days` long.
fn scenario_text(
    nodes: u32,
    per_node: u32,
    fillers: usize,
    big: &[(u32, u32)],
    days: u32,
) -> String {
    let gpus = nodes * per_node;
    let mut text = format!(
        "name: starvation\nduration: {days}d\nseed: {}\n\
         cluster: {{ pools: [ {{ name: p, gpus: {gpus}, gpusPerNode: {per_node} }} ] }}\nqueues:\n",
        gpus as usize * 31 + fillers * 7 + big.len()
    );
    for f in 0..fillers {
        text.push_str(&format!("  - {{ name: filler-{f} }}\n"));
    }
    for b in 0..big.len() {
        text.push_str(&format!("  - {{ name: big-{b} }}\n"));
    }
    text.push_str("workload:\n  streams:\n");
    // Each filler offers 1.5 × capacity / fillers GPUs of 1-GPU, 1-hour jobs.
    let gap_min = 60.0 * fillers as f64 / (1.5 * f64::from(gpus));
    for f in 0..fillers {
        text.push_str(&format!(
            "    - {{ queue: filler-{f}, interarrival: {gap_min:.3}m, gpus: 1, duration: 1h }}\n"
        ));
    }
    text.push_str("  jobs:\n");
    for (b, (size, at)) in big.iter().enumerate() {
        let size = (*size).clamp(1, gpus);
        // Whole nodes for a job larger than one, as a gang.
        let pods = if size > per_node {
            size.div_ceil(per_node)
        } else {
            1
        };
        let size = if size > per_node {
            pods * per_node
        } else {
            size
        };
        text.push_str(&format!(
            "    - {{ name: big-{b}, queue: big-{b}, submit: {at}h, gpus: {size}, pods: {pods}, duration: {RUN_H}h }}\n"
        ));
    }
    text
}

/// A queue that keeps receiving part of its entitlement through its small work is owed, by a
/// ledger that forgets, at most its shortfall `s` (the part of its entitlement it did not
/// receive) times what a queue given nothing is owed; below a half it never claims its whole
/// pool. Its larger workload earns its hold by waiting instead, once it has waited
/// `T · max(1, ½ / s)`. The run reports the queue's shortfall over its whole length, the ledger
/// counts it over a decayed window: the bound allows half as long again for the difference, then
/// the job's own drain and run and the slack. The jobs are half to three quarters of the pool:
/// one that with the queue's own running work would exceed the pool is not held for while that
/// work runs (`BeyondGuarantees`), and starts only once its queue runs nothing.
fn partly_served_bound_h(shortfall: f64) -> f64 {
    earning_bound_h(&FairShareParams::default()) * (0.5 / shortfall).max(1.0) * 1.5
        + RUN_H
        + SLACK_H
}

/// As `scenario_text` with one job, submitted at 24h, whose queue also submits 1-GPU, 1-hour jobs
/// from then on, offering the fraction `served` of its share of the pool, for `days` days.
fn partly_served_text(
    nodes: u32,
    per_node: u32,
    fillers: usize,
    size: u32,
    served: f64,
    days: u32,
) -> String {
    let gpus = nodes * per_node;
    let text = scenario_text(nodes, per_node, fillers, &[(size, 24)], days);
    let share = f64::from(gpus) / (fillers as f64 + 1.0);
    let gap_min = 60.0 / (served * share);
    text.replacen(
        "  jobs:\n",
        &format!(
            "    - {{ queue: big-0, start: 24h, interarrival: {gap_min:.3}m, gpus: 1, duration: 1h }}\n  jobs:\n"
        ),
        1,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn every_job_that_fits_its_pool_starts_in_bounded_time(
        nodes in 1..=2u32,
        per_node in prop::sample::select(vec![4u32, 8]),
        fillers in 2..=12usize,
        big in proptest::collection::vec((1..=16u32, 0..=24u32), 1..=4),
    ) {
        let text = scenario_text(nodes, per_node, fillers, &big, 8);
        let scenario = scenario::parse(Path::new("starvation.yaml"), &text).expect("generated scenario loads");
        let report = run(&scenario, PolicyName::Gpufair).report;
        let bound_s = start_bound_h(big.len()) * 3600.0;
        prop_assert!(bound_s < scenario.duration_s - 24.0 * 3600.0);
        for (name, job) in &report.named_jobs {
            let wait = job.wait_s.unwrap_or(f64::INFINITY);
            prop_assert!(
                wait <= bound_s,
                "{name} ({} GPUs of {}) waited {:.1}h, bound {:.1}h\n{text}",
                job.gpus, nodes * per_node, wait / 3600.0, bound_s / 3600.0
            );
            prop_assert!(job.end_s.is_some(), "{name} started but did not finish");
        }
    }

    #[test]
    fn a_job_of_a_queue_served_in_part_through_its_small_work_starts_in_bounded_time(
        nodes in 1..=2u32,
        per_node in prop::sample::select(vec![4u32, 8]),
        fillers in 2..=8usize,
        size_part in 0.5..=0.75f64,
        served in prop::sample::select(vec![0.5, 0.6, 0.7, 0.8, 0.9]),
    ) {
        let gpus = nodes * per_node;
        let size = ((f64::from(gpus) * size_part).round() as u32).clamp(2, gpus);
        // Long enough for the bound at the least shortfall the offered load can leave.
        let days = (partly_served_bound_h((1.0 - served) * 0.8) / 24.0).ceil() as u32 + 2;
        let text = partly_served_text(nodes, per_node, fillers, size, served, days);
        let scenario = scenario::parse(Path::new("partly-served.yaml"), &text).expect("generated scenario loads");
        let report = run(&scenario, PolicyName::Gpufair).report;
        let job = &report.named_jobs["big-0"];
        let queue = &report.queues["big-0"];
        let small_received = queue.received_gpu_hours - f64::from(job.gpus) * RUN_H;
        let shortfall = (1.0 - small_received / queue.entitled_gpu_hours).clamp(0.0, 1.0);
        prop_assert!(shortfall > 0.0, "the queue received its entitlement: {queue:?}");
        let bound_h = partly_served_bound_h(shortfall);
        let wait = job.wait_s.unwrap_or(f64::INFINITY);
        prop_assert!(
            wait <= bound_h * 3600.0,
            "big-0 ({} GPUs of {gpus}, shortfall {shortfall:.2}) waited {:.1}h, bound {:.1}h\n{text}",
            job.gpus, wait / 3600.0, bound_h
        );
        prop_assert!(job.end_s.is_some(), "big-0 started but did not finish");
    }
}

/// A guarantee serves only the work it covers. Queue `hollow` is guaranteed 4 GPUs but only ever
/// runs jobs of the whole 16-GPU pool, one every two hours, so it always has one waiting. Were
/// such a job served first on the guarantee's account, `hollow` would win back the pool each
/// time its last job freed it, and `wide`'s one job of the pool, with filler queues keeping
/// both nodes busy otherwise, would never start. Served in the order of the time-aware shares,
/// it starts within the bound for a job held behind one other.
#[test]
fn a_guarantee_does_not_serve_work_larger_than_itself_first() {
    let text = "\
name: hollow-guarantee
duration: 8d
seed: 5
cluster: { pools: [ { name: p, gpus: 16, gpusPerNode: 8 } ] }
queues:
  - { name: filler-0 }
  - { name: filler-1 }
  - { name: filler-2 }
  - { name: hollow, guaranteed: 4 }
  - { name: wide }
workload:
  streams:
    - { queue: filler-0, interarrival: 7.5m, gpus: 1, duration: 1h }
    - { queue: filler-1, interarrival: 7.5m, gpus: 1, duration: 1h }
    - { queue: filler-2, interarrival: 7.5m, gpus: 1, duration: 1h }
    - { queue: hollow, interarrival: 2h, gpus: 16, pods: 2, duration: 2h }
  jobs:
    - { name: wide-16, queue: wide, submit: 2h, gpus: 16, pods: 2, duration: 2h }
";
    let scenario = scenario::parse(Path::new("hollow-guarantee.yaml"), text).expect("loads");
    let report = run(&scenario, PolicyName::Gpufair).report;
    let job = &report.named_jobs["wide-16"];
    let bound_s = start_bound_h(2) * 3600.0;
    let wait = job.wait_s.unwrap_or(f64::INFINITY);
    assert!(
        wait <= bound_s,
        "waited {:.1}h, bound {:.1}h",
        wait / 3600.0,
        bound_s / 3600.0
    );
    assert!(job.end_s.is_some(), "started but did not finish");
}
