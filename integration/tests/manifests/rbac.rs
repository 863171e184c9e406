//! What each ServiceAccount may do, computed from the rendered Roles, ClusterRoles and their
//! bindings, against the table of calls each component's code makes. A grant the code does not
//! use, or a call without a grant, fails here; so does any wildcard.
//!
//! The controller's rows are its planned Kubernetes calls (gate release, pinning, eviction,
//! leader election); once its code lands, this table is the one to compare with its client
//! calls.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{INSTALL_NAMESPACE, KUSTOMIZATIONS, rendered};

/// `scope group/resource[names] verb`, scope `cluster` or `ns:<namespace>`, group `core` for "".
fn grants_by_account(objects: &[Value], account: &str) -> BTreeSet<String> {
    let role = |kind: &str, name: &str, namespace: Option<&str>| {
        objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && namespace.is_none_or(|n| o["metadata"]["namespace"] == n)
            })
            .unwrap_or_else(|| panic!("binding refers to missing {kind} {name}"))
    };
    let mut grants = BTreeSet::new();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        let bound = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == account
                    && s["namespace"] == INSTALL_NAMESPACE
            });
        if !bound {
            continue;
        }
        let namespace = binding["metadata"]["namespace"].as_str();
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role_name = binding["roleRef"]["name"].as_str().unwrap();
        let rules = &role(
            role_kind,
            role_name,
            if role_kind == "Role" { namespace } else { None },
        )["rules"];
        let scope = match (binding["kind"].as_str(), namespace) {
            (Some("RoleBinding"), Some(ns)) => format!("ns:{ns}"),
            _ => "cluster".to_string(),
        };
        for rule in rules.as_array().unwrap() {
            let strings = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            let names = strings("resourceNames");
            let names = if names.is_empty() {
                String::new()
            } else {
                format!("[{}]", names.join(","))
            };
            assert!(
                rule["nonResourceURLs"].is_null(),
                "{role_name}: nonResourceURLs"
            );
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        for part in [&group, &resource, &verb] {
                            assert!(!part.contains('*'), "{role_name}: wildcard {part:?}");
                        }
                        let group = if group.is_empty() {
                            "core"
                        } else {
                            group.as_str()
                        };
                        grants.insert(format!("{scope} {group}/{resource}{names} {verb}"));
                    }
                }
            }
        }
    }
    grants
}

fn table(rows: &[(&str, &str, &[&str])]) -> BTreeSet<String> {
    rows.iter()
        .flat_map(|(scope, resource, verbs)| {
            verbs
                .iter()
                .map(move |verb| format!("{scope} {resource} {verb}"))
        })
        .collect()
}

const NS: &str = "ns:gpufair-system";

fn controller() -> BTreeSet<String> {
    // The calls listed in controller/src (reflectors, the release patch, the pin's delete, the
    // eviction with its dry run, the status patch and its re-read, Events, the Lease, the
    // WorkloadFamily list and server-side applies) and the webhook's Queue and WorkloadFamily
    // watches.
    table(&[
        ("cluster", "gpufair.io/queues", &["list", "watch"]),
        ("cluster", "gpufair.io/queues/status", &["get", "patch"]),
        ("cluster", "gpufair.io/gpunodereports", &["list", "watch"]),
        (
            "cluster",
            "gpufair.io/workloadfamilies",
            &["list", "watch", "create", "patch"],
        ),
        ("cluster", "gpufair.io/workloadfamilies/status", &["patch"]),
        ("cluster", "core/nodes", &["list", "watch"]),
        (
            "cluster",
            "core/pods",
            &["list", "watch", "patch", "delete"],
        ),
        ("cluster", "core/pods/eviction", &["create"]),
        ("cluster", "events.k8s.io/events", &["create", "patch"]),
        (
            NS,
            "coordination.k8s.io/leases",
            &["get", "create", "update"],
        ),
    ])
}

fn device_plugin() -> BTreeSet<String> {
    table(&[
        (
            "cluster",
            "gpufair.io/gpunodereports",
            &["get", "create", "patch", "update"],
        ),
        ("cluster", "core/nodes", &["get"]),
        ("cluster", "core/pods", &["list"]),
    ])
}

/// `gpufair-certs apply`: get, create and replace (update) the Secret; get and JSON-patch the
/// webhook configuration (the requests its mock-server tests check).
fn certs() -> BTreeSet<String> {
    table(&[
        (NS, "core/secrets[gpufair-webhook-tls]", &["get", "update"]),
        (NS, "core/secrets", &["create"]),
        (
            "cluster",
            "admissionregistration.k8s.io/mutatingwebhookconfigurations[gpufair]",
            &["get", "patch"],
        ),
    ])
}

#[test]
fn each_service_account_has_exactly_the_access_its_code_uses() {
    for kustomization in KUSTOMIZATIONS {
        let objects = rendered(kustomization);
        assert_eq!(
            grants_by_account(&objects, "gpufair-webhook"),
            controller(),
            "{kustomization}"
        );
        assert_eq!(
            grants_by_account(&objects, "gpufair-device-plugin"),
            device_plugin(),
            "{kustomization}"
        );
        let expected_certs = if *kustomization == "overlays/cert-manager" {
            BTreeSet::new()
        } else {
            certs()
        };
        assert_eq!(
            grants_by_account(&objects, "gpufair-certs"),
            expected_certs,
            "{kustomization}"
        );
        // No binding grants anything to an account the manifests do not run.
        for object in &objects {
            for subject in object["subjects"].as_array().into_iter().flatten() {
                let name = subject["name"].as_str().unwrap();
                assert!(
                    ["gpufair-webhook", "gpufair-device-plugin", "gpufair-certs"].contains(&name),
                    "{kustomization}: binding to unexpected subject {name}"
                );
            }
        }
    }
}

#[test]
fn leader_election_is_confined_to_the_install_namespace() {
    let objects = rendered("base");
    let leases: Vec<String> = grants_by_account(&objects, "gpufair-webhook")
        .into_iter()
        .filter(|g| g.contains("leases"))
        .collect();
    assert!(!leases.is_empty());
    assert!(leases.iter().all(|g| g.starts_with(NS)), "{leases:?}");
}

/// Queues are edited by cluster admins only: the aggregated roles read, nothing more, and
/// nothing else in the manifests grants writes on them.
#[test]
fn the_aggregated_roles_only_read_queues() {
    let objects = rendered("base");
    let reader = super::find(&objects, "ClusterRole", "gpufair-queue-reader");
    for role in ["view", "edit", "admin"] {
        assert_eq!(
            reader["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{role}")],
            "true"
        );
    }
    for rule in reader["rules"].as_array().unwrap() {
        for verb in rule["verbs"].as_array().unwrap() {
            assert!(
                ["get", "list", "watch"].contains(&verb.as_str().unwrap()),
                "{verb}"
            );
        }
    }
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        for rule in role["rules"].as_array().unwrap() {
            let on_queues = rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "queues");
            let writes = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| !["get", "list", "watch"].contains(&v.as_str().unwrap()));
            assert!(
                !(on_queues && writes),
                "{} writes queues",
                role["metadata"]["name"]
            );
        }
    }
}
