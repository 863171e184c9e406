//! Mutation plans into RFC 6902 JSON patches against the pod the API server sent.
//!
//! A JSON patch `add` fails when the parent is missing, so the builder tracks which parents the
//! pod has (or this patch created). A missing parent is created by the operation that needs
//! it, holding what that operation adds (`add /spec/affinity {"nodeAffinity": {...}}`), and a
//! missing label or annotation map is created holding every label or annotation the plan sets:
//! one operation where empty parents and one entry each would take several. Appends use `-`
//! so that entries other webhooks or the user wrote are never overwritten.
//!
//! The operations borrow their keys and values from the mutations and are written straight
//! into one buffer as JSON text (`patch/json.rs`), with no `serde_json::Value` tree and no
//! string per path. Object keys are written in sorted order, as a `Value` would write them, so
//! the bytes are those of the `Value` builder in `patch/reference.rs`, kept for the tests that
//! check this.

use gpufair_core::mutation::{
    Mutation, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, Toleration,
};

use crate::pod::PodShape;
use Token::{Index, Name};

mod json;
#[cfg(test)]
mod reference;

const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";

/// One reference token of a JSON pointer.
#[derive(Debug, Clone, Copy)]
enum Token<'a> {
    Name(&'a str),
    Index(usize),
}

/// The deepest path written: `/spec/affinity/nodeAffinity/<required>/nodeSelectorTerms/<i>/
/// matchFields`, plus the append marker.
const MAX_DEPTH: usize = 7;

/// A JSON pointer (RFC 6901), kept as tokens until it is written.
#[derive(Debug, Clone, Copy)]
struct Pointer<'a> {
    tokens: [Token<'a>; MAX_DEPTH],
    len: usize,
    /// Ends in `-`: the position after an array's last entry.
    append: bool,
}

impl<'a> Pointer<'a> {
    fn new<const N: usize>(path: [Token<'a>; N]) -> Self {
        const { assert!(N <= MAX_DEPTH, "a patch path deeper than MAX_DEPTH") };
        let mut tokens = [Token::Name(""); MAX_DEPTH];
        tokens[..N].copy_from_slice(&path);
        Self {
            tokens,
            len: N,
            append: false,
        }
    }

    fn appended(mut self) -> Self {
        self.append = true;
        self
    }
}

impl Pointer<'_> {
    /// Appends the pointer's text (RFC 6901) as a JSON string.
    fn write_to(&self, out: &mut Vec<u8>) {
        out.push(b'"');
        for token in &self.tokens[..self.len] {
            out.push(b'/');
            match *token {
                Token::Index(index) => json::integer(out, index),
                Token::Name(name) => {
                    // `~` is written `~0` and `/` is written `~1`. Both are ASCII, so a byte
                    // scan finds them, and every cut falls on a character boundary.
                    let mut rest = name;
                    while let Some(at) = rest.bytes().position(|b| b == b'~' || b == b'/') {
                        json::escaped(out, &rest[..at]);
                        out.extend_from_slice(if rest.as_bytes()[at] == b'~' {
                            b"~0"
                        } else {
                            b"~1"
                        });
                        rest = &rest[at + 1..];
                    }
                    json::escaped(out, rest);
                }
            }
        }
        if self.append {
            out.extend_from_slice(b"/-");
        }
        out.push(b'"');
    }
}

/// Which of a pod's string maps a merged set of entries goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entries {
    Labels,
    Annotations,
}

impl Entries {
    fn of(self, mutation: &Mutation) -> Option<(&str, &str)> {
        match (self, mutation) {
            (Self::Labels, Mutation::SetLabel { key, value })
            | (Self::Annotations, Mutation::SetAnnotation { key, value }) => Some((key, value)),
            _ => None,
        }
    }
}

/// The value of an `add`, borrowed from the mutation it comes from.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    String(&'a str),
    Integer(i64),
    /// `{"name": gate}`.
    SchedulingGate(&'a str),
    /// `{"nodeSelectorTerms": [term]}`.
    RequiredAffinity(&'a NodeSelectorTerm),
    PreferredTerm(&'a PreferredSchedulingTerm),
    Toleration(&'a Toleration),
    Requirement(&'a NodeSelectorRequirement),
    Requirements(&'a [NodeSelectorRequirement]),
    /// A new label or annotation map: every entry those mutations set, the last one for a key
    /// set twice (as consecutive `add`s would leave it).
    Map(Entries, &'a [Mutation]),
}

impl Value<'_> {
    fn write_to(&self, out: &mut Vec<u8>) {
        match *self {
            Self::String(text) => json::string(out, text),
            Self::Integer(number) => json::integer(out, number),
            Self::SchedulingGate(name) => {
                out.push(b'{');
                json::key(out, "name");
                json::string(out, name);
                out.push(b'}');
            }
            Self::RequiredAffinity(term) => {
                out.push(b'{');
                json::key(out, "nodeSelectorTerms");
                out.push(b'[');
                write_term(out, term);
                out.extend_from_slice(b"]}");
            }
            Self::PreferredTerm(term) => {
                out.push(b'{');
                json::key(out, "preference");
                write_term(out, &term.preference);
                out.push(b',');
                json::key(out, "weight");
                json::integer(out, term.weight);
                out.push(b'}');
            }
            Self::Toleration(toleration) => write_toleration(out, toleration),
            Self::Requirement(requirement) => write_requirement(out, requirement),
            Self::Requirements(list) => write_requirements(out, list),
            Self::Map(entries, mutations) => write_map(out, entries, mutations),
        }
    }
}

fn write_requirement(out: &mut Vec<u8>, r: &NodeSelectorRequirement) {
    out.push(b'{');
    json::key(out, "key");
    json::string(out, &r.key);
    out.push(b',');
    json::key(out, "operator");
    json::string(out, &r.operator);
    if !r.values.is_empty() {
        out.push(b',');
        json::key(out, "values");
        out.push(b'[');
        for (i, value) in r.values.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json::string(out, value);
        }
        out.push(b']');
    }
    out.push(b'}');
}

fn write_requirements(out: &mut Vec<u8>, list: &[NodeSelectorRequirement]) {
    out.push(b'[');
    for (i, requirement) in list.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_requirement(out, requirement);
    }
    out.push(b']');
}

fn write_term(out: &mut Vec<u8>, term: &NodeSelectorTerm) {
    out.push(b'{');
    if !term.match_expressions.is_empty() {
        json::key(out, "matchExpressions");
        write_requirements(out, &term.match_expressions);
    }
    if !term.match_fields.is_empty() {
        if !term.match_expressions.is_empty() {
            out.push(b',');
        }
        json::key(out, "matchFields");
        write_requirements(out, &term.match_fields);
    }
    out.push(b'}');
}

fn write_toleration(out: &mut Vec<u8>, t: &Toleration) {
    let mut first = true;
    let mut separate = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    out.push(b'{');
    for (key, value) in [
        ("effect", &t.effect),
        ("key", &t.key),
        ("operator", &t.operator),
    ] {
        if let Some(value) = value {
            separate(out);
            json::key(out, key);
            json::string(out, value);
        }
    }
    if let Some(seconds) = t.toleration_seconds {
        separate(out);
        json::key(out, "tolerationSeconds");
        json::integer(out, seconds);
    }
    if let Some(value) = &t.value {
        separate(out);
        json::key(out, "value");
        json::string(out, value);
    }
    out.push(b'}');
}

/// Writes the entries `mutations` set in the map `entries`, keys in sorted order.
fn write_map(out: &mut Vec<u8>, entries: Entries, mutations: &[Mutation]) {
    let mut set: Vec<(&str, &str)> = mutations.iter().filter_map(|m| entries.of(m)).collect();
    // A stable sort keeps a key's settings in plan order, so the last of each run wins.
    set.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    let mut first = true;
    for (i, (key, value)) in set.iter().enumerate() {
        if set.get(i + 1).is_some_and(|next| next.0 == *key) {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        json::key(out, key);
        json::string(out, value);
    }
    out.push(b'}');
}

/// Object keys around an operation's value, outermost first: the parents that operation
/// creates below its path. `["nodeAffinity", R]` writes `{"nodeAffinity": {R: value}}`.
#[derive(Debug, Clone, Copy, Default)]
struct Parents<'a> {
    keys: [&'a str; 2],
    len: usize,
}

#[derive(Debug, Clone, Copy)]
enum Operation<'a> {
    Add {
        path: Pointer<'a>,
        /// Parents created with the value, between the path and the value.
        parents: Parents<'a>,
        value: Value<'a>,
        /// The value goes in a new array of its own.
        listed: bool,
    },
    Remove {
        path: Pointer<'a>,
    },
}

impl Operation<'_> {
    fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            Operation::Remove { path } => {
                out.extend_from_slice(br#"{"op":"remove","path":"#);
                path.write_to(out);
            }
            Operation::Add {
                path,
                parents,
                value,
                listed,
            } => {
                out.extend_from_slice(br#"{"op":"add","path":"#);
                path.write_to(out);
                out.extend_from_slice(br#","value":"#);
                for key in &parents.keys[..parents.len] {
                    out.push(b'{');
                    json::key(out, key);
                }
                if *listed {
                    out.push(b'[');
                }
                value.write_to(out);
                if *listed {
                    out.push(b']');
                }
                for _ in 0..parents.len {
                    out.push(b'}');
                }
            }
        }
        out.push(b'}');
    }
}

/// Room for one operation's JSON, to size the patch's buffer once.
const BYTES_PER_OPERATION: usize = 128;

/// A JSON patch, ready to write (a JSON array of operations).
#[derive(Debug, Clone)]
pub struct Patch<'a> {
    operations: Vec<Operation<'a>>,
}

impl Patch<'_> {
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Appends the patch as JSON.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, operation) in self.operations.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            operation.write_to(out);
        }
        out.push(b']');
    }

    /// The patch as JSON, in a buffer sized for it.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + self.operations.len() * BYTES_PER_OPERATION);
        self.write_to(&mut out);
        out
    }
}

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

struct Builder<'a> {
    operations: Vec<Operation<'a>>,
    present: Present,
    /// The label or annotation map this patch created, with all the plan's entries in it.
    labels_written: bool,
    annotations_written: bool,
}

const NODE_AFFINITY: [Token<'static>; 3] = [Name("spec"), Name("affinity"), Name("nodeAffinity")];

impl<'a> Builder<'a> {
    fn add(&mut self, path: Pointer<'a>, value: Value<'a>) {
        self.operations.push(Operation::Add {
            path,
            parents: Parents::default(),
            value,
            listed: false,
        });
    }

    fn remove(&mut self, path: Pointer<'a>) {
        self.operations.push(Operation::Remove { path });
    }

    /// Sets `key` in the label or annotation map. A missing map (and `/metadata`, which the API
    /// server always sends, but a review without it still gets a patch that applies) is
    /// created holding every entry of that map the plan sets, from `rest` on.
    fn set_entry(&mut self, entries: Entries, key: &'a str, value: &'a str, rest: &'a [Mutation]) {
        let (name, present, written) = match entries {
            Entries::Labels => ("labels", self.present.labels, self.labels_written),
            Entries::Annotations => (
                "annotations",
                self.present.annotations,
                self.annotations_written,
            ),
        };
        if written {
            return;
        }
        if present {
            self.add(
                Pointer::new([Name("metadata"), Name(name), Name(key)]),
                Value::String(value),
            );
            return;
        }
        let (path, parents) = if self.present.metadata {
            (
                Pointer::new([Name("metadata"), Name(name)]),
                Parents::default(),
            )
        } else {
            let parents = Parents {
                keys: [name, ""],
                len: 1,
            };
            (Pointer::new([Name("metadata")]), parents)
        };
        self.operations.push(Operation::Add {
            path,
            parents,
            value: Value::Map(entries, rest),
            listed: false,
        });
        self.present.metadata = true;
        match entries {
            Entries::Labels => (self.present.labels, self.labels_written) = (true, true),
            Entries::Annotations => {
                (self.present.annotations, self.annotations_written) = (true, true);
            }
        }
    }

    /// Adds `value` as `field` of `/spec/affinity/nodeAffinity`, creating the missing parents in
    /// the same operation. `listed` puts the value in a new array.
    fn add_under_node_affinity(&mut self, field: &'a str, value: Value<'a>, listed: bool) {
        let [spec, affinity, node_affinity] = NODE_AFFINITY;
        let (path, parents) = if !self.present.affinity {
            let parents = Parents {
                keys: ["nodeAffinity", field],
                len: 2,
            };
            (Pointer::new([spec, affinity]), parents)
        } else if !self.present.node_affinity {
            let parents = Parents {
                keys: [field, ""],
                len: 1,
            };
            (Pointer::new(NODE_AFFINITY), parents)
        } else {
            let path = Pointer::new([spec, affinity, node_affinity, Name(field)]);
            (path, Parents::default())
        };
        self.operations.push(Operation::Add {
            path,
            parents,
            value,
            listed,
        });
        self.present.affinity = true;
        self.present.node_affinity = true;
    }

    /// Appends `value` to the array at `path`, creating the array if `exists` is false.
    fn append(&mut self, path: Pointer<'a>, exists: bool, value: Value<'a>) {
        if exists {
            self.add(path.appended(), value);
        } else {
            self.operations.push(Operation::Add {
                path,
                parents: Parents::default(),
                value,
                listed: true,
            });
        }
    }
}

/// The patch that applies `mutations` to a pod of shape `pod`.
pub fn build_patch<'a>(pod: &PodShape, mutations: &'a [Mutation]) -> Patch<'a> {
    let mut b = Builder {
        operations: Vec::with_capacity(mutations.len() + 2),
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
    let [spec, affinity, node_affinity] = NODE_AFFINITY;
    for (at, mutation) in mutations.iter().enumerate() {
        match mutation {
            Mutation::SetLabel { key, value } => {
                b.set_entry(Entries::Labels, key, value, &mutations[at..]);
            }
            Mutation::SetAnnotation { key, value } => {
                b.set_entry(Entries::Annotations, key, value, &mutations[at..]);
            }
            // Planned only for an annotation the pod has, so the path exists.
            Mutation::RemoveAnnotation(key) => b.remove(Pointer::new([
                Name("metadata"),
                Name("annotations"),
                Name(key),
            ])),
            Mutation::SetPriorityClassName(class) => b.add(
                Pointer::new([spec, Name("priorityClassName")]),
                Value::String(class),
            ),
            Mutation::RemovePriority => b.remove(Pointer::new([spec, Name("priority")])),
            Mutation::RemovePreemptionPolicy => {
                b.remove(Pointer::new([spec, Name("preemptionPolicy")]));
            }
            Mutation::AddSchedulingGate(gate) => {
                let exists = b.present.gates;
                b.append(
                    Pointer::new([spec, Name("schedulingGates")]),
                    exists,
                    Value::SchedulingGate(gate),
                );
                b.present.gates = true;
            }
            Mutation::RemoveNodeName => b.remove(Pointer::new([spec, Name("nodeName")])),
            Mutation::CreateRequiredNodeAffinity(term) => {
                b.add_under_node_affinity(REQUIRED, Value::RequiredAffinity(term), false);
            }
            Mutation::ExtendRequiredNodeTerm {
                index,
                match_expressions,
                match_fields,
            } => {
                let original = pod.required_terms.get(*index);
                for (field, list, exists) in [
                    (
                        "matchExpressions",
                        match_expressions,
                        original.is_some_and(|t| t.0),
                    ),
                    ("matchFields", match_fields, original.is_some_and(|t| t.1)),
                ] {
                    if list.is_empty() {
                        continue;
                    }
                    let path = Pointer::new([
                        spec,
                        affinity,
                        node_affinity,
                        Name(REQUIRED),
                        Name("nodeSelectorTerms"),
                        Index(*index),
                        Name(field),
                    ]);
                    if exists {
                        for r in list {
                            b.append(path, true, Value::Requirement(r));
                        }
                    } else {
                        b.add(path, Value::Requirements(list));
                    }
                }
            }
            Mutation::AddPreferredNodeTerm(term) => {
                let value = Value::PreferredTerm(term);
                if b.present.preferred {
                    let path = Pointer::new([spec, affinity, node_affinity, Name(PREFERRED)]);
                    b.append(path, true, value);
                } else {
                    b.add_under_node_affinity(PREFERRED, value, true);
                }
                b.present.preferred = true;
            }
            Mutation::AddToleration(toleration) => {
                let exists = b.present.tolerations;
                b.append(
                    Pointer::new([spec, Name("tolerations")]),
                    exists,
                    Value::Toleration(toleration),
                );
                b.present.tolerations = true;
            }
            Mutation::SetTerminationGracePeriodSeconds(seconds) => b.add(
                Pointer::new([spec, Name("terminationGracePeriodSeconds")]),
                Value::Integer(*seconds),
            ),
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
                for (field, present) in [("requests", requests), ("limits", limits)] {
                    if *present {
                        let resource = |name| {
                            Pointer::new([
                                spec,
                                Name(list),
                                Index(index),
                                Name("resources"),
                                Name(field),
                                Name(name),
                            ])
                        };
                        b.remove(resource(from));
                        b.add(resource(to), Value::String("1"));
                    }
                }
            }
        }
    }
    Patch {
        operations: b.operations,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpufair_core::mutation::{Decision, OP_EXISTS, OP_IN, plan};
    use serde::Deserialize;
    use serde_json::{Value as Json, json};

    use super::*;
    use crate::facts::pod_facts;
    use crate::pod::Pod;

    fn encode(patch: &Patch<'_>) -> Vec<u8> {
        patch.to_json()
    }

    fn apply(pod: &Json, patch: &Patch<'_>) -> Json {
        let operations: json_patch::Patch = serde_json::from_slice(&encode(patch)).unwrap();
        let mut doc = pod.clone();
        json_patch::patch(&mut doc, &operations).unwrap();
        doc
    }

    fn shape(pod: &Json) -> PodShape {
        PodShape::of(&Pod::deserialize(pod).unwrap())
    }

    /// The bytes the `serde_json::Value` builder wrote for the same input.
    fn assert_same_as_reference(shape: &PodShape, mutations: &[Mutation]) {
        let direct = String::from_utf8(encode(&build_patch(shape, mutations))).unwrap();
        let reference = serde_json::to_string(&reference::build_patch(shape, mutations)).unwrap();
        assert_eq!(direct, reference, "for {mutations:?} on {shape:?}");
    }

    #[test]
    fn creates_missing_parents_and_escapes_keys() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": "n", "priority": 0}});
        let req = NodeSelectorRequirement::new("pool", OP_IN, &["a"]);
        let mutations = [
            Mutation::SetLabel {
                key: "gpufair.io/queue".into(),
                value: "q".into(),
            },
            Mutation::SetAnnotation {
                key: "gpufair.io/tier".into(),
                value: "elastic".into(),
            },
            Mutation::RemovePriority,
            Mutation::RemoveNodeName,
            Mutation::AddSchedulingGate("g".into()),
            Mutation::CreateRequiredNodeAffinity(NodeSelectorTerm {
                match_expressions: vec![req.clone()],
                match_fields: vec![],
            }),
            Mutation::AddPreferredNodeTerm(PreferredSchedulingTerm {
                weight: 5,
                preference: NodeSelectorTerm {
                    match_expressions: vec![req.clone()],
                    match_fields: vec![],
                },
            }),
            Mutation::AddToleration(Toleration {
                key: Some("k".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }),
        ];
        let patch = build_patch(&shape(&pod), &mutations);
        let text = String::from_utf8(encode(&patch)).unwrap();
        // Each missing parent is created by one operation that holds what goes in it.
        assert_eq!(patch.len(), 8, "{text}");
        assert!(
            text.contains(r#"{"op":"add","path":"/spec/affinity","value":{"nodeAffinity":{"#),
            "{text}"
        );
        let after = apply(&pod, &patch);
        assert_eq!(after["metadata"]["labels"]["gpufair.io/queue"], "q");
        // Where the map exists, the key is a path token, escaped.
        let labelled = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}});
        let patch = build_patch(&shape(&labelled), &mutations[..1]);
        let text = String::from_utf8(encode(&patch)).unwrap();
        assert!(
            text.contains(r#""path":"/metadata/labels/gpufair.io~1queue""#),
            "{text}"
        );
        assert_eq!(
            apply(&labelled, &patch)["metadata"]["labels"]["gpufair.io/queue"],
            "q"
        );
        assert_eq!(after["spec"]["schedulingGates"], json!([{"name": "g"}]));
        assert!(after["spec"].get("nodeName").is_none() && after["spec"].get("priority").is_none());
        let na = &after["spec"]["affinity"]["nodeAffinity"];
        assert_eq!(
            na[REQUIRED]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
            "pool"
        );
        assert_eq!(na[PREFERRED][0]["weight"], 5);
        assert_eq!(
            after["spec"]["tolerations"],
            json!([{"key": "k", "operator": "Exists"}])
        );
        assert_same_as_reference(&shape(&pod), &mutations);
    }

    #[test]
    fn appends_to_existing_lists_and_terms() {
        let pod = json!({"metadata": {"labels": {}}, "spec": {
            "containers": [],
            "schedulingGates": [{"name": "other"}],
            "tolerations": [{"key": "x", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}
            ]}}}
        }});
        let req = NodeSelectorRequirement::new("pool", OP_IN, &["a"]);
        let field = NodeSelectorRequirement::new("metadata.name", OP_IN, &["n1"]);
        let mutations = [
            Mutation::AddSchedulingGate("g".into()),
            Mutation::ExtendRequiredNodeTerm {
                index: 0,
                match_expressions: vec![req.clone()],
                match_fields: vec![field.clone()],
            },
            Mutation::ExtendRequiredNodeTerm {
                index: 1,
                match_expressions: vec![req.clone()],
                match_fields: vec![field.clone()],
            },
            Mutation::AddToleration(Toleration {
                key: Some("k".into()),
                ..Toleration::default()
            }),
        ];
        let patch = build_patch(&shape(&pod), &mutations);
        let after = apply(&pod, &patch);
        assert_eq!(
            after["spec"]["schedulingGates"],
            json!([{"name": "other"}, {"name": "g"}])
        );
        let terms = &after["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"];
        assert_eq!(terms[0]["matchExpressions"].as_array().unwrap().len(), 2);
        assert_eq!(terms[0]["matchFields"][0]["values"][0], "n1");
        assert_eq!(terms[1]["matchFields"].as_array().unwrap().len(), 2);
        assert_eq!(terms[1]["matchExpressions"][0]["key"], "pool");
        assert_eq!(after["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_same_as_reference(&shape(&pod), &mutations);
    }

    /// Every kind of mutation, with keys and values that need escaping, against pods with and
    /// without each parent: the same bytes as the `Value` builder.
    #[test]
    fn every_mutation_writes_the_same_bytes_as_the_value_builder() {
        let odd = "a/b~c \"quoted\" \\ tab\t nl\n \u{1} é 🚀 ~1";
        let requirement = NodeSelectorRequirement::new(odd, "NotIn", &[odd, "x"]);
        let exists = NodeSelectorRequirement::new("k", OP_EXISTS, &[]);
        let term = |expressions: Vec<NodeSelectorRequirement>, fields| NodeSelectorTerm {
            match_expressions: expressions,
            match_fields: fields,
        };
        let mutations = vec![
            Mutation::SetLabel {
                key: odd.into(),
                value: odd.into(),
            },
            Mutation::SetLabel {
                key: String::new(),
                value: String::new(),
            },
            // Set twice: the last value stands, whether the map is created or extended.
            Mutation::SetLabel {
                key: odd.into(),
                value: "second".into(),
            },
            Mutation::SetAnnotation {
                key: "gpufair.io/admitted-deadline".into(),
                value: "2030-01-01T00:00:00Z".into(),
            },
            Mutation::RemoveAnnotation(odd.into()),
            Mutation::SetPriorityClassName(odd.into()),
            Mutation::RemovePriority,
            Mutation::RemovePreemptionPolicy,
            Mutation::AddSchedulingGate(odd.into()),
            Mutation::AddSchedulingGate("second".into()),
            Mutation::RemoveNodeName,
            Mutation::CreateRequiredNodeAffinity(term(
                vec![requirement.clone(), exists.clone()],
                vec![NodeSelectorRequirement::new("metadata.name", OP_IN, &["n"])],
            )),
            Mutation::CreateRequiredNodeAffinity(term(vec![], vec![exists.clone()])),
            Mutation::ExtendRequiredNodeTerm {
                index: 0,
                match_expressions: vec![requirement.clone()],
                match_fields: vec![],
            },
            Mutation::ExtendRequiredNodeTerm {
                index: 1,
                match_expressions: vec![],
                match_fields: vec![exists.clone(), requirement.clone()],
            },
            Mutation::ExtendRequiredNodeTerm {
                index: 12,
                match_expressions: vec![exists.clone()],
                match_fields: vec![exists.clone()],
            },
            Mutation::AddPreferredNodeTerm(PreferredSchedulingTerm {
                weight: 100,
                preference: term(vec![requirement.clone()], vec![exists.clone()]),
            }),
            Mutation::AddPreferredNodeTerm(PreferredSchedulingTerm {
                weight: -3,
                preference: term(vec![], vec![]),
            }),
            Mutation::AddToleration(Toleration::default()),
            Mutation::AddToleration(Toleration {
                key: Some(odd.into()),
                operator: Some("Equal".into()),
                value: Some(odd.into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(i64::MIN),
            }),
            Mutation::AddToleration(Toleration {
                value: Some("v".into()),
                toleration_seconds: Some(300),
                ..Toleration::default()
            }),
            Mutation::SetTerminationGracePeriodSeconds(i64::MAX),
            Mutation::SetTerminationGracePeriodSeconds(-1),
            Mutation::ReplaceGpuResource {
                container: 0,
                from: "nvidia.com/gpu".into(),
                to: odd.into(),
                requests: true,
                limits: true,
            },
            Mutation::ReplaceGpuResource {
                container: 3,
                from: "nvidia.com/gpu".into(),
                to: "nvidia.com/mig-1g.10gb".into(),
                requests: false,
                limits: true,
            },
        ];
        let shapes = [
            PodShape::default(),
            PodShape {
                metadata: true,
                labels: true,
                annotations: true,
                scheduling_gates: true,
                affinity: true,
                node_affinity: true,
                preferred_terms: true,
                tolerations: true,
                required_terms: vec![(true, false), (false, true), (true, true)],
                init_containers: 2,
            },
            PodShape {
                metadata: true,
                affinity: true,
                required_terms: vec![(false, false)],
                init_containers: 5,
                ..PodShape::default()
            },
        ];
        for shape in &shapes {
            assert_same_as_reference(shape, &mutations);
            // One mutation at a time, so each parent is created by the mutation that needs it.
            for mutation in &mutations {
                assert_same_as_reference(shape, std::slice::from_ref(mutation));
            }
        }
        assert_same_as_reference(&PodShape::default(), &[]);
    }

    /// The pods of the kept fuzz corpus, planned as admission plans them: the same bytes as the
    /// `Value` builder for every plan with mutations.
    #[test]
    fn corpus_plans_write_the_same_bytes_as_the_value_builder() {
        let state = crate::fuzz_entry::state();
        let policy = state.policy.load();
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut compared = 0;
        for kind in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("admission_review")) else {
                continue;
            };
            for entry in entries {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                let Ok(review) = serde_json::from_slice::<Json>(&data) else {
                    continue;
                };
                let request = &review["request"];
                let Ok(pod) = Pod::deserialize(&request["object"]) else {
                    continue;
                };
                let shape = PodShape::of(&pod);
                let namespace = request["namespace"].as_str().unwrap_or("default");
                let facts = pod_facts(pod, namespace);
                let decision = state
                    .queues
                    .read(|queues| plan(&facts, queues, &policy, crate::fuzz_entry::NOW_UNIX_S));
                if let Decision::Admit(planned) = decision
                    && !planned.mutations.is_empty()
                {
                    assert_same_as_reference(&shape, &planned.mutations);
                    let after = apply(&request["object"], &build_patch(&shape, &planned.mutations));
                    for mutation in &planned.mutations {
                        let (map, key, value) = match mutation {
                            Mutation::SetLabel { key, value } => ("labels", key, value),
                            Mutation::SetAnnotation { key, value } => ("annotations", key, value),
                            _ => continue,
                        };
                        assert_eq!(after["metadata"][map][key], json!(value), "{map} {key}");
                    }
                    compared += 1;
                }
            }
        }
        assert!(compared >= 10, "only {compared} corpus pods got a patch");
    }
}
