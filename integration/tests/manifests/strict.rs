//! Every rendered object against its Kubernetes type, strictly: the apiVersion must be the
//! type's, the object must deserialise into the k8s-openapi type, and no field may be one the
//! type does not have (serde would otherwise drop a misspelt or misplaced field in silence,
//! and so would the API server's non-strict decoding: the setting would simply be lost).

use k8s_openapi::Resource;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::cert_manager::{Certificate, Issuer};
use super::kustomize::id;

/// Deserialises `object` into `T`, failing on any field `T` would ignore.
pub fn strict<T: DeserializeOwned>(object: &Value) -> Result<T, String> {
    let mut unknown = Vec::new();
    let typed = serde_ignored::deserialize(object.clone(), |path| unknown.push(path.to_string()))
        .map_err(|e: serde_json::Error| format!("{}: {e}", id(object)))?;
    if unknown.is_empty() {
        Ok(typed)
    } else {
        Err(format!(
            "{}: unknown fields {}",
            id(object),
            unknown.join(", ")
        ))
    }
}

fn typed<T: DeserializeOwned + Resource>(object: &Value) -> Result<(), String> {
    if object["apiVersion"].as_str() != Some(T::API_VERSION) {
        return Err(format!(
            "{}: apiVersion {} where {} expects {}",
            id(object),
            object["apiVersion"],
            T::KIND,
            T::API_VERSION
        ));
    }
    strict::<T>(object).map(drop)
}

/// Whether the kind is namespaced; `None` for a kind these manifests do not use.
pub fn namespaced(kind: &str) -> Option<bool> {
    Some(match kind {
        "Namespace"
        | "ClusterRole"
        | "ClusterRoleBinding"
        | "PriorityClass"
        | "CustomResourceDefinition"
        | "MutatingWebhookConfiguration"
        | "ValidatingAdmissionPolicy"
        | "ValidatingAdmissionPolicyBinding" => false,
        "ServiceAccount"
        | "Role"
        | "RoleBinding"
        | "ConfigMap"
        | "Service"
        | "Deployment"
        | "DaemonSet"
        | "Job"
        | "CronJob"
        | "PodDisruptionBudget"
        | "Certificate"
        | "Issuer"
        | "PrometheusRule" => true,
        _ => return None,
    })
}

/// Validates one object of any kind the manifests use.
pub fn validate(object: &Value) -> Result<(), String> {
    let kind = object["kind"].as_str().unwrap_or_default();
    match kind {
        "Namespace" => typed::<Namespace>(object),
        "ServiceAccount" => typed::<ServiceAccount>(object),
        "ConfigMap" => typed::<ConfigMap>(object),
        "Service" => typed::<Service>(object),
        "ClusterRole" => typed::<ClusterRole>(object),
        "ClusterRoleBinding" => typed::<ClusterRoleBinding>(object),
        "Role" => typed::<Role>(object),
        "RoleBinding" => typed::<RoleBinding>(object),
        "Deployment" => typed::<Deployment>(object),
        "DaemonSet" => typed::<DaemonSet>(object),
        "Job" => typed::<Job>(object),
        "CronJob" => typed::<CronJob>(object),
        "PodDisruptionBudget" => typed::<PodDisruptionBudget>(object),
        "PriorityClass" => typed::<PriorityClass>(object),
        "CustomResourceDefinition" => typed::<CustomResourceDefinition>(object),
        "MutatingWebhookConfiguration" => typed::<MutatingWebhookConfiguration>(object),
        "ValidatingAdmissionPolicy" => typed::<ValidatingAdmissionPolicy>(object),
        "ValidatingAdmissionPolicyBinding" => typed::<ValidatingAdmissionPolicyBinding>(object),
        "Certificate" | "Issuer" => {
            if object["apiVersion"] != "cert-manager.io/v1" {
                return Err(format!(
                    "{}: expected apiVersion cert-manager.io/v1",
                    id(object)
                ));
            }
            if kind == "Certificate" {
                strict::<Certificate>(object).map(drop)
            } else {
                strict::<Issuer>(object).map(drop)
            }
        }
        "PrometheusRule" => super::alerts::validate(object),
        other => Err(format!("{}: no schema for kind {other:?}", id(object))),
    }?;
    let has_namespace = object["metadata"]["namespace"].is_string();
    match namespaced(kind) {
        Some(true) if !has_namespace => Err(format!("{}: namespaced but no namespace", id(object))),
        Some(false) if has_namespace => Err(format!(
            "{}: cluster-scoped but has a namespace",
            id(object)
        )),
        _ => Ok(()),
    }
}

#[test]
fn strictness_catches_a_misplaced_field() {
    let good = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "a", "namespace": "b"}});
    validate(&good).unwrap();
    let mut bad = good.clone();
    bad["metadata"]["lables"] = serde_json::json!({"x": "y"});
    let err = validate(&bad).unwrap_err();
    assert!(err.contains("lables"), "{err}");
    let mut wrong_version = good;
    wrong_version["apiVersion"] = "apps/v1".into();
    assert!(validate(&wrong_version).is_err());
}
