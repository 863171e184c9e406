//! Helpers shared by the simulator's integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use gpufair_sim::engine::{PolicyRun, simulate};
use gpufair_sim::metrics::{PolicyReport, dominance};
use gpufair_sim::scenario::{self, PolicyName, Scenario};

/// The rival models gpufair is measured against.
pub const RIVALS: [PolicyName; 4] = [
    PolicyName::Kai,
    PolicyName::KueueAfs,
    PolicyName::Stateless,
    PolicyName::Fifo,
];

/// How much less fair (cumulative deviation, in points) gpufair may be than `stateless-hold`,
/// core's decide without the time-aware term: the bound of "the ledger never hurts".
pub const LEDGER_TOLERANCE_POINTS: f64 = 0.5;

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

/// The scenario files (`*.yaml`) in the repository folder `relative`, sorted by path.
pub fn yaml_files_in(relative: &str) -> Vec<PathBuf> {
    let dir = repo_path(relative);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

pub fn bundled(name: &str) -> Scenario {
    scenario::load(&repo_path(&format!("scenarios/{name}"))).expect("bundled scenario loads")
}

pub fn run(scenario: &Scenario, policy: PolicyName) -> PolicyRun {
    simulate(scenario, policy, &mut |_| {}).expect("simulation runs")
}

/// gpufair's report, after checking that no rival dominates it (lower fairness deviation and no
/// more GPU-hours lost).
pub fn gpufair_undominated(scenario: &Scenario) -> (PolicyReport, Vec<PolicyReport>) {
    let gpufair = run(scenario, PolicyName::Gpufair).report;
    let rivals: Vec<PolicyReport> = RIVALS.iter().map(|&p| run(scenario, p).report).collect();
    let mut all: Vec<&PolicyReport> = vec![&gpufair];
    all.extend(rivals.iter());
    for verdict in dominance(&all) {
        assert!(
            !verdict.dominates_gpufair,
            "{}: {} dominates gpufair ({:.1}% vs {:.1}% FD, {:.1} vs {:.1} GPU-h lost)",
            scenario.name,
            verdict.rival,
            verdict.rival_fairness_deviation * 100.0,
            verdict.gpufair_fairness_deviation * 100.0,
            verdict.rival_gpu_hours_lost,
            verdict.gpufair_gpu_hours_lost
        );
    }
    (gpufair, rivals)
}

/// Checks that gpufair, whose report on `scenario` is `gpufair`, is less fair than the same
/// policy without the ledger's history by at most [`LEDGER_TOLERANCE_POINTS`].
pub fn assert_ledger_never_hurts(scenario: &Scenario, gpufair: &PolicyReport) {
    let without_ledger = run(scenario, PolicyName::StatelessHold).report;
    let (ours, theirs) = (
        100.0 * gpufair.fairness_deviation,
        100.0 * without_ledger.fairness_deviation,
    );
    assert!(
        ours <= theirs + LEDGER_TOLERANCE_POINTS,
        "{}: gpufair FD {ours:.2}% against stateless-hold's {theirs:.2}%",
        scenario.name
    );
}

/// How far below the better of stateless's and Kueue-AFS's utilization gpufair may be, in
/// points: counting capacity held idle for a workload that then started as used, and without
/// that count (the drain a whole-node job of a single-node pool costs).
pub const UTILIZATION_TOLERANCE_POINTS: (f64, f64) = (3.0, 6.0);

/// Checks gpufair's utilization on `scenario` against the better of stateless's and Kueue-AFS's
/// among `rivals` (see [`UTILIZATION_TOLERANCE_POINTS`]).
pub fn assert_utilization_near_the_best(
    scenario: &Scenario,
    gpufair: &PolicyReport,
    rivals: &[PolicyReport],
) {
    let best = rivals
        .iter()
        .filter(|r| r.name == "stateless" || r.name == "kueue-afs")
        .map(|r| 100.0 * r.utilization)
        .fold(f64::NAN, f64::max);
    assert!(best.is_finite(), "stateless and Kueue-AFS ran");
    let raw = 100.0 * gpufair.utilization;
    // Utilization is what the queues received over the capacity measured, so that capacity is
    // their sum over it.
    let received: f64 = gpufair.queues.values().map(|q| q.received_gpu_hours).sum();
    let paid_off = gpufair.held_idle_paid_off_gpu_hours.unwrap_or(0.0);
    let counted = if received > 0.0 {
        raw * (received + paid_off) / received
    } else {
        raw
    };
    let (counted_tolerance, raw_tolerance) = UTILIZATION_TOLERANCE_POINTS;
    assert!(
        counted >= best - counted_tolerance && raw >= best - raw_tolerance,
        "{}: gpufair's utilization {raw:.1}% ({counted:.1}% counting held idle that paid off) \
         against the best of stateless and Kueue-AFS, {best:.1}%",
        scenario.name
    );
}
