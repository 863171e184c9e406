//! Core's decisions → the exact requests and Events that carry them out. Pure: the JSON patch of
//! each release, the pods of each eviction and the text of each explanation are decided here and
//! tested without a server; `apply` only sends them.

use std::sync::Arc;

use gpufair_core::admission::release_condition;
use gpufair_core::admission::{Decisions, DescribeWorkloads, Waiting};
use gpufair_core::snapshot::QueueId;
use serde_json::{Value, json};

use crate::prefetch::ahead_in_two_steps;
use crate::snapshot::{AffinityShape, Built, PendingPod, PodRef};
use crate::workload_name::workload_name;

/// Releasing one pod: pin it to its node and remove gpufair's gate, in one JSON patch.
///
/// The patch is written when the release is sent ([`Self::json_patch`]), not when it is planned: one
/// cycle can plan tens of thousands of releases that the release limit then sends over
/// minutes, and writing every patch up front cost more than building and deciding the cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRelease {
    pending: PendingPod,
    pub node: String,
    gate: Arc<str>,
}

impl PodRelease {
    /// Releasing the gated pod `pending`, whose gate is `gate`, onto `node`.
    pub fn new(pending: PendingPod, node: impl Into<String>, gate: Arc<str>) -> Self {
        Self {
            pending,
            node: node.into(),
            gate,
        }
    }

    pub fn pod(&self) -> &PodRef {
        self.pending.pod()
    }

    /// The JSON patch (an array of operations); see [`release_patch`].
    pub fn json_patch(&self) -> Value {
        release_patch(&self.pending, &self.gate, &self.node)
    }

    /// The resourceVersion the patch tests.
    pub fn resource_version(&self) -> &str {
        self.pending.resource_version()
    }

    /// Creation time, for the gate-release latency.
    pub fn created_at(&self) -> f64 {
        self.pending.created_at()
    }
}

/// Releasing a workload: all its pods or, if a request fails, as many as went through (the rest
/// are released by a later cycle: a gang's started members lower what it still needs).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadRelease {
    pub workload: String,
    pub queue: String,
    pub reason: String,
    pub pods: Vec<PodRelease>,
}

/// Evicting a whole workload for a preemptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    pub workload: String,
    pub victim_queue: String,
    pub pods: Vec<PodRef>,
    pub preemptor_workload: String,
    pub preemptor_queue: String,
    pub preemptor_pods: Vec<PodRef>,
    pub reason: String,
    /// The victim ran as backfill in the preemptor's hold: its queue is not cooled down for it,
    /// as the held workload, not the victim's queue, takes the room next.
    pub backfill: bool,
}

/// Why a pod stays gated, for its Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub pod: PodRef,
    pub message: String,
}

/// What core's decisions ask of the cluster: releases, evictions and explanations. The cycle's
/// other requests (expiries, status writes) are planned in [`crate::step`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub releases: Vec<WorkloadRelease>,
    pub evictions: Vec<Eviction>,
    pub explanations: Vec<Explanation>,
}

/// The `matchFields` requirement that pins a pod to `node` by name.
fn pin_requirement(node: &str) -> Value {
    json!({"key": "metadata.name", "operator": "In", "values": [node]})
}

const REQUIRED: &str = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution";

/// The JSON patch that releases `pod` onto `node`: the `test` ops pin the gate's index and name
/// and the resourceVersion the pod was read at, so any concurrent change fails the patch (the
/// pod is re-read, never retried blind); then the pin (narrowing required node affinity, which
/// a gated pod allows); then the gate's removal.
pub fn release_patch(pod: &PendingPod, gate: &str, node: &str) -> Value {
    let gate_path = format!("/spec/schedulingGates/{}", pod.gate_index);
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": pod.resource_version()}),
        json!({"op": "test", "path": format!("{gate_path}/name"), "value": gate}),
    ];
    let requirement = pin_requirement(node);
    let term = json!({"matchFields": [requirement]});
    match pod.affinity() {
        AffinityShape::NoAffinity => ops.push(json!({
            "op": "add", "path": "/spec/affinity",
            "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [term]}}}
        })),
        AffinityShape::NoNodeAffinity => ops.push(json!({
            "op": "add", "path": "/spec/affinity/nodeAffinity",
            "value": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [term]}}
        })),
        AffinityShape::NoRequired => ops.push(json!({
            "op": "add", "path": REQUIRED, "value": {"nodeSelectorTerms": [term]}
        })),
        // Terms are ORed: every term must be narrowed, or the others would still admit any node.
        AffinityShape::Terms(has_fields) => {
            for (i, has) in has_fields.iter().enumerate() {
                let path = format!("{REQUIRED}/nodeSelectorTerms/{i}/matchFields");
                ops.push(if *has {
                    json!({"op": "add", "path": format!("{path}/-"), "value": requirement})
                } else {
                    json!({"op": "add", "path": path, "value": [requirement]})
                });
            }
        }
    }
    ops.push(json!({"op": "remove", "path": gate_path}));
    Value::Array(ops)
}

/// Turns decisions into a plan, with an explanation for every waiting pod.
pub fn plan(built: &Built, decisions: &Decisions, gate: &str) -> Plan {
    plan_explaining(built, decisions, gate, |_| true)
}

/// The controller's choice of waiting pods to explain, for [`plan_explaining`]: those due an
/// Event at `now` (none in the last `interval` seconds), at most `cap` of them. Each one chosen
/// is recorded as told; the others stay due for a later cycle.
pub fn explanation_turns(now: f64, interval: f64, cap: usize) -> impl FnMut(&PendingPod) -> bool {
    let mut left = cap;
    move |pod| {
        let due = left > 0 && pod.take_explanation_turn(now, interval);
        left -= usize::from(due);
        due
    }
}

/// Turns decisions into a plan, explaining only the waiting pods `explain_pod` picks. The
/// controller explains each pod once per interval, and formatting a message for every waiting
/// pod every cycle cost more than building and deciding the cycle with 200,000 pods waiting.
pub fn plan_explaining(
    built: &Built,
    decisions: &Decisions,
    gate: &str,
    explain_pod: impl FnMut(&PendingPod) -> bool,
) -> Plan {
    let snapshot = &built.snapshot;
    let queue_name = |q: QueueId| {
        snapshot
            .queues
            .get(q)
            .map_or_else(String::new, |s| s.name.clone())
    };
    let mut actions = Plan::default();
    let gate: Arc<str> = gate.into();
    for release in &decisions.releases {
        let Some(workload) = snapshot.pending.get(release.workload) else {
            continue;
        };
        let Some(pods) = built.pending.get(release.workload) else {
            continue;
        };
        let mut planned = Vec::with_capacity(pods.len());
        for (pod, &node) in pods.iter().zip(&release.placements) {
            let Some(node) = snapshot.nodes.get(node) else {
                continue;
            };
            planned.push(PodRelease::new(pod.clone(), &node.name, gate.clone()));
        }
        actions.releases.push(WorkloadRelease {
            workload: workload.uid.clone(),
            queue: queue_name(workload.queue),
            reason: release.reason.describe(&|w| workload_name(built, w)),
            pods: planned,
        });
    }
    for preemption in &decisions.preemptions {
        let Some(preemptor) = snapshot.pending.get(preemption.for_workload) else {
            continue;
        };
        let pods: Vec<PodRef> = preemption
            .pods
            .iter()
            .filter_map(|&p| built.running.get(p).map(|r| r.pod().clone()))
            .collect();
        let victim_queue = preemption
            .pods
            .first()
            .and_then(|&p| snapshot.running.get(p))
            .map_or_else(String::new, |r| queue_name(r.queue));
        actions.evictions.push(Eviction {
            workload: preemption.victim_workload.clone(),
            victim_queue,
            pods,
            preemptor_workload: preemptor.uid.clone(),
            preemptor_queue: queue_name(preemptor.queue),
            preemptor_pods: built
                .pending
                .get(preemption.for_workload)
                .unwrap_or_default()
                .iter()
                .map(|p| p.pod().clone())
                .collect(),
            reason: preemption.reason.to_string(),
            backfill: matches!(
                preemption.reason,
                gpufair_core::admission::PreemptionReason::Backfill
            ),
        });
    }
    actions.explanations = explain(built, decisions, explain_pod);
    actions
}

/// One message per waiting pod: its queue's standing, its place and release score in the
/// queue, and core's wait reason.
fn explain(
    built: &Built,
    decisions: &Decisions,
    mut explain_pod: impl FnMut(&PendingPod) -> bool,
) -> Vec<Explanation> {
    let snapshot = &built.snapshot;
    let mut out = Vec::new();
    // Every waiting pod is offered, and deciding reads its facts: in a steady cycle that is
    // all this loop does, so the pods a few workloads on are loaded meanwhile.
    let first_pod = |waiting: &Waiting| built.pending.get(waiting.workload)?.first();
    let first_facts = |waiting: &Waiting| first_pod(waiting).map(PendingPod::facts);
    for waiting in ahead_in_two_steps(decisions.waiting.iter(), first_pod, first_facts) {
        let Some(workload) = snapshot.pending.get(waiting.workload) else {
            continue;
        };
        let Some(pods) = built.pending.get(waiting.workload) else {
            continue;
        };
        let chosen: Vec<&PodRef> = pods
            .iter()
            .filter(|pod| explain_pod(pod))
            .map(PendingPod::pod)
            .collect();
        if chosen.is_empty() {
            continue;
        }
        let Some(queue) = snapshot.queues.get(workload.queue) else {
            continue;
        };
        let outcome = decisions.queues.get(workload.queue).copied();
        let (allocated, fair, weight) = outcome.map_or((0.0, 0.0, 0.0), |o| {
            (o.allocated, o.fair_share, o.effective_weight)
        });
        let message = format!(
            "Waiting in queue {}: {}. The queue holds {allocated:.2} GPU-equivalents of a fair \
             share of {fair:.2} (effective weight {weight:.2}, usage share {:.3} of fair share \
             {:.3} over the window); this workload is {} of {} waiting in the queue ({} tier, \
             {}). It would be released by {}.",
            queue.name,
            waiting.reason.describe(&|w| workload_name(built, w)),
            queue.shares.usage_share,
            queue.shares.fair_share,
            waiting.position,
            waiting.queue_length,
            workload.tier,
            waiting.score,
            release_condition(snapshot, decisions, waiting),
        );
        for pod in chosen {
            out.push(Explanation {
                pod: pod.clone(),
                message: message.clone(),
            });
        }
    }
    out
}
