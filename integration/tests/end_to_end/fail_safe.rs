//! With the webhook down, the API server's own CEL (the MutatingWebhookConfiguration's
//! `matchConditions`) decides which pods would have been sent: CPU pods are created as if
//! gpufair were not installed, and every form of GPU request is refused (`failurePolicy:
//! Fail`) with an error that names gpufair's webhook, so no GPU pod starts ungated. gpufair's own
//! namespace is never sent, so its pods can always be recreated.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{ClusterOptions, NAMESPACE, Replica};
use serde_json::{Value, json};

use crate::common::{start, submit};

/// A pod whose container (or, with `init`, only its init container) has `resources`.
fn pod(namespace: &str, name: &str, resources: Value, init: bool) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"ai-task-type": "train"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "app:1",
                "resources": {"requests": {"cpu": "100m"}}}]}});
    let container = json!({"name": "setup", "image": "app:1", "resources": resources});
    if init {
        pod["spec"]["initContainers"] = json!([container]);
    } else {
        pod["spec"]["containers"][0] =
            json!({"name": "main", "image": "app:1", "resources": resources});
    }
    pod
}

/// Every form of GPU request the webhook must see: (pod name, resources, init container only).
fn gpu_forms() -> Vec<(&'static str, Value, bool)> {
    vec![
        ("whole", json!({"limits": {"nvidia.com/gpu": "1"}}), false),
        (
            "whole-requests",
            json!({"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}),
            false,
        ),
        (
            "mig",
            json!({"limits": {"nvidia.com/mig-3g.40gb": "1"}}),
            false,
        ),
        (
            "mig-me",
            json!({"limits": {"nvidia.com/mig-1g.18gb.me": "1"}}),
            false,
        ),
        (
            "shared",
            json!({"limits": {"nvidia.com/gpu.shared": "1"}}),
            false,
        ),
        (
            "init-only",
            json!({"limits": {"nvidia.com/gpu": "1"}}),
            true,
        ),
        (
            "init-only-mig",
            json!({"limits": {"nvidia.com/mig-1g.18gb.me": "1"}}),
            true,
        ),
    ]
}

pub async fn with_the_webhook_down_cpu_pods_pass_and_every_gpu_form_is_refused()
-> anyhow::Result<()> {
    let mut cluster = start(ClusterOptions::default()).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    submit(&cluster, gpu_pod("team", "before", 1), Some(0.5)).await?;

    cluster.replicas[0].kill();
    let api = cluster.api.clone();
    // A moment for connections the API server holds to the dead replica to fail.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // CPU pods: the matchConditions say no, so the webhook is not called at all.
    let cpu = pod("team", "cpu", json!({"requests": {"cpu": "1"}}), false);
    let mut cpu_with_init = pod("team", "cpu-init", json!({"requests": {"cpu": "1"}}), true);
    cpu_with_init["spec"]["containers"]
        .as_array_mut()
        .context("containers")?
        .push(json!({"name": "sidecar", "image": "app:1"}));
    let bare = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cpu-bare", "namespace": "team"},
        "spec": {"containers": [{"name": "main", "image": "app:1"}]}});
    let mut other_devices = pod(
        "team",
        "cpu-other-device",
        json!({"limits": {"example.com/gpu": "1"}}),
        false,
    );
    other_devices["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpux"] = json!("1");
    for object in [cpu, cpu_with_init, bare, other_devices] {
        let name = object["metadata"]["name"].clone();
        let created = api
            .create(object)
            .await
            .with_context(|| format!("CPU pod {name} with the webhook down"))?;
        ensure!(
            created["spec"]["schedulingGates"].is_null()
                && created["metadata"]["labels"]["gpufair.io/managed"].is_null(),
            "CPU pod {name} is not touched: {created}"
        );
    }

    // GPU pods, in every form: refused by the API server, naming the webhook.
    let mut refusals = Vec::new();
    for (name, resources, init) in gpu_forms() {
        match api.create(pod("team", name, resources.clone(), init)).await {
            Ok(created) => bail!(
                "GPU pod {name} ({resources}, init container only: {init}) was created with the \
                 webhook down: {created}"
            ),
            Err(error) => {
                let text = error.message();
                ensure!(
                    text.contains("failed calling webhook") && text.contains("pods.gpufair.io"),
                    "GPU pod {name}: refused, but not for the webhook being down: {text}"
                );
                refusals.push(format!("{name}: {:?}", error.code()));
            }
        }
        ensure!(
            api.get("v1", "Pod", "team", name).await?.is_none(),
            "GPU pod {name} does not exist"
        );
    }

    // gpufair's own namespace is excluded, so its pods are created even with the webhook down.
    let own = pod(
        NAMESPACE,
        "own",
        json!({"limits": {"nvidia.com/gpu": "1"}}),
        false,
    );
    api.create(own)
        .await
        .context("a pod in gpufair's own namespace with the webhook down")?;

    // Back up: the same forms are admitted again, gated.
    cluster.replicas[0] = Replica::start(&cluster.settings, "replica-0").await?;
    cluster.wait_ready(0).await?;
    cluster.admit_through(0).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (name, resources, init) in gpu_forms() {
        let created = api
            .create(pod("team", name, resources, init))
            .await
            .with_context(|| format!("GPU pod {name} once the webhook is back"))?;
        ensure!(
            created["spec"]["schedulingGates"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g["name"] == "gpufair.io/admission")),
            "GPU pod {name} is gated once the webhook is back: {created}"
        );
    }
    println!("  refused while down: {}", refusals.join(", "));
    Ok(())
}
