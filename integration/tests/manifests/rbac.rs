//! What each ServiceAccount may do, computed from the rendered Roles, ClusterRoles and their
//! bindings, against the Kubernetes calls each component's code makes. A grant the code does not
//! use, or a call without a grant, fails here; so does any wildcard.
//!
//! The calls are not a list kept by hand beside the code: `kube_calls_in_the_code_are_all_listed`
//! scans the components' sources for every kube client call (`Api` methods, watchers, the Event
//! recorder) and fails when a call is added, moved or removed without its row in [`CALLS`]; the
//! grants each ServiceAccount needs are the union of its rows.

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

const NS: &str = "ns:gpufair-system";

const WEBHOOK: &str = "gpufair-webhook";
const DEVICE_PLUGIN: &str = "gpufair-device-plugin";
const CERTS: &str = "gpufair-certs";

/// Calls in one source file: `count` occurrences of the method `call` (a kube `Api` method,
/// `watcher` or the recorder's `publish`), made by `account`'s process and needing `grants`
/// (`scope group/resource[names] verb`). Rows with no grants are same-named calls on other types
/// (maps, our own stores), which the scan cannot tell apart by name: they are listed so a new
/// kube call under such a name still changes the count.
struct Call {
    file: &'static str,
    call: &'static str,
    count: usize,
    account: &'static str,
    grants: &'static [&'static str],
}

const fn call(
    file: &'static str,
    call: &'static str,
    count: usize,
    account: &'static str,
    grants: &'static [&'static str],
) -> Call {
    Call {
        file,
        call,
        count,
        account,
        grants,
    }
}

/// Every kube client call in the components' non-test code.
const CALLS: &[Call] = &[
    // The controller (run by gpufair-webhook on the Lease holder).
    call(
        "controller/src/watch.rs",
        "watcher",
        2,
        WEBHOOK,
        // The pod watch into the facts store, and one reflector per other Api listed in the
        // file (Node, Queue, GpuNodeReport).
        &[
            "cluster core/pods list",
            "cluster core/pods watch",
            "cluster core/nodes list",
            "cluster core/nodes watch",
            "cluster gpufair.io/queues list",
            "cluster gpufair.io/queues watch",
            "cluster gpufair.io/gpunodereports list",
            "cluster gpufair.io/gpunodereports watch",
        ],
    ),
    // The release: one JSON patch per pod.
    call(
        "controller/src/apply.rs",
        "patch",
        1,
        WEBHOOK,
        &["cluster core/pods patch"],
    ),
    call(
        "controller/src/apply.rs",
        "create_subresource",
        1,
        WEBHOOK,
        &["cluster core/pods/eviction create"],
    ),
    // Before evicting a workload of several pods: its pods and their namespace's disruption
    // budgets, so a budget that passes each pod alone cannot half-evict the workload.
    call(
        "controller/src/apply.rs",
        "list",
        2,
        WEBHOOK,
        &[
            "cluster core/pods list",
            "cluster policy/poddisruptionbudgets list",
        ],
    ),
    // A released pod that never bound, recreated by its owner.
    call(
        "controller/src/apply.rs",
        "delete",
        1,
        WEBHOOK,
        &["cluster core/pods delete"],
    ),
    call(
        "controller/src/apply.rs",
        "patch_status",
        1,
        WEBHOOK,
        &["cluster gpufair.io/queues/status patch"],
    ),
    // The re-read after a 409 on the status patch.
    call(
        "controller/src/apply.rs",
        "get_status",
        1,
        WEBHOOK,
        &["cluster gpufair.io/queues/status get"],
    ),
    // kube's Event recorder creates an Event, then patches its series.
    call(
        "controller/src/apply.rs",
        "publish",
        1,
        WEBHOOK,
        &[
            "cluster events.k8s.io/events create",
            "cluster events.k8s.io/events patch",
        ],
    ),
    // `get` on maps and vectors, `evict` on our own Applier.
    call("controller/src/controller.rs", "get", 12, WEBHOOK, &[]),
    // Workload families (right-sizing): read once on taking the lease, then written by
    // server-side apply (which creates a family the first time) and its status.
    call(
        "controller/src/family_status.rs",
        "list",
        1,
        WEBHOOK,
        &["cluster gpufair.io/workloadfamilies list"],
    ),
    call(
        "controller/src/family_status.rs",
        "patch",
        1,
        WEBHOOK,
        &[
            "cluster gpufair.io/workloadfamilies patch",
            "cluster gpufair.io/workloadfamilies create",
        ],
    ),
    call(
        "controller/src/family_status.rs",
        "patch_status",
        1,
        WEBHOOK,
        &["cluster gpufair.io/workloadfamilies/status patch"],
    ),
    call("controller/src/controller.rs", "evict", 2, WEBHOOK, &[]),
    call(
        "controller/src/leader.rs",
        "get_opt",
        2,
        WEBHOOK,
        &["ns:gpufair-system coordination.k8s.io/leases get"],
    ),
    call(
        "controller/src/leader.rs",
        "create",
        1,
        WEBHOOK,
        &["ns:gpufair-system coordination.k8s.io/leases create"],
    ),
    call(
        "controller/src/leader.rs",
        "replace",
        2,
        WEBHOOK,
        &["ns:gpufair-system coordination.k8s.io/leases update"],
    ),
    // Admission's Queue watch (every replica).
    call(
        "webhook/src/queues.rs",
        "watcher",
        1,
        WEBHOOK,
        &[
            "cluster gpufair.io/queues list",
            "cluster gpufair.io/queues watch",
        ],
    ),
    // `get` on the queue index, `replace` on the queue store.
    call("webhook/src/queues.rs", "get", 4, WEBHOOK, &[]),
    // The webhook's WorkloadFamily watch (right-sizing reads the smoothed peaks), and `get` on
    // its index.
    call(
        "webhook/src/families.rs",
        "watcher",
        1,
        WEBHOOK,
        &[
            "cluster gpufair.io/workloadfamilies list",
            "cluster gpufair.io/workloadfamilies watch",
        ],
    ),
    call("webhook/src/families.rs", "get", 1, WEBHOOK, &[]),
    call("webhook/src/queues.rs", "replace", 2, WEBHOOK, &[]),
    call("webhook/src/lib.rs", "replace", 1, WEBHOOK, &[]),
    // `watch` on the TLS state: it reloads the certificate files.
    call("webhook/src/lib.rs", "watch", 1, WEBHOOK, &[]),
    // The device plugin: the owner Node, its own GpuNodeReport by server-side apply (which
    // creates it the first time), and the pods on its node.
    call(
        "device-plugin/src/report.rs",
        "get",
        1,
        DEVICE_PLUGIN,
        &["cluster core/nodes get"],
    ),
    call(
        "device-plugin/src/report.rs",
        "patch",
        1,
        DEVICE_PLUGIN,
        &[
            "cluster gpufair.io/gpunodereports patch",
            "cluster gpufair.io/gpunodereports create",
        ],
    ),
    call(
        "device-plugin/src/report.rs",
        "list",
        1,
        DEVICE_PLUGIN,
        &["cluster core/pods list"],
    ),
    // `publish` on the report sink (the patch above).
    call(
        "device-plugin/src/report.rs",
        "publish",
        1,
        DEVICE_PLUGIN,
        &[],
    ),
    // gpufair-certs apply: the Secret and the webhook configuration's caBundle.
    call(
        "certs/src/apply.rs",
        "get_opt",
        2,
        CERTS,
        &[
            "ns:gpufair-system core/secrets[gpufair-webhook-tls] get",
            "cluster admissionregistration.k8s.io/mutatingwebhookconfigurations[gpufair] get",
        ],
    ),
    call(
        "certs/src/apply.rs",
        "create",
        1,
        CERTS,
        &["ns:gpufair-system core/secrets create"],
    ),
    call(
        "certs/src/apply.rs",
        "replace",
        1,
        CERTS,
        &["ns:gpufair-system core/secrets[gpufair-webhook-tls] update"],
    ),
    call(
        "certs/src/apply.rs",
        "patch",
        1,
        CERTS,
        &["cluster admissionregistration.k8s.io/mutatingwebhookconfigurations[gpufair] patch"],
    ),
    // `get` on the Secret's data map.
    call("certs/src/apply.rs", "get", 1, CERTS, &[]),
];

/// The kube client methods (and free functions) that reach the API server.
const KUBE_CALLS: &[&str] = &[
    "get",
    "get_opt",
    "get_status",
    "get_metadata",
    "get_subresource",
    "list",
    "list_metadata",
    "watch",
    "watch_metadata",
    "create",
    "create_subresource",
    "replace",
    "replace_status",
    "replace_subresource",
    "patch",
    "patch_status",
    "patch_subresource",
    "patch_metadata",
    "delete",
    "delete_collection",
    "evict",
    "publish",
    "watcher",
    "metadata_watcher",
    "reflector",
];

/// The components' source directories whose code talks to the API server.
const SOURCE_DIRS: &[&str] = &[
    "controller/src",
    "webhook/src",
    "certs/src",
    "device-plugin/src",
];

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Calls of `name(` as a method (`.name(`) or a function (`name(` after a non-identifier
/// character), in code before the file's test module.
fn count_calls(code: &str, name: &str) -> usize {
    let pattern = format!("{name}(");
    code.match_indices(&pattern)
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            match before {
                Some('.') => true,
                Some(c) if name.contains("watcher") || name == "reflector" => {
                    !(c.is_alphanumeric() || c == '_')
                }
                _ => false,
            }
        })
        .count()
}

/// `(file, call) → count` for every kube call name found in a file that uses kube.
fn scanned_calls() -> std::collections::BTreeMap<(String, String), usize> {
    let root = super::repo_dir();
    let mut found = std::collections::BTreeMap::new();
    for dir in SOURCE_DIRS {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            // Test modules talk to mock servers, not the cluster.
            let code = text
                .find("#[cfg(test)]\nmod ")
                .map_or(text.as_str(), |at| &text[..at]);
            if !code.contains("kube::") {
                continue;
            }
            let file = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            for name in KUBE_CALLS {
                let count = count_calls(code, name);
                if count > 0 {
                    found.insert((file.clone(), name.to_string()), count);
                }
            }
        }
    }
    found
}

/// The grants `account` needs: the union of its rows.
fn needed(account: &str) -> BTreeSet<String> {
    CALLS
        .iter()
        .filter(|c| c.account == account)
        .flat_map(|c| c.grants.iter().map(|g| g.to_string()))
        .collect()
}

#[test]
fn kube_calls_in_the_code_are_all_listed() {
    let listed: std::collections::BTreeMap<(String, String), usize> = CALLS
        .iter()
        .map(|c| ((c.file.to_string(), c.call.to_string()), c.count))
        .collect();
    assert_eq!(
        listed.len(),
        CALLS.len(),
        "a (file, call) row appears twice"
    );
    let found = scanned_calls();
    let mut problems = Vec::new();
    for ((file, call), count) in &found {
        match listed.get(&(file.clone(), call.clone())) {
            None => problems.push(format!("{file}: {count} × {call}() with no row in CALLS")),
            Some(listed) if listed != count => {
                problems.push(format!("{file}: {count} × {call}(), CALLS says {listed}"))
            }
            Some(_) => {}
        }
    }
    for (file, call) in listed.keys() {
        if !found.contains_key(&(file.clone(), call.clone())) {
            problems.push(format!(
                "{file}: CALLS lists {call}() but the code has none"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_scan_finds_calls_written_either_way() {
    let code = "let a = api.patch(&n);\nlet s = watcher(api, c);\nlet t = my_watcher(x);\nbudget(x);\n    .get_opt(n)";
    assert_eq!(count_calls(code, "patch"), 1);
    assert_eq!(count_calls(code, "watcher"), 1);
    assert_eq!(count_calls(code, "get"), 0);
    assert_eq!(count_calls(code, "get_opt"), 1);
}

fn controller() -> BTreeSet<String> {
    needed(WEBHOOK)
}

fn device_plugin() -> BTreeSet<String> {
    needed(DEVICE_PLUGIN)
}

fn certs() -> BTreeSet<String> {
    needed(CERTS)
}

#[test]
fn each_service_account_has_exactly_the_access_its_code_uses() {
    for kustomization in KUSTOMIZATIONS {
        let objects = rendered(kustomization);
        assert_eq!(
            grants_by_account(&objects, WEBHOOK),
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
