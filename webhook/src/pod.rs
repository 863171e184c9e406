//! The parts of a Pod that admission reads, and nothing else.
//!
//! The API server sends the whole pod (volumes, probes, environment, status, managed fields);
//! building k8s-openapi's typed `Pod` from it costs most of a review's time, while the plan
//! reads a dozen fields. These structs name only those fields, with the same JSON names and
//! types as the Kubernetes API; every other field is skipped without being built. Fields that
//! the API allows to be absent are `Option` or defaulted, so what parses here is what the typed
//! `Pod` would accept for these fields.
//!
//! Strings the plan keeps (labels, container names, tolerations...) are owned, as the plan's
//! facts own them. Strings it only looks at (the pod's name and namespace, the owners, the
//! preemption policy) borrow from the request body when they carry no escapes, which saves an
//! allocation each per review.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod<'a> {
    /// `None` when the object carries no metadata at all: the patch must then create it.
    #[serde(borrow)]
    pub metadata: Option<ObjectMeta<'a>>,
    #[serde(borrow)]
    pub spec: Option<PodSpec<'a>>,
}

/// A JSON string, borrowed from the body unless it has escapes. serde borrows a bare
/// `Cow<str>` but never one inside an `Option`, so optional fields wrap it in this.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Text<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta<'a> {
    #[serde(borrow)]
    pub name: Option<Text<'a>>,
    #[serde(borrow)]
    pub generate_name: Option<Text<'a>>,
    #[serde(borrow)]
    pub namespace: Option<Text<'a>>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(borrow)]
    pub owner_references: Option<Vec<OwnerReference<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference<'a> {
    #[serde(default, borrow)]
    pub kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub name: Cow<'a, str>,
    pub controller: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec<'a> {
    pub affinity: Option<Affinity>,
    #[serde(default)]
    pub containers: Vec<Container>,
    pub init_containers: Option<Vec<Container>>,
    pub node_name: Option<String>,
    #[serde(borrow)]
    pub preemption_policy: Option<Text<'a>>,
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
    pub fn of(pod: &Pod<'_>) -> Self {
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
