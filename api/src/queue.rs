//! The `Queue` custom resource: a team's share of the cluster and its usage ledger.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::carried_status::CarriedStatus;
use crate::ledger_status::LedgerStatus;

fn default_weight() -> f64 {
    1.0
}

fn default_min_run_time() -> String {
    "0s".to_string()
}

/// A queue of GPU work, usually one team. Cluster-scoped: queues divide the whole cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpufair.io",
    version = "v1alpha1",
    kind = "Queue",
    plural = "queues",
    singular = "queue",
    status = "QueueStatus",
    printcolumn = r#"{"name":"Weight","type":"number","jsonPath":".spec.weight"}"#,
    printcolumn = r#"{"name":"Guaranteed","type":"number","jsonPath":".spec.guaranteed"}"#,
    printcolumn = r#"{"name":"Effective","type":"number","jsonPath":".status.effectiveWeight"}"#,
    printcolumn = r#"{"name":"Fair-Share","type":"number","jsonPath":".status.fairShare"}"#,
    printcolumn = r#"{"name":"Usage","type":"number","jsonPath":".status.usageShare"}"#,
    printcolumn = r#"{"name":"Allocated","type":"number","jsonPath":".status.allocated"}"#,
    printcolumn = r#"{"name":"Pending","type":"number","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueSpec {
    /// Base weight for dividing capacity beyond guarantees. Must be > 0.
    #[serde(default = "default_weight")]
    #[schemars(range(min = 0.0))]
    pub weight: f64,
    /// GPU-equivalents this queue gets first whenever it has the demand.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub guaranteed: f64,
    /// Most GPU-equivalents the queue may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub limit: Option<f64>,
    /// Namespaces whose pods may submit to this queue (and default to it).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Nodes this queue's pods run on; injected as required node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<LabelSelector>,
    /// Priority classes a pod of this queue may name itself. Any other explicit class is denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_classes: Option<Vec<String>>,
    /// Usage share (0..1) a new queue is assumed to have had over the window (cold start).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub initial_usage: f64,
    /// Running pods younger than this are never preempted, e.g. `2h`.
    #[serde(default = "default_min_run_time")]
    pub min_run_time: String,
}

/// What the controller last computed for the queue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Decayed usage history, restored on controller restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerStatus>,
    /// Decayed charged GPU-seconds ÷ decayed capacity over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_share: Option<f64>,
    /// Decayed entitled GPU-seconds ÷ decayed capacity over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<f64>,
    /// This cycle's fair share, GPU-equivalents: the pool divided by effective weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_gpus: Option<f64>,
    /// max(minWeight·weight, weight·(1 + K·(fairShare − usageShare))).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_weight: Option<f64>,
    /// GPU-equivalents held by running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<f64>,
    /// GPU-equivalents requested by gated pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Gated workloads (a lone pod, or a gang) waiting in the queue. The waiting fields below
    /// are written as a whole at every status write (null when unknown), so a merge patch
    /// never leaves an older view behind.
    #[serde(default)]
    pub waiting_workloads: Option<u64>,
    /// Creation time of the workload that has waited longest.
    #[serde(default)]
    pub oldest_waiting_since: Option<Time>,
    /// The pool the queue's pods run in.
    #[serde(default)]
    pub pool: Option<String>,
    /// The queue's 1-based place in its pool's order of service, among the pool's queues with
    /// waiting workloads: queues whose next workload fits in what is left of their guarantee
    /// first, then by allocated ÷ fair share.
    #[serde(default)]
    pub service_order: Option<u32>,
    /// The first waiting workloads in the queue's release order, at most
    /// [`WAITING_HEAD_LIMIT`], so the status stays small however many pods wait.
    #[serde(default)]
    pub waiting_head: Vec<WaitingWorkload>,
    /// When the controller computed the figures in this status.
    #[serde(default)]
    pub observed_at: Option<Time>,
    /// The queue's holds and preemption history, which a new leader carries on from.
    #[serde(default)]
    pub carried: Option<CarriedStatus>,
}

/// Most waiting workloads a Queue's status lists (`status.waitingHead`).
pub const WAITING_HEAD_LIMIT: usize = 20;

/// One waiting workload in `Queue.status.waitingHead`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingWorkload {
    /// 1-based place in the queue's release order (tier, then release score).
    pub position: u32,
    pub namespace: String,
    /// The gang's pod group, for a gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group: Option<String>,
    /// The pod, for a lone pod; a gang's first pod.
    pub pod: String,
    /// Pods present (a gang's members so far).
    pub pods: u32,
    /// realtime, elastic or backfill.
    pub tier: String,
    /// GPU-equivalents the workload asks for in all.
    pub gpu_equivalents: f64,
    /// Creation time (the oldest pod's, for a gang).
    pub since: Time,
    /// Why it waits this cycle.
    pub reason: String,
    /// Its release score, part by part.
    pub score: ReleaseScoreParts,
    /// What would release it.
    pub released_by: String,
}

/// A release score, part by part (each part already weighted), and its total.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseScoreParts {
    pub total: f64,
    pub urgency: f64,
    pub user_tier: f64,
    pub deadline: f64,
    pub waited: f64,
}

/// A Queue spec that does not make sense, naming the field and the accepted range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("Queue {queue:?}: spec.{field} = {value} is invalid: expected {expected}")]
pub struct QueueSpecError {
    pub queue: String,
    pub field: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl QueueSpec {
    /// Checks ranges the OpenAPI schema cannot express (NaN, strict > 0, duration syntax).
    pub fn validate(&self, queue: &str) -> Result<(), QueueSpecError> {
        let err = |field, value: String, expected| QueueSpecError {
            queue: queue.to_string(),
            field,
            value,
            expected,
        };
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(err(
                "weight",
                self.weight.to_string(),
                "a finite number > 0",
            ));
        }
        if !(self.guaranteed.is_finite() && self.guaranteed >= 0.0) {
            return Err(err(
                "guaranteed",
                self.guaranteed.to_string(),
                "GPU-equivalents >= 0",
            ));
        }
        if let Some(limit) = self.limit
            && !(limit.is_finite() && limit >= 0.0)
        {
            return Err(err("limit", limit.to_string(), "GPU-equivalents >= 0"));
        }
        if !(self.initial_usage.is_finite() && (0.0..=1.0).contains(&self.initial_usage)) {
            return Err(err(
                "initialUsage",
                self.initial_usage.to_string(),
                "a share between 0 and 1",
            ));
        }
        if gpufair_core::duration::parse_duration(&self.min_run_time).is_err() {
            return Err(err(
                "minRunTime",
                format!("{:?}", self.min_run_time),
                "a duration such as 0s, 30m or 2h",
            ));
        }
        Ok(())
    }

    /// `minRunTime` in seconds (validated by [`QueueSpec::validate`]).
    pub fn min_run_time_s(&self) -> Result<f64, gpufair_core::duration::DurationError> {
        gpufair_core::duration::parse_duration(&self.min_run_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn defaults_apply_to_a_minimal_queue() {
        let spec: QueueSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec.weight, 1.0);
        assert_eq!(spec.guaranteed, 0.0);
        assert_eq!(spec.limit, None);
        assert_eq!(spec.initial_usage, 0.0);
        assert_eq!(spec.min_run_time, "0s");
        spec.validate("q").unwrap();
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = serde_json::from_str::<QueueSpec>(r#"{"wieght": 2}"#).unwrap_err();
        assert!(err.to_string().contains("wieght"), "{err}");
    }

    #[test]
    fn validation_names_field_and_range() {
        let bad = [
            (r#"{"weight": 0}"#, "spec.weight"),
            (r#"{"weight": -1}"#, "spec.weight"),
            (r#"{"guaranteed": -3}"#, "spec.guaranteed"),
            (r#"{"limit": -1}"#, "spec.limit"),
            (r#"{"initialUsage": 1.5}"#, "spec.initialUsage"),
            (r#"{"minRunTime": "2 hours"}"#, "spec.minRunTime"),
        ];
        for (json, field) in bad {
            let spec: QueueSpec = serde_json::from_str(json).unwrap();
            let err = spec.validate("team").unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains("expected"),
                "{json}: {err}"
            );
        }
        let nan = QueueSpec {
            weight: f64::NAN,
            ..serde_json::from_str("{}").unwrap()
        };
        assert!(nan.validate("team").is_err());
    }

    #[test]
    fn crd_is_cluster_scoped_with_printer_columns() {
        let crd = Queue::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.group, "gpufair.io");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        let columns: Vec<_> = version
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert!(columns.contains(&"Effective") && columns.contains(&"Usage"));
        assert!(version.subresources.as_ref().unwrap().status.is_some());
    }
}
