//! The cached Kubernetes objects → core's `Snapshot`. A pure function: no client, no clock, no
//! randomness; the controller's memory (ledger shares, preemption times, pods to skip) comes in
//! as plain data, so every rule here is tested without a server.
//!
//! How pods are read (only pods labelled `gpufair.io/managed=true` count; others are never
//! acted on):
//! - bound (`spec.nodeName` set, not finished): running, charged to its queue, taking capacity;
//! - carrying gpufair's gate: pending, grouped into workloads (a gang by
//!   `<namespace>/<pod-group>`, else the pod alone);
//! - released by gpufair but not bound yet (no gate, pinned to one node by `metadata.name`):
//!   counted as running on that node, so its capacity is held until it binds;
//! - finished pods, pods being deleted while gated, and pods whose queue does not exist take
//!   no part (the last are reported as skipped).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use gpufair_api::{GpuNodeReport, Queue};
use gpufair_core::labels::{
    MANAGED_LABEL, MIN_MEMBER_ANNOTATION, POD_GROUP_LABEL, QUEUE_LABEL, TASK_TYPE_LABEL, TaskType,
    Tier, URGENCY_LABEL, Urgency, parse_deadline_annotation,
};
use gpufair_core::labels::{USER_TIER_ANNOTATION, UserTier};
use gpufair_core::mutation::{ADMITTED_DEADLINE_ANNOTATION, ResourcePattern, TIER_ANNOTATION};
use gpufair_core::snapshot::{
    LedgerShares, Node as CoreNode, PendingWorkload, PodRequest, Pool, PreviousHold, QueueState,
    ResourceKind, RunningPod, Snapshot,
};
use gpufair_core::units::ResourceTable;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::eligibility::Constraints;
use crate::pools::Pools;
use crate::quantity::{Unit, parse_quantity};
use crate::requests::pod_requests;

/// What a node with no constraint class offers of an eligibility resource: more than any node
/// can ever run pods, so only eligibility (not count) decides.
const ELIGIBLE_COUNT: u32 = 1_000_000;
/// Prefix of the synthetic eligibility resources (never a real resource name: no such domain).
pub const ELIGIBILITY_PREFIX: &str = "eligible.gpufair.invalid/class-";

/// Which resources are GPUs and what each is worth.
#[derive(Debug, Clone)]
pub struct GpuKinds {
    pub patterns: Vec<ResourcePattern>,
    pub table: ResourceTable,
}

impl GpuKinds {
    /// GPU-equivalents of one unit of `name`, or `None` for a resource that is no GPU. A GPU
    /// resource the table cannot value counts as a whole GPU (and is reported as a warning).
    pub fn value(&self, name: &str) -> Option<Result<f64, String>> {
        if !self.patterns.iter().any(|p| p.matches(name)) {
            return None;
        }
        Some(self.table.gpu_equivalents(name).map_err(|e| e.to_string()))
    }
}

/// The controller's memory that the snapshot needs.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub now: f64,
    /// Ledger shares per queue name (neutral when absent).
    pub shares: HashMap<String, LedgerShares>,
    pub last_preemption_at: HashMap<String, f64>,
    /// When each queue last lost a workload to preemption (no releases for one cooldown).
    pub last_evicted_at: HashMap<String, f64>,
    pub recent_preemptions: Vec<f64>,
    /// Last cycle's holds: workload identity and node names, so a hold is kept until it starts.
    pub previous_holds: Vec<(String, Vec<String>)>,
    /// Pods whose release patch failed its test, with the resourceVersion it was built from:
    /// skipped until the cache shows a newer version (re-read, never retried blind).
    pub stale: HashMap<String, String>,
    /// Released pods that did not bind in time: no longer counted as holding capacity.
    pub expired: HashSet<String>,
    /// Pods this leader released, by UID, with their node: until the cache shows the gate
    /// gone, they count as released (never released twice, never their capacity given away).
    pub released: HashMap<String, String>,
}

/// A pod, as named in API calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// How the pod's required node affinity looks, so the pin can be added by JSON patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AffinityShape {
    NoAffinity,
    NoNodeAffinity,
    NoRequired,
    /// One entry per required term: whether it already has `matchFields`.
    Terms(Vec<bool>),
}

/// A gated pod, with what releasing it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingPod {
    pub pod: PodRef,
    pub gate_index: usize,
    pub resource_version: String,
    pub affinity: AffinityShape,
    pub created_at: f64,
}

/// A pod counted as running (bound, or released and pinned).
#[derive(Debug, Clone, PartialEq)]
pub struct RunningRef {
    pub pod: PodRef,
    pub bound: bool,
}

/// Per queue, what the ledger charges.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueUse {
    /// GPU-equivalents of bound pods.
    pub allocated: f64,
    /// Measured GPU-equivalents in use (allocated where no report covers the pod).
    pub utilized: f64,
    pub pending_pods: usize,
}

/// The snapshot and how its indices map back to Kubernetes objects.
#[derive(Debug, Clone, Default)]
pub struct Built {
    pub snapshot: Snapshot,
    /// Parallel to `snapshot.pending`, and inside to each workload's `pods`.
    pub pending: Vec<Vec<PendingPod>>,
    /// Parallel to `snapshot.running`.
    pub running: Vec<RunningRef>,
    /// Per queue (in `snapshot.queues` order).
    pub usage: Vec<QueueUse>,
    /// Per pool: GPU-equivalents of its nodes.
    pub pool_capacity: Vec<f64>,
    /// Released pods not bound yet, and the node each is pinned to.
    pub unbound: Vec<(PodRef, String)>,
    /// Pods left out, and why.
    pub skipped: Vec<(PodRef, String)>,
    /// Problems worth a log line (bad quantities, unvalued GPU resources, invalid Queues).
    pub warnings: Vec<String>,
}

/// Everything the builder reads.
pub struct Objects<'a> {
    pub pods: &'a [Arc<Pod>],
    pub nodes: &'a [Arc<Node>],
    pub queues: &'a [Arc<Queue>],
    pub reports: &'a [Arc<GpuNodeReport>],
}

fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

fn seconds(time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> f64 {
    time.map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn affinity_shape(pod: &Pod) -> AffinityShape {
    let spec = pod.spec.as_ref();
    let Some(affinity) = spec.and_then(|s| s.affinity.as_ref()) else {
        return AffinityShape::NoAffinity;
    };
    let Some(node) = affinity.node_affinity.as_ref() else {
        return AffinityShape::NoNodeAffinity;
    };
    match node
        .required_during_scheduling_ignored_during_execution
        .as_ref()
    {
        None => AffinityShape::NoRequired,
        Some(s) if s.node_selector_terms.is_empty() => AffinityShape::NoRequired,
        Some(s) => AffinityShape::Terms(
            s.node_selector_terms
                .iter()
                .map(|t| t.match_fields.is_some())
                .collect(),
        ),
    }
}

/// The pod's state as the builder classifies it.
enum Class {
    Ignored,
    Bound(String),
    Gated(usize),
    Released,
}

fn classify(pod: &Pod, gate: &str) -> Class {
    let managed = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_LABEL))
        .is_some_and(|v| v == "true");
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !managed || matches!(phase, Some("Succeeded" | "Failed")) {
        return Class::Ignored;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Class::Ignored;
    };
    if let Some(node) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Class::Bound(node.clone());
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Class::Ignored;
    }
    match spec
        .scheduling_gates
        .iter()
        .flatten()
        .position(|g| g.name == gate)
    {
        Some(index) => Class::Gated(index),
        None => Class::Released,
    }
}

/// Per-pod data gathered in the first pass.
struct PodInfo<'a> {
    pod: &'a Pod,
    class: Class,
    queue: Option<usize>,
    requests: BTreeMap<String, f64>,
    constraints: Option<usize>,
}

/// Builds the snapshot. `gate` is the scheduling gate the webhook adds.
pub fn build(objects: &Objects<'_>, memory: &Memory, gate: &str, gpus: &GpuKinds) -> Built {
    let mut built = Built::default();
    let now = memory.now;

    // Queues, canonical by name; invalid specs are reported and left out.
    let mut queues: Vec<&Queue> = Vec::new();
    for q in objects.queues {
        let name = q.metadata.name.as_deref().unwrap_or_default();
        match q.spec.validate(name) {
            Ok(()) => queues.push(q),
            Err(err) => built.warnings.push(err.to_string()),
        }
    }
    queues.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let pools = Pools::from_queues(queues.iter().copied());
    let queue_index: HashMap<&str, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.metadata.name.as_deref().unwrap_or_default(), i))
        .collect();

    // Nodes, canonical by name.
    let mut nodes: Vec<&Node> = objects.nodes.iter().map(|n| n.as_ref()).collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let node_index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.metadata.name.as_deref().unwrap_or_default(), i))
        .collect();

    // First pass over pods: class, queue, requests, constraint class.
    let mut classes: HashMap<Constraints, usize> = HashMap::new();
    let mut class_list: Vec<Constraints> = Vec::new();
    let mut infos: Vec<PodInfo<'_>> = Vec::with_capacity(objects.pods.len());
    for pod in objects.pods {
        let class = classify(pod, gate);
        if matches!(class, Class::Ignored) {
            continue;
        }
        let spec = pod.spec.as_ref().expect("classified pods have a spec");
        let requests = match pod_requests(spec) {
            Ok(r) => r,
            Err(err) => {
                built
                    .skipped
                    .push((pod_ref(pod), format!("bad resource request: {err}")));
                continue;
            }
        };
        let queue = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(QUEUE_LABEL))
            .and_then(|q| queue_index.get(q.as_str()).copied());
        let constraints = if matches!(class, Class::Gated(_)) {
            let c = Constraints::of(spec);
            Some(*classes.entry(c.clone()).or_insert_with(|| {
                class_list.push(c);
                class_list.len() - 1
            }))
        } else {
            None
        };
        infos.push(PodInfo {
            pod,
            class,
            queue,
            requests,
            constraints,
        });
    }

    // Resources: every GPU kind nodes offer and everything pods request, by name; then one
    // eligibility kind per constraint class that excludes some node.
    let mut names: BTreeMap<String, f64> = BTreeMap::new();
    let mut unvalued: HashSet<String> = HashSet::new();
    let mut value_of = |name: &str, names: &mut BTreeMap<String, f64>| {
        if names.contains_key(name) {
            return;
        }
        let value = match gpus.value(name) {
            None => 0.0,
            Some(Ok(v)) => v,
            Some(Err(err)) => {
                if unvalued.insert(name.to_string()) {
                    built
                        .warnings
                        .push(format!("{err}; counted as a whole GPU"));
                }
                1.0
            }
        };
        names.insert(name.to_string(), value);
    };
    for node in &nodes {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for name in allocatable.into_iter().flatten().map(|(k, _)| k) {
            if gpus.value(name).is_some() {
                value_of(name, &mut names);
            }
        }
    }
    for info in &infos {
        for name in info.requests.keys() {
            value_of(name, &mut names);
        }
    }
    let mut resources: Vec<ResourceKind> = names
        .iter()
        .map(|(name, value)| ResourceKind {
            name: name.clone(),
            gpu_equivalents: *value,
        })
        .collect();
    let resource_index: HashMap<String, usize> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.clone(), i))
        .collect();
    let units: Vec<Unit> = resources.iter().map(|r| Unit::of(&r.name)).collect();
    // Eligibility: which classes exclude at least one node get a resource.
    let mut class_resource: Vec<Option<usize>> = vec![None; class_list.len()];
    let mut node_eligible: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (c, constraints) in class_list.iter().enumerate() {
        let admitted: Vec<bool> = nodes.iter().map(|n| constraints.admit(n)).collect();
        if admitted.iter().all(|a| *a) {
            continue;
        }
        let r = resources.len();
        resources.push(ResourceKind {
            name: format!("{ELIGIBILITY_PREFIX}{c}"),
            gpu_equivalents: 0.0,
        });
        class_resource[c] = Some(r);
        for (n, ok) in admitted.iter().enumerate() {
            if *ok {
                node_eligible[n].push(r);
            }
        }
    }
    let width = resources.len();
    let vector = |requests: &BTreeMap<String, f64>| -> Vec<u32> {
        let mut v = vec![0u32; width];
        for (name, value) in requests {
            if let Some(&r) = resource_index.get(name) {
                v[r] = units[r].request(*value);
            }
        }
        v
    };

    // Nodes: allocatable; free starts there and loses what running pods take.
    let mut core_nodes: Vec<CoreNode> = Vec::with_capacity(nodes.len());
    for (n, node) in nodes.iter().enumerate() {
        let mut allocatable = vec![0u32; width];
        let offered = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for (name, q) in offered.into_iter().flatten() {
            if let Some(&r) = resource_index.get(name) {
                match parse_quantity(&q.0) {
                    Ok(v) => allocatable[r] = units[r].capacity(v),
                    Err(err) => built.warnings.push(format!(
                        "node {}: allocatable {name}: {err}",
                        node.metadata.name.as_deref().unwrap_or_default()
                    )),
                }
            }
        }
        for &r in &node_eligible[n] {
            allocatable[r] = ELIGIBLE_COUNT;
        }
        // A node that is not Ready or is cordoned offers nothing new.
        let usable = node_ready(node)
            && !node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
        let free = if usable {
            allocatable.clone()
        } else {
            vec![0; width]
        };
        core_nodes.push(CoreNode {
            name: node.metadata.name.clone().unwrap_or_default(),
            pool: pools.of_node(node),
            allocatable,
            free,
        });
    }
    let gpu_size = |v: &[u32]| -> f64 {
        v.iter()
            .zip(&resources)
            .map(|(c, r)| f64::from(*c) * r.gpu_equivalents)
            .sum()
    };
    built.pool_capacity = vec![0.0; pools.pools.len()];
    for node in &core_nodes {
        built.pool_capacity[node.pool] += gpu_size(&node.allocatable);
    }

    // Measured use per pod UID (and by namespace/name where the report has no UID).
    let mut measured: HashMap<String, f64> = HashMap::new();
    for report in objects.reports {
        for p in &report.spec.pods {
            let devices = p.devices.len().max(1) as f64;
            let fraction = (p.sm_utilization / devices).clamp(0.0, 1.0);
            let key = if p.uid.is_empty() {
                format!("{}/{}", p.namespace, p.name)
            } else {
                p.uid.clone()
            };
            measured.insert(key, fraction);
        }
    }

    // Second pass: running, released and pending pods.
    built.usage = vec![QueueUse::default(); queues.len()];
    let mut gangs_started: HashMap<String, u32> = HashMap::new();
    let mut gated: Vec<(usize, usize)> = Vec::new(); // (info index, gate index)
    for (i, info) in infos.iter().enumerate() {
        let pod = info.pod;
        let reference = pod_ref(pod);
        let group = gang_key(pod);
        let (node_name, bound) = match &info.class {
            Class::Bound(node) => (node.clone(), true),
            Class::Released => {
                let spec = pod.spec.as_ref().expect("classified pods have a spec");
                let constraints = Constraints::of(spec);
                match constraints.pinned_node() {
                    Some(node) if !memory.expired.contains(&reference.uid) => {
                        built.unbound.push((reference.clone(), node.to_string()));
                        (node.to_string(), false)
                    }
                    _ => continue,
                }
            }
            Class::Gated(_) if memory.released.contains_key(&reference.uid) => {
                let node = memory.released[&reference.uid].clone();
                built.unbound.push((reference.clone(), node.clone()));
                (node, false)
            }
            Class::Gated(index) => {
                gated.push((i, *index));
                continue;
            }
            Class::Ignored => continue,
        };
        if let Some(g) = &group {
            *gangs_started.entry(g.clone()).or_default() += 1;
        }
        let Some(&n) = node_index.get(node_name.as_str()) else {
            continue;
        };
        let requests = vector(&info.requests);
        for (slot, taken) in core_nodes[n].free.iter_mut().zip(&requests) {
            *slot = slot.saturating_sub(*taken);
        }
        let Some(queue) = info.queue else {
            continue;
        };
        let size = gpu_size(&requests);
        if bound {
            let usage = &mut built.usage[queue];
            usage.allocated += size;
            let fraction = measured
                .get(&reference.uid)
                .or_else(|| measured.get(&format!("{}/{}", reference.namespace, reference.name)))
                .copied()
                .unwrap_or(1.0);
            usage.utilized += size * fraction;
        }
        let started_at = if bound {
            pod.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map_or(now, |t| seconds(Some(t)))
        } else {
            now
        };
        built.snapshot.running.push(RunningPod {
            uid: reference.uid.clone(),
            workload: group.unwrap_or_else(|| reference.uid.clone()),
            queue,
            node: n,
            requests,
            tier: tier_of(pod),
            started_at,
        });
        built.running.push(RunningRef {
            pod: reference,
            bound,
        });
    }

    // Pending workloads.
    let mut workloads: BTreeMap<String, (PendingWorkload, Vec<PendingPod>)> = BTreeMap::new();
    for (i, gate_index) in gated {
        let info = &infos[i];
        let pod = info.pod;
        let reference = pod_ref(pod);
        let Some(queue) = info.queue else {
            built.skipped.push((
                reference,
                "its gpufair.io/queue names no valid Queue".into(),
            ));
            continue;
        };
        let resource_version = pod.metadata.resource_version.clone().unwrap_or_default();
        if memory
            .stale
            .get(&reference.uid)
            .is_some_and(|rv| *rv == resource_version)
        {
            built.skipped.push((
                reference,
                "gates changed under the last release; waiting for the updated pod".into(),
            ));
            continue;
        }
        let mut requests = vector(&info.requests);
        if let Some(r) = info.constraints.and_then(|c| class_resource[c]) {
            requests[r] = 1;
        }
        let created_at = seconds(pod.metadata.creation_timestamp.as_ref());
        let group = gang_key(pod);
        let key = group.clone().unwrap_or_else(|| reference.uid.clone());
        let entry = workloads.entry(key.clone()).or_insert_with(|| {
            let min_member = group.as_ref().map_or(1, |g| {
                let wanted = min_member(pod);
                wanted
                    .saturating_sub(gangs_started.get(g).copied().unwrap_or(0))
                    .max(1)
            });
            (
                PendingWorkload {
                    uid: key.clone(),
                    queue,
                    tier: tier_of(pod),
                    deadline: deadline_of(pod),
                    urgency: urgency_of(pod),
                    user_tier: user_tier_of(pod),
                    created_at,
                    min_member,
                    pods: Vec::new(),
                },
                Vec::new(),
            )
        });
        entry.0.created_at = entry.0.created_at.min(created_at);
        entry.0.pods.push(PodRequest {
            uid: reference.uid.clone(),
            requests,
        });
        built.usage[queue].pending_pods += 1;
        entry.1.push(PendingPod {
            pod: reference,
            gate_index,
            resource_version,
            affinity: affinity_shape(pod),
            created_at,
        });
    }
    for (_, (workload, pods)) in workloads {
        built.snapshot.pending.push(workload);
        built.pending.push(pods);
    }

    built.snapshot.now = now;
    built.snapshot.resources = resources;
    built.snapshot.pools = pools
        .pools
        .iter()
        .map(|(name, _)| Pool { name: name.clone() })
        .collect();
    built.snapshot.nodes = core_nodes;
    built.snapshot.queues = queues
        .iter()
        .map(|q| {
            let name = q.metadata.name.clone().unwrap_or_default();
            QueueState {
                pool: pools.of_queue(q),
                weight: q.spec.weight,
                guaranteed: q.spec.guaranteed,
                limit: q.spec.limit,
                min_run_time_s: q.spec.min_run_time_s().unwrap_or(0.0),
                shares: memory
                    .shares
                    .get(&name)
                    .copied()
                    .unwrap_or(LedgerShares::NEUTRAL),
                last_preemption_at: memory.last_preemption_at.get(&name).copied(),
                last_evicted_at: memory.last_evicted_at.get(&name).copied(),
                name,
            }
        })
        .collect();
    built.snapshot.recent_preemptions = memory.recent_preemptions.clone();
    let node_index: HashMap<&str, usize> = built
        .snapshot
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    built.snapshot.previous_holds = memory
        .previous_holds
        .iter()
        .map(|(workload, nodes)| PreviousHold {
            workload: workload.clone(),
            nodes: nodes
                .iter()
                .filter_map(|n| node_index.get(n.as_str()).copied())
                .collect(),
        })
        .collect();
    built
}

fn gang_key(pod: &Pod) -> Option<String> {
    let group = pod.metadata.labels.as_ref()?.get(POD_GROUP_LABEL)?;
    Some(format!(
        "{}/{group}",
        pod.metadata.namespace.as_deref().unwrap_or_default()
    ))
}

fn min_member(pod: &Pod) -> u32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIN_MEMBER_ANNOTATION))
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

fn tier_of(pod: &Pod) -> Tier {
    let recorded = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TIER_ANNOTATION))
        .and_then(|t| Tier::parse(t));
    recorded.unwrap_or_else(|| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TASK_TYPE_LABEL))
            .and_then(|t| TaskType::parse(t))
            .unwrap_or(TaskType::Train)
            .tier()
    })
}

fn deadline_of(pod: &Pod) -> Option<f64> {
    let text = pod
        .metadata
        .annotations
        .as_ref()?
        .get(ADMITTED_DEADLINE_ANNOTATION)?;
    parse_deadline_annotation(text)
        .ok()
        .map(|d| d.at_unix_seconds as f64)
}

/// The `user-tier` annotation; the webhook refused bad values at admission, so one that is
/// unreadable now (edited since) counts as the default, standard.
fn user_tier_of(pod: &Pod) -> UserTier {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(USER_TIER_ANNOTATION))
        .and_then(|t| UserTier::parse(t))
        .unwrap_or_default()
}

fn urgency_of(pod: &Pod) -> Urgency {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(URGENCY_LABEL))
        .and_then(|u| Urgency::parse(u))
        .unwrap_or(Urgency::Medium)
}
