//! The shapes not tuned on (`scenarios/shapes/`): small pools shared by many queues, some of
//! whose jobs need a whole node or the whole pool, and idle clusters that fill up. On each, with
//! the project's defaults, the ledger costs no fairness against the same policy without it,
//! and every queue the pool owes something receives some of it.

mod common;

use common::{repo_path, run};
use gpufair_sim::scenario::{self, PolicyName};

/// How much less fair (cumulative deviation, in points) gpufair may be than `stateless-hold`,
/// core's decide without the time-aware term: the "the ledger never hurts" bound.
const LEDGER_TOLERANCE_POINTS: f64 = 0.5;

#[test]
fn on_every_shape_the_ledger_costs_no_fairness_and_no_owed_queue_is_left_with_nothing() {
    let dir = repo_path("scenarios/shapes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/shapes is readable")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the ten shapes, found {files:?}"
    );
    for file in files {
        let scenario = scenario::load(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let gpufair = run(&scenario, PolicyName::Gpufair).report;
        let without_ledger = run(&scenario, PolicyName::StatelessHold).report;
        let (ours, theirs) = (
            100.0 * gpufair.fairness_deviation,
            100.0 * without_ledger.fairness_deviation,
        );
        assert!(
            ours <= theirs + LEDGER_TOLERANCE_POINTS,
            "{}: gpufair FD {ours:.2}% against stateless-hold's {theirs:.2}%",
            scenario.name
        );
        for (queue, report) in &gpufair.queues {
            assert!(
                report.entitled_gpu_hours < 1.0 || report.received_gpu_hours > 0.0,
                "{}: {queue} was entitled to {:.1} GPU-hours and received nothing",
                scenario.name,
                report.entitled_gpu_hours
            );
        }
    }
}
