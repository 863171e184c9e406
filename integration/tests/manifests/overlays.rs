//! What each overlay promises: cert-manager replaces gpufair-certs and injects the CA, dev
//! runs the device plugin on fake GPUs, monitoring adds scraping and a dashboard over metrics
//! that exist.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{INSTALL_NAMESPACE, find, rendered, repo_dir};

#[test]
fn cert_manager_issues_the_secret_the_webhook_mounts() {
    let objects = rendered("overlays/cert-manager");
    assert!(
        !objects.iter().any(|o| o["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("gpufair-certs"))),
        "gpufair-certs is left out"
    );
    let configuration = find(&objects, "MutatingWebhookConfiguration", "gpufair");
    let from = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        .as_str()
        .expect("inject-ca-from");
    let (namespace, certificate) = from.split_once('/').unwrap();
    assert_eq!(namespace, INSTALL_NAMESPACE);
    let certificate = find(&objects, "Certificate", certificate);
    let deployment = find(&objects, "Deployment", "gpufair-webhook");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let mounted = volumes.iter().find(|v| v["name"] == "tls").unwrap();
    assert_eq!(
        mounted["secret"]["secretName"],
        certificate["spec"]["secretName"]
    );
    let names: Vec<String> = certificate["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        gpufair_certs::service_dns_names("gpufair-webhook", INSTALL_NAMESPACE)
    );
    // The serving certificate is signed by a CA issuer, itself made by the self-signed one.
    let issuer = find(
        &objects,
        "Issuer",
        certificate["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    let ca_secret = issuer["spec"]["ca"]["secretName"]
        .as_str()
        .expect("a CA issuer");
    let ca = objects
        .iter()
        .find(|o| o["kind"] == "Certificate" && o["spec"]["secretName"] == ca_secret)
        .expect("the CA certificate");
    assert_eq!(ca["spec"]["isCA"], true);
}

#[test]
fn the_base_makes_certificates_for_the_service_the_webhook_calls() {
    let objects = rendered("base");
    let job = find(&objects, "Job", "gpufair-certs");
    let args = job["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    let deployment = find(&objects, "Deployment", "gpufair-webhook");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let secret = volumes.iter().find(|v| v["name"] == "tls").unwrap()["secret"]["secretName"]
        .as_str()
        .unwrap();
    let configuration = find(&objects, "MutatingWebhookConfiguration", "gpufair");
    let service = configuration["webhooks"][0]["clientConfig"]["service"]["name"]
        .as_str()
        .unwrap();
    find(&objects, "Service", service);
    for expected in [
        format!("--secret={secret}"),
        "--webhook-configuration=gpufair".to_string(),
        format!("--service={service}"),
    ] {
        assert!(
            args.contains(&expected),
            "the certs Job passes {expected}: {args}"
        );
    }
    let role = find(&objects, "Role", "gpufair-certs");
    assert!(role["rules"].to_string().contains(secret));
}

#[test]
fn dev_runs_the_device_plugin_on_the_bundled_fake_gpus() {
    let objects = rendered("overlays/dev");
    let daemon_set = find(&objects, "DaemonSet", "gpufair-device-plugin");
    let pod = &daemon_set["spec"]["template"]["spec"];
    assert_eq!(
        pod["nodeSelector"],
        serde_json::json!({"gpufair.io/fake-gpus": "true"})
    );
    let container = &pod["containers"][0];
    let fake = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str().and_then(|a| a.strip_prefix("--fake-gpus=")))
        .expect("--fake-gpus");
    let (dir, file) = fake.rsplit_once('/').unwrap();
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == dir)
        .expect("the fake GPU file is mounted");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let map = find(
        &objects,
        "ConfigMap",
        volume["configMap"]["name"].as_str().unwrap(),
    );
    let text = map["data"][file]
        .as_str()
        .expect("the file is in the ConfigMap");
    gpufair_device_plugin::backend::fake::FakeBackend::parse(text).expect("the fake GPUs load");
    let config = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str().and_then(|a| a.strip_prefix("--config=")))
        .expect("--config");
    let (config_dir, config_file) = config.rsplit_once('/').unwrap();
    assert_eq!(config_dir, dir, "the config comes from the same ConfigMap");
    let text = map["data"][config_file]
        .as_str()
        .expect("the config is in the ConfigMap");
    gpufair_device_plugin::config::Config::parse(text).expect("the device-plugin config loads");
}

/// Metric names the binaries export today, and those the controller will export.
const KNOWN_METRICS: &[&str] = &[
    "gpufair_webhook_admission_requests_total",
    "gpufair_webhook_admission_duration_seconds_bucket",
    "gpufair_device_healthy",
    "gpufair_gpu_utilization_ratio",
    "gpufair_gpu_memory_used_bytes",
    "gpufair_queue_usage_share",
    "gpufair_queue_effective_weight",
    "gpufair_queue_fair_share_gpus",
    "gpufair_queue_allocated_gpus",
    "gpufair_queue_pending_pods",
    "gpufair_gate_release_latency_seconds_bucket",
    "gpufair_preemptions_total",
    "gpufair_controller_cycle_seconds_bucket",
    "gpufair_leader",
];

#[test]
fn monitoring_scrapes_both_components_and_ships_a_dashboard_over_known_metrics() {
    let objects = rendered("overlays/monitoring");
    for (kind, name) in [
        ("Deployment", "gpufair-webhook"),
        ("DaemonSet", "gpufair-device-plugin"),
    ] {
        let template = &find(&objects, kind, name)["spec"]["template"];
        let annotations = &template["metadata"]["annotations"];
        assert_eq!(annotations["prometheus.io/scrape"], "true", "{name}");
        let port: i64 = annotations["prometheus.io/port"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let ports = template["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap();
        assert!(
            ports
                .iter()
                .any(|p| p["name"] == "metrics" && p["containerPort"] == port),
            "{name}: scrape port {port} is the metrics port"
        );
    }
    let map = find(&objects, "ConfigMap", "gpufair-grafana-dashboard");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let text = map["data"]["gpufair-dashboard.json"].as_str().unwrap();
    let on_disk = std::fs::read_to_string(
        repo_dir().join("deploy/overlays/monitoring/gpufair-dashboard.json"),
    )
    .unwrap();
    assert_eq!(text, on_disk);
    let dashboard: Value = serde_json::from_str(text).expect("valid JSON");
    let mut used = BTreeSet::new();
    let mut titles = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        titles.push(panel["title"].as_str().unwrap().to_lowercase());
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            for (start, _) in expr.match_indices("gpufair_") {
                let name: String = expr[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    KNOWN_METRICS.contains(&name.as_str()),
                    "unknown metric {name} in {expr}"
                );
                used.insert(name);
            }
        }
    }
    for wanted in [
        "gpufair_queue_usage_share",
        "gpufair_queue_fair_share_gpus",
        "gpufair_queue_effective_weight",
        "gpufair_queue_pending_pods",
        "gpufair_gate_release_latency_seconds_bucket",
        "gpufair_preemptions_total",
        "gpufair_device_healthy",
    ] {
        assert!(used.contains(wanted), "the dashboard shows {wanted}");
    }
    let ids: BTreeSet<i64> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), titles.len(), "panel ids are unique");
}

/// The webhook's metric names in the list are the ones it registers today (families appear in
/// the exposition once they have a sample; counters gain `_total`, histograms `_bucket`). The
/// device plugin's names are checked by its own metrics tests.
#[test]
fn known_metrics_include_what_the_webhook_exports() {
    let webhook = gpufair_webhook::metrics::Metrics::new();
    webhook.request(gpufair_webhook::metrics::Outcome::Unmanaged, 0.001);
    let text = webhook.encode();
    for name in [
        "gpufair_webhook_admission_requests_total",
        "gpufair_webhook_admission_duration_seconds_bucket",
    ] {
        assert!(text.contains(name), "the webhook exports {name}:\n{text}");
        assert!(KNOWN_METRICS.contains(&name), "{name} is in the known list");
    }
}
