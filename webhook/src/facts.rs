//! Kubernetes objects into the plain facts the mutation plan reads.

use gpufair_api::Queue;
use gpufair_core::mutation::{
    ContainerResources, NodeSelectorRequirement, NodeSelectorTerm, OP_IN, PodFacts,
    PreferredSchedulingTerm, QueueFacts, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use gpufair_core::rightsize::OwnerFacts;

use crate::pod;

/// The pod's facts, moved out of the parsed pod; `namespace` comes from the AdmissionRequest,
/// because a pod being created may not carry it in its metadata.
pub fn pod_facts(pod: pod::Pod<'_>, namespace: &str) -> PodFacts {
    let meta = pod.metadata.unwrap_or_default();
    let spec = pod.spec.unwrap_or_default();
    let node_affinity = spec.affinity.and_then(|a| a.node_affinity);
    let (required, preferred) = match node_affinity {
        Some(n) => (
            n.required_during_scheduling_ignored_during_execution,
            n.preferred_during_scheduling_ignored_during_execution,
        ),
        None => (None, None),
    };
    let containers = spec
        .init_containers
        .into_iter()
        .flatten()
        .chain(spec.containers)
        .map(container_resources)
        .collect();
    PodFacts {
        namespace: namespace.to_string(),
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        node_name: spec.node_name.filter(|n| !n.is_empty()),
        priority_class_name: spec.priority_class_name,
        has_priority: spec.priority.is_some(),
        has_preemption_policy: spec.preemption_policy.is_some(),
        scheduling_gates: spec
            .scheduling_gates
            .into_iter()
            .flatten()
            .map(|g| g.name)
            .collect(),
        required_node_terms: required
            .map(|selector| selector.node_selector_terms.into_iter().map(term).collect()),
        preferred_node_terms: preferred
            .into_iter()
            .flatten()
            .map(|t| PreferredSchedulingTerm {
                weight: t.weight,
                preference: term(t.preference),
            })
            .collect(),
        tolerations: spec
            .tolerations
            .into_iter()
            .flatten()
            .map(toleration)
            .collect(),
        containers,
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        owner: meta
            .owner_references
            .into_iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| OwnerFacts {
                kind: o.kind.into_owned(),
                name: o.name.into_owned(),
            }),
    }
}

fn container_resources(container: pod::Container) -> ContainerResources {
    let (requests, limits) = container
        .resources
        .map(|r| (r.requests, r.limits))
        .unwrap_or_default();
    ContainerResources {
        name: container.name,
        requests: requests.unwrap_or_default(),
        limits: limits.unwrap_or_default(),
    }
}

fn requirement(r: pod::NodeSelectorRequirement) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: r.key,
        operator: r.operator,
        values: r.values.unwrap_or_default(),
    }
}

fn term(t: pod::NodeSelectorTerm) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: t
            .match_expressions
            .into_iter()
            .flatten()
            .map(requirement)
            .collect(),
        match_fields: t
            .match_fields
            .into_iter()
            .flatten()
            .map(requirement)
            .collect(),
    }
}

fn toleration(t: pod::Toleration) -> Toleration {
    Toleration {
        key: t.key,
        operator: t.operator,
        value: t.value,
        effect: t.effect,
        toleration_seconds: t.toleration_seconds,
    }
}

/// A queue's facts. A label selector's operators (`In`, `NotIn`, `Exists`, `DoesNotExist`) have
/// the same names and meaning in a node selector, and `matchLabels` is `In` with one value.
pub fn queue_facts(queue: &Queue) -> Option<QueueFacts> {
    let name = queue.metadata.name.clone()?;
    Some(QueueFacts {
        name,
        namespaces: queue.spec.namespaces.clone(),
        node_pool: queue
            .spec
            .node_pool
            .as_ref()
            .map(selector_requirements)
            .unwrap_or_default(),
        priority_classes: queue.spec.priority_classes.clone(),
    })
}

fn selector_requirements(selector: &LabelSelector) -> Vec<NodeSelectorRequirement> {
    let from_labels =
        selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| NodeSelectorRequirement {
                key: k.clone(),
                operator: OP_IN.to_string(),
                values: vec![v.clone()],
            });
    let from_expressions =
        selector
            .match_expressions
            .iter()
            .flatten()
            .map(|e| NodeSelectorRequirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            });
    from_labels.chain(from_expressions).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_init_containers_affinity_and_node_pool() {
        let pod = serde_json::json!({
            "metadata": {"labels": {"a": "b"}},
            "spec": {
                "nodeName": "n1",
                "priority": 0,
                "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "containers": [{"name": "main"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]
                }}}
            }
        });
        let pod = <pod::Pod<'_> as serde::Deserialize>::deserialize(&pod).unwrap();
        let facts = pod_facts(pod, "ml");
        assert_eq!(facts.namespace, "ml");
        assert_eq!(facts.node_name.as_deref(), Some("n1"));
        assert!(facts.has_priority && !facts.has_preemption_policy);
        assert_eq!(facts.containers[0].limits["nvidia.com/gpu"], "1");
        let terms = facts.required_node_terms.unwrap();
        assert_eq!(terms[0].match_expressions[0].operator, "Exists");

        let queue: Queue = serde_yaml::from_str(
            "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec:\n  namespaces: [ml]\n  nodePool:\n    matchLabels: {pool: a100}\n    matchExpressions: [{key: zone, operator: NotIn, values: [c]}]\n",
        )
        .unwrap();
        let facts = queue_facts(&queue).unwrap();
        assert_eq!(
            facts.node_pool,
            vec![
                NodeSelectorRequirement::new("pool", "In", &["a100"]),
                NodeSelectorRequirement::new("zone", "NotIn", &["c"]),
            ]
        );
    }
}
