//! The manifests in `deploy/`: every kustomization renders with the real `kubectl kustomize`
//! (the one the end-to-end control plane is built with), every rendered object is a
//! valid Kubernetes object under strict checking, and the properties the install depends on
//! hold: a fail-safe webhook, one install namespace, RBAC exactly as the code needs it,
//! admission policies that allow and deny what they should, flags the binaries accept.

mod alerts;
mod cert_manager;
mod dockerfiles;
mod helm;
mod kustomize;
mod overlays;
mod policies;
mod promtool;
mod rbac;
mod strict;
mod webhook_configuration;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Every kustomization a user may apply: deploy/base and every directory of deploy/overlays
/// (a test checks the list against the directory).
pub const KUSTOMIZATIONS: &[&str] = &[
    "base",
    "overlays/cert-manager",
    "overlays/dev",
    "overlays/mig",
    "overlays/monitoring",
];

pub const INSTALL_NAMESPACE: &str = "gpufair-system";

pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn deploy_dir() -> PathBuf {
    repo_dir().join("deploy")
}

pub fn rendered(kustomization: &str) -> Vec<Value> {
    kustomize::render(&deploy_dir().join(kustomization))
        .unwrap_or_else(|e| panic!("deploy/{kustomization}: {e}"))
}

/// The one object of `kind` named `name`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn every_kustomization_renders_into_strictly_valid_objects() {
    for kustomization in KUSTOMIZATIONS {
        let objects = rendered(kustomization);
        assert!(
            objects.len() > 10,
            "{kustomization}: only {} objects",
            objects.len()
        );
        let errors: Vec<String> = objects
            .iter()
            .filter_map(|o| strict::validate(o).err())
            .collect();
        assert!(
            errors.is_empty(),
            "deploy/{kustomization}:\n{}",
            errors.join("\n")
        );
    }
}

#[test]
fn every_overlay_is_in_the_list() {
    let mut overlays: Vec<String> = std::fs::read_dir(deploy_dir().join("overlays"))
        .unwrap()
        .map(|e| format!("overlays/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    overlays.sort();
    let listed: Vec<String> = KUSTOMIZATIONS
        .iter()
        .filter(|k| k.starts_with("overlays/"))
        .map(|k| k.to_string())
        .collect();
    assert_eq!(listed, overlays, "KUSTOMIZATIONS names every overlay");
}

/// Every YAML or JSON file in a kustomization directory is used by it: a file left out would
/// look installed to a reader and not be.
#[test]
fn kustomizations_use_every_file() {
    let mut dirs: Vec<String> = KUSTOMIZATIONS.iter().map(|s| s.to_string()).collect();
    dirs.push("crds".into());
    for dir in dirs {
        let path = deploy_dir().join(&dir);
        let kustomization =
            &kustomize::yaml_documents(&path.join("kustomization.yaml")).unwrap()[0];
        let mut used: Vec<String> = Vec::new();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        used.extend(strings(&kustomization["resources"]));
        for patch in kustomization["patches"].as_array().into_iter().flatten() {
            used.extend(patch["path"].as_str().map(str::to_string));
        }
        for generator in kustomization["configMapGenerator"]
            .as_array()
            .into_iter()
            .flatten()
        {
            used.extend(strings(&generator["files"]));
        }
        for entry in std::fs::read_dir(&path).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let manifest = name.ends_with(".yaml") || name.ends_with(".json");
            if manifest && name != "kustomization.yaml" {
                assert!(
                    used.contains(&name),
                    "deploy/{dir}/{name} is not used by its kustomization"
                );
            }
        }
    }
}

#[test]
fn the_bundled_config_is_one_gpufair_accepts() {
    let objects = rendered("base");
    let map = find(&objects, "ConfigMap", "gpufair-config");
    let config = map["data"]["config.yaml"].as_str().expect("config.yaml");
    gpufair_api::Config::from_yaml(config, "deploy/base/config.yaml").expect("a valid config");
}

#[test]
fn tier_priority_classes_match_the_defaults() {
    let objects = rendered("base");
    let value = |name| {
        find(&objects, "PriorityClass", name)["value"]
            .as_i64()
            .unwrap()
    };
    assert!(value("gpufair-realtime") > value("gpufair-elastic"));
    assert!(value("gpufair-elastic") > value("gpufair-backfill"));
    // gpufair's controller does all preemption, with its guards; kube-scheduler's own would
    // evict pods one by one (end_to_end's stock_scheduler case shows it).
    for class in ["gpufair-realtime", "gpufair-elastic", "gpufair-backfill"] {
        assert_eq!(
            find(&objects, "PriorityClass", class)["preemptionPolicy"],
            "Never",
            "{class} lets kube-scheduler preempt"
        );
    }
}

/// Everything that names the install namespace names the same one, so the objects refer to
/// each other: namespaced objects, ServiceAccount subjects, the webhook's Service, and the
/// controller identity the admission policies compare against.
#[test]
fn one_install_namespace_everywhere() {
    for kustomization in KUSTOMIZATIONS {
        let objects = rendered(kustomization);
        for object in &objects {
            let kind = object["kind"].as_str().unwrap();
            if strict::namespaced(kind) == Some(true) {
                assert_eq!(
                    object["metadata"]["namespace"],
                    INSTALL_NAMESPACE,
                    "{}",
                    kustomize::id(object)
                );
            }
            for subject in object["subjects"].as_array().into_iter().flatten() {
                assert_eq!(
                    subject["namespace"],
                    INSTALL_NAMESPACE,
                    "{}",
                    kustomize::id(object)
                );
            }
            for webhook in object["webhooks"].as_array().into_iter().flatten() {
                assert_eq!(
                    webhook["clientConfig"]["service"]["namespace"],
                    INSTALL_NAMESPACE
                );
            }
        }
        let namespace = find(&objects, "Namespace", INSTALL_NAMESPACE);
        assert_eq!(
            namespace["metadata"]["labels"]["gpufair.io/webhook"], "skip",
            "the webhook is never asked to admit its own pods"
        );
    }
}

/// The flags the manifests pass are flags the real binaries accept, and the environment
/// variables they set are ones the binaries read.
#[test]
fn manifest_arguments_are_accepted_by_the_binaries() {
    let mut checked = 0;
    for kustomization in KUSTOMIZATIONS {
        for object in rendered(kustomization) {
            let pod = match object["kind"].as_str() {
                Some("Deployment" | "DaemonSet" | "Job") => &object["spec"]["template"]["spec"],
                Some("CronJob") => &object["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                _ => continue,
            };
            for container in pod["containers"].as_array().into_iter().flatten() {
                let image = container["image"].as_str().unwrap();
                let binary = image
                    .rsplit('/')
                    .next()
                    .and_then(|n| n.split(':').next())
                    .unwrap();
                let args: Vec<&str> = container["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let subcommand: Vec<&str> = args
                    .iter()
                    .copied()
                    .take_while(|a| !a.starts_with('-'))
                    .collect();
                let mut help_args = subcommand.clone();
                help_args.push("--help");
                let help = std::process::Command::new(gpufair_integration::binary(binary))
                    .args(&help_args)
                    .output()
                    .expect("binary runs");
                assert!(help.status.success(), "{binary} {help_args:?} failed");
                let help = String::from_utf8_lossy(&help.stdout);
                for arg in &args[subcommand.len()..] {
                    let flag = arg
                        .strip_prefix("--")
                        .unwrap_or_else(|| panic!("{binary}: argument {arg} is not a flag"));
                    let name = flag.split('=').next().unwrap_or(flag);
                    assert!(
                        help.contains(&format!("--{name}")),
                        "deploy/{kustomization}: {binary} does not accept --{name}"
                    );
                }
                for env in container["env"].as_array().into_iter().flatten() {
                    let name = env["name"].as_str().unwrap();
                    if name.starts_with("GPUFAIR_") || name == "NODE_NAME" {
                        assert!(
                            help.contains(name),
                            "deploy/{kustomization}: {binary} does not read {name}"
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 12, "only {checked} containers checked");
}
