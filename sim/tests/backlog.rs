//! What is left unstarted at the end: counted in jobs and in the GPU-hours they asked for.

mod common;

use common::{repo_path, run};
use gpufair_sim::scenario::{self, PolicyName};

/// One 4-GPU node: a 3-GPU job of queue a and a 1-GPU job of queue b take it for the whole run,
/// so a's jobs behind them never start. Their backlog is their size times their run time,
/// whatever their number, and it is a's, not b's.
#[test]
fn the_backlog_left_unstarted_is_counted_in_jobs_and_in_gpu_hours() {
    let text = "name: backlog
duration: 10h
seed: 1
cluster: { pools: [ { name: p, gpus: 4, gpusPerNode: 4 } ] }
queues:
  - { name: a, weight: 1 }
  - { name: b, weight: 1 }
workload:
  jobs:
    - { name: first, queue: a, submit: 0h, gpus: 3, duration: 20h }
    - { name: beside, queue: b, submit: 0h, gpus: 1, duration: 20h }
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
        let (a, b) = (&report.queues["a"], &report.queues["b"]);
        assert_eq!(
            (a.jobs_never_started, b.jobs_never_started),
            (3, 0),
            "{policy}"
        );
        assert!(
            (a.gpu_hours_never_started - 8.0).abs() < 1e-9 && b.gpu_hours_never_started == 0.0,
            "{policy}: a {}, b {}",
            a.gpu_hours_never_started,
            b.gpu_hours_never_started
        );
    }
}

/// One 8-GPU pool that a stream of 1-GPU jobs keeps full, and one job of the whole pool from a
/// second queue: stateless fair share never starts it, its queue receives nothing of its
/// entitlement, and five days on it has waited past the earning bound (69 h), so it is counted
/// as starved; gpufair starts it within the bound, and counts nothing.
#[test]
fn a_job_of_a_starved_queue_left_past_the_earning_bound_is_counted() {
    let text = "name: starved
duration: 120h
seed: 1
cluster: { pools: [ { name: p, gpus: 8, gpusPerNode: 4 } ] }
queues:
  - { name: small, weight: 1 }
  - { name: big, weight: 1 }
workload:
  streams:
    - { queue: small, start: 0m, interarrival: 5m, gpus: 1, duration: 60m }
  jobs:
    - { name: whole-pool, queue: big, submit: 1h, gpus: 8, pods: 2, duration: 2h }
";
    let scenario = scenario::parse(&repo_path("scenarios/inline.yaml"), text).unwrap();
    let stateless = run(&scenario, PolicyName::Stateless).report;
    assert!(stateless.named_jobs["whole-pool"].start_s.is_none());
    assert_eq!(stateless.starved_jobs_unstarted_past_bound, 1);
    let gpufair = run(&scenario, PolicyName::Gpufair).report;
    assert!(gpufair.named_jobs["whole-pool"].start_s.is_some());
    assert_eq!(gpufair.starved_jobs_unstarted_past_bound, 0);
}
