//! Two contended days of the real Philly trace through every policy.

mod common;

use common::{repo_path, run};
use gpufair_sim::scenario::{self, PolicyName};

fn slice() -> scenario::Scenario {
    let text = format!(
        "name: philly-slice
duration: 3d
seed: 1
cluster: {{ pools: [ {{ name: p, gpus: 256 }} ] }}
queues:
  - {{ name: big, weight: 1 }}
  - {{ name: rest, weight: 1 }}
workload:
  traces:
    - {{ file: {}, format: philly, queueBy: cluster, from: 21d, until: 23d,
        map: {{ ee9e8c: big, 7f04ca: big, b436b2: big }}, defaultQueue: rest }}
",
        repo_path("traces/philly.csv").display()
    );
    scenario::parse(&repo_path("scenarios/inline.yaml"), &text).unwrap()
}

#[test]
fn every_policy_conserves_capacity_and_accounts_for_every_job() {
    let scenario = slice();
    assert!(scenario.jobs.len() > 1000, "{} jobs", scenario.jobs.len());
    assert!(scenario.jobs.iter().all(|j| j.submit_s < 2.0 * 86_400.0));
    for policy in [
        PolicyName::Gpufair,
        PolicyName::Stateless,
        PolicyName::Fifo,
        PolicyName::Kai,
        PolicyName::KueueAfs,
    ] {
        let report = run(&scenario, policy).report;
        assert!(
            report.utilization > 0.3 && report.utilization <= 1.0 + 1e-9,
            "{policy}: {}",
            report.utilization
        );
        assert_eq!(report.jobs_submitted, scenario.jobs.len());
        assert!(report.jobs_started + report.jobs_never_started >= report.jobs_submitted);
        let received: f64 = report.queues.values().map(|q| q.received_gpu_hours).sum();
        let entitled: f64 = report.queues.values().map(|q| q.entitled_gpu_hours).sum();
        assert!(received <= 256.0 * 72.0 + 1e-6 && entitled <= 256.0 * 72.0 + 1e-6);
        assert!((0.0..=1.0).contains(&report.jain_index) || (report.jain_index - 1.0).abs() < 1e-9);
        if matches!(
            policy,
            PolicyName::Stateless | PolicyName::Fifo | PolicyName::KueueAfs
        ) {
            assert_eq!(report.preemptions, 0, "{policy} never preempts");
        }
    }
}

#[test]
fn the_bundled_philly_scenario_reads_the_whole_trace() {
    let s = common::bundled("philly.yaml");
    assert_eq!(s.jobs.len(), 82_247);
    assert_eq!(s.queues.len(), 15);
    assert_eq!(s.jobs.iter().map(|j| j.gpus()).max(), Some(128));
    assert!(s.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
    let helios = common::bundled("helios.yaml");
    assert!(helios.jobs.len() > 10_000);
}
