//! What the controller keeps of a cached node.
//!
//! The node reflector holds every node for as long as it exists. A real node reports its image
//! list, addresses, capacity, daemon endpoints and a dozen conditions, none of which a decision
//! reads; keeping them would make the controller's memory grow with how verbose nodes are.
//! Nodes are trimmed as they arrive, before the store keeps them. (Pods are not kept at all:
//! see [`crate::pod_store`].)

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};

/// The annotation `kubectl apply` writes: a full copy of the object, read by no decision.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Keeps a node's identity, labels, annotations, taints, cordon, allocatable and Ready
/// condition; drops the image list, addresses, capacity and the other conditions a real node
/// reports (its image list alone is often tens of kilobytes).
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(spec) = node.spec.take() {
        node.spec = Some(NodeSpec {
            taints: spec.taints,
            unschedulable: spec.unschedulable,
            ..NodeSpec::default()
        });
    }
    if let Some(status) = node.status.take() {
        node.status = Some(NodeStatus {
            allocatable: status.allocatable,
            conditions: status
                .conditions
                .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
            ..NodeStatus::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use serde_json::json;

    #[test]
    fn trimmed_nodes_admit_and_offer_the_same() {
        let full: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"pool": "a"}},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}], "unschedulable": false},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
                "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
                "conditions": [{"type": "MemoryPressure", "status": "False"},
                               {"type": "Ready", "status": "True"}],
                "images": [{"names": ["registry/trainer:1"], "sizeBytes": 1_000_000_000}]
            }
        }))
        .expect("a valid Node");
        let mut trimmed = full.clone();
        trim_node(&mut trimmed);
        let status = trimmed.status.as_ref().unwrap();
        assert!(status.images.is_none() && status.capacity.is_none());
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        for spec in [
            json!({"containers": [], "tolerations": [{"key": "gpu", "operator": "Exists"}],
                   "nodeSelector": {"pool": "a"}}),
            json!({"containers": [], "nodeSelector": {"pool": "a"}}),
            json!({"containers": [], "tolerations": [{"key": "gpu", "operator": "Exists"}],
                   "nodeSelector": {"pool": "b"}}),
        ] {
            let spec: PodSpec = serde_json::from_value(spec).expect("a valid PodSpec");
            let c = crate::eligibility::Constraints::of(&spec);
            assert_eq!(c.admit(&full), c.admit(&trimmed));
        }
        assert_eq!(
            full.status.as_ref().unwrap().allocatable,
            status.allocatable
        );
    }
}
