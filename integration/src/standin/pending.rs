//! The scheduler stand-in's queue of pods waiting for a node, in the order it tries them:
//! highest `spec.priority` first, then oldest, then by namespace and name.
//!
//! A pod that fitted nowhere is parked, as kube-scheduler parks it in its unschedulable queue:
//! it is tried again when it changes itself, or when the cluster changes in a way that can make
//! room (a node changed, or a pod gave capacity back), and not on every pass. Bindings only
//! take capacity, so a parked pod cannot fit before one of those happens.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::store::{Key, name_of, namespace_of};

/// The order pods are tried in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Order {
    priority: Reverse<i64>,
    created: Option<String>,
    pub key: Key,
}

impl Order {
    pub fn of(pod: &Value) -> Self {
        Self {
            priority: Reverse(pod["spec"]["priority"].as_i64().unwrap_or(0)),
            created: pod["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_string),
            key: (namespace_of(pod).to_string(), name_of(pod).to_string()),
        }
    }
}

/// Whether the scheduler should place this pod: no node yet, no scheduling gates, not being
/// deleted, Pending, and meant for the default scheduler.
pub fn schedulable(pod: &Value) -> bool {
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

/// Schedulable pods: active ones to try on the next pass, parked ones that fitted nowhere.
#[derive(Debug, Default)]
pub struct PendingQueue {
    orders: HashMap<Key, Order>,
    active: BTreeSet<Order>,
    parked: BTreeSet<Order>,
}

impl PendingQueue {
    /// Takes in the pod stored under `key` (`None`: it is gone): a schedulable pod becomes
    /// active (a change to a parked pod is worth another try); any other leaves the queue.
    pub fn update(&mut self, key: &Key, pod: Option<&Value>) {
        if let Some(order) = self.orders.remove(key) {
            self.active.remove(&order);
            self.parked.remove(&order);
        }
        if let Some(pod) = pod.filter(|p| schedulable(p)) {
            let order = Order::of(pod);
            self.orders.insert(key.clone(), order.clone());
            self.active.insert(order);
        }
    }

    /// Makes every parked pod active again: room may have been made.
    pub fn unpark_all(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        self.active.extend(parked);
    }

    /// The first active pod, taken out of the active set; the caller parks it or drops it.
    pub fn next_active(&mut self) -> Option<Order> {
        self.active.pop_first()
    }

    /// Puts a pod that fitted nowhere aside until room may have been made.
    pub fn park(&mut self, order: Order) {
        if self.orders.get(&order.key) == Some(&order) {
            self.parked.insert(order);
        }
    }

    /// Forgets a pod (it was bound).
    pub fn remove(&mut self, key: &Key) {
        self.update(key, None);
    }

    /// Puts a pod taken with [`PendingQueue::next_active`] back, to be tried first next time.
    pub fn reactivate(&mut self, order: Order) {
        if self.orders.get(&order.key) == Some(&order) {
            self.active.insert(order);
        }
    }

    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    pub fn parked_len(&self) -> usize {
        self.parked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, priority: i64, created: &str) -> Value {
        json!({"metadata": {"namespace": "default", "name": name, "creationTimestamp": created},
               "spec": {"priority": priority}})
    }

    fn key(name: &str) -> Key {
        ("default".to_string(), name.to_string())
    }

    fn names(queue: &mut PendingQueue) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(order) = queue.next_active() {
            names.push(order.key.1.clone());
            queue.park(order);
        }
        names
    }

    #[test]
    fn highest_priority_then_oldest_then_name() {
        let mut queue = PendingQueue::default();
        for (name, priority, created) in [
            ("late", 0, "2026-01-01T00:00:02Z"),
            ("b-early", 0, "2026-01-01T00:00:01Z"),
            ("a-early", 0, "2026-01-01T00:00:01Z"),
            ("urgent", 10, "2026-01-01T00:00:09Z"),
        ] {
            queue.update(&key(name), Some(&pod(name, priority, created)));
        }
        assert_eq!(names(&mut queue), ["urgent", "a-early", "b-early", "late"]);
    }

    #[test]
    fn gated_bound_and_deleted_pods_leave_the_queue() {
        let mut queue = PendingQueue::default();
        let mut p = pod("p", 0, "2026-01-01T00:00:00Z");
        queue.update(&key("p"), Some(&p));
        assert_eq!(queue.active_len(), 1);
        p["spec"]["schedulingGates"] = json!([{"name": "gpufair.io/admission"}]);
        queue.update(&key("p"), Some(&p));
        assert_eq!(queue.active_len(), 0);
        p["spec"]["schedulingGates"] = json!([]);
        queue.update(&key("p"), Some(&p));
        assert_eq!(queue.active_len(), 1);
        p["spec"]["nodeName"] = json!("n1");
        queue.update(&key("p"), Some(&p));
        assert_eq!(queue.active_len(), 0);
        queue.update(&key("q"), Some(&pod("q", 0, "2026-01-01T00:00:00Z")));
        queue.update(&key("q"), None);
        assert_eq!(queue.active_len() + queue.parked_len(), 0);
    }

    #[test]
    fn parked_pods_wait_for_room_or_their_own_change() {
        let mut queue = PendingQueue::default();
        let p = pod("p", 0, "2026-01-01T00:00:00Z");
        queue.update(&key("p"), Some(&p));
        let order = queue.next_active().unwrap();
        queue.park(order);
        assert!(queue.next_active().is_none());
        assert_eq!(queue.parked_len(), 1);
        queue.unpark_all();
        assert_eq!(queue.next_active().map(|o| o.key), Some(key("p")));
        // Taken and not parked again: gone from both sets until the pod changes.
        queue.update(&key("p"), Some(&p));
        assert_eq!(queue.active_len(), 1);
        let order = queue.next_active().unwrap();
        queue.park(order);
        queue.update(&key("p"), Some(&p));
        assert_eq!((queue.active_len(), queue.parked_len()), (1, 0));
    }
}
