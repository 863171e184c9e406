//! The manifests in `deploy/` are real Kubernetes objects: every document parses into its
//! k8s-openapi type, the kustomization lists every file, and the bundled config is one gpufair
//! accepts.

use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn documents(path: &Path) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            serde_yaml::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn check<T: serde::de::DeserializeOwned>(doc: &serde_yaml::Value, path: &Path) -> T {
    serde_yaml::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{}: not a valid object: {e}", path.display()))
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let mut kinds = Vec::new();
    for dir in ["base", "crds"] {
        let dir = deploy_dir().join(dir);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n == "kustomization.yaml") {
                continue;
            }
            for doc in documents(&path) {
                let kind = doc["kind"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: a document has no kind", path.display()))
                    .to_string();
                match kind.as_str() {
                    "Namespace" => drop(check::<Namespace>(&doc, &path)),
                    "ServiceAccount" => drop(check::<ServiceAccount>(&doc, &path)),
                    "ClusterRole" => drop(check::<ClusterRole>(&doc, &path)),
                    "ClusterRoleBinding" => drop(check::<ClusterRoleBinding>(&doc, &path)),
                    "Role" => drop(check::<Role>(&doc, &path)),
                    "RoleBinding" => drop(check::<RoleBinding>(&doc, &path)),
                    "Deployment" => drop(check::<Deployment>(&doc, &path)),
                    "DaemonSet" => drop(check::<DaemonSet>(&doc, &path)),
                    "Service" => drop(check::<Service>(&doc, &path)),
                    "PodDisruptionBudget" => drop(check::<PodDisruptionBudget>(&doc, &path)),
                    "PriorityClass" => drop(check::<PriorityClass>(&doc, &path)),
                    "MutatingWebhookConfiguration" => {
                        drop(check::<MutatingWebhookConfiguration>(&doc, &path))
                    }
                    "CustomResourceDefinition" => {
                        drop(check::<CustomResourceDefinition>(&doc, &path))
                    }
                    "ConfigMap" => {
                        let map: ConfigMap = check(&doc, &path);
                        let config = map
                            .data
                            .as_ref()
                            .and_then(|d| d.get("config.yaml"))
                            .expect("gpufair-config has config.yaml");
                        gpufair_api::Config::from_yaml(config, "deploy/base/config.yaml")
                            .expect("the bundled config is valid");
                    }
                    other => panic!("{}: unexpected kind {other}", path.display()),
                }
                kinds.push(kind);
            }
        }
    }
    for needed in [
        "Deployment",
        "DaemonSet",
        "MutatingWebhookConfiguration",
        "PriorityClass",
        "CustomResourceDefinition",
    ] {
        assert!(kinds.iter().any(|k| k == needed), "no {needed} in deploy/");
    }
}

#[test]
fn kustomizations_list_every_file() {
    for (dir, extra) in [("base", vec!["../crds"]), ("crds", vec![])] {
        let dir_path = deploy_dir().join(dir);
        let kustomization = &documents(&dir_path.join("kustomization.yaml"))[0];
        let listed: Vec<String> = kustomization["resources"]
            .as_sequence()
            .expect("resources list")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        let mut files: Vec<String> = std::fs::read_dir(&dir_path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .collect();
        files.extend(extra.into_iter().map(str::to_string));
        files.sort();
        let mut listed_sorted = listed.clone();
        listed_sorted.sort();
        assert_eq!(
            listed_sorted, files,
            "deploy/{dir}/kustomization.yaml is out of date"
        );
    }
}

#[test]
fn tier_priority_classes_match_the_defaults() {
    let path = deploy_dir().join("base/priorityclasses.yaml");
    let classes: Vec<PriorityClass> = documents(&path).iter().map(|d| check(d, &path)).collect();
    let names: Vec<_> = classes
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["gpufair-realtime", "gpufair-elastic", "gpufair-backfill"]
    );
    let backfill = &classes[2];
    assert_eq!(
        backfill.preemption_policy.as_deref(),
        Some("Never"),
        "backfill never preempts"
    );
    assert!(classes[0].value > classes[1].value && classes[1].value > classes[2].value);
}

/// The flags the manifests pass are flags the real binaries accept.
#[test]
fn manifest_arguments_are_accepted_by_the_binaries() {
    let cases = [
        (
            "webhook.yaml",
            "Deployment",
            "gpufair-webhook",
            vec!["serve", "--help"],
        ),
        (
            "device-plugin.yaml",
            "DaemonSet",
            "gpufair-device-plugin",
            vec!["--help"],
        ),
    ];
    for (file, kind, binary, help_args) in cases {
        let path = deploy_dir().join("base").join(file);
        let doc = documents(&path)
            .into_iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .expect("workload present");
        let template = if kind == "Deployment" {
            check::<Deployment>(&doc, &path)
                .spec
                .expect("spec")
                .template
        } else {
            check::<DaemonSet>(&doc, &path).spec.expect("spec").template
        };
        let container = &template.spec.expect("pod spec").containers[0];
        let help = std::process::Command::new(gpufair_integration::binary(binary, binary))
            .args(&help_args)
            .output()
            .expect("binary runs");
        assert!(help.status.success(), "{binary} {help_args:?} failed");
        let help = String::from_utf8_lossy(&help.stdout);
        for arg in container.args.iter().flatten() {
            if let Some(flag) = arg.strip_prefix("--") {
                let name = flag.split('=').next().unwrap_or(flag);
                assert!(
                    help.contains(&format!("--{name}")),
                    "{file}: {binary} does not accept --{name}"
                );
            }
        }
        for env in container.env.iter().flatten() {
            if env.name.starts_with("GPUFAIR_") || env.name == "NODE_NAME" {
                assert!(
                    help.contains(&env.name),
                    "{file}: {binary} does not read {}",
                    env.name
                );
            }
        }
    }
}
