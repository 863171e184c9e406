use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::labels::TaskType;

/// 2024-05-15T12:00:00Z.
const NOW: i64 = 1_715_774_400;

fn policy() -> AdmissionPolicy {
    AdmissionPolicy {
        affinity_rules: vec![
            AffinityRule {
                when: RuleCondition::TaskType(TaskType::Inference),
                weight: 50,
                preference: term(&[("nvidia.com/mig.capable", OP_IN, &["true"])]),
            },
            AffinityRule {
                when: RuleCondition::DeadlineWithin { seconds: 86_400 },
                weight: 80,
                preference: term(&[("gpu-type", OP_IN, &["h100"])]),
            },
        ],
        tolerations: vec![Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }],
        train_grace_period_seconds: Some(300),
        replaceable_priority_classes: vec!["cluster-default".into()],
        ..AdmissionPolicy::bare()
    }
}

fn term(requirements: &[(&str, &str, &[&str])]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: requirements
            .iter()
            .map(|(k, op, values)| NodeSelectorRequirement::new(*k, op, values))
            .collect(),
        match_fields: Vec::new(),
    }
}

fn queues() -> Vec<QueueFacts> {
    vec![
        QueueFacts {
            name: "research".into(),
            namespaces: vec!["ml".into(), "shared".into()],
            node_pool: vec![NodeSelectorRequirement::new("pool", OP_IN, &["a100"])],
            priority_classes: Some(vec!["research-high".into()]),
        },
        QueueFacts {
            name: "serving".into(),
            namespaces: vec!["web".into(), "shared".into()],
            node_pool: Vec::new(),
            priority_classes: None,
        },
    ]
}

fn gpu_pod(namespace: &str, labels: &[(&str, &str)]) -> PodFacts {
    PodFacts {
        namespace: namespace.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        has_priority: true,
        has_preemption_policy: true,
        termination_grace_period_seconds: Some(30),
        containers: vec![ContainerResources {
            name: "main".into(),
            limits: BTreeMap::from([("nvidia.com/gpu".into(), "1".into())]),
            ..ContainerResources::default()
        }],
        ..PodFacts::default()
    }
}

fn admit(pod: &PodFacts) -> Plan {
    match plan(pod, &queues()[..], &policy(), NOW) {
        Decision::Admit(plan) => plan,
        other => panic!("expected admission, got {other:?}"),
    }
}

fn deny(pod: &PodFacts) -> String {
    match plan(pod, &queues()[..], &policy(), NOW) {
        Decision::Deny(reason) => reason,
        other => panic!("expected denial, got {other:?}"),
    }
}

#[test]
fn cpu_only_and_zero_gpu_pods_are_untouched() {
    let mut pod = gpu_pod("ml", &[("ai-task-type", "nonsense")]);
    pod.containers[0].limits = BTreeMap::from([("cpu".into(), "2".into())]);
    assert_eq!(
        plan(&pod, &queues()[..], &policy(), NOW),
        Decision::Unmanaged
    );
    pod.containers[0].limits = BTreeMap::from([("nvidia.com/gpu".into(), "0".into())]);
    assert_eq!(
        plan(&pod, &queues()[..], &policy(), NOW),
        Decision::Unmanaged
    );
    // `nvidia.com/mig-` alone is not a MIG profile.
    pod.containers[0].limits = BTreeMap::from([("nvidia.com/mig-".into(), "1".into())]);
    assert_eq!(
        plan(&pod, &queues()[..], &policy(), NOW),
        Decision::Unmanaged
    );
}

#[test]
fn train_pod_gets_everything() {
    let pod = gpu_pod("ml", &[]);
    let plan = admit(&pod);
    assert_eq!(plan.queue, "research");
    assert_eq!(
        plan.mutations,
        vec![
            Mutation::SetPriorityClassName("gpufair-elastic".into()),
            Mutation::RemovePriority,
            Mutation::RemovePreemptionPolicy,
            Mutation::AddSchedulingGate("gpufair.io/admission".into()),
            Mutation::CreateRequiredNodeAffinity(term(&[("pool", OP_IN, &["a100"])])),
            Mutation::AddToleration(policy().tolerations[0].clone()),
            Mutation::SetTerminationGracePeriodSeconds(300),
            Mutation::SetLabel {
                key: "gpufair.io/managed".into(),
                value: "true".into()
            },
            Mutation::SetLabel {
                key: "gpufair.io/queue".into(),
                value: "research".into()
            },
            Mutation::SetAnnotation {
                key: TIER_ANNOTATION.into(),
                value: "elastic".into()
            },
        ]
    );
    assert!(plan.warnings.is_empty());
}

#[test]
fn inference_with_near_deadline_gets_both_preferences_and_no_grace_change() {
    let pod = gpu_pod(
        "web",
        &[("ai-task-type", "inference"), ("deadline", "2024-05-15")],
    );
    let plan = admit(&pod);
    assert_eq!(plan.queue, "serving");
    assert!(
        plan.mutations
            .contains(&Mutation::SetPriorityClassName("gpufair-realtime".into()))
    );
    let preferred: Vec<_> = plan
        .mutations
        .iter()
        .filter_map(|m| match m {
            Mutation::AddPreferredNodeTerm(t) => Some(t.weight),
            _ => None,
        })
        .collect();
    assert_eq!(preferred, vec![50, 80]);
    assert!(!plan.mutations.iter().any(|m| matches!(
        m,
        Mutation::SetTerminationGracePeriodSeconds(_) | Mutation::CreateRequiredNodeAffinity(_)
    )));
    assert!(plan.mutations.contains(&Mutation::SetAnnotation {
        key: ADMITTED_DEADLINE_ANNOTATION.into(),
        value: "2024-05-16T00:00:00Z".into()
    }));
}

#[test]
fn past_deadline_is_admitted_with_a_warning() {
    let pod = gpu_pod("ml", &[("deadline", "20240101")]);
    let plan = admit(&pod);
    assert_eq!(plan.warnings.len(), 1);
    assert!(plan.warnings[0].contains("deadline 2024-01-02T00:00:00Z has already passed"));
}

#[test]
fn own_priority_class_needs_queue_permission() {
    let mut pod = gpu_pod("ml", &[]);
    pod.priority_class_name = Some("research-high".into());
    let plan = admit(&pod);
    // Allowed: kept, and the Priority plugin's values for it stay too.
    assert!(!plan.mutations.iter().any(|m| matches!(
        m,
        Mutation::SetPriorityClassName(_) | Mutation::RemovePriority
    )));

    pod.priority_class_name = Some("system-cluster-critical".into());
    let reason = deny(&pod);
    assert!(reason.contains("\"system-cluster-critical\"") && reason.contains("research-high"));

    // Promoting itself to realtime is refused too.
    pod.priority_class_name = Some("gpufair-realtime".into());
    assert!(deny(&pod).contains("gpufair-elastic"));

    // A cluster default class written by the API server is replaced.
    pod.priority_class_name = Some("cluster-default".into());
    assert!(
        admit(&pod)
            .mutations
            .contains(&Mutation::SetPriorityClassName("gpufair-elastic".into()))
    );
}

#[test]
fn bad_labels_and_queues_are_denied_with_names() {
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: [Case; 5] = [
        (
            &[("deadline", "tomorrow")],
            "ml",
            "label deadline=\"tomorrow\"",
        ),
        (
            &[("ai-task-type", "training")],
            "ml",
            "train, inference or processing",
        ),
        (&[("urgency-level", "asap")], "ml", "high, medium or low"),
        (
            &[("gpufair.io/queue", "nope")],
            "ml",
            "no Queue \"nope\" exists",
        ),
        (
            &[("gpufair.io/queue", "serving")],
            "ml",
            "does not admit namespace \"ml\"",
        ),
    ];
    for (labels, namespace, expected) in cases {
        let reason = deny(&gpu_pod(namespace, labels));
        assert!(reason.contains(expected), "{labels:?}: {reason}");
    }
    assert!(deny(&gpu_pod("shared", &[])).contains("research, serving"));
    assert!(deny(&gpu_pod("nowhere", &[])).contains("no Queue lists namespace \"nowhere\""));
    let mut gang = gpu_pod("ml", &[("gpufair.io/pod-group", "g")]);
    gang.annotations
        .insert("gpufair.io/min-member".into(), "0".into());
    assert!(deny(&gang).contains("gpufair.io/min-member"));
    let mut tiered = gpu_pod("ml", &[]);
    tiered.annotations.insert("user-tier".into(), "vip".into());
    assert_eq!(
        deny(&tiered),
        "annotation user-tier=\"vip\" is invalid: expected premium, standard or basic"
    );
    tiered
        .annotations
        .insert("user-tier".into(), "premium".into());
    admit(&tiered);
}

#[test]
fn node_name_moves_into_every_term_and_foreign_gates_stay() {
    let mut pod = gpu_pod("ml", &[]);
    pod.node_name = Some("node-7".into());
    pod.scheduling_gates = vec!["example.com/other".into()];
    pod.required_node_terms = Some(vec![
        term(&[("zone", OP_IN, &["a"])]),
        NodeSelectorTerm::default(),
        term(&[("zone", OP_IN, &["b"]), ("pool", OP_IN, &["a100"])]),
    ]);
    let plan = admit(&pod);
    let after = pod.apply(&plan.mutations);
    assert_eq!(after.node_name, None);
    assert_eq!(
        after.scheduling_gates,
        vec![
            "example.com/other".to_string(),
            "gpufair.io/admission".into()
        ]
    );
    let terms = after.required_node_terms.unwrap();
    assert_eq!(terms.len(), 3);
    let node = NodeSelectorRequirement::new(NODE_NAME_FIELD, OP_IN, &["node-7"]);
    let pool = NodeSelectorRequirement::new("pool", OP_IN, &["a100"]);
    for index in [0, 2] {
        assert_eq!(terms[index].match_fields, vec![node.clone()]);
        assert_eq!(
            terms[index]
                .match_expressions
                .iter()
                .filter(|r| **r == pool)
                .count(),
            1
        );
    }
    assert!(
        terms[1].is_empty(),
        "an empty term matches nothing and stays so"
    );
}

// ---- property tests ----

fn requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        prop::sample::select(vec!["pool", "zone", "gpu-type"]),
        prop::sample::select(vec![OP_IN, OP_NOT_IN]),
        prop::sample::select(vec!["a100", "h100", "a", "b"]),
    )
        .prop_map(|(key, op, value)| NodeSelectorRequirement::new(key, op, &[value]))
}

fn node_term() -> impl Strategy<Value = NodeSelectorTerm> {
    (
        prop::collection::vec(requirement(), 0..3),
        prop::collection::vec(
            prop::sample::select(vec!["n1", "n2"])
                .prop_map(|n| NodeSelectorRequirement::new(NODE_NAME_FIELD, OP_IN, &[n])),
            0..2,
        ),
    )
        .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm {
            match_expressions,
            match_fields,
        })
}

fn any_pod() -> impl Strategy<Value = PodFacts> {
    let labels = (
        prop::option::of(prop::sample::select(vec!["research", "serving", "nope"])),
        prop::option::of(prop::sample::select(vec![
            "train",
            "inference",
            "processing",
        ])),
        prop::option::of(prop::sample::select(vec![
            "20240515",
            "2024-01-01",
            "20301231",
        ])),
        any::<bool>(),
    );
    let spec = (
        prop::sample::select(vec!["ml", "web", "shared"]),
        prop::option::of(prop::sample::select(vec!["node-1", "node-2"])),
        prop::option::of(prop::sample::select(vec![
            "",
            "research-high",
            "cluster-default",
            "gpufair-elastic",
            "gpufair-realtime",
        ])),
        prop::collection::vec(
            prop::sample::select(vec!["example.com/a", "gpufair.io/admission"]),
            0..2,
        ),
        prop::option::of(prop::collection::vec(node_term(), 0..4)),
        prop::option::of(prop::sample::select(vec![0_i64, 30, 300, 900])),
        prop::sample::select(vec!["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu"]),
    );
    (labels, spec).prop_map(
        |((queue, task, deadline, urgent), (namespace, node, class, gates, terms, grace, res))| {
            let mut labels = BTreeMap::new();
            if let Some(q) = queue {
                labels.insert("gpufair.io/queue".to_string(), q.to_string());
            }
            if let Some(t) = task {
                labels.insert("ai-task-type".to_string(), t.to_string());
            }
            if let Some(d) = deadline {
                labels.insert("deadline".to_string(), d.to_string());
            }
            if urgent {
                labels.insert("urgency-level".to_string(), "high".to_string());
            }
            PodFacts {
                namespace: namespace.into(),
                labels,
                node_name: node.map(String::from),
                priority_class_name: class.map(String::from),
                has_priority: true,
                has_preemption_policy: true,
                scheduling_gates: gates.into_iter().map(String::from).collect(),
                required_node_terms: terms,
                termination_grace_period_seconds: grace,
                containers: vec![ContainerResources {
                    name: "c".into(),
                    requests: BTreeMap::from([(res.to_string(), "1".to_string())]),
                    ..ContainerResources::default()
                }],
                ..PodFacts::default()
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn planning_a_mutated_pod_again_changes_nothing(pod in any_pod(), now in 1_700_000_000_i64..1_800_000_000) {
        if let Decision::Admit(first) = plan(&pod, &queues()[..], &policy(), now) {
            let mutated = pod.apply(&first.mutations);
            match plan(&mutated, &queues()[..], &policy(), now) {
                Decision::Admit(second) => {
                    prop_assert!(second.mutations.is_empty(), "{:?}", second.mutations);
                    prop_assert_eq!(second.queue, first.queue);
                }
                other => prop_assert!(false, "second pass gave {:?}", other),
            }
            prop_assert_eq!(
                mutated.scheduling_gates.iter().filter(|g| *g == "gpufair.io/admission").count(),
                1
            );
            prop_assert_eq!(mutated.node_name, None);
        }
    }

    #[test]
    fn required_affinity_narrows_every_term(pod in any_pod()) {
        if let Decision::Admit(plan) = plan(&pod, &queues()[..], &policy(), NOW) {
            let queue = queues().into_iter().find(|q| q.name == plan.queue).unwrap();
            let mutated = pod.apply(&plan.mutations);
            let node_field = pod
                .node_name
                .as_deref()
                .map(|n| NodeSelectorRequirement::new(NODE_NAME_FIELD, OP_IN, &[n]));
            let before = pod.required_node_terms.clone().unwrap_or_default();
            let after = mutated.required_node_terms.clone().unwrap_or_default();
            if before.is_empty() {
                prop_assert!(after.len() <= 1);
            } else {
                // No term is added (that would widen the ORed selector) and none is dropped.
                prop_assert_eq!(after.len(), before.len());
            }
            for (index, term) in after.iter().enumerate() {
                if let Some(original) = before.get(index) {
                    if original.is_empty() {
                        prop_assert!(term.is_empty());
                        continue;
                    }
                    prop_assert!(original.match_expressions.iter().all(|r| term.match_expressions.contains(r)));
                    prop_assert!(original.match_fields.iter().all(|r| term.match_fields.contains(r)));
                }
                for requirement in &queue.node_pool {
                    prop_assert!(term.match_expressions.contains(requirement));
                }
                if let Some(field) = &node_field {
                    prop_assert!(term.match_fields.contains(field));
                }
            }
        }
    }
}

#[test]
fn gpufair_annotations_a_user_wrote_are_overwritten_or_removed() {
    // Forged at creation: a realtime tier on a training pod, and an admitted deadline on a pod
    // that names no deadline (the controller orders by both).
    let mut pod = gpu_pod("ml", &[("ai-task-type", "train")]);
    pod.annotations
        .insert("gpufair.io/tier".into(), "realtime".into());
    pod.annotations.insert(
        "gpufair.io/admitted-deadline".into(),
        "2000-01-01T00:00:00Z".into(),
    );
    let plan = admit(&pod);
    let after = pod.apply(&plan.mutations);
    assert_eq!(after.annotations["gpufair.io/tier"], "elastic");
    assert!(
        !after
            .annotations
            .contains_key("gpufair.io/admitted-deadline")
    );
    // With a deadline label the webhook writes its own value instead.
    let mut pod = gpu_pod("ml", &[("deadline", "20300101")]);
    pod.annotations.insert(
        "gpufair.io/admitted-deadline".into(),
        "2000-01-01T00:00:00Z".into(),
    );
    let after = pod.apply(&admit(&pod).mutations);
    assert_eq!(
        after.annotations["gpufair.io/admitted-deadline"],
        "2030-01-02T00:00:00Z"
    );
}
