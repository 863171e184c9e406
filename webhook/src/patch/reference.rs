//! The patch builder with every operation a `json_patch` value holding a `serde_json::Value`, as
//! it was before operations were written directly. Kept for tests, which check that the direct
//! writer writes the same bytes for the same mutations and pod shape.

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
    labels_written: bool,
    annotations_written: bool,
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

    /// Sets `key` in the label (or annotation) map `name`. A missing map is added holding
    /// every entry of that map the plan sets from `rest` on, inside a new `/metadata` if that
    /// is missing too.
    fn set_entry(&mut self, name: &str, key: &str, value: &str, rest: &[Mutation]) {
        let (present, written) = if name == "labels" {
            (self.present.labels, self.labels_written)
        } else {
            (self.present.annotations, self.annotations_written)
        };
        if written {
            return;
        }
        if present {
            self.add(&["metadata", name, key], json!(value));
            return;
        }
        let mut map = Map::new();
        for mutation in rest {
            match (name, mutation) {
                ("labels", Mutation::SetLabel { key, value })
                | ("annotations", Mutation::SetAnnotation { key, value }) => {
                    map.insert(key.clone(), json!(value));
                }
                _ => {}
            }
        }
        if self.present.metadata {
            self.add(&["metadata", name], Value::Object(map));
        } else {
            self.add(&["metadata"], json!({ name: map }));
            self.present.metadata = true;
        }
        if name == "labels" {
            (self.present.labels, self.labels_written) = (true, true);
        } else {
            (self.present.annotations, self.annotations_written) = (true, true);
        }
    }

    /// Adds `value` as `field` of `/spec/affinity/nodeAffinity`, creating what is missing
    /// above it in the same operation.
    fn add_under_node_affinity(&mut self, field: &str, value: Value) {
        if !self.present.affinity {
            self.add(&NODE_AFFINITY[..2], json!({"nodeAffinity": {field: value}}));
        } else if !self.present.node_affinity {
            self.add(&NODE_AFFINITY, json!({ field: value }));
        } else {
            let [spec, affinity, node_affinity] = NODE_AFFINITY;
            self.add(&[spec, affinity, node_affinity, field], value);
        }
        self.present.affinity = true;
        self.present.node_affinity = true;
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
        labels_written: false,
        annotations_written: false,
    };
    for (at, mutation) in mutations.iter().enumerate() {
        match mutation {
            Mutation::SetLabel { key, value } => {
                b.set_entry("labels", key, value, &mutations[at..])
            }
            Mutation::SetAnnotation { key, value } => {
                b.set_entry("annotations", key, value, &mutations[at..]);
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
                b.add_under_node_affinity(REQUIRED, json!({"nodeSelectorTerms": [term_json(term)]}))
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
                let value =
                    json!({"weight": term.weight, "preference": term_json(&term.preference)});
                if b.present.preferred {
                    let [spec, affinity, node_affinity] = NODE_AFFINITY;
                    b.append(&[spec, affinity, node_affinity, PREFERRED], true, value);
                } else {
                    b.add_under_node_affinity(PREFERRED, json!([value]));
                }
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
