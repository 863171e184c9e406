//! A scheduler stand-in: binds pods that have no node and no scheduling gates, highest
//! `spec.priority` first (then oldest, then by namespace and name), to the first node in name
//! order that fits. A node fits when it is schedulable, every `NoSchedule`/`NoExecute` taint is
//! tolerated, `nodeSelector` and required node affinity (matchExpressions and matchFields)
//! match, and the pod's requests fit in allocatable minus the requests of the unfinished pods
//! already on it (cpu, memory, `pods`, and any extended resource such as `nvidia.com/gpu`).
//! It does not preempt and ignores preferred affinity, pod (anti-)affinity and topology spread.
//! A pod that fits nowhere gets `PodScheduled=False/Unschedulable`, as kube-scheduler reports.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::quantity::parse_milli;
use super::selectors::node_term_matches;
use super::status::ApiError;
use super::store::{Inner, Target, name_of, namespace_of, now_rfc3339};

pub type Resources = BTreeMap<String, i128>;

fn quantities(map: &Value) -> Resources {
    map.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let milli = match v {
                Value::String(s) => parse_milli(s).ok(),
                Value::Number(n) => n.as_f64().map(|f| (f * 1000.0) as i128),
                _ => None,
            }?;
            Some((k.clone(), milli))
        })
        .collect()
}

/// What a pod asks for: per resource, the larger of the containers' sum and the largest init
/// container (requests, or limits where a request is missing), plus overhead and one `pods`.
pub fn pod_requests(pod: &Value) -> Resources {
    let container_requests = |container: &Value| {
        let mut requests = quantities(&container["resources"]["limits"]);
        requests.extend(quantities(&container["resources"]["requests"]));
        requests
    };
    let mut total = Resources::new();
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for (k, v) in container_requests(container) {
            *total.entry(k).or_default() += v;
        }
    }
    for container in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for (k, v) in container_requests(container) {
            let entry = total.entry(k).or_default();
            *entry = (*entry).max(v);
        }
    }
    for (k, v) in quantities(&pod["spec"]["overhead"]) {
        *total.entry(k).or_default() += v;
    }
    *total.entry("pods".into()).or_default() += 1000;
    total
}

pub fn allocatable(node: &Value) -> Resources {
    let status = &node["status"];
    if status["allocatable"].is_object() {
        quantities(&status["allocatable"])
    } else {
        quantities(&status["capacity"])
    }
}

fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
    tolerations.iter().any(|t| {
        let key_ok = match t["key"].as_str() {
            None | Some("") => t["operator"] == "Exists",
            Some(key) => taint["key"] == key,
        };
        let value_ok = t["operator"] == "Exists"
            || t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("");
        let effect_ok = t["effect"]
            .as_str()
            .is_none_or(|e| e.is_empty() || taint["effect"] == e);
        key_ok && value_ok && effect_ok
    })
}

/// Why `node` cannot take `pod`, or `None` when it can (ignoring resources).
pub fn placement_refusal(pod: &Value, node: &Value) -> Option<&'static str> {
    if node["spec"]["unschedulable"] == true {
        return Some("node(s) were unschedulable");
    }
    let tolerations = pod["spec"]["tolerations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for taint in node["spec"]["taints"].as_array().into_iter().flatten() {
        if matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute"))
            && !tolerates(tolerations, taint)
        {
            return Some("node(s) had untolerated taint");
        }
    }
    let labels = &node["metadata"]["labels"];
    for (key, value) in pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if labels.get(key) != Some(value) {
            return Some("node(s) didn't match Pod's node affinity/selector");
        }
    }
    let required =
        &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    if !required.is_null() {
        let terms = required["nodeSelectorTerms"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if !terms.iter().any(|term| node_term_matches(term, node)) {
            return Some("node(s) didn't match Pod's node affinity/selector");
        }
    }
    None
}

fn schedulable(pod: &Value) -> bool {
    pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
        && pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
        && pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["phase"]
            .as_str()
            .is_none_or(|p| p == "Pending")
        && pod["spec"]["schedulerName"]
            .as_str()
            .is_none_or(|s| s == "default-scheduler")
}

/// Requests in use on each node by pods that have not finished.
pub fn node_usage(inner: &Inner) -> Result<BTreeMap<String, Resources>, ApiError> {
    let pods = inner.kind("", "pods")?;
    let mut usage: BTreeMap<String, Resources> = BTreeMap::new();
    for pod in inner.iter(&pods, None) {
        let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        if matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        let used = usage.entry(node.to_string()).or_default();
        for (k, v) in pod_requests(pod) {
            *used.entry(k).or_default() += v;
        }
    }
    Ok(usage)
}

/// Binds a pod to a node: the `pods/binding` subresource.
pub fn bind(inner: &mut Inner, namespace: &str, name: &str, node: &str) -> Result<Value, ApiError> {
    let pods = inner.kind("", "pods")?;
    let pod = inner.get(&pods, namespace, name)?;
    let conflict = |message: String| {
        ApiError::conflict_message(format!(
            "Operation cannot be fulfilled on pods/binding \"{name}\": {message}"
        ))
    };
    if let Some(current) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(conflict(format!(
            "pod {name} is already assigned to node \"{current}\""
        )));
    }
    if pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty())
    {
        return Err(conflict(format!(
            "pod {name} has non-empty .spec.schedulingGates"
        )));
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return Err(conflict(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        )));
    }
    let mut new = pod.clone();
    new["spec"]["nodeName"] = json!(node);
    set_condition(&mut new, "PodScheduled", "True", None, None);
    inner.update(&pods, namespace, name, new, Target::System)
}

/// Sets a pod condition, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(
    pod: &mut Value,
    kind: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    let mut conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let existing = conditions.iter().position(|c| c["type"] == kind);
    let transition = match existing {
        Some(i) if conditions[i]["status"] == status => conditions[i]["lastTransitionTime"].clone(),
        _ => json!(now_rfc3339()),
    };
    let mut condition = json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": transition});
    if let Some(reason) = reason {
        condition["reason"] = json!(reason);
    }
    if let Some(message) = message {
        condition["message"] = json!(message);
    }
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    pod["status"]["conditions"] = json!(conditions);
}

/// One scheduling pass; returns the bindings made as (namespace, pod, node).
pub fn schedule_once(inner: &mut Inner) -> Result<Vec<(String, String, String)>, ApiError> {
    let pods_kind = inner.kind("", "pods")?;
    let nodes_kind = inner.kind("", "nodes")?;
    let mut pending: Vec<Value> = inner
        .iter(&pods_kind, None)
        .filter(|p| schedulable(p))
        .cloned()
        .collect();
    pending.sort_by(|a, b| {
        let priority = |p: &Value| p["spec"]["priority"].as_i64().unwrap_or(0);
        priority(b)
            .cmp(&priority(a))
            .then_with(|| {
                a["metadata"]["creationTimestamp"]
                    .as_str()
                    .cmp(&b["metadata"]["creationTimestamp"].as_str())
            })
            .then_with(|| namespace_of(a).cmp(namespace_of(b)))
            .then_with(|| name_of(a).cmp(name_of(b)))
    });
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let nodes: Vec<Value> = inner.iter(&nodes_kind, None).cloned().collect();
    let mut usage = node_usage(inner)?;
    // Parsed once per pass, not once per pod and node: a pass over thousands of released
    // pods and a thousand nodes otherwise spends its time re-reading quantities.
    let allocatables: Vec<Resources> = nodes.iter().map(allocatable).collect();
    let mut bound = Vec::new();
    for pod in pending {
        let requests = pod_requests(&pod);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut chosen = None;
        for (node, free) in nodes.iter().zip(&allocatables) {
            if let Some(reason) = placement_refusal(&pod, node) {
                *reasons.entry(reason.to_string()).or_default() += 1;
                continue;
            }
            let used = usage.get(name_of(node));
            let short = requests.iter().find(|(resource, amount)| {
                **amount > 0
                    && used.and_then(|u| u.get(*resource)).copied().unwrap_or(0) + **amount
                        > free.get(*resource).copied().unwrap_or(0)
            });
            if let Some((resource, _)) = short {
                *reasons
                    .entry(format!("Insufficient {resource}"))
                    .or_default() += 1;
                continue;
            }
            chosen = Some(name_of(node).to_string());
            break;
        }
        let namespace = namespace_of(&pod).to_string();
        let name = name_of(&pod).to_string();
        match chosen {
            Some(node) => {
                bind(inner, &namespace, &name, &node)?;
                let used = usage.entry(node.clone()).or_default();
                for (k, v) in requests {
                    *used.entry(k).or_default() += v;
                }
                bound.push((namespace, name, node));
            }
            None => {
                let detail: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                let message = format!(
                    "0/{} nodes are available: {}.",
                    nodes.len(),
                    detail.join(", ")
                );
                let mut new = pod.clone();
                set_condition(
                    &mut new,
                    "PodScheduled",
                    "False",
                    Some("Unschedulable"),
                    Some(&message),
                );
                if new != pod {
                    inner.update(&pods_kind, &namespace, &name, new, Target::System)?;
                }
            }
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_sum_containers_and_take_the_largest_init_container() {
        let pod = json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "2"}}},
                           {"resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]
        }});
        let requests = pod_requests(&pod);
        assert_eq!(requests["cpu"], 2000);
        assert_eq!(requests["nvidia.com/gpu"], 2000);
        assert_eq!(requests["pods"], 1000);
    }

    #[test]
    fn taints_selectors_and_affinity() {
        let node = json!({"metadata": {"name": "n1", "labels": {"pool": "a"}},
            "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}});
        let mut pod = json!({"spec": {"nodeSelector": {"pool": "a"}}});
        assert_eq!(
            placement_refusal(&pod, &node),
            Some("node(s) had untolerated taint")
        );
        pod["spec"]["tolerations"] = json!([{"key": "gpu", "operator": "Equal", "value": "yes"}]);
        assert_eq!(placement_refusal(&pod, &node), None);
        pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}});
        assert!(placement_refusal(&pod, &node).is_some());
        pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
        pod["spec"]["affinity"] = Value::Null;
        pod["spec"]["nodeSelector"] = json!({"pool": "b"});
        assert!(placement_refusal(&pod, &node).is_some());
    }
}
