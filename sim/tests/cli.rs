//! The binary: JSON on standard output with the documented keys, and errors on bad input.

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpufair-sim"))
}

fn seed() -> String {
    format!(
        "{}/../scenarios/seed-llm-vs-vision.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn json_to_stdout_has_the_documented_keys() {
    let out = sim()
        .args(["run", &seed(), "--json", "-", "--policies", "gpufair,fifo"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let out = sim()
        .args(["run", &seed(), "--policies", "gpufair,stateless", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
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
    let out = sim()
        .args(["run", &lab(), "--policies", "gpufair,fifo", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such.yaml: cannot read scenario"));
}

fn lab() -> String {
    format!(
        "{}/../scenarios/lab-8-a100.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn the_lab_reports_tiers_key_tasks_deadlines_and_throughput() {
    let out = sim()
        .args(["run", &lab(), "--json", "-", "--policies", "gpufair,fifo"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let out = sim()
        .args(["run", &seed(), "--json", "-", "--policies", "fifo"])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(value["policies"][0].get("classes").is_none());
}

#[test]
fn sweep_prints_the_trade_off_and_refuses_bad_weights() {
    let out = sim()
        .args([
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
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let points: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
