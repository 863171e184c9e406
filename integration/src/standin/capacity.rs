//! The scheduler stand-in's view of the cluster, kept up to date from the changes it is told
//! about instead of rebuilt from every pod on every pass: the nodes in name order with their
//! allocatable parsed once, and per node the requests of the unfinished pods bound to it.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::scheduler::{Resources, allocatable, pod_requests};
use super::store::Key;

/// One node as the scheduler reads it.
#[derive(Debug, Clone)]
pub struct NodeEntry {
    pub object: Value,
    pub allocatable: Resources,
}

/// Nodes and the requests in use on each.
#[derive(Debug, Default)]
pub struct Capacity {
    nodes: BTreeMap<String, NodeEntry>,
    usage: HashMap<String, Resources>,
    /// What each bound, unfinished pod adds to its node's usage, so a change to the pod can
    /// take the old amount back out.
    holders: HashMap<Key, (String, Resources)>,
}

/// What a pod holds on a node: bound (`spec.nodeName`) and not Succeeded or Failed.
fn holding(pod: &Value) -> Option<(String, Resources)> {
    let node = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())?;
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) {
        return None;
    }
    Some((node.to_string(), pod_requests(pod)))
}

impl Capacity {
    /// Takes in the pod stored under `key` (`None`: it is gone). Returns true when the pod gave
    /// back capacity it held (it finished, went away, or moved), which may let a pod that
    /// fitted nowhere fit now.
    pub fn apply_pod(&mut self, key: &Key, pod: Option<&Value>) -> bool {
        let now = pod.and_then(holding);
        let before = self.holders.remove(key);
        if before == now {
            if let Some(now) = now {
                self.holders.insert(key.clone(), now);
            }
            return false;
        }
        let freed = before.is_some();
        if let Some((node, requests)) = before {
            let used = self.usage.entry(node.clone()).or_default();
            for (resource, amount) in requests {
                *used.entry(resource).or_default() -= amount;
            }
            used.retain(|_, amount| *amount != 0);
            if used.is_empty() {
                self.usage.remove(&node);
            }
        }
        if let Some((node, requests)) = now {
            let used = self.usage.entry(node.clone()).or_default();
            for (resource, amount) in &requests {
                *used.entry(resource.clone()).or_default() += amount;
            }
            self.holders.insert(key.clone(), (node, requests));
        }
        freed
    }

    /// Takes in the node `name` as stored now (`None`: it is gone).
    pub fn apply_node(&mut self, name: &str, node: Option<&Value>) {
        match node {
            Some(node) => {
                let entry = NodeEntry {
                    allocatable: allocatable(node),
                    object: node.clone(),
                };
                self.nodes.insert(name.to_string(), entry);
            }
            None => {
                self.nodes.remove(name);
            }
        }
    }

    /// Every node, in name order.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &NodeEntry)> {
        self.nodes
            .iter()
            .map(|(name, entry)| (name.as_str(), entry))
    }

    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.get(name)
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Requests in use on `node` by unfinished pods bound to it.
    pub fn used(&self, node: &str) -> Option<&Resources> {
        self.usage.get(node)
    }

    /// The first resource `requests` asks for that does not fit on `node`, if any (an unknown
    /// node has room for nothing).
    pub fn short_of<'a>(&self, node: &str, requests: &'a Resources) -> Option<&'a str> {
        let none = Resources::new();
        let free = self.nodes.get(node).map_or(&none, |n| &n.allocatable);
        let used = self.used(node);
        requests
            .iter()
            .find(|(resource, amount)| {
                **amount > 0
                    && used.and_then(|u| u.get(*resource)).copied().unwrap_or(0) + **amount
                        > free.get(*resource).copied().unwrap_or(0)
            })
            .map(|(resource, _)| resource.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> Key {
        ("default".to_string(), name.to_string())
    }

    fn pod(node: Option<&str>, phase: &str, gpus: u32) -> Value {
        json!({"spec": {"nodeName": node, "containers": [
            {"resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase}})
    }

    fn capacity_with_node(gpus: u32) -> Capacity {
        let mut capacity = Capacity::default();
        capacity.apply_node(
            "n1",
            Some(
                &json!({"metadata": {"name": "n1"}, "status": {"allocatable": {
                "nvidia.com/gpu": gpus.to_string(), "pods": "110"}}}),
            ),
        );
        capacity
    }

    fn gpus(n: i128) -> Resources {
        Resources::from([("nvidia.com/gpu".to_string(), n * 1000)])
    }

    #[test]
    fn a_bound_pod_holds_capacity_until_it_is_deleted() {
        let mut capacity = capacity_with_node(2);
        assert!(!capacity.apply_pod(&key("a"), Some(&pod(Some("n1"), "Running", 2))));
        assert_eq!(capacity.used("n1").unwrap()["nvidia.com/gpu"], 2000);
        assert_eq!(capacity.short_of("n1", &gpus(1)), Some("nvidia.com/gpu"));
        // The same pod seen again changes nothing and frees nothing.
        assert!(!capacity.apply_pod(&key("a"), Some(&pod(Some("n1"), "Running", 2))));
        assert_eq!(capacity.used("n1").unwrap()["nvidia.com/gpu"], 2000);
        assert!(capacity.apply_pod(&key("a"), None));
        assert!(capacity.used("n1").is_none());
        assert_eq!(capacity.short_of("n1", &gpus(2)), None);
    }

    #[test]
    fn a_finished_pod_gives_its_capacity_back() {
        let mut capacity = capacity_with_node(1);
        capacity.apply_pod(&key("a"), Some(&pod(Some("n1"), "Running", 1)));
        assert_eq!(capacity.short_of("n1", &gpus(1)), Some("nvidia.com/gpu"));
        assert!(capacity.apply_pod(&key("a"), Some(&pod(Some("n1"), "Succeeded", 1))));
        assert_eq!(capacity.short_of("n1", &gpus(1)), None);
    }

    #[test]
    fn unbound_pods_hold_nothing_and_node_changes_are_read_again() {
        let mut capacity = capacity_with_node(1);
        assert!(!capacity.apply_pod(&key("a"), Some(&pod(None, "Pending", 1))));
        assert!(capacity.used("n1").is_none());
        assert_eq!(capacity.short_of("n1", &gpus(2)), Some("nvidia.com/gpu"));
        capacity.apply_node(
            "n1",
            Some(
                &json!({"metadata": {"name": "n1"}, "status": {"allocatable": {
                "nvidia.com/gpu": "4"}}}),
            ),
        );
        assert_eq!(capacity.short_of("n1", &gpus(2)), None);
        capacity.apply_node("n1", None);
        assert_eq!(capacity.node_count(), 0);
    }
}
