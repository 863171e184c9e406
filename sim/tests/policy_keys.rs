//! The policy's keys in scenarios: task type, urgency, user tier, deadline, resource, node
//! shapes and releaseScore. Each is read with core's grammar and refused by name when wrong; the
//! policies then act on them.

use std::path::Path;

use gpufair_core::labels::{TaskType, Tier, Urgency, UserTier};
use gpufair_sim::engine::simulate;
use gpufair_sim::scenario::{self, PolicyName, Scenario, ScenarioError};

const GOOD: &str = "\
name: t
duration: 1d
cluster:
  pools:
    - { name: p, gpus: 2, gpusPerNode: 2, mig: { \"3g.40gb\": 2, \"1g.10gb\": 1 }, sharedReplicas: 4 }
queues:
  - { name: a }
releaseScore: { urgency: 2, deadline: 4 }
workload:
  jobs:
    - { name: infer, queue: a, submit: 0s, gpus: 1, duration: 1h, taskType: inference, resource: nvidia.com/gpu.shared }
    - { name: slice, queue: a, submit: 0s, gpus: 2, duration: 1h, taskType: processing, resource: nvidia.com/mig-3g.40gb }
    - { name: key, queue: a, submit: 0s, gpus: 1, duration: 1h, urgency: high, userTier: premium, deadline: 6h }
    - { name: due, queue: a, submit: 0s, gpus: 1, duration: 1h, deadlineAt: 3h }
";

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    scenario::parse(Path::new("s.yaml"), text)
}

fn message(text: &str) -> String {
    parse(text)
        .expect_err("scenario must be refused")
        .to_string()
}

#[test]
fn keys_are_read_and_slices_valued_in_gpu_equivalents() {
    let s = parse(GOOD).unwrap();
    assert!(s.labelled && s.has_slices());
    // 2 whole GPUs + 2 × 3/7 + 1/7 + 4 × 1/4 on the one node.
    assert!((s.pools[0].capacity - (2.0 + 1.0 + 1.0)).abs() < 1e-9);
    assert_eq!(s.release_score.urgency, 2.0);
    assert_eq!(
        s.release_score.user_tier, 1.0,
        "absent keys keep core's defaults"
    );
    let job = |name: &str| {
        s.jobs
            .iter()
            .find(|j| j.name.as_deref() == Some(name))
            .unwrap()
    };
    assert_eq!(job("infer").tier(), Tier::Realtime);
    assert!((job("infer").gpu_equivalents - 0.25).abs() < 1e-12);
    assert_eq!(job("slice").task_type, TaskType::Processing);
    assert!((job("slice").gpu_equivalents - 6.0 / 7.0).abs() < 1e-12);
    assert_eq!(job("slice").pods, vec![2], "two instances fit the one node");
    assert_eq!(job("key").urgency, Urgency::High);
    assert_eq!(job("key").user_tier, UserTier::Premium);
    assert_eq!(job("key").deadline_s, Some(6.0 * 3600.0));
    assert_eq!(job("due").deadline_s, Some(3.0 * 3600.0));
    assert!(job("key").is_key() && job("infer").is_key() && !job("due").is_key());
}

#[test]
fn bad_values_are_refused_by_key_with_the_accepted_forms() {
    let cases = [
        (
            "taskType: inference",
            "taskType: serving",
            "workload.jobs[0].taskType",
            "train, inference or processing",
        ),
        (
            "urgency: high",
            "urgency: urgent",
            "workload.jobs[2].urgency",
            "high, medium or low",
        ),
        (
            "userTier: premium",
            "userTier: gold",
            "workload.jobs[2].userTier",
            "premium, standard or basic",
        ),
        (
            "resource: nvidia.com/gpu.shared",
            "resource: amd.com/gpu",
            "workload.jobs[0].resource",
            "nvidia.com/mig-<profile>",
        ),
        (
            "resource: nvidia.com/mig-3g.40gb",
            "resource: nvidia.com/mig-3x.40gb",
            "workload.jobs[1].resource",
            "MIG profile",
        ),
        (
            "resource: nvidia.com/mig-3g.40gb",
            "resource: nvidia.com/mig-2g.20gb",
            "workload.jobs[1].resource",
            "no node of pool \"p\" offers",
        ),
        (
            "\"3g.40gb\": 2",
            "\"3g.40\": 2",
            "cluster.pools[0].mig.3g.40",
            "MIG profile",
        ),
        (
            "sharedReplicas: 4",
            "sharedReplicas: 0",
            "cluster.pools[0].sharedReplicas",
            "at least 1",
        ),
        (
            "deadline: 6h",
            "deadline: 6h, deadlineAt: 2h",
            "workload.jobs[2].deadlineAt",
            "not both",
        ),
        ("deadline: 6h", "deadline: 6", "", "invalid duration 6"),
        (
            "urgency: 2, deadline: 4",
            "urgency: -1, deadline: 4",
            "releaseScore.urgency",
            "[0, 1000]",
        ),
        (
            "urgency: 2, deadline: 4",
            "urgency: 2, deadline: 4, waitScale: 0s",
            "releaseScore.waitScale",
            "> 0",
        ),
        (
            "gpus: 2, duration: 1h, taskType: processing",
            "gpus: 3, duration: 1h, taskType: processing",
            "workload.jobs[1].gpus",
            "can never fit",
        ),
    ];
    for (from, to, key, expected) in cases {
        assert!(GOOD.contains(from), "{from}");
        let err = message(&GOOD.replacen(from, to, 1));
        assert!(err.contains(key) && err.contains(expected), "{to}: {err}");
    }
}

#[test]
fn a_scenario_without_the_keys_is_unlabelled_and_whole_gpu_only() {
    let s = parse(
        "name: t\nduration: 1h\ncluster: { pools: [ { name: p, gpus: 8 } ] }\nqueues: [ { name: a } ]\n\
         workload: { jobs: [ { queue: a, submit: 0s, gpus: 1, duration: 1h } ] }\n",
    )
    .unwrap();
    assert!(!s.labelled && !s.has_slices());
    assert_eq!(s.jobs[0].task_type, TaskType::default());
    assert_eq!(s.capacity(), 8.0);
}

/// One whole GPU, taken at 0s; then, in submission order, a low-urgency job, a high-urgency
/// one and an inference job wait for it. gpufair releases realtime first, then by the score
/// (urgency); FIFO in submission order; Kueue by priority (tier, then urgency). KAI also
/// preempts lower priorities of the same queue: the high-urgency job evicts the first, and the
/// inference job evicts it in turn.
#[test]
fn policies_order_waiting_work_by_what_they_know() {
    let text = "\
name: order
duration: 1d
cluster: { pools: [ { name: p, gpus: 1, gpusPerNode: 1 } ] }
queues: [ { name: a } ]
workload:
  jobs:
    - { name: first, queue: a, submit: 0s, gpus: 1, duration: 1h }
    - { name: low, queue: a, submit: 1m, gpus: 1, duration: 1h, urgency: low }
    - { name: high, queue: a, submit: 2m, gpus: 1, duration: 1h, urgency: high }
    - { name: infer, queue: a, submit: 3m, gpus: 1, duration: 1h, taskType: inference }
";
    let s = parse(text).unwrap();
    let order = |policy: PolicyName| {
        let run = simulate(&s, policy, &mut |_| {}).unwrap();
        let mut named: Vec<(f64, String)> = run
            .report
            .named_jobs
            .iter()
            .map(|(name, job)| (job.start_s.unwrap_or(f64::INFINITY), name.clone()))
            .collect();
        named.sort_by(|a, b| a.0.total_cmp(&b.0));
        named.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
    };
    assert_eq!(order(PolicyName::Fifo), ["first", "low", "high", "infer"]);
    for policy in [PolicyName::Gpufair, PolicyName::KueueAfs] {
        assert_eq!(
            order(policy),
            ["first", "infer", "high", "low"],
            "{policy:?}"
        );
    }
    assert_eq!(order(PolicyName::Kai), ["first", "high", "infer", "low"]);
    let kai = simulate(&s, PolicyName::Kai, &mut |_| {}).unwrap().report;
    assert_eq!(kai.named_jobs["first"].preemptions, 1);
    assert_eq!(kai.named_jobs["high"].preemptions, 1);
    assert_eq!(kai.named_jobs["infer"].preemptions, 0);
}

/// Slices are placed per node by the resource they ask for: two 3g.40gb jobs run side by side
/// on the node's two instances while a third waits, whatever the whole GPUs are doing.
#[test]
fn slices_are_placed_on_the_instances_their_node_offers() {
    let text = "\
name: slices
duration: 1d
cluster: { pools: [ { name: p, gpus: 1, gpusPerNode: 1, mig: { \"3g.40gb\": 2 } } ] }
queues: [ { name: a } ]
workload:
  jobs:
    - { name: s1, queue: a, submit: 0s, gpus: 1, duration: 1h, resource: nvidia.com/mig-3g.40gb }
    - { name: s2, queue: a, submit: 0s, gpus: 1, duration: 1h, resource: nvidia.com/mig-3g.40gb }
    - { name: s3, queue: a, submit: 0s, gpus: 1, duration: 1h, resource: nvidia.com/mig-3g.40gb }
    - { name: whole, queue: a, submit: 0s, gpus: 1, duration: 1h }
";
    let s = parse(text).unwrap();
    for policy in [
        PolicyName::Gpufair,
        PolicyName::Fifo,
        PolicyName::Kai,
        PolicyName::KueueAfs,
    ] {
        let run = simulate(&s, policy, &mut |_| {}).unwrap();
        let start = |n: &str| run.report.named_jobs[n].start_s.unwrap();
        assert_eq!(start("s1"), start("s2"), "{policy:?}");
        assert_eq!(start("whole"), start("s1"), "{policy:?}");
        assert!(start("s3") >= start("s1") + 3600.0, "{policy:?}");
        let classes = run.report.classes.as_ref().expect("slices are reported");
        // 6/7 + 1 GPU-equivalents for 1h, then 3/7 for 1h, over 1 day.
        let delivered = (6.0 / 7.0 + 1.0 + 3.0 / 7.0) / 1.0;
        assert!(
            (classes.gpu_hours_per_day - delivered).abs() < 1e-6,
            "{policy:?}: {classes:?}"
        );
    }
}

/// Deadlines met are counted over jobs whose deadline falls inside the simulated time.
#[test]
fn deadline_hit_rate_counts_jobs_finished_in_time() {
    let text = "\
name: deadlines
duration: 1d
cluster: { pools: [ { name: p, gpus: 1, gpusPerNode: 1 } ] }
queues: [ { name: a } ]
workload:
  jobs:
    - { name: a1, queue: a, submit: 0s, gpus: 1, duration: 2h, deadline: 3h }
    - { name: a2, queue: a, submit: 0s, gpus: 1, duration: 2h, deadline: 3h }
";
    let s = parse(text).unwrap();
    let run = simulate(&s, PolicyName::Fifo, &mut |_| {}).unwrap();
    let classes = run.report.classes.unwrap();
    assert_eq!(classes.jobs_with_deadline, 2);
    assert_eq!(classes.deadline_hit_rate, Some(0.5));
}
