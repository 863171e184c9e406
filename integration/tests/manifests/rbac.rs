//! What each ServiceAccount may do, computed from the rendered Roles, ClusterRoles and their
//! bindings, against the Kubernetes calls each component's code makes. A grant the code does not
//! use, or a call without a grant, fails here; so does any wildcard.
//!
//! The certs tool and the device plugin make every call through one module, `kube_api`, whose
//! trait has one method per request and whose `CALLS` declare the grants those requests need;
//! `only_the_api_module_of_each_crate_calls_the_api_server` fails when another file of the
//! crate names kube's client. The controller, the runtime's watches and the webhook library are
//! still read by a syntax scan (`kube_calls_in_the_code_are_all_listed`, [`kube_calls`]): it
//! finds every call with the name and argument count of a kube client call (`Api` methods,
//! watchers, the Event recorder's `publish`) and fails when one is added, moved or removed
//! without its row in [`CALLS`]. A row says whether its calls are provably made on an `Api` or
//! `Recorder` (a kube row, with the grants they need) or not (an other row, with none).
//! The grants each ServiceAccount needs are the union of its rows and declarations.

mod kube_calls;

use std::collections::{BTreeMap, BTreeSet};

use gpufair_api::access::{ApiCall, Scope};
use serde_json::Value;

use super::{INSTALL_NAMESPACE, KUSTOMIZATIONS, rendered};
use kube_calls::Receiver;

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

/// Calls in one source file: `count` calls of the method or function `call` whose receiver is
/// `receiver`, made by `account`'s process. A kube row's calls are on an `Api` or the Event
/// recorder (or are kube-runtime watchers) and need `grants` (`scope group/resource[names]
/// verb`). An other row's calls only share a kube call's name and argument count (maps, our
/// own stores) and need none: they are listed so that a kube call the scan cannot prove to be
/// one still changes a count.
struct Call {
    file: &'static str,
    call: &'static str,
    receiver: Receiver,
    count: usize,
    account: &'static str,
    grants: &'static [&'static str],
}

const fn kube(
    file: &'static str,
    call: &'static str,
    count: usize,
    account: &'static str,
    grants: &'static [&'static str],
) -> Call {
    Call {
        file,
        call,
        receiver: Receiver::Kube,
        count,
        account,
        grants,
    }
}

const fn other(
    file: &'static str,
    call: &'static str,
    count: usize,
    account: &'static str,
) -> Call {
    Call {
        file,
        call,
        receiver: Receiver::Other,
        count,
        account,
        grants: &[],
    }
}

/// Every kube client call in the components' non-test code, and the calls of the same name and
/// argument count on other types in files that use kube.
const CALLS: &[Call] = &[
    // The controller (run by gpufair-webhook on the Lease holder).
    kube(
        "controller/src/io/watch.rs",
        "watcher",
        2,
        WEBHOOK,
        // The pod watch into the facts store, and one reflector per other Api listed in the
        // file (Node, GpuNodeReport).
        &[
            "cluster core/pods list",
            "cluster core/pods watch",
            "cluster core/nodes list",
            "cluster core/nodes watch",
            "cluster gpufair.io/gpunodereports list",
            "cluster gpufair.io/gpunodereports watch",
        ],
    ),
    // The release: one JSON patch per pod.
    kube(
        "controller/src/io/apply.rs",
        "patch",
        1,
        WEBHOOK,
        &["cluster core/pods patch"],
    ),
    kube(
        "controller/src/io/apply.rs",
        "create_subresource",
        1,
        WEBHOOK,
        &["cluster core/pods/eviction create"],
    ),
    // Before evicting a workload of several pods: its pods and their namespace's disruption
    // budgets, so a budget that passes each pod alone cannot half-evict the workload.
    kube(
        "controller/src/io/apply.rs",
        "list",
        2,
        WEBHOOK,
        &[
            "cluster core/pods list",
            "cluster policy/poddisruptionbudgets list",
        ],
    ),
    // A released pod that never bound, recreated by its owner.
    kube(
        "controller/src/io/apply.rs",
        "delete",
        1,
        WEBHOOK,
        &["cluster core/pods delete"],
    ),
    kube(
        "controller/src/io/apply.rs",
        "patch_status",
        1,
        WEBHOOK,
        &["cluster gpufair.io/queues/status patch"],
    ),
    // The re-read after a 409 on the status patch.
    kube(
        "controller/src/io/apply.rs",
        "get_status",
        1,
        WEBHOOK,
        &["cluster gpufair.io/queues/status get"],
    ),
    // kube's Event recorder creates an Event, then patches its series.
    kube(
        "controller/src/io/apply.rs",
        "publish",
        1,
        WEBHOOK,
        &[
            "cluster events.k8s.io/events create",
            "cluster events.k8s.io/events patch",
        ],
    ),
    // `get` and `entry` on maps and vectors, `evict` on our own Applier.
    other("controller/src/io/controller.rs", "get", 13, WEBHOOK),
    other("controller/src/io/controller.rs", "entry", 1, WEBHOOK),
    other("controller/src/io/controller.rs", "evict", 2, WEBHOOK),
    // Workload families (right-sizing): read once on taking the lease, then written by
    // server-side apply (which creates a family the first time) and its status.
    kube(
        "controller/src/io/family_status.rs",
        "list",
        1,
        WEBHOOK,
        &["cluster gpufair.io/workloadfamilies list"],
    ),
    kube(
        "controller/src/io/family_status.rs",
        "patch",
        1,
        WEBHOOK,
        &[
            "cluster gpufair.io/workloadfamilies patch",
            "cluster gpufair.io/workloadfamilies create",
        ],
    ),
    kube(
        "controller/src/io/family_status.rs",
        "patch_status",
        1,
        WEBHOOK,
        &["cluster gpufair.io/workloadfamilies/status patch"],
    ),
    kube(
        "controller/src/io/leader.rs",
        "get_opt",
        2,
        WEBHOOK,
        &["ns:gpufair-system coordination.k8s.io/leases get"],
    ),
    kube(
        "controller/src/io/leader.rs",
        "create",
        1,
        WEBHOOK,
        &["ns:gpufair-system coordination.k8s.io/leases create"],
    ),
    kube(
        "controller/src/io/leader.rs",
        "replace",
        2,
        WEBHOOK,
        &["ns:gpufair-system coordination.k8s.io/leases update"],
    ),
    // The process's watches (gpufair-runtime, every replica), one generic `watcher` call: the
    // Queue watch that feeds admission and the controller, and the WorkloadFamily watch that
    // feeds right-sizing (the smoothed peaks).
    kube(
        "runtime/src/watches.rs",
        "watcher",
        1,
        WEBHOOK,
        &[
            "cluster gpufair.io/queues list",
            "cluster gpufair.io/queues watch",
            "cluster gpufair.io/workloadfamilies list",
            "cluster gpufair.io/workloadfamilies watch",
        ],
    ),
    // `get` on the queue index's maps, `entry` on its by-namespace map.
    other("webhook/src/queues.rs", "get", 4, WEBHOOK),
    other("webhook/src/queues.rs", "entry", 1, WEBHOOK),
    // `get` on the family index.
    other("webhook/src/families.rs", "get", 1, WEBHOOK),
];

/// The components' source directories whose code talks to the API server.
const SOURCE_DIRS: &[&str] = &["controller/src", "webhook/src", "runtime/src"];

/// The grants `account` needs: the union of its rows.
fn needed(account: &str) -> BTreeSet<String> {
    CALLS
        .iter()
        .filter(|c| c.account == account)
        .flat_map(|c| c.grants.iter().map(|g| g.to_string()))
        .collect()
}

type RowKey = (String, String, Receiver);

#[test]
fn kube_calls_in_the_code_are_all_listed() {
    let mut problems = Vec::new();
    let mut listed: BTreeMap<RowKey, usize> = BTreeMap::new();
    for row in CALLS {
        let kind = row.receiver;
        match (kind, row.grants.is_empty()) {
            (Receiver::Kube, true) => problems.push(format!(
                "{}: the kube {}() row has no grants",
                row.file, row.call
            )),
            (Receiver::Other, false) => problems.push(format!(
                "{}: the other {}() row has grants, but its calls are not kube's",
                row.file, row.call
            )),
            _ => {}
        }
        let key = (row.file.to_string(), row.call.to_string(), kind);
        if listed.insert(key, row.count).is_some() {
            problems.push(format!(
                "{}: two {kind:?} rows for {}()",
                row.file, row.call
            ));
        }
    }
    let mut scanned: BTreeMap<RowKey, Vec<usize>> = BTreeMap::new();
    let sources = kube_calls::read_sources(&super::repo_dir(), SOURCE_DIRS);
    for found in kube_calls::scan(&sources) {
        scanned
            .entry((found.file, found.call, found.receiver))
            .or_default()
            .push(found.line);
    }
    for ((file, call, kind), lines) in &scanned {
        let key = (file.clone(), call.clone(), *kind);
        match listed.get(&key) {
            None => problems.push(format!(
                "{file}: {} × {kind:?} {call}() (lines {lines:?}) with no row in CALLS",
                lines.len()
            )),
            Some(&count) if count != lines.len() => problems.push(format!(
                "{file}: {} × {kind:?} {call}() (lines {lines:?}), CALLS says {count}",
                lines.len()
            )),
            Some(_) => {}
        }
    }
    for (file, call, kind) in listed.keys() {
        if !scanned.contains_key(&(file.clone(), call.clone(), *kind)) {
            problems.push(format!(
                "{file}: CALLS lists {kind:?} {call}() but the code has none"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

fn controller() -> BTreeSet<String> {
    needed(WEBHOOK)
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
