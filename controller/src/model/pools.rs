//! Node pools from Queues' `nodePool` selectors. Core divides each pool on its own, so every node
//! belongs to exactly one pool: the first (in canonical order of the selector) whose selector
//! matches it, else the default pool, which also serves every queue without a `nodePool`.

use std::collections::BTreeMap;

use gpufair_api::Queue;
use gpufair_core::snapshot::PoolId;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::eligibility::operator_matches;
use crate::pool_name::selector_text;

/// Name of the pool of queues without a `nodePool` and of nodes no selector matches.
pub const DEFAULT_POOL: &str = "default";

/// The default pool's index: the first.
const DEFAULT: PoolId = PoolId::new(0);

/// Pools by canonical selector text; index 0 is the default pool.
#[derive(Debug, Clone, Default)]
pub struct Pools {
    /// (pool name, selector), pool 0 (default) has none.
    pub pools: Vec<(String, Option<LabelSelector>)>,
    by_key: BTreeMap<String, PoolId>,
}

fn key(selector: &LabelSelector) -> String {
    // serde_json writes map keys (matchLabels) sorted, so equal selectors give equal text.
    serde_json::to_string(selector).unwrap_or_default()
}

impl Pools {
    /// One pool per distinct selector, in order of the selector's text.
    pub fn from_queues<'a>(queues: impl IntoIterator<Item = &'a Queue>) -> Self {
        let mut named: BTreeMap<String, (String, LabelSelector)> = BTreeMap::new();
        for queue in queues {
            if let Some(selector) = &queue.spec.node_pool {
                let name = queue.metadata.name.clone().unwrap_or_default();
                named
                    .entry(key(selector))
                    .and_modify(|(first, _)| {
                        if name < *first {
                            first.clone_from(&name);
                        }
                    })
                    .or_insert((name, selector.clone()));
            }
        }
        let mut pools = vec![(DEFAULT_POOL.to_string(), None)];
        let mut by_key = BTreeMap::new();
        for (k, (first_queue, selector)) in named {
            by_key.insert(k, PoolId::new(pools.len()));
            // Named as kubectl prints the selector, which is how `fairshare.pools` in the config
            // file names it; a name that could be mistaken for the default pool is not used.
            let name = selector_text(&selector)
                .filter(|text| text != DEFAULT_POOL)
                .unwrap_or_else(|| format!("nodePool of {first_queue}"));
            pools.push((name, Some(selector)));
        }
        Self { pools, by_key }
    }

    pub fn of_queue(&self, queue: &Queue) -> PoolId {
        queue
            .spec
            .node_pool
            .as_ref()
            .and_then(|s| self.by_key.get(&key(s)).copied())
            .unwrap_or(DEFAULT)
    }

    pub fn of_node(&self, node: &Node) -> PoolId {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        self.pools
            .iter()
            .position(|(_, s)| s.as_ref().is_some_and(|s| selector_matches(s, labels)))
            .map_or(DEFAULT, PoolId::new)
    }
}

/// A label selector against a node's labels.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        operator_matches(
            &e.operator,
            e.values.as_deref().unwrap_or_default(),
            labels.get(&e.key).map(String::as_str),
        )
    });
    labels_ok && expressions_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_join_the_first_matching_pool_else_default() {
        let queues: Vec<Queue> = [
            json!({"metadata": {"name": "b"}, "spec": {"nodePool": {"matchLabels": {"pool": "h100"}}}}),
            json!({"metadata": {"name": "a"}, "spec": {"nodePool": {"matchLabels": {"pool": "h100"}}}}),
            json!({"metadata": {"name": "c"}, "spec": {}}),
        ]
        .into_iter()
        .map(|v| {
            let mut v = v;
            v["apiVersion"] = json!("gpufair.io/v1alpha1");
            v["kind"] = json!("Queue");
            serde_json::from_value(v).unwrap()
        })
        .collect();
        let pools = Pools::from_queues(&queues);
        assert_eq!(pools.pools.len(), 2);
        assert_eq!(pools.pools[1].0, "pool=h100");
        assert_eq!(pools.of_queue(&queues[0]), PoolId::new(1));
        assert_eq!(pools.of_queue(&queues[2]), PoolId::new(0));
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": {"pool": "h100"}}}))
                .unwrap();
        assert_eq!(pools.of_node(&node), PoolId::new(1));
        let other: Node = serde_json::from_value(json!({"metadata": {"name": "m"}})).unwrap();
        assert_eq!(pools.of_node(&other), PoolId::new(0));
    }
}
