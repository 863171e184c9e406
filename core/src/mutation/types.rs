//! Plain descriptions of a pod and a queue, as much of them as the mutation plan reads.
//!
//! The webhook fills these from the AdmissionReview; the simulator and tests build them directly.
//! Operators and toleration fields stay strings so that whatever the API server accepted is
//! carried through unchanged.

use std::collections::BTreeMap;

/// `In`: the value is one of `values`.
pub const OP_IN: &str = "In";
/// `NotIn`: the value is none of `values`.
pub const OP_NOT_IN: &str = "NotIn";
/// `Exists`: the key is present.
pub const OP_EXISTS: &str = "Exists";
/// `DoesNotExist`: the key is absent.
pub const OP_DOES_NOT_EXIST: &str = "DoesNotExist";
/// `Gt`: integer value greater than the single value given.
pub const OP_GT: &str = "Gt";
/// `Lt`: integer value less than the single value given.
pub const OP_LT: &str = "Lt";

/// The field a pod's node name is matched by in `matchFields`.
pub const NODE_NAME_FIELD: &str = "metadata.name";

/// One requirement of a node selector term (`matchExpressions` or `matchFields` entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    pub fn new(key: impl Into<String>, operator: &str, values: &[&str]) -> Self {
        Self {
            key: key.into(),
            operator: operator.to_string(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }
}

/// One node selector term: its requirements are ANDed; the terms of a selector are ORed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<NodeSelectorRequirement>,
    pub match_fields: Vec<NodeSelectorRequirement>,
}

impl NodeSelectorTerm {
    /// Kubernetes reads an empty term as matching no node at all.
    pub fn is_empty(&self) -> bool {
        self.match_expressions.is_empty() && self.match_fields.is_empty()
    }
}

/// A weighted preference (`preferredDuringSchedulingIgnoredDuringExecution` entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreferredSchedulingTerm {
    /// 1..=100, as the API server requires.
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

/// A toleration, field for field as in the pod spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

/// Resource requests and limits of one container (regular or init), quantities as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerResources {
    pub name: String,
    pub requests: BTreeMap<String, String>,
    pub limits: BTreeMap<String, String>,
}

/// What the mutation plan reads from a pod being created.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFacts {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_name: Option<String>,
    pub priority_class_name: Option<String>,
    /// `spec.priority` is set (the API server's Priority plugin fills it before webhooks run).
    pub has_priority: bool,
    /// `spec.preemptionPolicy` is set (filled by the same plugin).
    pub has_preemption_policy: bool,
    pub scheduling_gates: Vec<String>,
    /// `None` when the pod has no required node affinity at all.
    pub required_node_terms: Option<Vec<NodeSelectorTerm>>,
    pub preferred_node_terms: Vec<PreferredSchedulingTerm>,
    pub tolerations: Vec<Toleration>,
    /// Containers and init containers alike: an init container's GPU is still a GPU.
    pub containers: Vec<ContainerResources>,
    pub termination_grace_period_seconds: Option<i64>,
    /// The controlling owner, which names the pod's workload family for right-sizing.
    pub owner: Option<crate::rightsize::OwnerFacts>,
}

/// What the mutation plan reads from a Queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueFacts {
    pub name: String,
    /// Namespaces whose pods may use this queue; the queue is their default.
    pub namespaces: Vec<String>,
    /// The node pool as node selector requirements, injected as required affinity.
    pub node_pool: Vec<NodeSelectorRequirement>,
    /// Priority classes a pod may name itself; `None` or empty allows none.
    pub priority_classes: Option<Vec<String>>,
}

impl QueueFacts {
    pub fn admits_namespace(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| n == namespace)
    }

    pub fn allows_priority_class(&self, class: &str) -> bool {
        self.priority_classes
            .as_ref()
            .is_some_and(|classes| classes.iter().any(|c| c == class))
    }
}
