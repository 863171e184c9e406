//! What is left unstarted at the end: counted in jobs and in the GPU-hours they asked for.

mod common;

use common::{repo_path, run};
use gpufair_sim::scenario::{self, PolicyName};

/// One 4-GPU node: a 4-GPU job takes it for the whole run, so the jobs behind it never start.
/// Their backlog is their size times their run time, whatever their number.
#[test]
fn the_backlog_left_unstarted_is_counted_in_jobs_and_in_gpu_hours() {
    let text = "name: backlog
duration: 10h
seed: 1
cluster: { pools: [ { name: p, gpus: 4, gpusPerNode: 4 } ] }
queues:
  - { name: a, weight: 1 }
workload:
  jobs:
    - { name: first, queue: a, submit: 0h, gpus: 4, duration: 20h }
    - { queue: a, submit: 1h, gpus: 1, duration: 3h }
    - { queue: a, submit: 2h, gpus: 2, duration: 90m }
    - { queue: a, submit: 3h, gpus: 4, duration: 30m }
";
    let scenario = scenario::parse(&repo_path("scenarios/inline.yaml"), text).unwrap();
    for policy in [PolicyName::Gpufair, PolicyName::Stateless, PolicyName::Fifo] {
        let report = run(&scenario, policy).report;
        assert_eq!(report.jobs_never_started, 3, "{policy}");
        // 1 × 3 h + 2 × 1.5 h + 4 × 0.5 h
        assert!(
            (report.gpu_hours_never_started - 8.0).abs() < 1e-9,
            "{policy}: {}",
            report.gpu_hours_never_started
        );
    }
}
