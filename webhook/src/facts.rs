//! Kubernetes objects into the plain facts the mutation plan reads.

use std::collections::BTreeMap;

use gpufair_api::Queue;
use gpufair_core::mutation::{
    ContainerResources, NodeSelectorRequirement, NodeSelectorTerm, OP_IN, PodFacts,
    PreferredSchedulingTerm, QueueFacts, Toleration,
};
use k8s_openapi::api::core::v1 as core_v1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The pod's facts; `namespace` comes from the AdmissionRequest, because a pod being created
/// may not carry it in its metadata.
pub fn pod_facts(pod: &core_v1::Pod, namespace: &str) -> PodFacts {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let node_affinity = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref());
    let containers = spec
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
                .map(container_resources)
                .collect()
        })
        .unwrap_or_default();
    PodFacts {
        namespace: namespace.to_string(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        node_name: spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        priority_class_name: spec.and_then(|s| s.priority_class_name.clone()),
        has_priority: spec.is_some_and(|s| s.priority.is_some()),
        has_preemption_policy: spec.is_some_and(|s| s.preemption_policy.is_some()),
        scheduling_gates: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|gates| gates.iter().map(|g| g.name.clone()).collect())
            .unwrap_or_default(),
        required_node_terms: node_affinity
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|selector| selector.node_selector_terms.iter().map(term).collect()),
        preferred_node_terms: node_affinity
            .and_then(|n| {
                n.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|terms| {
                terms
                    .iter()
                    .map(|t| PreferredSchedulingTerm {
                        weight: t.weight,
                        preference: term(&t.preference),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        tolerations: spec
            .and_then(|s| s.tolerations.as_ref())
            .map(|ts| ts.iter().map(toleration).collect())
            .unwrap_or_default(),
        containers,
        termination_grace_period_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
    }
}

fn container_resources(container: &core_v1::Container) -> ContainerResources {
    let quantities = |map: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        map.map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default()
    };
    let resources = container.resources.as_ref();
    ContainerResources {
        name: container.name.clone(),
        requests: quantities(resources.and_then(|r| r.requests.as_ref())),
        limits: quantities(resources.and_then(|r| r.limits.as_ref())),
    }
}

fn requirement(r: &core_v1::NodeSelectorRequirement) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: r.key.clone(),
        operator: r.operator.clone(),
        values: r.values.clone().unwrap_or_default(),
    }
}

fn term(t: &core_v1::NodeSelectorTerm) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: t
            .match_expressions
            .iter()
            .flatten()
            .map(requirement)
            .collect(),
        match_fields: t.match_fields.iter().flatten().map(requirement).collect(),
    }
}

fn toleration(t: &core_v1::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone(),
        operator: t.operator.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
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
        let pod: core_v1::Pod = serde_json::from_value(serde_json::json!({
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
        }))
        .unwrap();
        let facts = pod_facts(&pod, "ml");
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
