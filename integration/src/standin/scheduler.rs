//! A scheduler stand-in: binds pods that have no node and no scheduling gates, highest
//! `spec.priority` first (then oldest, then by namespace and name), to the first node in name
//! order that fits. A node fits when it is schedulable, every `NoSchedule`/`NoExecute` taint is
//! tolerated, `nodeSelector` and required node affinity (matchExpressions and matchFields)
//! match, and the pod's requests fit in allocatable minus the requests of the unfinished pods
//! already on it (cpu, memory, `pods`, and any extended resource such as `nvidia.com/gpu`).
//! It does not preempt and ignores preferred affinity, pod (anti-)affinity and topology spread.
//! A pod that fits nowhere gets `PodScheduled=False/Unschedulable`, as kube-scheduler reports.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::capacity::Capacity;
use super::journal::JournalId;
use super::pending::PendingQueue;
use super::quantity::parse_milli;
use super::selectors::node_term_matches;
use super::status::ApiError;
use super::store::{Inner, Target, now_rfc3339};

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

/// The node names a pod's required node affinity allows, when every term names them with a
/// `metadata.name In (...)` field (what gpufair's releases pin pods with); `None` otherwise.
fn named_nodes(pod: &Value) -> Option<BTreeSet<&str>> {
    let terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()?;
    let mut names = BTreeSet::new();
    for term in terms {
        let field = term["matchFields"].as_array()?.iter().find(|f| {
            f["key"] == "metadata.name" && f["operator"] == "In" && f["values"].is_array()
        })?;
        names.extend(field["values"].as_array()?.iter().filter_map(Value::as_str));
    }
    Some(names)
}

/// The scheduler stand-in between passes: what it knows of nodes and their usage and the pods
/// waiting for a node, both kept from the store's changes (its journal) rather than read
/// from every pod on every pass.
pub struct Scheduler {
    journal: JournalId,
    capacity: Capacity,
    pending: PendingQueue,
}

impl Scheduler {
    /// A scheduler that starts from everything the store holds now.
    pub fn new(inner: &mut Inner) -> Self {
        Self {
            journal: inner.open_journal(&["pods", "nodes"]),
            capacity: Capacity::default(),
            pending: PendingQueue::default(),
        }
    }

    /// Takes in what changed since the last pass.
    fn catch_up(&mut self, inner: &mut Inner) -> Result<(), ApiError> {
        let pods = inner.kind("", "pods")?;
        let nodes = inner.kind("", "nodes")?;
        let mut room = false;
        for (resource, key) in inner.take_journal(self.journal) {
            if resource == "nodes" {
                self.capacity
                    .apply_node(&key.1, inner.try_get(&nodes, "", &key.1));
                room = true;
            } else {
                let pod = inner.try_get(&pods, &key.0, &key.1);
                room |= self.capacity.apply_pod(&key, pod);
                self.pending.update(&key, pod);
            }
        }
        if room {
            self.pending.unpark_all();
        }
        Ok(())
    }

    /// Where `pod` goes: the first node in name order that takes it, or the
    /// `0/N nodes are available: ...` message when none does.
    fn place(&self, pod: &Value, requests: &Resources) -> Result<String, String> {
        let fits = |name: &str, node: &Value| {
            placement_refusal(pod, node).is_none()
                && self.capacity.short_of(name, requests).is_none()
        };
        // A pod pinned by name can only go to the nodes it names, so those are tried alone;
        // the first of them that fits is the first node in name order that fits.
        if let Some(names) = named_nodes(pod) {
            for name in names {
                if let Some(entry) = self.capacity.node(name)
                    && fits(name, &entry.object)
                {
                    return Ok(name.to_string());
                }
            }
        }
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for (name, entry) in self.capacity.nodes() {
            if let Some(reason) = placement_refusal(pod, &entry.object) {
                *reasons.entry(reason.to_string()).or_default() += 1;
                continue;
            }
            if let Some(resource) = self.capacity.short_of(name, requests) {
                *reasons
                    .entry(format!("Insufficient {resource}"))
                    .or_default() += 1;
                continue;
            }
            return Ok(name.to_string());
        }
        let detail: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        Err(format!(
            "0/{} nodes are available: {}.",
            self.capacity.node_count(),
            detail.join(", ")
        ))
    }

    /// One scheduling pass over the pods waiting for a node that may fit; returns the bindings
    /// made as (namespace, pod, node).
    pub fn schedule_once(
        &mut self,
        inner: &mut Inner,
    ) -> Result<Vec<(String, String, String)>, ApiError> {
        self.catch_up(inner)?;
        let pods_kind = inner.kind("", "pods")?;
        let mut bound = Vec::new();
        while let Some(order) = self.pending.next_active() {
            let (namespace, name) = order.key.clone();
            let Some(pod) = inner.try_get(&pods_kind, &namespace, &name).cloned() else {
                self.pending.remove(&order.key);
                continue;
            };
            let requests = pod_requests(&pod);
            match self.place(&pod, &requests) {
                Ok(node) => {
                    let new = match bind(inner, &namespace, &name, &node) {
                        Ok(new) => new,
                        Err(error) => {
                            self.pending.reactivate(order);
                            return Err(error);
                        }
                    };
                    // Counted at once: the next pod of this pass must see the node's new usage.
                    self.capacity.apply_pod(&order.key, Some(&new));
                    self.pending.remove(&order.key);
                    bound.push((namespace, name, node));
                }
                Err(message) => {
                    let mut new = pod.clone();
                    set_condition(
                        &mut new,
                        "PodScheduled",
                        "False",
                        Some("Unschedulable"),
                        Some(&message),
                    );
                    if new != pod
                        && let Err(error) =
                            inner.update(&pods_kind, &namespace, &name, new, Target::System)
                    {
                        self.pending.reactivate(order);
                        return Err(error);
                    }
                    self.pending.park(order);
                }
            }
        }
        Ok(bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standin::store::{Store, with_default_namespace};

    fn store_with_node(gpus: u32) -> Store {
        let store = with_default_namespace(100);
        {
            let mut inner = store.lock();
            let nodes = inner.kind("", "nodes").unwrap();
            let mut node = json!({"metadata": {"name": "n1"}, "status": {"allocatable": {
                "nvidia.com/gpu": gpus.to_string(), "pods": "110"}}});
            inner.prepare_create(&nodes, "", &mut node).unwrap();
            inner.create(&nodes, node).unwrap();
        }
        store
    }

    fn create_pod(inner: &mut Inner, name: &str, gpus: u32) {
        let pods = inner.kind("", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": name}, "spec": {"containers": [
            {"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]}});
        inner.prepare_create(&pods, "default", &mut pod).unwrap();
        inner.create(&pods, pod).unwrap();
    }

    fn pod(inner: &Inner, name: &str) -> Value {
        let pods = inner.kind("", "pods").unwrap();
        inner.get(&pods, "default", name).unwrap()
    }

    #[test]
    fn a_parked_pod_binds_once_a_bound_pod_is_deleted() {
        let store = store_with_node(1);
        let mut inner = store.lock();
        let mut scheduler = Scheduler::new(&mut inner);
        create_pod(&mut inner, "first", 1);
        let bound = scheduler.schedule_once(&mut inner).unwrap();
        assert_eq!(bound, [("default".into(), "first".into(), "n1".into())]);
        create_pod(&mut inner, "second", 1);
        assert!(scheduler.schedule_once(&mut inner).unwrap().is_empty());
        let waiting = pod(&inner, "second");
        let condition = &waiting["status"]["conditions"][0];
        assert_eq!(condition["reason"], "Unschedulable");
        assert_eq!(
            condition["message"],
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        );
        // Nothing gave capacity back: further passes leave it parked.
        assert!(scheduler.schedule_once(&mut inner).unwrap().is_empty());
        assert_eq!(scheduler.pending.parked_len(), 1);
        let pods = inner.kind("", "pods").unwrap();
        inner.remove_now(&pods, "default", "first").unwrap();
        let bound = scheduler.schedule_once(&mut inner).unwrap();
        assert_eq!(bound, [("default".into(), "second".into(), "n1".into())]);
        assert_eq!(pod(&inner, "second")["spec"]["nodeName"], "n1");
    }

    #[test]
    fn a_parked_pod_binds_when_its_node_grows_or_a_pod_finishes() {
        let store = store_with_node(1);
        let mut inner = store.lock();
        let mut scheduler = Scheduler::new(&mut inner);
        create_pod(&mut inner, "big", 2);
        create_pod(&mut inner, "small", 1);
        // In one pass: "big" fits nowhere, "small" takes the only GPU.
        let bound = scheduler.schedule_once(&mut inner).unwrap();
        assert_eq!(bound, [("default".into(), "small".into(), "n1".into())]);
        let nodes = inner.kind("", "nodes").unwrap();
        inner
            .modify(&nodes, "", "n1", Target::System, |old| {
                let mut new = old.clone();
                new["status"]["allocatable"]["nvidia.com/gpu"] = json!("2");
                Ok(new)
            })
            .unwrap();
        // Two GPUs, one held by "small": still no room for "big".
        assert!(scheduler.schedule_once(&mut inner).unwrap().is_empty());
        let pods = inner.kind("", "pods").unwrap();
        inner
            .modify(&pods, "default", "small", Target::System, |old| {
                let mut new = old.clone();
                new["status"]["phase"] = json!("Succeeded");
                Ok(new)
            })
            .unwrap();
        let bound = scheduler.schedule_once(&mut inner).unwrap();
        assert_eq!(bound, [("default".into(), "big".into(), "n1".into())]);
    }

    #[test]
    fn a_pod_pinned_by_name_goes_to_its_node_and_gated_pods_wait() {
        let store = store_with_node(8);
        let mut inner = store.lock();
        let nodes = inner.kind("", "nodes").unwrap();
        let mut node = json!({"metadata": {"name": "n0"}, "status": {"allocatable": {
            "nvidia.com/gpu": "8", "pods": "110"}}});
        inner.prepare_create(&nodes, "", &mut node).unwrap();
        inner.create(&nodes, node).unwrap();
        let mut scheduler = Scheduler::new(&mut inner);
        let pods = inner.kind("", "pods").unwrap();
        let mut gated = json!({"metadata": {"name": "gated"}, "spec": {
            "schedulingGates": [{"name": "gpufair.io/admission"}],
            "containers": [{"name": "main", "image": "x"}]}});
        inner.prepare_create(&pods, "default", &mut gated).unwrap();
        inner.create(&pods, gated).unwrap();
        assert!(scheduler.schedule_once(&mut inner).unwrap().is_empty());
        inner
            .modify(&pods, "default", "gated", Target::System, |old| {
                let mut new = old.clone();
                new["spec"]["schedulingGates"] = json!([]);
                new["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}});
                Ok(new)
            })
            .unwrap();
        let bound = scheduler.schedule_once(&mut inner).unwrap();
        assert_eq!(bound, [("default".into(), "gated".into(), "n1".into())]);
    }

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
