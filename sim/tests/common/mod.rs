//! Helpers shared by the simulator's integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use gpufair_sim::engine::{PolicyRun, simulate};
use gpufair_sim::scenario::{self, PolicyName, Scenario};

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

pub fn bundled(name: &str) -> Scenario {
    scenario::load(&repo_path(&format!("scenarios/{name}"))).expect("bundled scenario loads")
}

pub fn run(scenario: &Scenario, policy: PolicyName) -> PolicyRun {
    simulate(scenario, policy, &mut |_| {}).expect("simulation runs")
}
