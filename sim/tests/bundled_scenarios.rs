//! Every bundled scenario an admin replays with `gpufair-sim run`, with its own settings: the
//! ledger costs no fairness against the same policy without it (`stateless-hold`, core's decide
//! with K = 0), no rival model dominates gpufair, and its utilization stays near the best
//! rival's. With `shapes.rs`, which checks the same on the shapes not tuned on, these are the
//! README's "The ledger never hurts" and "Holds cost little utilization".
//!
//! The two traces are left to `philly_slice.rs` and BENCHMARKS.md (a full replay takes minutes),
//! and the right-sizing families are the input of `gpufair-sim right-size`, not of `run`.

mod common;

use common::{
    assert_ledger_never_hurts, assert_utilization_near_the_best, gpufair_undominated, yaml_files_in,
};
use gpufair_sim::scenario;

/// Bundled files that are not replayed here, and why (see the module's comment).
const NOT_REPLAYED: [&str; 3] = ["philly.yaml", "helios.yaml", "right-size-families.yaml"];

#[test]
fn on_every_bundled_scenario_the_ledger_never_hurts_no_rival_dominates_and_gpus_stay_busy() {
    let mut files = yaml_files_in("scenarios");
    for name in NOT_REPLAYED {
        assert!(
            files.iter().any(|path| path.ends_with(name)),
            "{name} is no longer bundled: drop it from NOT_REPLAYED"
        );
    }
    files.retain(|path| !NOT_REPLAYED.iter().any(|name| path.ends_with(name)));
    assert!(
        files.len() >= 11,
        "expected the eleven bundled scenarios, found {files:?}"
    );
    for file in files {
        let scenario = scenario::load(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (gpufair, rivals) = gpufair_undominated(&scenario);
        assert_ledger_never_hurts(&scenario, &gpufair);
        assert_utilization_near_the_best(&scenario, &gpufair, &rivals);
    }
}
