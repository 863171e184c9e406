//! The alerts and the Grafana dashboard checked with the real `promtool`, built from
//! `github.com/prometheus/prometheus` (`gpufair_integration::tools`): `promtool check rules` on
//! the shipped rule groups (the chart's files/prometheus-rules.yaml, which the monitoring
//! overlay's PrometheusRule carries too, as helm.rs shows), `promtool test rules` on
//! tests/fixtures/prometheus-rules.test.yaml (each alert fires on series that should fire it
//! and stays silent otherwise), and every dashboard query parsed by Prometheus's own parser and
//! naming only metrics the binaries register.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use gpufair_integration::prometheus::{dashboard_queries, grafana_interpolated};
use gpufair_integration::tools::Tool;
use serde_json::Value;

use super::alerts::{metric_names, registered_labels, registered_names, unknown_selector_labels};
use super::{kustomize, repo_dir};

fn rules_file() -> PathBuf {
    repo_dir().join("deploy/helm/gpufair/files/prometheus-rules.yaml")
}

fn unit_tests_file() -> PathBuf {
    repo_dir().join("integration/tests/fixtures/prometheus-rules.test.yaml")
}

fn dashboard_file() -> PathBuf {
    repo_dir().join("deploy/helm/gpufair/files/gpufair-dashboard.json")
}

/// Runs promtool; (whether it succeeded, stdout and stderr together).
fn promtool(args: &[&str]) -> (bool, String) {
    let binary = Tool::Promtool.locate().unwrap_or_else(|e| panic!("{e}"));
    let output = Command::new(binary)
        .args(args)
        .output()
        .expect("promtool runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn promtool_accepts_the_shipped_rules() {
    let rules = rules_file().display().to_string();
    let (ok, output) = promtool(&["check", "rules", "--lint-fatal", &rules]);
    assert!(ok, "promtool check rules {rules}:\n{output}");
    assert!(output.contains("SUCCESS: 6 rules found"), "{output}");
}

#[test]
fn promtool_finds_a_broken_rule() {
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(
        file.path(),
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: sum(rate(x[5m])\n",
    )
    .unwrap();
    let (ok, output) = promtool(&["check", "rules", &file.path().display().to_string()]);
    assert!(!ok, "an unbalanced expression passed: {output}");
}

#[test]
fn alert_unit_tests_pass() {
    let tests = unit_tests_file().display().to_string();
    let (ok, output) = promtool(&["test", "rules", &tests]);
    assert!(ok, "promtool test rules {tests}:\n{output}");
    assert!(output.contains("SUCCESS"), "{output}");
}

/// The unit tests can fail: the same file with one expectation turned around fails.
#[test]
fn a_wrong_expectation_fails_the_unit_tests() {
    let text = std::fs::read_to_string(unit_tests_file()).unwrap();
    let wrong = text
        .replacen(
            "  - ../../../deploy/helm/gpufair/files/prometheus-rules.yaml",
            &format!("  - {}", rules_file().display()),
            1,
        )
        .replacen(
            "      - eval_time: 5h\n        alertname: GpufairQueueAtMinimumWeight\n        exp_alerts: []",
            "      - eval_time: 5h\n        alertname: GpufairQueueAtMinimumWeight\n        exp_alerts:\n          - exp_labels: { severity: warning, queue: greedy }",
            1,
        );
    assert_ne!(wrong, text);
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(file.path(), wrong).unwrap();
    let (ok, output) = promtool(&["test", "rules", &file.path().display().to_string()]);
    assert!(
        !ok && output.contains("GpufairQueueAtMinimumWeight"),
        "{output}"
    );
}

/// The founding document's three alerts each have a case where they fire and one where they
/// stay silent, and every shipped alert has a test.
#[test]
fn every_alert_is_tested_firing_and_silent() {
    let tests = &kustomize::yaml_documents(&unit_tests_file()).unwrap()[0];
    let rules = &kustomize::yaml_documents(&rules_file()).unwrap()[0];
    let shipped: BTreeSet<&str> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for test in tests["tests"].as_array().unwrap() {
        for case in test["alert_rule_test"].as_array().into_iter().flatten() {
            let alert = case["alertname"].as_str().unwrap();
            match case["exp_alerts"].as_array() {
                Some(expected) if !expected.is_empty() => fires.insert(alert),
                _ => silent.insert(alert),
            };
        }
    }
    for alert in &shipped {
        assert!(fires.contains(alert), "no test where {alert} fires");
        assert!(silent.contains(alert), "no test where {alert} stays silent");
    }
    for founding in [
        "GpufairQueueAtMinimumWeight",
        "GpufairQueueWaitAboveSLA",
        "GpufairGpuUtilizationLow",
    ] {
        assert!(shipped.contains(founding), "{founding} is not shipped");
    }
}

#[test]
fn every_dashboard_query_parses_and_names_registered_metrics() {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard_file()).unwrap()).unwrap();
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "only {} queries found", queries.len());
    let mut registered = registered_names();
    let labels = registered_labels();
    // The device plugin's health family shows in an exposition only with a device inventory,
    // which registered_names cannot give it; its registration is read from the source instead.
    let plugin_metrics =
        std::fs::read_to_string(repo_dir().join("device-plugin/src/metrics.rs")).unwrap();
    assert!(plugin_metrics.contains("\"gpufair_device_healthy\","));
    registered.insert("gpufair_device_healthy".to_string());
    for (panel, query) in &queries {
        let query = grafana_interpolated(query);
        let (ok, output) = promtool(&["--experimental", "promql", "format", &query]);
        assert!(ok, "panel {panel}: {query} does not parse:\n{output}");
        let names = metric_names(&query).unwrap_or_else(|e| panic!("panel {panel}: {e}"));
        assert!(!names.is_empty(), "panel {panel}: {query} reads no metric");
        for name in names {
            assert!(
                registered.contains(&name),
                "panel {panel}: {name} is not registered by any binary ({query})"
            );
        }
        let unknown = unknown_selector_labels(&query, &labels);
        assert!(
            unknown.is_empty(),
            "panel {panel}: selects on labels its metrics do not carry: {unknown:?} ({query})"
        );
    }
}

/// The parser step can fail: a query with a typo does not parse.
#[test]
fn promtool_refuses_a_broken_query() {
    let (ok, _) = promtool(&[
        "--experimental",
        "promql",
        "format",
        "sum by (queue (gpufair_queue_pending_pods)",
    ]);
    assert!(!ok);
}
