//! What a pod asks of a node, computed as kube-scheduler does: per resource, the larger of the
//! containers' sum and the largest init container, plus the pod overhead; plus one `pods` slot.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use gpufair_core::quantity::{QuantityError, parse_quantity};

/// The scheduler's `pods` resource: every pod takes one of the node's pod slots.
pub const PODS_RESOURCE: &str = "pods";

/// A container's requests, with limits standing in where only a limit is set (the API server
/// defaults requests to limits then; for extended resources only limits may be written).
fn container_requests(c: &Container) -> Result<BTreeMap<String, f64>, QuantityError> {
    let mut out = BTreeMap::new();
    if let Some(resources) = &c.resources {
        for (name, q) in resources.limits.iter().flatten() {
            out.insert(name.clone(), parse_quantity(&q.0)?);
        }
        for (name, q) in resources.requests.iter().flatten() {
            out.insert(name.clone(), parse_quantity(&q.0)?);
        }
    }
    Ok(out)
}

/// The pod's effective requests in base units (cores, bytes, counts).
pub fn pod_requests(spec: &PodSpec) -> Result<BTreeMap<String, f64>, QuantityError> {
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for c in &spec.containers {
        for (name, value) in container_requests(c)? {
            *total.entry(name).or_default() += value;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (name, value) in container_requests(c)? {
            let slot = total.entry(name).or_default();
            *slot = slot.max(value);
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        *total.entry(name.clone()).or_default() += parse_quantity(&q.0)?;
    }
    total.insert(PODS_RESOURCE.to_string(), 1.0);
    total.retain(|_, v| *v > 0.0);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sums_containers_takes_largest_init_adds_overhead() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                            "limits": {"nvidia.com/gpu": "2"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}}
            ],
            "initContainers": [
                {"name": "i", "resources": {"requests": {"cpu": "4", "memory": "512Mi"}}}
            ],
            "overhead": {"cpu": "100m"}
        }))
        .unwrap();
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r["cpu"], 4.1);
        assert_eq!(r["memory"], 1024.0 * 1024.0 * 1024.0);
        assert_eq!(r["nvidia.com/gpu"], 2.0);
        assert_eq!(r[PODS_RESOURCE], 1.0);
        let bad: PodSpec = serde_json::from_value(json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}))
        .unwrap();
        assert!(pod_requests(&bad).is_err());
    }
}
