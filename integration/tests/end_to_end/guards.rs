//! The shipped ValidatingAdmissionPolicies, enforced by kube-apiserver itself: a normal user
//! (a ServiceAccount bound to the aggregated `edit` ClusterRole, allowed by RBAC to patch any
//! pod of its namespace) cannot release a pod by removing the `gpufair.io/admission` gate,
//! cannot move a managed pod to another queue or tier, cannot rename its family or turn its
//! right-sizing on or off, and cannot set `gpufair.io/managed`; gpufair's controller may remove
//! the gate. Every refusal carries the policy's own message, and the API server's type checker
//! finds nothing to warn about in any expression.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use gpufair_integration::cluster::{ApiError, ClusterOptions, KubeApi, NAMESPACE, WEBHOOK_ACCOUNT};
use gpufair_integration::controlplane::client_from;
use serde_json::{Value, json};

use crate::common::{start, submit, wait_until};

const POLICIES: [&str; 3] = [
    "gpufair-gate",
    "gpufair-pod-labels",
    "gpufair-managed-label",
];
const VAP: &str = "admissionregistration.k8s.io/v1";
const GATE: &str = "gpufair.io/admission";

/// The message of validation `index` of policy `name`, as the API server stores it.
async fn message(api: &KubeApi, name: &str, index: usize) -> anyhow::Result<String> {
    let policy = api
        .get(VAP, "ValidatingAdmissionPolicy", "", name)
        .await?
        .with_context(|| format!("ValidatingAdmissionPolicy {name}"))?;
    policy["spec"]["validations"][index]["message"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("{name}: validation {index} has no message"))
}

/// `result` is a refusal by policy `policy` with `message`.
fn refused_by(
    what: &str,
    result: Result<Value, ApiError>,
    policy: &str,
    message: &str,
) -> anyhow::Result<()> {
    match result {
        Ok(pod) => bail!("{what} was allowed: {pod}"),
        Err(error) => {
            let text = error.message();
            ensure!(
                text.contains(&format!("ValidatingAdmissionPolicy '{policy}'"))
                    && text.contains(message),
                "{what}: refused ({:?}), but not by {policy} with its message {message:?}: {text}",
                error.code()
            );
            ensure!(
                error.code() == Some(403),
                "{what}: refused with {:?}, not 403 Forbidden: {text}",
                error.code()
            );
            Ok(())
        }
    }
}

/// A ServiceAccount `name` in `namespace` bound to the `edit` ClusterRole, and a client with its
/// token.
async fn editor(
    cluster: &gpufair_integration::cluster::Cluster,
    namespace: &str,
    name: &str,
) -> anyhow::Result<KubeApi> {
    let api = &cluster.api;
    api.create(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace}}))
        .await?;
    api.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("{name}-edit"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
    )
    .await?;
    // kube-controller-manager's aggregation controller fills `edit` from the roles labelled
    // to aggregate into it; until then it grants nothing.
    api.wait_for(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "",
        "edit",
        Duration::from_secs(30),
        |role| {
            role.is_some_and(|r| {
                r["rules"].as_array().is_some_and(|rules| {
                    rules.iter().any(|rule| {
                        rule["resources"]
                            .as_array()
                            .is_some_and(|r| r.iter().any(|r| r == "pods"))
                            && rule["verbs"]
                                .as_array()
                                .is_some_and(|v| v.iter().any(|v| v == "patch"))
                    })
                })
            })
        },
    )
    .await?;
    let path = cluster.dir().join(format!("{name}.kubeconfig"));
    cluster
        .plane
        .service_account_kubeconfig(namespace, name, &path)
        .await?;
    Ok(KubeApi::new(client_from(&path).await?))
}

/// Waits until the validatingadmissionpolicy-status-controller has type-checked the current
/// generation of each policy; returns the warnings it found.
async fn type_check_warnings(api: &KubeApi) -> anyhow::Result<Vec<String>> {
    let mut warnings = Vec::new();
    for name in POLICIES {
        let policy = api
            .wait_for(
                VAP,
                "ValidatingAdmissionPolicy",
                "",
                name,
                Duration::from_secs(60),
                |p| {
                    p.is_some_and(|p| {
                        !p["status"]["typeChecking"].is_null()
                            && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                    })
                },
            )
            .await?
            .unwrap_or_default();
        for warning in policy["status"]["typeChecking"]["expressionWarnings"]
            .as_array()
            .into_iter()
            .flatten()
        {
            warnings.push(format!("{name}: {warning}"));
        }
    }
    Ok(warnings)
}

fn labels_patch(key: &str, value: Value) -> Value {
    json!({"metadata": {"labels": {key: value}}})
}

fn annotations_patch(key: &str, value: Value) -> Value {
    json!({"metadata": {"annotations": {key: value}}})
}

pub async fn the_api_server_enforces_the_shipped_policies() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions::default()).await?;
    let api = &cluster.api;
    let warnings = type_check_warnings(api).await?;
    ensure!(
        warnings.is_empty(),
        "the API server's type checker warns about the shipped policies:\n{}",
        warnings.join("\n")
    );
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    cluster
        .queue("other", "other", json!({"weight": 1}))
        .await?;
    let alice = editor(&cluster, "team", "alice").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A gang member whose gang never completes stays gated however long the case takes; it
    // opts in to right-sizing and names its family, so the webhook records its decision.
    let mut held = gang_pod("team", "held", 0, 3, 1);
    held["metadata"]["labels"]["gpufair.io/family"] = json!("llama-finetune");
    held["metadata"]["labels"]["gpufair.io/right-size"] = json!("true");
    held["apiVersion"] = json!("v1");
    held["kind"] = json!("Pod");
    let created = alice.create(held).await?;
    ensure!(
        created["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["name"] == GATE))
            && created["metadata"]["labels"]["gpufair.io/managed"] == "true",
        "the webhook gated and marked alice's pod: {created}"
    );
    let pod = "held-0";
    let patch = |change: Value| alice.merge("v1", "Pod", "team", pod, None, change);

    // RBAC lets alice patch the pod: an unrelated label and annotation change goes through.
    patch(json!({"metadata": {"labels": {"team-note": "x"}, "annotations": {"team-note": "x"}}}))
        .await
        .context("alice may edit her pod's own labels")?;

    // kube-apiserver enforces each new ValidatingAdmissionPolicy once its informers have
    // synced the policy and its binding, each on its own. Until a dry run of one change each
    // policy forbids is refused, the case would test that delay, not the policies.
    for (policy, change) in [
        ("gpufair-gate", json!({"spec": {"schedulingGates": null}})),
        (
            "gpufair-pod-labels",
            labels_patch("gpufair.io/queue", json!("other")),
        ),
        (
            "gpufair-managed-label",
            labels_patch("gpufair.io/managed", json!("false")),
        ),
    ] {
        wait_until(
            &format!("kube-apiserver to enforce {policy}"),
            Duration::from_secs(30),
            || async {
                alice
                    .merge_dry_run("v1", "Pod", "team", pod, change.clone())
                    .await
                    .is_err_and(|e| e.code() == Some(403) && e.message().contains(policy))
                    .then_some(())
            },
        )
        .await?;
    }
    let gate = message(api, "gpufair-gate", 0).await?;
    refused_by(
        "alice removing the gate",
        patch(json!({"spec": {"schedulingGates": null}})).await,
        "gpufair-gate",
        &gate,
    )?;
    let fixed_labels = message(api, "gpufair-pod-labels", 0).await?;
    let fixed_annotations = message(api, "gpufair-pod-labels", 1).await?;
    for (key, value) in [
        ("gpufair.io/queue", json!("other")),
        ("ai-task-type", json!("inference")),
        ("ai-task-type", Value::Null),
        ("urgency-level", json!("high")),
        ("gpufair.io/pod-group", json!("another")),
        ("gpufair.io/family", json!("other-family")),
        ("gpufair.io/family", Value::Null),
        ("gpufair.io/right-size", json!("false")),
        ("gpufair.io/right-size", Value::Null),
    ] {
        refused_by(
            &format!("alice setting label {key} to {value}"),
            patch(labels_patch(key, value)).await,
            "gpufair-pod-labels",
            &fixed_labels,
        )?;
    }
    let record = created["metadata"]["annotations"]["gpufair.io/right-size-result"].clone();
    ensure!(
        record.is_string(),
        "the webhook recorded its right-sizing decision: {created}"
    );
    for (key, value) in [
        ("gpufair.io/right-size-result", json!("right-sized: forged")),
        ("gpufair.io/right-size-result", Value::Null),
        ("gpufair.io/tier", json!("realtime")),
        ("gpufair.io/min-member", json!("1")),
    ] {
        refused_by(
            &format!("alice setting annotation {key} to {value}"),
            patch(annotations_patch(key, value)).await,
            "gpufair-pod-labels",
            &fixed_annotations,
        )?;
    }
    let managed_after = message(api, "gpufair-managed-label", 1).await?;
    refused_by(
        "alice changing gpufair.io/managed",
        patch(labels_patch("gpufair.io/managed", json!("false"))).await,
        "gpufair-managed-label",
        &managed_after,
    )?;

    // gpufair.io/managed on a pod gpufair does not manage: at creation and afterwards.
    let managed_create = message(api, "gpufair-managed-label", 0).await?;
    let mut forged = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cpu-forged", "namespace": "team",
            "labels": {"gpufair.io/managed": "true"}},
        "spec": {"containers": [{"name": "main", "image": "app:1",
            "resources": {"requests": {"cpu": "100m"}}}]}});
    refused_by(
        "alice creating a CPU pod labelled gpufair.io/managed",
        alice.create(forged.clone()).await,
        "gpufair-managed-label",
        &managed_create,
    )?;
    forged["metadata"]["name"] = json!("cpu-plain");
    forged["metadata"]["labels"] = json!({"app": "x"});
    alice.create(forged).await?;
    refused_by(
        "alice labelling her CPU pod gpufair.io/managed",
        alice
            .merge(
                "v1",
                "Pod",
                "team",
                "cpu-plain",
                None,
                labels_patch("gpufair.io/managed", json!("true")),
            )
            .await,
        "gpufair-managed-label",
        &managed_after,
    )?;

    // The pod is still as admitted.
    let now = api
        .get("v1", "Pod", "team", pod)
        .await?
        .context("the held pod")?;
    ensure!(
        now["metadata"]["labels"]["gpufair.io/queue"] == "team"
            && now["metadata"]["labels"]["gpufair.io/family"] == "llama-finetune"
            && now["metadata"]["annotations"]["gpufair.io/right-size-result"] == record
            && now["spec"]["schedulingGates"][0]["name"] == GATE,
        "the refused changes left no trace: {now}"
    );

    // gpufair's controller, with its own ServiceAccount's token, may remove the gate.
    let controller = KubeApi::new(client_from(&cluster.settings.kubeconfig).await?);
    controller
        .merge(
            "v1",
            "Pod",
            "team",
            pod,
            None,
            json!({"spec": {"schedulingGates": null}}),
        )
        .await
        .with_context(|| format!("{NAMESPACE}/{WEBHOOK_ACCOUNT} removing the gate"))?;
    wait_until(
        "the released pod bound",
        Duration::from_secs(10),
        || async {
            api.get("v1", "Pod", "team", pod)
                .await
                .ok()
                .flatten()
                .filter(|p| !p["spec"]["nodeName"].is_null())
        },
    )
    .await?;

    // Released pods keep their labels fixed as well; a plain GPU pod goes through admission
    // as usual meanwhile.
    refused_by(
        "alice moving the released pod to queue other",
        patch(labels_patch("gpufair.io/queue", json!("other"))).await,
        "gpufair-pod-labels",
        &fixed_labels,
    )?;
    submit(&cluster, gpu_pod("team", "plain", 1), Some(0.5)).await?;
    println!(
        "  every change refused with its policy's message; the controller's gate removal allowed"
    );
    Ok(())
}
