//! `kubectl gpufair pending [QUEUE]`: waiting workloads in release order, from the head of each
//! queue's release order that Queue status lists.

use gpufair_api::{Queue, ReleaseScoreParts, WAITING_HEAD_LIMIT};
use gpufair_core::time_text;
use serde::Serialize;

use crate::table::render;
use crate::time::{seconds, timestamp};

/// One waiting workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRow {
    pub pool: String,
    pub queue: String,
    /// The queue's place in its pool's order of service.
    pub service_order: Option<u32>,
    /// The workload's place in its queue's release order.
    pub position: u32,
    pub namespace: String,
    pub pod_group: Option<String>,
    pub pod: String,
    pub pods: u32,
    pub tier: String,
    pub gpu_equivalents: f64,
    /// RFC 3339.
    pub since: String,
    pub score: ReleaseScoreParts,
    pub reason: String,
    pub released_by: String,
}

impl PendingRow {
    /// The workload's name: its pod group, or its pod.
    pub fn workload(&self) -> &str {
        self.pod_group.as_deref().unwrap_or(&self.pod)
    }
}

/// What `pending` found: the rows, and per queue how many wait beyond those listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub workloads: Vec<PendingRow>,
    /// Queues with more waiting workloads than their status lists: (queue, listed, waiting).
    pub not_listed: Vec<NotListed>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotListed {
    pub queue: String,
    pub listed: u64,
    pub waiting: u64,
}

/// The waiting workloads of `queues` (only the one named `only`, if given): per pool, queues in
/// the pool's order of service, each queue's workloads in its release order.
pub fn pending(queues: &[Queue], only: Option<&str>) -> Pending {
    let mut workloads = Vec::new();
    let mut not_listed = Vec::new();
    for queue in queues {
        let name = queue.metadata.name.clone().unwrap_or_default();
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let Some(status) = &queue.status else {
            continue;
        };
        let listed = status.waiting_head.len() as u64;
        if let Some(waiting) = status.waiting_workloads
            && waiting > listed
        {
            not_listed.push(NotListed {
                queue: name.clone(),
                listed,
                waiting,
            });
        }
        for w in &status.waiting_head {
            workloads.push(PendingRow {
                pool: status.pool.clone().unwrap_or_default(),
                queue: name.clone(),
                service_order: status.service_order,
                position: w.position,
                namespace: w.namespace.clone(),
                pod_group: w.pod_group.clone(),
                pod: w.pod.clone(),
                pods: w.pods,
                tier: w.tier.clone(),
                gpu_equivalents: w.gpu_equivalents,
                since: timestamp(&w.since),
                score: w.score,
                reason: w.reason.clone(),
                released_by: w.released_by.clone(),
            });
        }
    }
    workloads.sort_by(|a, b| {
        let key = |r: &PendingRow| {
            (
                r.pool.clone(),
                r.service_order.unwrap_or(u32::MAX),
                r.queue.clone(),
                r.position,
            )
        };
        key(a).cmp(&key(b))
    });
    not_listed.sort_by(|a, b| a.queue.cmp(&b.queue));
    Pending {
        workloads,
        not_listed,
    }
}

/// The table, with waits measured to `now` (Unix seconds).
pub fn table(pending: &Pending, now: f64) -> String {
    let mut out = if pending.workloads.is_empty() {
        "No waiting workloads.\n".to_string()
    } else {
        let header = [
            "POOL",
            "QUEUE",
            "#",
            "NAMESPACE",
            "WORKLOAD",
            "PODS",
            "TIER",
            "GPU-EQ",
            "WAITING",
            "SCORE",
            "REASON",
        ];
        let cells: Vec<Vec<String>> = pending
            .workloads
            .iter()
            .map(|r| {
                vec![
                    r.pool.clone(),
                    r.queue.clone(),
                    r.position.to_string(),
                    r.namespace.clone(),
                    r.workload().to_string(),
                    r.pods.to_string(),
                    r.tier.clone(),
                    format!("{:.2}", r.gpu_equivalents),
                    seconds(&r.since).map_or_else(|| "-".into(), |t| time_text::duration(now - t)),
                    format!("{:.3}", r.score.total),
                    r.reason.clone(),
                ]
            })
            .collect();
        render(&header, &cells)
    };
    for n in &pending.not_listed {
        out.push_str(&format!(
            "queue {}: {} waiting, the first {} listed (Queue status lists at most {WAITING_HEAD_LIMIT}; \
             `kubectl gpufair why POD` explains any of them)\n",
            n.queue, n.waiting, n.listed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(position: u32, pod: &str, group: Option<&str>) -> serde_json::Value {
        json!({"position": position, "namespace": "team", "pod": pod, "podGroup": group,
               "pods": if group.is_some() { 4 } else { 1 }, "tier": "elastic", "gpuEquivalents": 2.0,
               "since": "2026-12-02T02:50:00Z", "reason": "no placement of all its pods exists in free capacity",
               "score": {"total": 1.25, "urgency": 0.5, "userTier": 0.5, "deadline": 0.0, "waited": 0.25},
               "releasedBy": "2 GPUs free on a node of pool default"})
    }

    fn queue(name: &str, order: u32, waiting: u64, head: Vec<serde_json::Value>) -> Queue {
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": {}, "status": {"pool": "default", "serviceOrder": order,
                                   "waitingWorkloads": waiting, "waitingHead": head}
        }))
        .unwrap()
    }

    #[test]
    fn workloads_follow_the_order_of_service_then_release_order() {
        let queues = [
            queue("b", 2, 1, vec![entry(1, "b-1", None)]),
            queue(
                "a",
                1,
                30,
                vec![entry(2, "a-2", None), entry(1, "train-0", Some("train"))],
            ),
        ];
        let all = pending(&queues, None);
        let names: Vec<&str> = all.workloads.iter().map(PendingRow::workload).collect();
        assert_eq!(names, ["train", "a-2", "b-1"]);
        let now = seconds("2026-12-02T03:00:00Z").unwrap();
        assert_eq!(
            table(&all, now),
            "\
POOL      QUEUE   #   NAMESPACE   WORKLOAD   PODS   TIER      GPU-EQ   WAITING   SCORE   REASON
default   a       1   team        train      4      elastic   2.00     10 min    1.250   no placement of all its pods exists in free capacity
default   a       2   team        a-2        1      elastic   2.00     10 min    1.250   no placement of all its pods exists in free capacity
default   b       1   team        b-1        1      elastic   2.00     10 min    1.250   no placement of all its pods exists in free capacity
queue a: 30 waiting, the first 2 listed (Queue status lists at most 20; `kubectl gpufair why POD` explains any of them)
"
        );
        let only_b = pending(&queues, Some("b"));
        assert_eq!(only_b.workloads.len(), 1);
        assert!(only_b.not_listed.is_empty());
        assert_eq!(table(&pending(&[], None), now), "No waiting workloads.\n");
    }
}
