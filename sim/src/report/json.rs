//! The machine-readable result: deterministic for a given scenario (no wall-clock times).

use serde::Serialize;

use std::collections::BTreeMap;

use crate::metrics::{Dominance, PolicyReport, common_set_deviation, dominance};
use crate::scenario::Scenario;

/// The metric variants computed, stated in the output itself.
pub const METRIC_VARIANTS: &str = "fairness_deviation: fairshare.md §7 M1, cumulative over the measured horizon \
(after warm-up), demand-capped entitlement e_i from core's divide with base weights (K=0) of the capacity \
the pool's demand can use (each resource kind counted up to the demand for it; \
fairness_deviation_whole_capacity divides the whole capacity instead), active queues E_i >= 1% of total (fairness_deviation_common_queues: the same for every policy over the queues active under any policy of the run); 24h variants: the same over sliding 24h windows stepped by 1h; jain_index over A_i/E_i \
of active queues; waits are first start - submission, jobs never started count as waiting until the end; \
a queue is starved while demand > allocation and allocation < 0.9 e_i";

#[derive(Serialize)]
pub struct JsonReport<'a> {
    pub scenario: &'a str,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
    pub gpus: u32,
    pub jobs: usize,
    pub metric_variants: &'static str,
    pub policies: Vec<&'a PolicyReport>,
    /// Per policy: M1 over the queues active under any policy of this run, so that every
    /// policy is averaged over the same queues.
    pub fairness_deviation_common_queues: BTreeMap<String, f64>,
    /// For each rival run beside gpufair: does it have lower fairness deviation and no more
    /// GPU-hours lost?
    pub pareto: Vec<Dominance>,
}

pub fn to_json(scenario: &Scenario, reports: &[&PolicyReport]) -> String {
    let report = JsonReport {
        scenario: &scenario.name,
        duration_s: scenario.duration_s,
        warmup_s: scenario.warmup_s,
        seed: scenario.seed,
        gpus: scenario.total_gpus(),
        jobs: scenario.jobs.len(),
        metric_variants: METRIC_VARIANTS,
        policies: reports.to_vec(),
        fairness_deviation_common_queues: common_set_deviation(reports),
        pareto: dominance(reports),
    };
    // Plain data with string keys: serialisation cannot fail.
    serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
