//! The `pods/eviction` subresource (policy/v1 Eviction) and the disruption arithmetic of
//! PodDisruptionBudgets, as the API server's eviction handler and the disruption controller
//! compute them:
//!
//! - a pod that is Pending, Succeeded, Failed or already being deleted is evicted without
//!   consulting budgets;
//! - more than one budget selecting the pod is a 500, as in the real handler;
//! - otherwise the budget's pods are those its selector matches (not finished, not being
//!   deleted); healthy ones are Running and Ready; `minAvailable` (count or percentage, rounded
//!   up) or `maxUnavailable` (likewise) gives the desired healthy count; an eviction that would
//!   go below it is refused with 429 and a `DisruptionBudget` cause; an unhealthy pod may be
//!   evicted while the budget is met (the default `IfHealthyBudget` policy);
//! - the budget's status (`disruptionsAllowed`, `currentHealthy`, `desiredHealthy`,
//!   `expectedPods`) is written on every eviction and by [`Budgets::refresh`].

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::journal::JournalId;
use super::selectors::LabelSelector;
use super::status::{ApiError, success};
use super::store::{DeleteOptions, Inner, Target, check_preconditions, name_of, now_rfc3339};

fn healthy(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The budget arithmetic for one PodDisruptionBudget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub expected: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
}

impl Budget {
    pub fn disruptions_allowed(&self) -> i64 {
        (self.current_healthy - self.desired_healthy).max(0)
    }
}

fn percent_of(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

/// Whether a budget's selector picks this pod (an empty selector picks every pod in the
/// namespace, a missing one none, as in policy/v1).
fn selects(pdb: &Value, pod: &Value) -> bool {
    let selector = &pdb["spec"]["selector"];
    if selector.is_null() {
        return false;
    }
    LabelSelector::from_object(selector, "spec.selector")
        .is_ok_and(|s| s.matches(&pod["metadata"]["labels"]))
}

pub fn budget(inner: &Inner, pdb: &Value) -> Result<Budget, ApiError> {
    let pods = inner.kind("", "pods")?;
    let namespace = pdb["metadata"]["namespace"].as_str().unwrap_or_default();
    let members: Vec<&Value> = inner
        .iter(&pods, Some(namespace))
        .filter(|p| selects(pdb, p))
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    let expected = members.len() as i64;
    let current_healthy = members.iter().filter(|p| healthy(p)).count() as i64;
    let spec = &pdb["spec"];
    let desired_healthy = if !spec["minAvailable"].is_null() {
        percent_of(&spec["minAvailable"], expected).unwrap_or(0)
    } else if !spec["maxUnavailable"].is_null() {
        (expected - percent_of(&spec["maxUnavailable"], expected).unwrap_or(0)).max(0)
    } else {
        0
    };
    Ok(Budget {
        expected,
        current_healthy,
        desired_healthy,
    })
}

fn write_status(
    inner: &mut Inner,
    pdb: &Value,
    budget: Budget,
    allowed: i64,
) -> Result<(), ApiError> {
    let kind = inner.kind("policy", "poddisruptionbudgets")?;
    let mut new = pdb.clone();
    new["status"]["disruptionsAllowed"] = json!(allowed);
    new["status"]["currentHealthy"] = json!(budget.current_healthy);
    new["status"]["desiredHealthy"] = json!(budget.desired_healthy);
    new["status"]["expectedPods"] = json!(budget.expected);
    new["status"]["observedGeneration"] = pdb["metadata"]["generation"].clone();
    let namespace = pdb["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let stored = inner.get(&kind, &namespace, name_of(pdb))?;
    if new["status"] != stored["status"] {
        new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
        inner.update(&kind, &namespace, name_of(pdb), new, Target::Status)?;
    }
    Ok(())
}

/// The disruption-controller stand-in between passes: its journal of pod and budget changes.
pub struct Budgets {
    journal: JournalId,
}

impl Budgets {
    /// A disruption controller that starts from everything the store holds now.
    pub fn new(inner: &mut Inner) -> Self {
        Self {
            journal: inner.open_journal(&["pods", "poddisruptionbudgets.policy"]),
        }
    }

    /// One pass: the status of every budget in a namespace where a pod or a budget changed
    /// since the last pass, from the pods as they are now. A budget counts only pods of its
    /// own namespace, so the others cannot have moved.
    pub fn refresh(&mut self, inner: &mut Inner) -> Result<(), ApiError> {
        let namespaces: BTreeSet<String> = inner
            .take_journal(self.journal)
            .into_iter()
            .map(|(_, (namespace, _))| namespace)
            .collect();
        if namespaces.is_empty() {
            return Ok(());
        }
        let kind = inner.kind("policy", "poddisruptionbudgets")?;
        for namespace in namespaces {
            let budgets: Vec<Value> = inner.iter(&kind, Some(&namespace)).cloned().collect();
            for pdb in budgets {
                let budget = budget(inner, &pdb)?;
                write_status(inner, &pdb, budget, budget.disruptions_allowed())?;
            }
        }
        Ok(())
    }
}

fn delete_options(eviction: &Value) -> DeleteOptions {
    let options = &eviction["deleteOptions"];
    DeleteOptions {
        grace_period_seconds: options["gracePeriodSeconds"].as_i64(),
        precondition_uid: options["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_resource_version: options["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    }
}

/// POST pods/<name>/eviction. Returns the success Status (201) the real server sends. A dry
/// run (`dryRun=All`) makes every check and answers as the real eviction would, but neither
/// deletes the pod nor writes the budget's status.
pub fn evict(
    inner: &mut Inner,
    namespace: &str,
    name: &str,
    eviction: &Value,
    dry_run: bool,
) -> Result<Value, ApiError> {
    let body_name = eviction["metadata"]["name"].as_str().unwrap_or_default();
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object (metadata.name {body_name:?}, URL {name:?})"
        )));
    }
    let pods = inner.kind("", "pods")?;
    let pod = inner.get(&pods, namespace, name)?;
    let options = delete_options(eviction);
    let free = matches!(
        pod["status"]["phase"].as_str(),
        Some("Pending" | "Succeeded" | "Failed") | None
    ) || !pod["metadata"]["deletionTimestamp"].is_null();
    if !free {
        let kind = inner.kind("policy", "poddisruptionbudgets")?;
        let budgets: Vec<Value> = inner
            .iter(&kind, Some(namespace))
            .filter(|pdb| selects(pdb, &pod))
            .cloned()
            .collect();
        if budgets.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = budgets.first() {
            let budget = budget(inner, pdb)?;
            let allowed = if healthy(&pod) {
                budget.disruptions_allowed() > 0
            } else {
                budget.current_healthy >= budget.desired_healthy
            };
            if !allowed {
                if !dry_run {
                    write_status(inner, pdb, budget, budget.disruptions_allowed())?;
                }
                let mut error = ApiError::too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    0,
                );
                error.retry_after = None;
                return Err(error.with_details(json!({"causes": [{
                    "reason": "DisruptionBudget",
                    "message": format!(
                        "The disruption budget {} needs {} healthy pods and has {} currently",
                        name_of(pdb), budget.desired_healthy, budget.current_healthy
                    ),
                }]})));
            }
            if dry_run {
                return Ok(success(201));
            }
            let mut disrupted = pdb.clone();
            disrupted["status"]["disruptedPods"][name] = json!(now_rfc3339());
            let remaining = if healthy(&pod) {
                budget.disruptions_allowed() - 1
            } else {
                budget.disruptions_allowed()
            };
            write_status(inner, &disrupted, budget, remaining.max(0))?;
        }
    }
    if dry_run {
        check_preconditions(&pod, &options)?;
        return Ok(success(201));
    }
    inner.delete(&pods, namespace, name, &options)?;
    Ok(success(201))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(percent_of(&json!("50%"), 3), Some(2));
        assert_eq!(percent_of(&json!(2), 3), Some(2));
        assert_eq!(percent_of(&json!("x"), 3), None);
    }
}
