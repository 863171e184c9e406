//! The shipped alerts on a real Prometheus (built from its Go module) scraping the real
//! processes: the webhook replica (admission and controller on one `/metrics`) and the device
//! plugin. One queue takes a node's two GPUs with work that never ends; a second queue's pod
//! then waits behind it. The first queue's effective weight falls to its floor and the second
//! queue's wait grows, so `GpufairQueueAtMinimumWeight` fires for the first and
//! `GpufairQueueWaitAboveSLA` for the second, and neither for the other queue.
//!
//! The rules are the chart's `files/prometheus-rules.yaml` with their clock compressed (see
//! [`compressed_rules`]): every `for` becomes 3 s, the 4-hour SLA 20 s, and the rate windows one
//! minute. The expressions, metric names, labels and annotations are the shipped ones.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions, NodeOptions};
use gpufair_integration::prometheus::{
    PrometheusServer, ScrapeJob, dashboard_queries, grafana_interpolated,
};
use serde_json::{Value, json};

use crate::common::{check_invariants, start, submit, wait_until};

/// The test config, with a strong history correction (k 20, no catch-up period) so a queue that
/// keeps a pool from another reaches its weight floor within seconds, and no preemption, so the
/// waiting queue stays starved.
const CONFIG: &str = "fairshare:
  window: 168h
  decay: 0.9
  decayPeriod: 24h
  k: 20.0
  minWeight: 0.1
  bucket: 1h
  catchUpPeriod: 0s
  chargeBasis: allocated
preemption:
  enabled: false
";

/// The SLA the compressed rules hold a wait to, in seconds (4 hours shipped).
const COMPRESSED_SLA_S: u32 = 20;

/// The shipped rule file with its clock compressed so a case sees the alerts fire in seconds.
/// Each rewrite must apply, so a change to the shipped file that this no longer matches fails
/// here instead of testing something else.
fn compressed_rules(shipped: &str) -> anyhow::Result<String> {
    let mut text = shipped.to_string();
    for (from, to) in [
        ("4 * 3600", COMPRESSED_SLA_S.to_string()),
        ("[1h]", "[1m]".to_string()),
        ("[15m]", "[1m]".to_string()),
    ] {
        ensure!(
            text.contains(from),
            "the shipped rules no longer contain {from:?}"
        );
        text = text.replace(from, &to);
    }
    let mut fors = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("for: ") {
            Some(_) => {
                fors += 1;
                let indent = line.len() - line.trim_start().len();
                format!("{}for: 3s", " ".repeat(indent))
            }
            None => line.to_string(),
        })
        .collect();
    ensure!(fors > 0, "the shipped rules have no `for:` to compress");
    Ok(lines.join("\n") + "\n")
}

/// The firing alerts: (alert name, queue label).
async fn firing(prometheus: &PrometheusServer) -> anyhow::Result<BTreeSet<(String, String)>> {
    Ok(prometheus
        .alerts()
        .await?
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                a["labels"]["queue"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect())
}

fn pair(alert: &str, queue: &str) -> (String, String) {
    (alert.to_string(), queue.to_string())
}

async fn start_prometheus(cluster: &Cluster) -> anyhow::Result<PrometheusServer> {
    let shipped = std::fs::read_to_string(
        gpufair_integration::workspace_root()
            .join("deploy/helm/gpufair/files/prometheus-rules.yaml"),
    )?;
    let jobs = [
        ScrapeJob {
            name: "gpufair-webhook".into(),
            targets: cluster.replicas.iter().map(|r| r.metrics.clone()).collect(),
        },
        ScrapeJob {
            name: "gpufair-device-plugin".into(),
            targets: cluster.device_plugin_metrics(),
        },
    ];
    Ok(PrometheusServer::start(&jobs, &compressed_rules(&shipped)?).await?)
}

pub async fn prometheus_fires_the_minimum_weight_and_wait_alerts_on_a_starved_queue()
-> anyhow::Result<()> {
    let options = ClusterOptions {
        nodes: vec![NodeOptions::new("gpu-1", 2)],
        config_yaml: CONFIG.into(),
        ..ClusterOptions::default()
    };
    let cluster = start(options).await?;
    let prometheus = start_prometheus(&cluster).await?;
    cluster.queue("hog", "hog", json!({"weight": 1})).await?;
    cluster
        .queue("starved", "starved", json!({"weight": 1}))
        .await?;
    for name in ["hog-1", "hog-2"] {
        submit(&cluster, gpu_pod("hog", name, 1), None).await?;
        cluster
            .api
            .wait_for("v1", "Pod", "hog", name, Duration::from_secs(15), |p| {
                p.is_some_and(|p| !p["spec"]["nodeName"].is_null())
            })
            .await?;
    }
    submit(&cluster, gpu_pod("starved", "waiting", 1), None).await?;

    // Every component is scraped.
    let targets = wait_until(
        "Prometheus to scrape the replica and the device plugin",
        Duration::from_secs(30),
        || async {
            let targets = prometheus.targets().await.ok()?;
            (targets.len() == 2 && targets.iter().all(|t| t["health"] == "up")).then_some(targets)
        },
    )
    .await
    .with_context(|| prometheus.log())?;
    let jobs: BTreeSet<&str> = targets
        .iter()
        .filter_map(|t| t["labels"]["job"].as_str())
        .collect();
    println!("  targets up: {jobs:?}");
    for (metric, job) in [
        (
            "gpufair_webhook_admission_requests_total",
            "gpufair-webhook",
        ),
        ("gpufair_queue_effective_weight", "gpufair-webhook"),
        ("gpufair_device_healthy", "gpufair-device-plugin"),
    ] {
        let samples = prometheus
            .query(&format!("count({metric}{{job=\"{job}\"}})"))
            .await?;
        ensure!(
            samples.first().is_some_and(|(_, n)| *n >= 1.0),
            "Prometheus holds no {metric} from job {job}: {samples:?}"
        );
    }

    let expected = [
        pair("GpufairQueueAtMinimumWeight", "hog"),
        pair("GpufairQueueWaitAboveSLA", "starved"),
    ];
    let started = tokio::time::Instant::now();
    let fired = match wait_until(
        "both starvation alerts to fire",
        Duration::from_secs(u64::from(COMPRESSED_SLA_S) + 60),
        || async {
            let fired = firing(&prometheus).await.ok()?;
            expected.iter().all(|e| fired.contains(e)).then_some(fired)
        },
    )
    .await
    {
        Ok(fired) => fired,
        Err(error) => {
            let alerts = prometheus.alerts().await.ok();
            let queues = prometheus
                .query("{__name__=~\"gpufair_queue_(effective_weight|oldest_wait_seconds|at_min_weight)\"}")
                .await
                .ok();
            return Err(error.context(format!(
                "alerts now: {alerts:?}\nqueue metrics: {queues:?}\n{}",
                prometheus.log()
            )));
        }
    };
    println!(
        "  firing after {:.1} s: {fired:?}",
        started.elapsed().as_secs_f64()
    );
    for wrong in [
        pair("GpufairQueueAtMinimumWeight", "starved"),
        pair("GpufairQueueWaitAboveSLA", "hog"),
        pair("GpufairControllerNotLeading", ""),
    ] {
        ensure!(
            !fired.contains(&wrong),
            "{wrong:?} fires, which it should not: {fired:?}"
        );
    }
    let wait = prometheus
        .query("gpufair_queue_oldest_wait_seconds{queue=\"starved\"}")
        .await?;
    ensure!(
        wait.first()
            .is_some_and(|(_, s)| *s > f64::from(COMPRESSED_SLA_S)),
        "the starved queue's oldest wait reads {wait:?}"
    );

    // Every rule evaluates without error against what the binaries export.
    let groups = prometheus.rule_groups().await?;
    let rules: Vec<&Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    ensure!(rules.len() >= 6, "only {} rules loaded", rules.len());
    for rule in &rules {
        ensure!(
            rule["health"] == "ok",
            "rule {} evaluates with an error: {}",
            rule["name"],
            rule["lastError"]
        );
    }

    // And every dashboard query evaluates on the live data.
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(
        gpufair_integration::workspace_root()
            .join("deploy/helm/gpufair/files/gpufair-dashboard.json"),
    )?)?;
    let queries = dashboard_queries(&dashboard);
    for (panel, query) in &queries {
        prometheus
            .query(&grafana_interpolated(query))
            .await
            .with_context(|| format!("dashboard panel {panel}"))?;
    }
    println!("  {} dashboard queries evaluated", queries.len());
    check_invariants(&cluster).await?;
    Ok(())
}
