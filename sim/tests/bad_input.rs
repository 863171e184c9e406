//! Every bad scenario names the file, the line or key, and what was expected.

use std::path::{Path, PathBuf};

use gpufair_sim::scenario::{self, ScenarioError};

const GOOD: &str = "\
name: t
duration: 2h
cluster: { pools: [ { name: p, gpus: 16 } ] }
queues:
  - { name: a }
workload:
  jobs:
    - { queue: a, submit: 0s, gpus: 1, duration: 1h }
";

fn parse(text: &str) -> Result<scenario::Scenario, ScenarioError> {
    scenario::parse(Path::new("dir/s.yaml"), text)
}

fn message(text: &str) -> String {
    parse(text)
        .expect_err("scenario must be refused")
        .to_string()
}

#[test]
fn the_good_scenario_parses() {
    let s = parse(GOOD).unwrap();
    assert_eq!((s.jobs.len(), s.pools[0].gpus_per_node), (1, 8));
}

#[test]
fn unknown_key_names_file_line_and_expected_keys() {
    let err = message(&GOOD.replace("{ queue: a, submit", "{ queue: a, sbumit: 0s, submit"));
    assert!(err.starts_with("dir/s.yaml:8:"), "{err}");
    assert!(
        err.contains("unknown field `sbumit`") && err.contains("`submit`"),
        "{err}"
    );
}

#[test]
fn bad_duration_names_the_value_and_the_forms() {
    let err = message(&GOOD.replace("duration: 2h", "duration: 2 hours"));
    assert!(err.starts_with("dir/s.yaml:2:"), "{err}");
    assert!(
        err.contains("\"2 hours\"") && err.contains("s, m, h or d"),
        "{err}"
    );
    let err = message(&GOOD.replace("duration: 1h", "duration: 60"));
    assert!(err.contains("invalid duration 60"), "{err}");
}

#[test]
fn unknown_queue_names_the_key_and_the_queues() {
    let err = message(&GOOD.replace("{ queue: a,", "{ queue: b,"));
    assert!(err.contains("workload.jobs[0].queue"), "{err}");
    assert!(
        err.contains("unknown queue \"b\": expected one of a"),
        "{err}"
    );
}

#[test]
fn unknown_policy_names_line_and_choices() {
    let err = message(&format!("{GOOD}policies: [gpufair, fairest]\n"));
    assert!(err.starts_with("dir/s.yaml:9:"), "{err}");
    assert!(
        err.contains("fairest") && err.contains("kueue-afs"),
        "{err}"
    );
}

#[test]
fn impossible_jobs_and_values_are_refused() {
    let err = message(&GOOD.replace("gpus: 1,", "gpus: 12, pods: 5,"));
    assert!(err.contains("workload.jobs[0].pods"), "{err}");
    let err = message(&GOOD.replace("gpus: 1,", "gpus: 40,"));
    assert!(err.contains("can never fit pool"), "{err}");
    let err = message(&GOOD.replace("{ name: a }", "{ name: a, weight: -1 }"));
    assert!(
        err.contains("queues[0].weight: expected a number > 0"),
        "{err}"
    );
}

fn trace_scenario(file: &Path) -> String {
    format!(
        "{GOOD}  traces:\n    - {{ file: {}, format: philly, queueBy: cluster, defaultQueue: a }}\n",
        file.display()
    )
}

#[test]
fn missing_trace_file_names_it() {
    let err = message(&trace_scenario(&PathBuf::from("/no/such/trace.csv")));
    assert!(err.contains("workload.traces[0].file"), "{err}");
    assert!(
        err.contains("/no/such/trace.csv: cannot read trace"),
        "{err}"
    );
}

#[test]
fn malformed_trace_row_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(
        &trace,
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,x\n2017-10-09 07:01:5,66.0,1,66.0,x\n",
    )
    .unwrap();
    let err = message(&trace_scenario(&trace));
    assert!(err.contains("t.csv:3: column timestamp"), "{err}");
}

#[test]
fn relative_trace_paths_are_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("traces")).unwrap();
    std::fs::write(
        dir.path().join("traces/t.csv"),
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,12,792.0,a\n",
    )
    .unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(&path, trace_scenario(Path::new("traces/t.csv"))).unwrap();
    let s = scenario::load(&path).unwrap();
    // The trace's 12-GPU job on 8-GPU nodes is a gang of one node-sized pod and the rest.
    let gang = s.jobs.iter().find(|j| j.pods.len() > 1).unwrap();
    assert_eq!(gang.pods, vec![8, 4]);
}

#[test]
fn per_pool_fairshare_names_the_pool_and_the_key() {
    let with = |block: &str| {
        GOOD.replace(
            "workload:",
            &format!("fairshare:\n  pools:\n{block}\nworkload:"),
        )
    };
    let s = parse(&with("    p: { enabled: false, k: 2 }")).unwrap();
    let p = &s.pool_fairshare["p"];
    assert!(!p.time_aware);
    assert_eq!(p.k, 2.0);
    let err = message(&with("    q: { enabled: false }"));
    assert!(
        err.contains("fairshare.pools.q") && err.contains("p"),
        "{err}"
    );
    let err = message(&with("    p: { k: -1 }"));
    assert!(err.contains("fairshare.pools.p.k"), "{err}");
    let err = message(&with("    p: { bucket: 1h }"));
    assert!(err.contains("unknown field `bucket`"), "{err}");
}

#[test]
fn tiny_ledger_buckets_are_refused_by_key() {
    let err = message(&GOOD.replace("queues:", "fairshare: { bucket: 10ms }\nqueues:"));
    assert!(
        err.contains("fairshare.bucket") && err.contains("at least 1m"),
        "{err}"
    );
    parse(&GOOD.replace("queues:", "fairshare: { bucket: 1m }\nqueues:")).unwrap();
}

#[test]
fn a_stream_that_would_exhaust_memory_is_refused_by_key() {
    // 1000 years of a job every second: billions of jobs.
    let text = GOOD.replace(
        "  jobs:",
        "  streams:\n    - { queue: a, end: 365000d, interarrival: 1s, gpus: 1, duration: 1h }\n  jobs:",
    );
    let err = message(&text);
    assert!(
        err.contains("workload.streams[0].interarrival")
            && err.contains(&gpufair_sim::scenario::MAX_JOBS.to_string()),
        "{err}"
    );
}

#[test]
fn a_pool_of_billions_of_nodes_is_refused_by_key() {
    let err = message(&GOOD.replace(
        "{ name: p, gpus: 16 }",
        "{ name: p, gpus: 4000000000, gpusPerNode: 1 }",
    ));
    assert!(
        err.contains("cluster.pools[0].gpus") && err.contains("100000 nodes"),
        "{err}"
    );
}

#[test]
fn the_config_file_s_blocks_are_read_by_the_same_schema() {
    let with = |block: &str| GOOD.replace("workload:", &format!("{block}\nworkload:"));
    let s = parse(&with(
        "fairshare: { holdIdleLimit: 90m, catchUpPeriod: 0, utilizationFloor: 0.5, \
         pools: { p: { holdIdleLimit: 0s, holdLead: 45m, holdBackfill: true } } }\n\
         preemption: { cooldown: 30m }",
    ))
    .unwrap();
    assert_eq!(
        (s.fairshare.hold_idle_limit_s, s.fairshare.catch_up_s),
        (5400.0, 0.0)
    );
    assert!(!s.fairshare.hold_backfill);
    assert_eq!(s.pool_fairshare["p"].hold_idle_limit_s, 0.0);
    assert!(s.pool_fairshare["p"].hold_backfill);
    assert_eq!(
        (s.fairshare.hold_lead_s, s.pool_fairshare["p"].hold_lead_s),
        (1800.0, 2700.0)
    );
    assert_eq!(s.preemption.cooldown_s, 1800.0);
    let cases = [
        (
            "fairshare: { window: 60 }",
            "fairshare.window: \"60\" is out of range: expected a number followed by a unit",
        ),
        (
            "fairshare: { decay: 1.5 }",
            "fairshare.decay: 1.5 is out of range: expected a factor in (0, 1]",
        ),
        (
            "fairshare: { pools: { p: { window: 30m } } }",
            "fairshare.pools.p.window: \"30m\" is out of range: expected a duration > 0 and no \
             shorter than fairshare.bucket",
        ),
        (
            "preemption: { fairShareThreshold: 2 }",
            "preemption.fairShareThreshold: 2 is out of range: expected a ratio in [0, 1]",
        ),
        (
            "releaseScore: { waitScale: 0s }",
            "releaseScore.waitScale: \"0s\" is out of range: expected a duration > 0",
        ),
        (
            "fairshare: { chargeBasis: utilized }",
            "fairshare.chargeBasis: the simulator has no measured utilization",
        ),
    ];
    for (block, expected) in cases {
        let err = message(&with(block));
        assert!(
            err.starts_with(&format!("dir/s.yaml: {expected}")),
            "{block}: {err}"
        );
    }
}
