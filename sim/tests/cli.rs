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
