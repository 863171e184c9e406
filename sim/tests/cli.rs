//! The binary: JSON on standard output with the documented keys, and errors on bad input.

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpufair-sim"))
}

/// A bundled scenario's path.
fn scenario(file: &str) -> String {
    format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"))
}

fn seed() -> String {
    scenario("seed-llm-vs-vision.yaml")
}

fn lab() -> String {
    scenario("lab-8-a100.yaml")
}

/// Runs the binary with `args`, expecting success; returns its standard output.
fn succeed(args: &[&str], out_dir: Option<&std::path::Path>) -> Vec<u8> {
    let mut command = sim();
    command.args(args);
    if let Some(dir) = out_dir {
        command.arg("--out").arg(dir);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn json_to_stdout_has_the_documented_keys() {
    let stdout = succeed(
        &["run", &seed(), "--json", "-", "--policies", "gpufair,fifo"],
        None,
    );
    let value: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let gpufair = &value["policies"][0];
    assert_eq!(gpufair["name"], "gpufair");
    assert!(gpufair["fairness_deviation"].is_number());
    assert!(gpufair["utilization"].is_number());
    for key in ["received_gpu_hours", "entitled_gpu_hours", "wait_p99_s"] {
        assert!(gpufair["queues"]["llm"][key].is_number(), "{key}");
    }
    assert!(gpufair["named_jobs"]["llm-posttrain"]["start_s"].is_number());
    assert!(value["policies"][1]["named_jobs"]["llm-posttrain"]["start_s"].is_null());
}

#[test]
fn table_and_report_with_plots() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = succeed(
        &["run", &seed(), "--policies", "gpufair,stateless"],
        Some(dir.path()),
    );
    let table = String::from_utf8(stdout).unwrap();
    assert!(table.contains("fairness deviation (cumulative)") && table.contains("llm-posttrain"));
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("allocation-gpufair.svg"));
    for svg in [
        "wait-cdf.svg",
        "allocation-stateless.svg",
        "weights-gpufair.svg",
    ] {
        let text = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        assert!(
            text.starts_with("<svg") && text.contains("<polyline"),
            "{svg}"
        );
    }
    // The seed scenario labels no job: no key-task plot.
    assert!(!dir.path().join("key-task-wait-cdf.svg").exists());
    assert!(!report.contains("key-task-wait-cdf.svg"));
}

#[test]
fn the_lab_report_plots_key_task_waits() {
    let dir = tempfile::tempdir().unwrap();
    succeed(
        &["run", &lab(), "--policies", "gpufair,fifo"],
        Some(dir.path()),
    );
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("key-task-wait-cdf.svg"));
    let svg = std::fs::read_to_string(dir.path().join("key-task-wait-cdf.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("Key-task wait"));
    // One line per policy.
    assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
}

#[test]
fn bad_policy_and_missing_file_fail_with_a_message() {
    let out = sim()
        .args(["run", &seed(), "--policies", "fairest"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy \"fairest\""));
    let out = sim().args(["run", "/no/such.yaml"]).output().unwrap();
    assert!(!out.status.success());
    // One line, the cause named once.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Error: /no/such.yaml: cannot read scenario: No such file or directory (os error 2)\n"
    );
}

#[test]
fn the_lab_reports_tiers_key_tasks_deadlines_and_throughput() {
    let stdout = succeed(
        &["run", &lab(), "--json", "-", "--policies", "gpufair,fifo"],
        None,
    );
    let value: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    for policy in value["policies"].as_array().unwrap() {
        let classes = &policy["classes"];
        for tier in ["realtime", "elastic", "backfill"] {
            assert!(
                classes["by_tier"][tier]["wait_mean_s"].is_number(),
                "{tier}"
            );
        }
        assert!(classes["by_tier"]["realtime"]["within_objective"].is_number());
        assert!(classes["key_tasks"]["wait_p99_s"].is_number());
        assert!(classes["deadline_hit_rate"].is_number());
        assert!(classes["gpu_hours_per_day"].as_f64().unwrap() > 0.0);
    }
    // A scenario without the keys has no such section.
    let stdout = succeed(&["run", &seed(), "--json", "-", "--policies", "fifo"], None);
    let value: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert!(value["policies"][0].get("classes").is_none());
}

#[test]
fn sweep_prints_the_trade_off_and_refuses_bad_weights() {
    let stdout = succeed(
        &[
            "sweep",
            &lab(),
            "--urgency",
            "0,2",
            "--user-tier",
            "1",
            "--deadline",
            "4",
            "--waited",
            "1",
            "--json",
            "-",
        ],
        None,
    );
    let points: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let points = points.as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert!(points.iter().any(|p| p["efficient"] == true));
    assert!(points[0]["key_wait_mean_s"].is_number());

    let out = sim()
        .args(["sweep", &lab(), "--urgency", "2,-1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--urgency") && err.contains("[0, 1000]"),
        "{err}"
    );
}

#[test]
fn spread_summarizes_each_policy_over_cycle_lengths_and_refuses_bad_ones() {
    let stdout = succeed(
        &[
            "spread",
            &seed(),
            "--cycles",
            "29s,30s",
            "--policies",
            "gpufair,kai,stateless-hold",
            "--json",
            "-",
        ],
        None,
    );
    let spread: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(spread["cycles_s"], serde_json::json!([29.0, 30.0]));
    let gpufair = &spread["policies"][0];
    assert_eq!(gpufair["name"], "gpufair");
    let fd = &gpufair["fairness_deviation"];
    let (min, mean, max) = (
        fd["min"].as_f64().unwrap(),
        fd["mean"].as_f64().unwrap(),
        fd["max"].as_f64().unwrap(),
    );
    assert!(min <= mean && mean <= max, "{fd}");
    let versus = spread["gpufair_versus"].as_array().unwrap();
    assert_eq!(versus.len(), 2);
    assert!(
        versus[0]["dominates_gpufair_runs"].is_number(),
        "kai is a rival"
    );
    assert!(
        versus[1]["dominates_gpufair_runs"].is_null(),
        "an ablation is not"
    );

    for (cycles, expected) in [
        ("30s,abc", "invalid duration \"abc\""),
        ("0,30s", "expected a duration longer than zero"),
    ] {
        let out = sim()
            .args([
                "spread",
                &seed(),
                "--cycles",
                cycles,
                "--policies",
                "gpufair",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--cycles") && err.contains(expected), "{err}");
    }
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    // `gpufair-sim run ... | head`: the reader closes the pipe before the tables are written.
    let mut child = sim()
        .args(["run", &lab(), "--policies", "gpufair,fifo"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
