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
        "nvidia.com/mig-1g.18gb.me",
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

/// Every resource name gpufair treats as a GPU is sent: the names the device plugin advertises
/// (whole, shared and every MIG profile shape NVIDIA uses) and the default `gpuResources`
/// patterns of the webhook's config. A pod asking for a GPU under a name the matchConditions
/// missed would be created without gpufair's gate, ahead of every queue.
#[test]
fn every_gpu_resource_name_gpufair_knows_is_sent() {
    use gpufair_core::units::{SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE};
    use gpufair_device_plugin::devices::mig_resource_name;

    let webhook = &webhooks("base")[0];
    let mut names = vec![
        WHOLE_GPU_RESOURCE.to_string(),
        SHARED_GPU_RESOURCE.to_string(),
    ];
    for profile in [
        "1g.10gb",
        "1g.18gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        "1c.3g.40gb",
        "1g.10gb+me.all",
        "1g.24gb+gfx",
        "1g.12gb-me",
    ] {
        names.push(mig_resource_name(profile).expect("a valid MIG resource name"));
    }
    for pattern in gpufair_api::config::AdmissionConfig::default().gpu_resources {
        match pattern.strip_suffix('*') {
            Some(prefix) => names.push(format!("{prefix}1g.10gb")),
            None => names.push(pattern),
        }
    }
    for name in names {
        for field in ["requests", "limits"] {
            let mut p = pod(Value::Null, 0, &[]);
            p["spec"]["containers"][0]["resources"] = json!({field: {&name: "1"}});
            assert!(sent(webhook, &p), "{name} in {field} is not sent");
        }
    }
}

/// The only pods never sent are those in namespaces labelled `gpufair.io/webhook=skip` and in
/// kube-system and gpufair-system: no object selector, no other exclusion. Setting the label
/// takes write access to Namespace objects, which gpufair's manifests grant to nobody, so it
/// stays with whoever the cluster's own RBAC gives it (cluster admins by default).
#[test]
fn the_only_ways_around_the_webhook_are_the_skip_label_and_two_system_namespaces() {
    for kustomization in KUSTOMIZATIONS {
        for webhook in webhooks(kustomization) {
            assert!(webhook["objectSelector"].is_null(), "{kustomization}");
            assert_eq!(
                webhook["namespaceSelector"],
                json!({"matchExpressions": [
                    {"key": "gpufair.io/webhook", "operator": "NotIn", "values": ["skip"]},
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": ["kube-system", INSTALL_NAMESPACE]}
                ]}),
                "{kustomization}"
            );
        }
        for role in rendered(kustomization)
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        {
            for rule in role["rules"].as_array().into_iter().flatten() {
                let on_namespaces = rule["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r == "namespaces");
                let verbs: Vec<&str> = rule["verbs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                assert!(
                    !(on_namespaces && verbs.iter().any(|v| !["get", "list", "watch"].contains(v))),
                    "{kustomization}: {} writes namespaces",
                    role["metadata"]["name"]
                );
            }
        }
    }
}
