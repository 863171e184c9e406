//! The waiting view in Queue status: per queue, how many workloads wait, since when, the
//! queue's place in its pool's order of service, and the head of its release order (at most
//! [`WAITING_HEAD_LIMIT`] workloads, each with its reason, release score and what would release
//! it). `kubectl gpufair` reads it with one list of Queues, however many pods wait, and the
//! status write stays bounded.

use gpufair_api::{ReleaseScoreParts, WAITING_HEAD_LIMIT, WaitingWorkload};
use gpufair_core::admission::{Decisions, DescribeWorkloads};
use gpufair_core::admission::{release_condition, service_order};
use gpufair_core::index::IndexVec;
use gpufair_core::snapshot::{QueueId, Snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::snapshot::Built;
use crate::workload_name::workload_name;

/// One queue's waiting view.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueWaiting {
    pub count: u64,
    /// Creation time of the longest-waiting workload, Unix seconds.
    pub oldest_since: Option<f64>,
    pub pool: String,
    pub service_order: Option<u32>,
    pub head: Vec<WaitingWorkload>,
}

/// Unix seconds as a Kubernetes `Time`, to the millisecond.
pub fn time(unix_s: f64) -> Option<Time> {
    if !unix_s.is_finite() {
        return None;
    }
    let millis = (unix_s * 1000.0).round();
    k8s_openapi::jiff::Timestamp::from_millisecond(millis as i64)
        .ok()
        .map(Time)
}

/// Per queue (in `snapshot.queues` order), how long its longest-waiting workload has waited at
/// `now`, in seconds; 0 where none waits. Cheap enough for every cycle: one pass over the waiting.
pub fn oldest_waits(
    snapshot: &Snapshot,
    decisions: &Decisions,
    now: f64,
) -> IndexVec<QueueId, f64> {
    let mut oldest = IndexVec::from_elem(0.0_f64, snapshot.queues.len());
    for waiting in &decisions.waiting {
        let Some(workload) = snapshot.pending.get(waiting.workload) else {
            continue;
        };
        if let Some(slot) = oldest.get_mut(workload.queue) {
            *slot = slot.max(now - workload.created_at);
        }
    }
    oldest
}

/// The waiting view of every queue, in `built.snapshot.queues` order.
pub fn waiting_view(built: &Built, decisions: &Decisions) -> IndexVec<QueueId, QueueWaiting> {
    let snapshot = &built.snapshot;
    let order = service_order(snapshot, decisions);
    let mut view: IndexVec<QueueId, QueueWaiting> = snapshot
        .queues
        .iter()
        .zip(&order)
        .map(|(queue, &service_order)| QueueWaiting {
            pool: snapshot
                .pools
                .get(queue.pool)
                .map_or_else(String::new, |p| p.name.clone()),
            service_order,
            ..QueueWaiting::default()
        })
        .collect();
    for waiting in &decisions.waiting {
        let Some(workload) = snapshot.pending.get(waiting.workload) else {
            continue;
        };
        let Some(queue) = view.get_mut(workload.queue) else {
            continue;
        };
        queue.count += 1;
        queue.oldest_since = Some(
            queue
                .oldest_since
                .map_or(workload.created_at, |t| t.min(workload.created_at)),
        );
        if waiting.position > WAITING_HEAD_LIMIT {
            continue;
        }
        let Some(pods) = built.pending.get(waiting.workload) else {
            continue;
        };
        let Some(first) = pods.first() else {
            continue;
        };
        let lone = pods.len() == 1 && *first.pod().uid == *workload.uid;
        let pod_group = (!lone).then(|| {
            workload
                .uid
                .split_once('/')
                .map_or(workload.uid.as_str(), |(_, group)| group)
                .to_string()
        });
        let score = waiting.score;
        queue.head.push(WaitingWorkload {
            position: u32::try_from(waiting.position).unwrap_or(u32::MAX),
            namespace: first.pod().namespace.to_string(),
            pod_group,
            pod: first.pod().name.to_string(),
            pods: u32::try_from(pods.len()).unwrap_or(u32::MAX),
            tier: workload.tier.to_string(),
            gpu_equivalents: snapshot.workload_gpu_equivalents(workload),
            since: time(workload.created_at).unwrap_or_else(|| time(0.0).expect("the epoch")),
            reason: waiting.reason.describe(&|w| workload_name(built, w)),
            score: ReleaseScoreParts {
                total: score.total(),
                urgency: score.urgency,
                user_tier: score.user_tier,
                deadline: score.deadline,
                waited: score.waited,
            },
            released_by: release_condition(snapshot, decisions, waiting).to_string(),
        });
    }
    for queue in &mut view {
        queue.head.sort_by_key(|w| w.position);
    }
    view
}
