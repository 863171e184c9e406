//! The MutatingWebhookConfiguration cannot stop the cluster: only GPU pods are sent (CEL
//! matchConditions, evaluated here on real pod shapes), its own namespace and kube-system are
//! never sent, the timeout is short, and GPU pods still fail closed.

use serde_json::{Value, json};

use super::policies::{eval_bool, pod};
use super::{INSTALL_NAMESPACE, KUSTOMIZATIONS, rendered};

fn webhooks(kustomization: &str) -> Vec<Value> {
    let objects = rendered(kustomization);
    let configurations: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "MutatingWebhookConfiguration")
        .collect();
    assert_eq!(configurations.len(), 1, "{kustomization}");
    configurations[0]["webhooks"].as_array().unwrap().clone()
}

fn sent(webhook: &Value, pod: &Value) -> bool {
    let conditions = webhook["matchConditions"]
        .as_array()
        .expect("matchConditions");
    conditions.iter().all(|c| {
        eval_bool(c["expression"].as_str().unwrap(), &[("object", pod)])
            .unwrap_or_else(|e| panic!("matchCondition {}: {e}", c["name"]))
    })
}

#[test]
fn every_overlay_keeps_the_webhook_fail_safe() {
    for kustomization in KUSTOMIZATIONS {
        for webhook in webhooks(kustomization) {
            let name = webhook["name"].as_str().unwrap();
            let conditions = webhook["matchConditions"].as_array();
            assert!(
                conditions.is_some_and(|c| !c.is_empty()),
                "{kustomization}: {name} has no matchConditions, so every pod would be sent"
            );
            assert_eq!(
                webhook["failurePolicy"], "Fail",
                "{kustomization}: GPU pods fail closed"
            );
            let timeout = webhook["timeoutSeconds"]
                .as_i64()
                .expect("timeoutSeconds set");
            assert!(
                (1..=5).contains(&timeout),
                "{kustomization}: timeout {timeout}s"
            );
            assert_eq!(webhook["sideEffects"], "None");
            assert_eq!(webhook["rules"][0]["operations"], json!(["CREATE"]));
            let excluded: Vec<&str> = webhook["namespaceSelector"]["matchExpressions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
                .flat_map(|e| {
                    e["values"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter_map(Value::as_str)
                })
                .collect();
            for namespace in [INSTALL_NAMESPACE, "kube-system"] {
                assert!(
                    excluded.contains(&namespace),
                    "{kustomization}: {namespace} not excluded"
                );
            }
        }
    }
}

#[test]
fn only_pods_requesting_a_gpu_are_sent() {
    let webhook = &webhooks("base")[0];
    assert!(
        sent(webhook, &pod(Value::Null, 1, &[])),
        "limits nvidia.com/gpu"
    );
    assert!(!sent(webhook, &pod(Value::Null, 0, &[])), "a CPU pod");
    let with = |resources: Value, init: bool| {
        let mut p = pod(Value::Null, 0, &[]);
        let container = json!({"name": "c", "image": "x", "resources": resources});
        if init {
            p["spec"]["initContainers"] = json!([container]);
        } else {
            p["spec"]["containers"] = json!([{"name": "a", "image": "x"}, container]);
        }
        p
    };
    for resource in [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
    ] {
        for field in ["requests", "limits"] {
            for init in [false, true] {
                let p = with(json!({field: {resource: "1"}}), init);
                assert!(
                    sent(webhook, &p),
                    "{resource} in {field} (init container: {init})"
                );
            }
        }
    }
    for resource in [
        "cpu",
        "memory",
        "example.com/gpu",
        "nvidia.com/gpux",
        "amd.com/gpu",
    ] {
        assert!(
            !sent(webhook, &with(json!({"limits": {resource: "1"}}), false)),
            "{resource}"
        );
    }
    // Containers without resources at all, and empty maps, evaluate without error.
    let mut bare = pod(Value::Null, 0, &[]);
    bare["spec"]["containers"] =
        json!([{"name": "a", "image": "x"}, {"name": "b", "image": "x", "resources": {}}]);
    assert!(!sent(webhook, &bare));
    bare["spec"]["initContainers"] = json!([{"name": "i", "image": "x"}]);
    assert!(!sent(webhook, &bare));
}

/// The webhook's own matchCondition and the managed-label policy's `requestsGpu` variable
/// describe the same pods (one is copied from the other; this keeps them from drifting).
#[test]
fn the_gpu_predicate_is_the_same_in_webhook_and_policy() {
    let objects = rendered("base");
    let webhook = &webhooks("base")[0];
    let policy = super::find(
        &objects,
        "ValidatingAdmissionPolicy",
        "gpufair-managed-label",
    );
    let variable = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "requestsGpu")
        .unwrap();
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(
        squash(
            webhook["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
        ),
        squash(variable["expression"].as_str().unwrap())
    );
}
