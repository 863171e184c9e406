//! Which nodes a pod may run on at all: its `nodeSelector`, its required node affinity and the
//! node's taints. Core places by resource counts only, so the snapshot turns each distinct set
//! of constraints into a resource kind worth zero GPU-equivalents that only eligible nodes
//! offer; a pod is then never planned (and pinned) onto a node kube-scheduler would refuse.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

/// The node-selection constraints of one pod, in a form that compares equal across pods.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Constraints {
    node_selector: Vec<(String, String)>,
    /// `None`: no required affinity. Terms are ORed, requirements inside a term ANDed.
    terms: Option<Vec<Term>>,
    tolerations: Vec<TolerationKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Term {
    expressions: Vec<Requirement>,
    fields: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Requirement {
    key: String,
    operator: String,
    values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct TolerationKey {
    key: String,
    operator: String,
    value: String,
    effect: String,
}

fn requirement(r: &NodeSelectorRequirement) -> Requirement {
    Requirement {
        key: r.key.clone(),
        operator: r.operator.clone(),
        values: r.values.clone().unwrap_or_default(),
    }
}

fn term(t: &NodeSelectorTerm) -> Term {
    Term {
        expressions: t
            .match_expressions
            .iter()
            .flatten()
            .map(requirement)
            .collect(),
        fields: t.match_fields.iter().flatten().map(requirement).collect(),
    }
}

fn toleration(t: &Toleration) -> TolerationKey {
    TolerationKey {
        key: t.key.clone().unwrap_or_default(),
        operator: t.operator.clone().unwrap_or_else(|| "Equal".into()),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone().unwrap_or_default(),
    }
}

impl Constraints {
    pub fn of(spec: &PodSpec) -> Self {
        let mut node_selector: Vec<(String, String)> = spec
            .node_selector
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        node_selector.sort();
        let terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|s| s.node_selector_terms.iter().map(term).collect());
        let mut tolerations: Vec<TolerationKey> =
            spec.tolerations.iter().flatten().map(toleration).collect();
        tolerations.sort();
        tolerations.dedup();
        Self {
            node_selector,
            terms,
            tolerations,
        }
    }

    /// Whether kube-scheduler's node filters (selector, required affinity, taints) admit `node`.
    pub fn admit(&self, node: &Node) -> bool {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let selector_ok = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let affinity_ok = match &self.terms {
            None => true,
            Some(terms) => terms.iter().any(|t| term_matches(t, labels, name)),
        };
        let taints_ok = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_none_or(|taints| taints.iter().all(|t| self.tolerates(t)));
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        selector_ok && affinity_ok && taints_ok && !unschedulable
    }

    fn tolerates(&self, taint: &Taint) -> bool {
        if taint.effect == "PreferNoSchedule" {
            return true;
        }
        self.tolerations.iter().any(|t| {
            let effect_ok = t.effect.is_empty() || t.effect == taint.effect;
            let key_ok = t.key.is_empty() || t.key == taint.key;
            let value_ok = match t.operator.as_str() {
                "Exists" => true,
                _ => t.value == taint.value.clone().unwrap_or_default(),
            };
            // An empty key only tolerates everything with Exists.
            let empty_key_ok = !t.key.is_empty() || t.operator == "Exists";
            effect_ok && key_ok && value_ok && empty_key_ok
        })
    }

    /// The single node the pod is pinned to by `metadata.name` in every required term, if any:
    /// how a released pod shows where gpufair placed it.
    pub fn pinned_node(&self) -> Option<&str> {
        let terms = self.terms.as_ref()?;
        let mut pinned: Option<&str> = None;
        for t in terms {
            let here = t.fields.iter().find_map(|r| {
                (r.key == "metadata.name" && r.operator == "In" && r.values.len() == 1)
                    .then(|| r.values[0].as_str())
            })?;
            if pinned.is_some_and(|p| p != here) {
                return None;
            }
            pinned = Some(here);
        }
        pinned
    }
}

fn term_matches(term: &Term, labels: &BTreeMap<String, String>, name: &str) -> bool {
    // Kubernetes reads a term without requirements as matching nothing.
    if term.expressions.is_empty() && term.fields.is_empty() {
        return false;
    }
    term.expressions.iter().all(|r| {
        operator_matches(
            &r.operator,
            &r.values,
            labels.get(&r.key).map(String::as_str),
        )
    }) && term.fields.iter().all(|r| {
        let value = (r.key == "metadata.name").then_some(name);
        operator_matches(&r.operator, &r.values, value)
    })
}

/// Whether a label's `value` (absent: `None`) meets one requirement of a node selector term or
/// a label selector: `In`, `NotIn`, `Exists`, `DoesNotExist`, and node affinity's `Gt`/`Lt`. An
/// operator Kubernetes does not define matches nothing.
pub fn operator_matches(operator: &str, values: &[String], value: Option<&str>) -> bool {
    let number = |v: &str| v.parse::<i64>().ok();
    match operator {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(number),
                values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn selector_affinity_and_taints_all_apply() {
        let h100 = node(json!({
            "metadata": {"name": "n1", "labels": {"gpu-type": "h100", "gen": "9"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
        }));
        let bare = spec(json!({"containers": []}));
        assert!(!Constraints::of(&bare).admit(&h100), "taint not tolerated");
        let tolerant = spec(json!({"containers": [],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}));
        assert!(Constraints::of(&tolerant).admit(&h100));
        let picky = spec(json!({"containers": [],
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"gpu-type": "a100"}}));
        assert!(!Constraints::of(&picky).admit(&h100));
        let affinity = spec(json!({"containers": [],
        "tolerations": [{"operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["10"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]}}}}));
        let c = Constraints::of(&affinity);
        assert!(c.admit(&h100), "second term matches by name");
        assert_eq!(c.pinned_node(), None, "first term does not pin");
        let cordoned = node(json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}}));
        assert!(!Constraints::of(&bare).admit(&cordoned));
    }

    #[test]
    fn pinned_node_needs_the_same_name_in_every_term() {
        let pinned = spec(json!({"containers": [],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "a", "operator": "Exists"}],
                 "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}
            ]}}}}));
        assert_eq!(Constraints::of(&pinned).pinned_node(), Some("n7"));
    }
}
