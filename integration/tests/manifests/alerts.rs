//! The monitoring overlay's PrometheusRule: its shape (strictly, as the Prometheus Operator
//! reads it), the alerts the founding documents ask for, and every metric its expressions name
//! checked against what the binaries register, so renaming a metric breaks this test.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::strict::strict;
use super::{find, rendered};

/// `monitoring.coreos.com/v1` PrometheusRule, as far as the operator's API reference goes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrometheusRule {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: RuleSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleSpec {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleGroup {
    name: String,
    #[serde(default)]
    interval: Option<String>,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    alert: Option<String>,
    #[serde(default)]
    record: Option<String>,
    expr: String,
    #[serde(default, rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Validates a rendered PrometheusRule.
pub fn validate(object: &Value) -> Result<(), String> {
    if object["apiVersion"] != "monitoring.coreos.com/v1" {
        return Err(format!(
            "{}: expected apiVersion monitoring.coreos.com/v1",
            object["metadata"]["name"]
        ));
    }
    strict::<PrometheusRule>(object).map(drop)
}

/// Operators, modifiers and aggregations: `sum by (le) (...)` puts `by` between an
/// aggregation and its parenthesis, so aggregations cannot be told from metrics by the `(`.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a parenthesised list of label names, not expressions.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression reads: identifiers that are not functions,
/// aggregations, keywords, label names (in `{}` or a `by (...)`-style list), strings, numbers
/// or durations.
pub fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut braces = 0usize;
    let mut label_list_depth: Option<usize> = None;
    let mut parens = 0usize;
    let mut previous_word = String::new();
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                let quote = c;
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    if chars[i] == '\\' && quote != '`' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= chars.len() {
                    return Err(format!("unterminated string in {expr}"));
                }
                i += 1;
            }
            '[' => {
                // A range or subquery duration, e.g. [1h] or [1h:5m].
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == ']')
                    .ok_or_else(|| format!("unclosed [ in {expr}"))?;
                i += end + 1;
            }
            '{' => {
                braces += 1;
                i += 1;
            }
            '}' => {
                braces = braces
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced }} in {expr}"))?;
                i += 1;
            }
            '(' => {
                parens += 1;
                if LABEL_LISTS.contains(&previous_word.as_str()) {
                    label_list_depth = Some(parens);
                }
                previous_word.clear();
                i += 1;
            }
            ')' => {
                if label_list_depth == Some(parens) {
                    label_list_depth = None;
                }
                parens = parens
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced ) in {expr}"))?;
                i += 1;
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                // Numbers, including 1e3, 0x1f and durations such as 5m in `offset 5m`.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                previous_word.clear();
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let is_call = next == Some(&'(');
                let in_labels = braces > 0 || label_list_depth.is_some();
                if !in_labels && !is_call && !KEYWORDS.contains(&word.to_lowercase().as_str()) {
                    names.insert(word.clone());
                }
                previous_word = word;
            }
            _ => {
                if !c.is_whitespace() {
                    previous_word.clear();
                }
                i += 1;
            }
        }
    }
    if braces != 0 || parens != 0 {
        return Err(format!("unbalanced brackets in {expr}"));
    }
    Ok(names)
}

/// The sample names a registry's text exposition can carry, from its `# TYPE` lines: a counter
/// `x` is sampled as `x_total`, a histogram as `x_bucket`, `x_sum` and `x_count`.
fn exposed_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(format!("{}_total", name.trim_end_matches("_total")));
            }
            "histogram" | "summary" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The expositions of everything gpufair's binaries register: the webhook process (admission and
/// the controller on one registry, as `serve` builds it) and the device plugin. A labelled
/// family only shows in the exposition once it has a series, so each is given one through the
/// binaries' own recording calls (the device plugin's health family, which needs a device
/// inventory, is the one left out; no rule reads it).
fn expositions() -> Vec<String> {
    use gpufair_controller::metrics::{PreemptionLabels, QueueLabels};
    use gpufair_webhook::metrics::{Outcome, ReloadOutcome};

    let controller = gpufair_controller::ControllerMetrics::default();
    let queue = QueueLabels { queue: "q".into() };
    for gauge in [
        &controller.usage_share,
        &controller.effective_weight,
        &controller.fair_share_gpus,
        &controller.allocated_gpus,
        &controller.oldest_wait,
    ] {
        gauge.get_or_create(&queue).set(0.5);
    }
    controller.pending_pods.get_or_create(&queue).set(1);
    controller.at_min_weight.get_or_create(&queue).set(0);
    controller.queue_wait.get_or_create(&queue).observe(1.0);
    controller
        .preemptions
        .get_or_create(&PreemptionLabels {
            victim_queue: "a".into(),
            preemptor_queue: "b".into(),
        })
        .inc();
    let mut webhook = gpufair_webhook::metrics::Metrics::new();
    controller.register(&mut webhook.registry);
    webhook.request(Outcome::Unmanaged, 0.001);
    webhook.config_reload(ReloadOutcome::Success);
    webhook.tls_reload(ReloadOutcome::Success);
    webhook.queue_reload(ReloadOutcome::Success);

    let device_plugin = gpufair_device_plugin::metrics::Metrics::new();
    let spec: gpufair_api::GpuNodeReportSpec = serde_json::from_value(serde_json::json!({
        "nodeName": "n", "timestamp": "2026-01-01T00:00:00Z", "intervalSeconds": 10.0,
        "deviceCount": 0, "podCount": 0
    }))
    .unwrap();
    device_plugin.record_report(&gpufair_device_plugin::usage::Report {
        spec,
        per_device: vec![gpufair_device_plugin::usage::PodDeviceUse {
            namespace: "ml".into(),
            pod: "p".into(),
            device: "GPU-1".into(),
            sm_utilization: 0.5,
            memory_bytes: 1,
        }],
        unattributed_processes: 0,
    });
    device_plugin.record_charged_by_allocation(["MIG-1"].into_iter());

    vec![webhook.encode(), device_plugin.encode()]
}

/// Every metric name the binaries expose (see [`expositions`]).
pub fn registered_names() -> BTreeSet<String> {
    expositions()
        .iter()
        .flat_map(|e| exposed_names(e))
        .collect()
}

/// Per exposed series name, the label names its samples carry, plus the two Prometheus adds
/// when it scrapes (`job`, `instance`).
pub fn registered_labels() -> BTreeMap<String, BTreeSet<String>> {
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for exposition in expositions() {
        for line in exposition.lines().filter(|l| !l.starts_with('#')) {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let entry = labels.entry(line[..name_end].to_string()).or_default();
            entry.extend(["job".to_string(), "instance".to_string()]);
            if let Some(set) = line[name_end..]
                .strip_prefix('{')
                .and_then(|rest| rest.split_once('}'))
                .map(|(set, _)| set)
            {
                entry.extend(set.split(',').filter_map(|pair| {
                    pair.split_once('=')
                        .map(|(label, _)| label.trim().to_string())
                }));
            }
        }
    }
    labels
}

/// Each `metric{label op value, ...}` selector in `expr`: the metric and the label names it
/// matches on.
pub fn selector_labels(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(open) = expr[i..].find('{').map(|o| o + i) {
        let start = expr[..open]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |p| p + 1);
        let metric = &expr[start..open];
        let Some(close) = expr[open..].find('}').map(|c| c + open) else {
            break;
        };
        if !metric.is_empty() && !bytes[start].is_ascii_digit() {
            let labels = expr[open + 1..close]
                .split(',')
                .filter_map(|matcher| {
                    let label = matcher
                        .trim()
                        .split(['=', '!', '~'])
                        .next()?
                        .trim()
                        .to_string();
                    (!label.is_empty()).then_some(label)
                })
                .collect();
            found.push((metric.to_string(), labels));
        }
        i = close + 1;
    }
    found
}

/// The selectors of `expr` that match on a label their metric does not carry: such a
/// selector matches nothing, silently.
pub fn unknown_selector_labels(
    expr: &str,
    labels: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut unknown = Vec::new();
    for (metric, matched) in selector_labels(expr) {
        let Some(known) = labels.get(&metric) else {
            continue;
        };
        for label in matched {
            if !known.contains(&label) {
                unknown.push(format!("{metric}{{{label}}}"));
            }
        }
    }
    unknown
}

#[test]
fn the_tokenizer_finds_metrics_only() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (queue, le) (rate(a_bucket{job=\"x\", le!~'1.*'}[1h]))) \
         > 4 * 3600 and on (queue) b_total offset 5m unless absent(c) or max without(pod) (d:rec)",
    )
    .unwrap();
    let expected: BTreeSet<String> = ["a_bucket", "b_total", "c", "d:rec"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
    assert!(metric_names("sum(rate(x[5m])").is_err());
    assert!(metric_names("x{a=\"b}").is_err());
}

#[test]
fn every_alert_reads_metrics_the_binaries_register() {
    let registered = registered_names();
    let labels = registered_labels();
    assert!(
        registered.contains("gpufair_queue_wait_seconds_bucket")
            && registered.contains("gpufair_gpu_utilization_ratio")
            && registered.contains("gpufair_webhook_admission_requests_total"),
        "registries read: {registered:?}"
    );
    let objects = rendered("overlays/monitoring");
    let object = find(&objects, "PrometheusRule", "gpufair");
    validate(object).unwrap();
    let rule: PrometheusRule = strict(object).unwrap();
    let mut alerts = BTreeSet::new();
    for group in &rule.spec.groups {
        for rule in &group.rules {
            let alert = rule.alert.clone().expect("every rule is an alert");
            let names = metric_names(&rule.expr).unwrap_or_else(|e| panic!("{alert}: {e}"));
            assert!(!names.is_empty(), "{alert} reads no metric");
            for name in &names {
                assert!(
                    registered.contains(name),
                    "{alert}: {name} is not registered by any binary (expr: {})",
                    rule.expr
                );
            }
            let unknown = unknown_selector_labels(&rule.expr, &labels);
            assert!(
                unknown.is_empty(),
                "{alert}: selects on labels its metrics do not carry: {unknown:?} (expr: {})",
                rule.expr
            );
            assert!(
                rule.for_.is_some(),
                "{alert}: no `for`, it would fire on one blip"
            );
            assert!(rule.labels.contains_key("severity"), "{alert}: no severity");
            assert!(
                rule.annotations.contains_key("summary"),
                "{alert}: no summary"
            );
            alerts.insert(alert);
        }
    }
    for wanted in [
        "GpufairQueueAtMinimumWeight",
        "GpufairQueueWaitAboveSLA",
        "GpufairGpuUtilizationLow",
        "GpufairGateReleaseSlow",
        "GpufairPreemptionRateHigh",
    ] {
        assert!(alerts.contains(wanted), "missing alert {wanted}");
    }
}

/// A selector on a label its metric lacks matches nothing and is caught; the labels a metric
/// has, and those Prometheus adds, pass.
#[test]
fn a_selector_on_a_missing_label_is_caught() {
    let labels = registered_labels();
    assert_eq!(
        unknown_selector_labels(
            "sum by (queue) (increase(gpufair_preemptions_total{queue=~\".*\"}[1h]))",
            &labels
        ),
        vec!["gpufair_preemptions_total{queue}".to_string()]
    );
    assert!(
        unknown_selector_labels(
            "gpufair_preemptions_total{victim_queue=~\"a\", job=\"x\"} + gpufair_queue_wait_seconds_bucket{le=\"8.0\", queue!=\"\"}",
            &labels
        )
        .is_empty()
    );
    assert_eq!(
        selector_labels("rate(a_b{c=\"1\",d!~'x'}[5m]) / 2{"),
        vec![("a_b".to_string(), vec!["c".to_string(), "d".to_string()])]
    );
}

#[test]
fn a_renamed_metric_is_caught() {
    let registered = registered_names();
    let names = metric_names("rate(gpufair_preemption_total[1h])").unwrap();
    assert!(names.iter().any(|n| !registered.contains(n)));
}
