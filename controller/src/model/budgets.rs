//! Disruption budgets for a whole workload. The Eviction API checks each pod on its own, so a
//! budget that allows one disruption passes the dry run of every pod of a two-pod gang, and the
//! real evictions would then take the first pod and be refused the second: half a gang evicted,
//! the other half still holding its GPUs. Before evicting a workload of several pods, the
//! controller checks that every budget selecting its pods allows them all to go at once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::pools::selector_matches;

/// Whether a pod counts against a budget: the API server's eviction handler takes Pending and
/// finished pods, and pods being deleted, without consulting budgets; and under the default
/// unhealthy-pod policy an unready pod does not spend a disruption either.
fn spends_a_disruption(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    running && ready && pod.metadata.deletion_timestamp.is_none()
}

/// Whether `budget` selects `pod`: same namespace, and its selector matches the pod's labels
/// (an empty selector selects every pod of the namespace, a missing one none, as in policy/v1).
fn selects(budget: &PodDisruptionBudget, pod: &Pod) -> bool {
    if budget.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let Some(selector) = budget.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let empty = BTreeMap::new();
    selector_matches(selector, pod.metadata.labels.as_ref().unwrap_or(&empty))
}

/// The first budget that would refuse evicting all of `pods` at once, as a sentence naming it
/// and the counts; `None` when every budget allows it.
pub fn shortfall(budgets: &[PodDisruptionBudget], pods: &[Pod]) -> Option<String> {
    budgets.iter().find_map(|budget| {
        let spent = pods
            .iter()
            .filter(|pod| selects(budget, pod) && spends_a_disruption(pod))
            .count();
        let allowed = budget
            .status
            .as_ref()
            .map_or(0, |s| s.disruptions_allowed.max(0));
        (spent as i64 > i64::from(allowed)).then(|| {
            format!(
                "PodDisruptionBudget {}/{} allows {allowed} disruption(s), and evicting the \
                 workload would take {spent} of its pods",
                budget.metadata.namespace.as_deref().unwrap_or_default(),
                budget.metadata.name.as_deref().unwrap_or_default(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, group: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": "research", "name": name,
                         "labels": {"gpufair.io/pod-group": group, "app": "train"}},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("a valid Pod")
    }

    fn budget(selector: serde_json::Value, allowed: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"namespace": "research", "name": "train-pdb"},
            "spec": {"selector": selector, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 1,
                       "expectedPods": 2}
        }))
        .expect("a valid PodDisruptionBudget")
    }

    #[test]
    fn a_budget_of_one_refuses_a_two_pod_gang_that_each_dry_run_would_pass() {
        let gang = [pod("a", "g", true), pod("b", "g", true)];
        let one = budget(json!({"matchLabels": {"app": "train"}}), 1);
        let message = shortfall(std::slice::from_ref(&one), &gang).expect("refused");
        assert!(message.contains("research/train-pdb allows 1"), "{message}");
        assert!(message.contains("take 2"), "{message}");
        assert_eq!(
            shortfall(
                &[budget(json!({"matchLabels": {"app": "train"}}), 2)],
                &gang
            ),
            None
        );
        // One budget for each pod's own share is not enough either: the one that falls short
        // is named.
        let only_a = budget(
            json!({"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["train"]}]}),
            0,
        );
        assert!(shortfall(&[only_a], &gang[..1]).is_some());
    }

    #[test]
    fn unready_pods_and_other_selections_spend_nothing() {
        let gang = [pod("a", "g", true), pod("b", "g", false)];
        let one = budget(json!({"matchLabels": {"app": "train"}}), 1);
        assert_eq!(shortfall(std::slice::from_ref(&one), &gang), None);
        let elsewhere = budget(json!({"matchLabels": {"app": "serve"}}), 0);
        assert_eq!(shortfall(&[elsewhere], &gang), None);
        // policy/v1: a budget without a selector selects nothing; an empty one, everything.
        let mut none = budget(json!({}), 0);
        none.spec.as_mut().expect("a spec").selector = None;
        assert_eq!(shortfall(&[none], &gang), None);
        assert!(shortfall(&[budget(json!({}), 0)], &gang).is_some());
    }
}
