//! gpufair's manifests applied to the control plane as an admin would: `kubectl kustomize
//! deploy/base` (the real kubectl), then `kubectl apply --server-side` of everything but the
//! workloads, which the harness runs as local processes instead (the webhook Deployment, the
//! device-plugin DaemonSet, the certificate Job and CronJob). The MutatingWebhookConfiguration
//! is applied as shipped except for its `clientConfig`, which points at a local replica.

use std::time::Duration;

use serde_json::{Value, json};

use super::{ApiError, ClusterError, KubeApi};
use crate::controlplane::ControlPlane;

/// deploy/base's MutatingWebhookConfiguration.
pub const WEBHOOK_CONFIGURATION: &str = "gpufair";

/// Kinds the harness runs itself, as processes.
const RUN_LOCALLY: [&str; 4] = ["Deployment", "DaemonSet", "Job", "CronJob"];

/// The objects of `kubectl kustomize DIR` (relative to the workspace), in its order.
pub fn render(plane: &ControlPlane, dir: &str) -> Result<Vec<Value>, ClusterError> {
    let path = crate::workspace_root().join(dir);
    let text = plane.kubectl(&["kustomize", &path.display().to_string()], None)?;
    parse_documents(&text)
}

/// Every non-empty document of a multi-document YAML text.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, ClusterError> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let object: Value = serde::Deserialize::deserialize(document)
            .map_err(|e| ClusterError::Setup(format!("rendered YAML: {e}")))?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    Ok(objects)
}

fn to_yaml(objects: &[Value]) -> Result<String, ClusterError> {
    let mut text = String::new();
    for object in objects {
        text.push_str("---\n");
        text.push_str(
            &serde_yaml::to_string(object)
                .map_err(|e| ClusterError::Setup(format!("YAML: {e}")))?,
        );
    }
    Ok(text)
}

/// Applies deploy/base (less the workloads) and waits until the CRDs are established. The
/// webhook configuration starts with a URL nothing listens on; with `failurePolicy: Fail` GPU
/// pods are refused until [`super::Cluster::admit_through`] points it at a replica.
pub async fn install_base(plane: &ControlPlane) -> Result<(), ClusterError> {
    let objects = render(plane, "deploy/base")?;
    let (crds, rest): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .filter(|o| !RUN_LOCALLY.contains(&o["kind"].as_str().unwrap_or_default()))
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    plane.apply(&to_yaml(&crds)?)?;
    plane.wait_crds_established()?;
    let rest: Vec<Value> = rest
        .into_iter()
        .map(|mut object| {
            if object["kind"] == "MutatingWebhookConfiguration" {
                // Port 9 (discard) on loopback: refused at once until a replica is set.
                object["webhooks"][0]["clientConfig"] =
                    json!({"url": "https://127.0.0.1:9/mutate"});
            }
            object
        })
        .collect();
    plane.apply(&to_yaml(&rest)?)?;
    Ok(())
}

/// A GPU pod for a dry-run create, which admission mutates but nothing stores.
fn probe_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "gpufair-admission-probe-", "namespace": "default"},
        "spec": {"containers": [{"name": "probe", "image": "probe",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    })
}

/// Waits until the API server reaches a webhook for GPU pods: a dry-run create of a GPU pod is
/// answered by the webhook (admitted, or refused by it) rather than failing to call it. The API
/// server reads webhook configurations from its informer, so a change takes effect a moment
/// after it is written.
pub async fn wait_admission_through(api: &KubeApi, url: &str) -> Result<(), ClusterError> {
    use kube::api::{Api, PostParams};
    use kube::core::DynamicObject;
    let (resource, _) = api.resource("v1", "Pod").await?;
    let pods: Api<DynamicObject> = Api::namespaced_with(api.client.clone(), "default", &resource);
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe: DynamicObject = serde_json::from_value(probe_pod())
        .map_err(|e| ClusterError::Setup(format!("probe pod: {e}")))?;
    let timeout = Duration::from_secs(30);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match pods.create(&params, &probe).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if !status.message.contains("failed calling webhook") => {
                return Ok(());
            }
            Err(error) if tokio::time::Instant::now() > deadline => {
                return Err(ApiError::Timeout {
                    what: format!("admission through {url} ({error})"),
                    timeout,
                }
                .into());
            }
            Err(_) => {}
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ApiError::Timeout {
                what: format!("admission through {url}"),
                timeout,
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
