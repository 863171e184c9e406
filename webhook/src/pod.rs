//! The parts of a Pod that admission reads, and nothing else.
//!
//! The API server sends the whole pod (volumes, probes, environment, status, managed fields);
//! building k8s-openapi's typed `Pod` from it costs most of a review's time, while the plan
//! reads a dozen fields. These structs name only those fields, with the same JSON names and
//! types as the Kubernetes API; every other field is skipped without being built. Fields that
//! the API allows to be absent are `Option` or defaulted, so what parses here is what the typed
//! `Pod` would accept for these fields.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    /// `None` when the object carries no metadata at all: the patch must then create it.
    pub metadata: Option<ObjectMeta>,
    pub spec: Option<PodSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: Option<String>,
    pub generate_name: Option<String>,
    pub namespace: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    pub controller: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub affinity: Option<Affinity>,
    #[serde(default)]
    pub containers: Vec<Container>,
    pub init_containers: Option<Vec<Container>>,
    pub node_name: Option<String>,
    pub preemption_policy: Option<String>,
    pub priority: Option<i32>,
    pub priority_class_name: Option<String>,
    pub scheduling_gates: Option<Vec<SchedulingGate>>,
    pub termination_grace_period_seconds: Option<i64>,
    pub tolerations: Option<Vec<Toleration>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    pub node_affinity: Option<NodeAffinity>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
    pub preferred_during_scheduling_ignored_during_execution: Option<Vec<PreferredSchedulingTerm>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    #[serde(default)]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    pub match_expressions: Option<Vec<NodeSelectorRequirement>>,
    pub match_fields: Option<Vec<NodeSelectorRequirement>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreferredSchedulingTerm {
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    pub resources: Option<ResourceRequirements>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    pub limits: Option<BTreeMap<String, String>>,
    pub requests: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingGate {
    pub name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    pub effect: Option<String>,
    pub key: Option<String>,
    pub operator: Option<String>,
    pub toleration_seconds: Option<i64>,
    pub value: Option<String>,
}

/// Which parents the pod has, for a JSON patch against it (an `add` needs its parent).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PodShape {
    pub metadata: bool,
    pub labels: bool,
    pub annotations: bool,
    pub scheduling_gates: bool,
    pub affinity: bool,
    pub node_affinity: bool,
    pub preferred_terms: bool,
    pub tolerations: bool,
    /// Per required node selector term: whether it has `matchExpressions`, `matchFields`.
    pub required_terms: Vec<(bool, bool)>,
    /// Number of init containers (the plan indexes them before the regular ones).
    pub init_containers: usize,
}

impl PodShape {
    pub fn of(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let affinity = spec.and_then(|s| s.affinity.as_ref());
        let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
        Self {
            metadata: pod.metadata.is_some(),
            labels: pod.metadata.as_ref().is_some_and(|m| m.labels.is_some()),
            annotations: pod
                .metadata
                .as_ref()
                .is_some_and(|m| m.annotations.is_some()),
            scheduling_gates: spec.is_some_and(|s| s.scheduling_gates.is_some()),
            affinity: affinity.is_some(),
            node_affinity: node_affinity.is_some(),
            preferred_terms: node_affinity.is_some_and(|n| {
                n.preferred_during_scheduling_ignored_during_execution
                    .is_some()
            }),
            tolerations: spec.is_some_and(|s| s.tolerations.is_some()),
            required_terms: node_affinity
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|r| {
                    r.node_selector_terms
                        .iter()
                        .map(|t| (t.match_expressions.is_some(), t.match_fields.is_some()))
                        .collect()
                })
                .unwrap_or_default(),
            init_containers: spec
                .and_then(|s| s.init_containers.as_ref())
                .map_or(0, Vec::len),
        }
    }
}
