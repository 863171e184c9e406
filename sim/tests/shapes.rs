//! The shapes not tuned on (`scenarios/shapes/`): small pools shared by many queues, some of
//! whose jobs need a whole node or the whole pool, and idle clusters that fill up. On each, with
//! the project's defaults, the ledger costs no fairness against the same policy without it, no
//! rival model dominates gpufair, its utilization stays near the best rival's, and every queue
//! the pool owes something receives some of it.

mod common;

use common::{
    assert_ledger_never_hurts, assert_utilization_near_the_best, gpufair_undominated, yaml_files_in,
};
use gpufair_sim::scenario;

#[test]
fn on_every_shape_the_ledger_never_hurts_no_rival_dominates_gpus_stay_busy_owed_get_served() {
    let files = yaml_files_in("scenarios/shapes");
    assert!(
        files.len() >= 10,
        "expected the ten shapes, found {files:?}"
    );
    for file in files {
        let scenario = scenario::load(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (gpufair, rivals) = gpufair_undominated(&scenario);
        assert_ledger_never_hurts(&scenario, &gpufair);
        assert_utilization_near_the_best(&scenario, &gpufair, &rivals);
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
