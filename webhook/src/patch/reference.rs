//! The patch builder as it was before operations were serialized directly: every operation a
//! `json_patch` value with a `serde_json::Value`. Kept for tests, which check that the direct
//! serialization writes the same bytes for the same mutations and pod shape.

use gpufair_core::mutation::{Mutation, NodeSelectorRequirement, NodeSelectorTerm, Toleration};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::{Map, Value, json};

use crate::pod::PodShape;

const NODE_AFFINITY: [&str; 3] = ["spec", "affinity", "nodeAffinity"];
const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";

/// Which parents exist, as of the operations emitted so far.
struct Present {
    metadata: bool,
    labels: bool,
    annotations: bool,
    gates: bool,
    affinity: bool,
    node_affinity: bool,
    preferred: bool,
    tolerations: bool,
}

struct Builder {
    ops: Vec<PatchOperation>,
    present: Present,
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

impl Builder {
    fn add(&mut self, tokens: &[&str], value: Value) {
        self.ops.push(PatchOperation::Add(AddOperation {
            path: pointer(tokens),
            value,
        }));
    }

    fn remove(&mut self, tokens: &[&str]) {
        self.ops.push(PatchOperation::Remove(RemoveOperation {
            path: pointer(tokens),
        }));
    }

    /// Ensures `/metadata` exists: the API server always sends it, but a review without it is
    /// still answered with a patch that applies.
    fn metadata(&mut self) {
        if !self.present.metadata {
            self.add(&["metadata"], json!({}));
            self.present.metadata = true;
        }
    }

    /// Ensures `/spec/affinity/nodeAffinity` exists.
    fn node_affinity(&mut self) {
        if !self.present.affinity {
            self.add(&NODE_AFFINITY[..2], json!({}));
            self.present.affinity = true;
        }
        if !self.present.node_affinity {
            self.add(&NODE_AFFINITY, json!({}));
            self.present.node_affinity = true;
        }
    }

    /// Appends `value` to the array at `tokens`, creating the array if `exists` is false.
    fn append(&mut self, tokens: &[&str], exists: bool, value: Value) {
        if exists {
            let mut path = tokens.to_vec();
            path.push("-");
            self.add(&path, value);
        } else {
            self.add(tokens, Value::Array(vec![value]));
        }
    }
}

fn requirement_json(r: &NodeSelectorRequirement) -> Value {
    let mut object = Map::new();
    object.insert("key".into(), Value::String(r.key.clone()));
    object.insert("operator".into(), Value::String(r.operator.clone()));
    if !r.values.is_empty() {
        object.insert("values".into(), json!(r.values));
    }
    Value::Object(object)
}

fn term_json(term: &NodeSelectorTerm) -> Value {
    let mut object = Map::new();
    if !term.match_expressions.is_empty() {
        let list = term
            .match_expressions
            .iter()
            .map(requirement_json)
            .collect();
        object.insert("matchExpressions".into(), Value::Array(list));
    }
    if !term.match_fields.is_empty() {
        let list = term.match_fields.iter().map(requirement_json).collect();
        object.insert("matchFields".into(), Value::Array(list));
    }
    Value::Object(object)
}

fn toleration_json(t: &Toleration) -> Value {
    let mut object = Map::new();
    let mut put = |key: &str, value: &Option<String>| {
        if let Some(v) = value {
            object.insert(key.into(), Value::String(v.clone()));
        }
    };
    put("key", &t.key);
    put("operator", &t.operator);
    put("value", &t.value);
    put("effect", &t.effect);
    if let Some(seconds) = t.toleration_seconds {
        object.insert("tolerationSeconds".into(), json!(seconds));
    }
    Value::Object(object)
}

/// The patch that applies `mutations` to a pod of shape `pod`.
pub fn build_patch(pod: &PodShape, mutations: &[Mutation]) -> Patch {
    let mut b = Builder {
        ops: Vec::with_capacity(mutations.len() + 4),
        present: Present {
            metadata: pod.metadata,
            labels: pod.labels,
            annotations: pod.annotations,
            gates: pod.scheduling_gates,
            affinity: pod.affinity,
            node_affinity: pod.node_affinity,
            preferred: pod.preferred_terms,
            tolerations: pod.tolerations,
        },
    };
    for mutation in mutations {
        match mutation {
            Mutation::SetLabel { key, value } => {
                if !b.present.labels {
                    b.metadata();
                    b.add(&["metadata", "labels"], json!({}));
                    b.present.labels = true;
                }
                b.add(&["metadata", "labels", key], json!(value));
            }
            Mutation::SetAnnotation { key, value } => {
                if !b.present.annotations {
                    b.metadata();
                    b.add(&["metadata", "annotations"], json!({}));
                    b.present.annotations = true;
                }
                b.add(&["metadata", "annotations", key], json!(value));
            }
            // Planned only for an annotation the pod has, so the path exists.
            Mutation::RemoveAnnotation(key) => b.remove(&["metadata", "annotations", key]),
            Mutation::SetPriorityClassName(class) => {
                b.add(&["spec", "priorityClassName"], json!(class));
            }
            Mutation::RemovePriority => b.remove(&["spec", "priority"]),
            Mutation::RemovePreemptionPolicy => b.remove(&["spec", "preemptionPolicy"]),
            Mutation::AddSchedulingGate(gate) => {
                let exists = b.present.gates;
                b.append(&["spec", "schedulingGates"], exists, json!({"name": gate}));
                b.present.gates = true;
            }
            Mutation::RemoveNodeName => b.remove(&["spec", "nodeName"]),
            Mutation::CreateRequiredNodeAffinity(term) => {
                b.node_affinity();
                b.add(
                    &[
                        NODE_AFFINITY[0],
                        NODE_AFFINITY[1],
                        NODE_AFFINITY[2],
                        REQUIRED,
                    ],
                    json!({"nodeSelectorTerms": [term_json(term)]}),
                );
            }
            Mutation::ExtendRequiredNodeTerm {
                index,
                match_expressions,
                match_fields,
            } => {
                let original = pod.required_terms.get(*index);
                let index = index.to_string();
                for (field, list, exists) in [
                    (
                        "matchExpressions",
                        match_expressions,
                        original.is_some_and(|t| t.0),
                    ),
                    ("matchFields", match_fields, original.is_some_and(|t| t.1)),
                ] {
                    let path = [
                        NODE_AFFINITY[0],
                        NODE_AFFINITY[1],
                        NODE_AFFINITY[2],
                        REQUIRED,
                        "nodeSelectorTerms",
                        index.as_str(),
                        field,
                    ];
                    if list.is_empty() {
                        continue;
                    }
                    if exists {
                        for r in list {
                            b.append(&path, true, requirement_json(r));
                        }
                    } else {
                        b.add(&path, list.iter().map(requirement_json).collect());
                    }
                }
            }
            Mutation::AddPreferredNodeTerm(term) => {
                b.node_affinity();
                let exists = b.present.preferred;
                b.append(
                    &[
                        NODE_AFFINITY[0],
                        NODE_AFFINITY[1],
                        NODE_AFFINITY[2],
                        PREFERRED,
                    ],
                    exists,
                    json!({"weight": term.weight, "preference": term_json(&term.preference)}),
                );
                b.present.preferred = true;
            }
            Mutation::AddToleration(toleration) => {
                let exists = b.present.tolerations;
                b.append(
                    &["spec", "tolerations"],
                    exists,
                    toleration_json(toleration),
                );
                b.present.tolerations = true;
            }
            Mutation::SetTerminationGracePeriodSeconds(seconds) => {
                b.add(&["spec", "terminationGracePeriodSeconds"], json!(seconds));
            }
            Mutation::ReplaceGpuResource {
                container,
                from,
                to,
                requests,
                limits,
            } => {
                // The plan lists init containers first, then regular ones.
                let (list, index) = match container.checked_sub(pod.init_containers) {
                    Some(regular) => ("containers", regular),
                    None => ("initContainers", *container),
                };
                let index = index.to_string();
                for (field, present) in [("requests", requests), ("limits", limits)] {
                    if *present {
                        let base = ["spec", list, index.as_str(), "resources", field];
                        b.remove(&[&base[..], &[from.as_str()]].concat());
                        b.add(&[&base[..], &[to.as_str()]].concat(), json!("1"));
                    }
                }
            }
        }
    }
    Patch(b.ops)
}
