//! What each ServiceAccount may do, computed from the rendered Roles, ClusterRoles and their
//! bindings, against the Kubernetes calls each component's code makes. A grant the code does not
//! use, or a call without a grant, fails here; so does any wildcard.
//!
//! Every crate that talks to the API server makes every call through one module, `kube_api`,
//! whose traits have one method per request (a watch is one method returning its stream) and
//! whose `CALLS` declare the grants those requests need;
//! `only_the_api_module_of_each_crate_calls_the_api_server` fails when another file of the
//! crate names kube's client. The grants each ServiceAccount needs are the union of the `CALLS`
//! of the components that run under it: `gpufair-webhook` runs the runtime's watches, the
//! admission library (which declares none) and the controller.

use std::collections::BTreeSet;

use gpufair_api::access::{ApiCall, Scope};
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

const NS: &str = "ns:gpufair-system";

const WEBHOOK: &str = "gpufair-webhook";

/// What `gpufair-webhook` runs: the process's watches (the runtime), admission (the webhook
/// library) and, on the Lease holder, the controller.
fn webhook() -> BTreeSet<String> {
    [
        gpufair_runtime::kube_api::CALLS,
        gpufair_webhook::kube_api::CALLS,
        gpufair_controller::kube_api::CALLS,
    ]
    .into_iter()
    .flat_map(declared)
    .collect()
}

fn device_plugin() -> BTreeSet<String> {
    declared(gpufair_device_plugin::kube_api::CALLS)
}

fn certs() -> BTreeSet<String> {
    declared(gpufair_certs::kube_api::CALLS)
}

/// A component's declared calls as grants (`scope group/resource[names] verb`).
fn declared(calls: &[ApiCall]) -> BTreeSet<String> {
    calls
        .iter()
        .map(|call| {
            let scope = match call.scope {
                Scope::Cluster => "cluster",
                Scope::InstallNamespace => NS,
            };
            let group = if call.group.is_empty() {
                "core"
            } else {
                call.group
            };
            let names = if call.names.is_empty() {
                String::new()
            } else {
                format!("[{}]", call.names.join(","))
            };
            format!("{scope} {group}/{}{names} {}", call.resource, call.verb)
        })
        .collect()
}

/// The crates whose calls go through one module, and that module: no other source file of the
/// crate names kube's `Api`, its Event `Recorder` or anything of `kube::runtime` (watchers,
/// reflectors), so the module's `CALLS` are all the crate asks of the API server.
const ONE_API_MODULE: &[(&str, &str)] = &[
    ("certs/src", "kube_api.rs"),
    ("device-plugin/src", "kube_api.rs"),
    ("controller/src", "io/kube_api.rs"),
    ("runtime/src", "kube_api.rs"),
    ("webhook/src", "kube_api.rs"),
];

/// Where `code` names a kube client: the identifiers `Api` or `Recorder`, or the path
/// `kube::runtime`. `kube::Error::Api`, an error the server returned, is not a client.
fn kube_client_mentions(code: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let line = line.replace("Error::Api", "");
        let names_client = line
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == "Api" || word == "Recorder");
        if names_client || line.contains("kube::runtime") {
            lines.push(number + 1);
        }
    }
    lines
}

#[test]
fn kube_api_mentions_are_found() {
    assert_eq!(kube_client_mentions("let a: Api<Pod> = x;"), [1]);
    assert_eq!(kube_client_mentions("x\nuse kube::{Api, Client};"), [2]);
    assert_eq!(kube_client_mentions("use kube::runtime::watcher;"), [1]);
    assert_eq!(
        kube_client_mentions("KubeNodeApi::new(c); // Kubernetes API"),
        [0; 0]
    );
    assert_eq!(
        kube_client_mentions("Err(kube::Error::Api(status))"),
        [0; 0]
    );
}

#[test]
fn only_the_api_module_of_each_crate_calls_the_api_server() {
    let mut problems = Vec::new();
    for (dir, module) in ONE_API_MODULE {
        let root = super::repo_dir().join(dir);
        let root = root.as_path();
        let mut files = Vec::new();
        rust_files(root, &mut files);
        assert!(files.iter().any(|f| f.ends_with(module)), "{dir}/{module}");
        for file in files.iter().filter(|f| !f.ends_with(module)) {
            let code = std::fs::read_to_string(file).unwrap();
            let lines = kube_client_mentions(&code);
            if !lines.is_empty() {
                let file = file.strip_prefix(root).unwrap().display();
                problems.push(format!("{dir}/{file}: lines {lines:?}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "kube client outside the API module: {problems:#?}"
    );
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn each_service_account_has_exactly_the_access_its_code_uses() {
    for kustomization in KUSTOMIZATIONS {
        let objects = rendered(kustomization);
        assert_eq!(
            grants_by_account(&objects, WEBHOOK),
            webhook(),
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
