//! The Helm chart on the real control plane, with the real `helm`: `helm install` (everything
//! the chart renders goes to the API server, workloads included), then a GPU pod is gated,
//! released and bound; `helm upgrade` with changed values while GPU pods keep coming, none of
//! them refused, the webhook configuration rewritten and the caBundle that `gpufair-certs`
//! (here the harness) wrote kept; the new config reaches admission; `helm uninstall` leaves no
//! webhook configuration or policy behind, so GPU pods are created with no gpufair running.
//!
//! What it does not show: the chart's pods running. No container runtime runs here, so the
//! Deployment, DaemonSet and Job are stored (kube-controller-manager makes their pods, which
//! kwok pretends to run) while the harness runs the same binaries as processes, with tokens of
//! the chart's ServiceAccounts, the config file of the chart's ConfigMap, and admission pointed
//! at them through the chart's `webhook.url` value instead of its Service.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions, Install, NAMESPACE, TEST_CONFIG};
use serde_json::{Value, json};

use crate::common::{check_invariants, start, submit, wait_until};

/// The values a platform team would pass, with the harness's config (short preemption
/// cooldown, 1 s grace period for training pods).
fn values(config: &str, timeout_seconds: u32, replicas: u32) -> String {
    let config: String = config.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "webhook:\n  replicas: {replicas}\n  timeoutSeconds: {timeout_seconds}\nconfig:\n{config}"
    )
}

/// The chart's MutatingWebhookConfiguration as stored now, if it is.
async fn webhook_configuration(cluster: &Cluster) -> anyhow::Result<Option<Value>> {
    Ok(cluster
        .api
        .get(
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
            "",
            "gpufair",
        )
        .await?)
}

/// A training pod that leaves its grace period to admission.
fn train_pod_without_grace_period(name: &str) -> Value {
    let mut pod = gpu_pod("team", name, 1);
    pod["spec"]
        .as_object_mut()
        .map(|s| s.remove("terminationGracePeriodSeconds"));
    pod
}

pub async fn install_upgrade_and_uninstall_with_the_real_helm() -> anyhow::Result<()> {
    let mut cluster = start(ClusterOptions {
        install: Install::Helm {
            values: values(TEST_CONFIG, 5, 2),
        },
        ..ClusterOptions::default()
    })
    .await?;
    let configuration = webhook_configuration(&cluster)
        .await?
        .context("the chart's webhook configuration")?;
    ensure!(
        configuration["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm",
        "the webhook configuration is the release's: {configuration}"
    );
    for (kind, name) in [
        ("Deployment", "gpufair-webhook"),
        ("DaemonSet", "gpufair-device-plugin"),
    ] {
        ensure!(
            cluster
                .api
                .get("apps/v1", kind, NAMESPACE, name)
                .await?
                .is_some(),
            "helm installed {kind} {name}"
        );
    }

    // Gated, released, bound.
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    submit(&cluster, gpu_pod("team", "first", 1), None).await?;
    cluster
        .api
        .wait_for("v1", "Pod", "team", "first", Duration::from_secs(10), |p| {
            p.is_some_and(|p| !p["spec"]["nodeName"].is_null())
        })
        .await?;
    wait_until("a Released Event", Duration::from_secs(5), || async {
        cluster
            .pod_events()
            .await
            .into_iter()
            .find(|e| e.pod == "first" && e.reason == "Released")
    })
    .await?;
    let before = submit(
        &cluster,
        train_pod_without_grace_period("grace-before"),
        None,
    )
    .await?;
    ensure!(
        before["spec"]["terminationGracePeriodSeconds"] == 1,
        "the installed config's grace period: {}",
        before["spec"]["terminationGracePeriodSeconds"]
    );
    let ca_bundle = webhook_configuration(&cluster)
        .await?
        .context("the webhook configuration")?["webhooks"][0]["clientConfig"]["caBundle"]
        .clone();
    ensure!(ca_bundle.is_string(), "the harness wrote a caBundle");

    // helm upgrade with new values while GPU pods keep arriving: every one is admitted.
    let upgraded_config = TEST_CONFIG.replace(
        "trainTerminationGracePeriodSeconds: 1",
        "trainTerminationGracePeriodSeconds: 7",
    );
    ensure!(
        upgraded_config != TEST_CONFIG,
        "the test config sets the grace period"
    );
    let done = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU32::new(0));
    let submitter = {
        let api = cluster.api.clone();
        let (done, admitted) = (Arc::clone(&done), Arc::clone(&admitted));
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let index = admitted.load(Ordering::SeqCst);
                let mut pod = gpu_pod("team", &format!("during-upgrade-{index}"), 1);
                pod["apiVersion"] = json!("v1");
                pod["kind"] = json!("Pod");
                let created = api
                    .create(pod)
                    .await
                    .map_err(|e| anyhow::anyhow!("a GPU pod refused around the upgrade: {e}"))?;
                ensure!(
                    created["spec"]["schedulingGates"]
                        .as_array()
                        .is_some_and(|g| g.iter().any(|g| g["name"] == "gpufair.io/admission")),
                    "a GPU pod admitted without its gate around the upgrade: {created}"
                );
                admitted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            anyhow::Ok(())
        })
    };
    let values = gpufair_integration::cluster::helm::values_with_url(
        &values(&upgraded_config, 4, 3),
        &cluster.replicas[0].listen,
    )?;
    let release = cluster.helm().clone();
    let started_at = admitted.load(Ordering::SeqCst);
    let upgrade_started = std::time::Instant::now();
    tokio::task::spawn_blocking(move || release.upgrade(&values)).await??;
    let upgrade_took = upgrade_started.elapsed();
    let during = admitted.load(Ordering::SeqCst) - started_at;
    // And a while after, as the API server picks up the rewritten configuration.
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::SeqCst);
    submitter.await??;
    let admitted = admitted.load(Ordering::SeqCst);
    ensure!(
        during >= 2,
        "only {during} pods created while helm upgrade ran ({upgrade_took:?})"
    );

    let configuration = webhook_configuration(&cluster)
        .await?
        .context("the webhook configuration after the upgrade")?;
    let webhook = &configuration["webhooks"][0];
    ensure!(
        webhook["timeoutSeconds"] == 4,
        "the upgrade rewrote the webhook configuration: {webhook}"
    );
    ensure!(
        webhook["clientConfig"]["caBundle"] == ca_bundle,
        "the upgrade kept the caBundle it does not own: {webhook}"
    );
    let deployment = cluster
        .api
        .get("apps/v1", "Deployment", NAMESPACE, "gpufair-webhook")
        .await?
        .context("the webhook Deployment")?;
    ensure!(
        deployment["spec"]["replicas"] == 3,
        "replicas: {}",
        deployment["spec"]
    );

    // The new ConfigMap reaches the running replica as kubelet projects it; it reloads.
    let projected = cluster.project_config_map().await?;
    ensure!(
        projected.contains("trainTerminationGracePeriodSeconds: 7"),
        "the upgraded ConfigMap: {projected}"
    );
    wait_until(
        "the replica to reload its config",
        Duration::from_secs(15),
        || async {
            (!cluster.replicas[0]
                .log_lines_with("config reloaded")
                .is_empty())
            .then_some(())
        },
    )
    .await?;
    let after = submit(
        &cluster,
        train_pod_without_grace_period("grace-after"),
        None,
    )
    .await?;
    ensure!(
        after["spec"]["terminationGracePeriodSeconds"] == 7,
        "the upgraded config's grace period: {}",
        after["spec"]["terminationGracePeriodSeconds"]
    );
    check_invariants(&cluster).await?;

    // helm uninstall: nothing of gpufair's admission is left to refuse or hold up a pod.
    cluster.helm().uninstall()?;
    ensure!(
        webhook_configuration(&cluster).await?.is_none(),
        "the webhook configuration is gone"
    );
    for policy in [
        "gpufair-gate",
        "gpufair-pod-labels",
        "gpufair-managed-label",
    ] {
        for kind in [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ] {
            ensure!(
                cluster
                    .api
                    .get("admissionregistration.k8s.io/v1", kind, "", policy)
                    .await?
                    .is_none(),
                "{kind} {policy} is gone"
            );
        }
    }
    // No gpufair process either: a GPU pod is created as if gpufair had never been there. The
    // API server drops a deleted webhook configuration from its informer a moment later.
    for replica in &mut cluster.replicas {
        replica.kill();
    }
    let created = wait_until(
        "a GPU pod created with gpufair gone",
        Duration::from_secs(15),
        || async {
            let mut pod = gpu_pod("team", "after-uninstall", 1);
            pod["apiVersion"] = json!("v1");
            pod["kind"] = json!("Pod");
            cluster.api.create(pod).await.ok()
        },
    )
    .await?;
    ensure!(
        created["spec"]["schedulingGates"].is_null(),
        "no gate without gpufair: {created}"
    );
    // Helm never deletes what it installed from crds/: the Queues stay.
    ensure!(
        cluster
            .api
            .get(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "queues.gpufair.io"
            )
            .await?
            .is_some(),
        "the Queue CRD stays"
    );
    println!(
        "  helm upgrade took {:.1} s; {during} GPU pods admitted and gated while it ran, \
         {admitted} in all around it, none refused",
        upgrade_took.as_secs_f64()
    );
    Ok(())
}
