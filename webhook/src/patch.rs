//! Mutation plans into RFC 6902 JSON patches against the pod the API server sent.
//!
//! A JSON patch `add` fails when the parent is missing, so the builder tracks which parents the
//! pod has (or this patch created) and adds an empty object or array first where needed.
//! Appends use `-` so that entries other webhooks or the user wrote are never overwritten.
//!
//! The operations borrow their keys and values from the mutations and serialize straight to
//! JSON: a review's patch costs two buffers (the JSON and its path text), not a
//! `serde_json::Value` tree plus a path string per operation. Objects are written with their
//! keys in sorted order, as a `Value` would be, so the bytes are those the `Value` builder
//! wrote (`patch/reference.rs`, kept for the tests that check this).

use std::cell::Cell;
use std::fmt::Write as _;

use gpufair_core::mutation::{
    Mutation, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, Toleration,
};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::pod::PodShape;
use Token::{Index, Name};

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

/// Room for the longest path text usually written (a node selector term's fields).
const PATH_CAPACITY: usize = 128;

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
    /// Writes the pointer's text (RFC 6901) at the end of `out`.
    fn write_to(&self, out: &mut String) {
        for token in &self.tokens[..self.len] {
            out.push('/');
            match *token {
                // Writing to a `String` cannot fail.
                Token::Index(index) => {
                    let _ = write!(out, "{index}");
                }
                Token::Name(name) => {
                    // `~` is written `~0` and `/` is written `~1`. Both are ASCII, so a byte
                    // scan finds them (a `char` pattern decodes every character on the way),
                    // and every cut falls on a character boundary.
                    let mut rest = name;
                    while let Some(at) = rest.bytes().position(|b| b == b'~' || b == b'/') {
                        out.push_str(&rest[..at]);
                        out.push_str(if rest.as_bytes()[at] == b'~' {
                            "~0"
                        } else {
                            "~1"
                        });
                        rest = &rest[at + 1..];
                    }
                    out.push_str(rest);
                }
            }
        }
        if self.append {
            out.push_str("/-");
        }
    }
}

/// The value of an `add`, borrowed from the mutation it comes from.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    /// `{}`: a parent object created before its first entry.
    EmptyObject,
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
}

impl Serialize for Value<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            Self::EmptyObject => serializer.serialize_map(Some(0))?.end(),
            Self::String(text) => serializer.serialize_str(text),
            Self::Integer(number) => serializer.serialize_i64(number),
            Self::SchedulingGate(name) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("name", name)?;
                map.end()
            }
            Self::RequiredAffinity(term) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("nodeSelectorTerms", &[Term(term)])?;
                map.end()
            }
            Self::PreferredTerm(term) => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("preference", &Term(&term.preference))?;
                map.serialize_entry("weight", &term.weight)?;
                map.end()
            }
            Self::Toleration(toleration) => serialize_toleration(toleration, serializer),
            Self::Requirement(requirement) => Requirement(requirement).serialize(serializer),
            Self::Requirements(list) => Requirements(list).serialize(serializer),
        }
    }
}

struct Requirement<'a>(&'a NodeSelectorRequirement);

impl Serialize for Requirement<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let with_values = !r.values.is_empty();
        let mut map = serializer.serialize_map(Some(2 + usize::from(with_values)))?;
        map.serialize_entry("key", &r.key)?;
        map.serialize_entry("operator", &r.operator)?;
        if with_values {
            map.serialize_entry("values", &r.values)?;
        }
        map.end()
    }
}

struct Requirements<'a>(&'a [NodeSelectorRequirement]);

impl Serialize for Requirements<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for requirement in self.0 {
            seq.serialize_element(&Requirement(requirement))?;
        }
        seq.end()
    }
}

struct Term<'a>(&'a NodeSelectorTerm);

impl Serialize for Term<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let term = self.0;
        let (expressions, fields) = (&term.match_expressions, &term.match_fields);
        let len = usize::from(!expressions.is_empty()) + usize::from(!fields.is_empty());
        let mut map = serializer.serialize_map(Some(len))?;
        if !expressions.is_empty() {
            map.serialize_entry("matchExpressions", &Requirements(expressions))?;
        }
        if !fields.is_empty() {
            map.serialize_entry("matchFields", &Requirements(fields))?;
        }
        map.end()
    }
}

fn serialize_toleration<S: Serializer>(t: &Toleration, serializer: S) -> Result<S::Ok, S::Error> {
    let strings = [
        ("effect", &t.effect),
        ("key", &t.key),
        ("operator", &t.operator),
    ];
    let len = strings.iter().filter(|(_, v)| v.is_some()).count()
        + usize::from(t.toleration_seconds.is_some())
        + usize::from(t.value.is_some());
    let mut map = serializer.serialize_map(Some(len))?;
    for (key, value) in strings {
        if let Some(value) = value {
            map.serialize_entry(key, value)?;
        }
    }
    if let Some(seconds) = t.toleration_seconds {
        map.serialize_entry("tolerationSeconds", &seconds)?;
    }
    if let Some(value) = &t.value {
        map.serialize_entry("value", value)?;
    }
    map.end()
}

#[derive(Debug, Clone, Copy)]
enum Operation<'a> {
    Add {
        path: Pointer<'a>,
        value: Value<'a>,
    },
    /// An `add` of a new array holding `value`.
    AddList {
        path: Pointer<'a>,
        value: Value<'a>,
    },
    Remove {
        path: Pointer<'a>,
    },
}

/// An operation to serialize, with the patch's one buffer for path text: the path is
/// written there and then as one JSON string, rather than as a string of its own per
/// operation or as many small pieces.
struct Written<'p, 'a> {
    operation: &'p Operation<'a>,
    path_text: &'p Cell<String>,
}

impl Serialize for Written<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (op, path) = match self.operation {
            Operation::Add { path, .. } | Operation::AddList { path, .. } => ("add", path),
            Operation::Remove { path } => ("remove", path),
        };
        let with_value = !matches!(self.operation, Operation::Remove { .. });
        let mut text = self.path_text.take();
        text.clear();
        path.write_to(&mut text);
        let mut map = serializer.serialize_map(Some(2 + usize::from(with_value)))?;
        map.serialize_entry("op", op)?;
        let written = map.serialize_entry("path", text.as_str());
        self.path_text.set(text);
        written?;
        match self.operation {
            Operation::Add { value, .. } => map.serialize_entry("value", value)?,
            Operation::AddList { value, .. } => map.serialize_entry("value", &[value])?,
            Operation::Remove { .. } => {}
        }
        map.end()
    }
}

/// A JSON patch, ready to serialize (a JSON array of operations).
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
}

impl Serialize for Patch<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let path_text = Cell::new(String::with_capacity(PATH_CAPACITY));
        let mut seq = serializer.serialize_seq(Some(self.operations.len()))?;
        for operation in &self.operations {
            seq.serialize_element(&Written {
                operation,
                path_text: &path_text,
            })?;
        }
        seq.end()
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
}

const NODE_AFFINITY: [Token<'static>; 3] = [Name("spec"), Name("affinity"), Name("nodeAffinity")];

impl<'a> Builder<'a> {
    fn add(&mut self, path: Pointer<'a>, value: Value<'a>) {
        self.operations.push(Operation::Add { path, value });
    }

    fn remove(&mut self, path: Pointer<'a>) {
        self.operations.push(Operation::Remove { path });
    }

    /// Ensures `/metadata` exists: the API server always sends it, but a review without it is
    /// still answered with a patch that applies.
    fn metadata(&mut self) {
        if !self.present.metadata {
            self.add(Pointer::new([Name("metadata")]), Value::EmptyObject);
            self.present.metadata = true;
        }
    }

    /// Ensures `/spec/affinity/nodeAffinity` exists.
    fn node_affinity(&mut self) {
        if !self.present.affinity {
            let [spec, affinity, _] = NODE_AFFINITY;
            self.add(Pointer::new([spec, affinity]), Value::EmptyObject);
            self.present.affinity = true;
        }
        if !self.present.node_affinity {
            self.add(Pointer::new(NODE_AFFINITY), Value::EmptyObject);
            self.present.node_affinity = true;
        }
    }

    /// Appends `value` to the array at `path`, creating the array if `exists` is false.
    fn append(&mut self, path: Pointer<'a>, exists: bool, value: Value<'a>) {
        if exists {
            self.add(path.appended(), value);
        } else {
            self.operations.push(Operation::AddList { path, value });
        }
    }
}

/// The patch that applies `mutations` to a pod of shape `pod`.
pub fn build_patch<'a>(pod: &PodShape, mutations: &'a [Mutation]) -> Patch<'a> {
    let mut b = Builder {
        operations: Vec::with_capacity(mutations.len() + 4),
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
    let [spec, affinity, node_affinity] = NODE_AFFINITY;
    for mutation in mutations {
        match mutation {
            Mutation::SetLabel { key, value } => {
                if !b.present.labels {
                    b.metadata();
                    b.add(
                        Pointer::new([Name("metadata"), Name("labels")]),
                        Value::EmptyObject,
                    );
                    b.present.labels = true;
                }
                b.add(
                    Pointer::new([Name("metadata"), Name("labels"), Name(key)]),
                    Value::String(value),
                );
            }
            Mutation::SetAnnotation { key, value } => {
                if !b.present.annotations {
                    b.metadata();
                    b.add(
                        Pointer::new([Name("metadata"), Name("annotations")]),
                        Value::EmptyObject,
                    );
                    b.present.annotations = true;
                }
                b.add(
                    Pointer::new([Name("metadata"), Name("annotations"), Name(key)]),
                    Value::String(value),
                );
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
                b.node_affinity();
                b.add(
                    Pointer::new([spec, affinity, node_affinity, Name(REQUIRED)]),
                    Value::RequiredAffinity(term),
                );
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
                b.node_affinity();
                let exists = b.present.preferred;
                b.append(
                    Pointer::new([spec, affinity, node_affinity, Name(PREFERRED)]),
                    exists,
                    Value::PreferredTerm(term),
                );
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
        serde_json::to_vec(patch).unwrap()
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
        assert!(
            text.contains("/metadata/labels/gpufair.io~1queue"),
            "{text}"
        );
        let after = apply(&pod, &patch);
        assert_eq!(after["metadata"]["labels"]["gpufair.io/queue"], "q");
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
                    compared += 1;
                }
            }
        }
        assert!(compared >= 10, "only {compared} corpus pods got a patch");
    }
}
