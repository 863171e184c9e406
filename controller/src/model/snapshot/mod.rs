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

mod pod_pass;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use gpufair_api::{GpuNodeReport, Queue};
use gpufair_core::admission::CycleMemory;
use gpufair_core::index::IndexVec;
use gpufair_core::ledger::UsageSpan;
use gpufair_core::mutation::ResourcePattern;
use gpufair_core::snapshot::{
    LedgerShares, Node as CoreNode, NodeId, Pool, PoolId, QueueId, QueueState, ResourceKind,
    Snapshot,
};
use gpufair_core::units::ResourceTable;
use k8s_openapi::api::core::v1::{Node, Pod};

use self::pod_pass::{PodPass, read_pods};
use crate::facts::{FactsCache, PodFacts};
use crate::grouped::Grouped;
pub use crate::pod_ref::{AffinityShape, PodRef};
use crate::pools::Pools;
use crate::prefetch::drop_ahead;
use gpufair_core::quantity::{Unit, parse_quantity};

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
    /// What core's cycles hand one another: holds, their backfill, preemption history. The
    /// simulator carries the same.
    pub carried: CycleMemory,
    /// Pods whose release patch failed its test, with the resourceVersion it was built from:
    /// skipped until the cache shows a newer version (re-read, never retried blind).
    pub stale: HashMap<String, String>,
    /// Released pods that did not bind in time: no longer counted as holding capacity.
    pub expired: HashSet<String>,
    /// Pods this leader released, by UID, with their node: until the cache shows the gate
    /// gone, they count as released (never released twice, never their capacity given away).
    pub released: HashMap<String, String>,
    /// Victim workloads whose eviction a disruption budget (or a 429) refused, with when. For
    /// [`REFUSED_EVICTION_BACKOFF_S`] core chooses other victims instead of asking again.
    pub refused_evictions: HashMap<String, f64>,
    /// Whether to list each queue's pods' spans of use ([`Built::usage_spans`]): a new leader's
    /// first cycle charges the stretch since its predecessor's last status write with them.
    pub usage_spans: bool,
}

/// How long a refused victim is passed over before it may be chosen again: long enough for
/// the preemptor to turn to another victim, short enough that a budget that relaxes (its pods
/// became ready) is used again within a minute.
pub const REFUSED_EVICTION_BACKOFF_S: f64 = 60.0;

/// A gated pod, with what releasing it needs. It shares the pod store's parsed facts rather
/// than copying its name, version and affinity: a cycle lists every waiting pod, and those
/// copies once cost more than the rest of the build together.
#[derive(Debug, Clone)]
pub struct PendingPod {
    facts: Arc<PodFacts>,
    /// Where gpufair's gate sits in `spec.schedulingGates`.
    pub gate_index: usize,
}

impl PendingPod {
    /// `facts` of a pod in state [`PodState::Gated`], and its gate's index.
    pub fn new(facts: Arc<PodFacts>, gate_index: usize) -> Self {
        Self { facts, gate_index }
    }

    pub fn pod(&self) -> &PodRef {
        &self.facts.reference
    }

    /// Everything read from the pod.
    pub fn facts(&self) -> &PodFacts {
        &self.facts
    }

    /// Whether the pod is due an Event saying why it waits at `now`: never told, or told at
    /// least `interval` seconds ago. When it is, `now` is recorded as its last.
    pub fn take_explanation_turn(&self, now: f64, interval: f64) -> bool {
        let due = self
            .facts
            .last_explained
            .get()
            .is_none_or(|at| now - at >= interval);
        if due {
            self.facts.last_explained.set(now);
        }
        due
    }

    /// The resourceVersion the pod was read at.
    pub fn resource_version(&self) -> &str {
        &self.facts.resource_version
    }

    pub fn affinity(&self) -> &AffinityShape {
        &self.facts.affinity
    }

    /// `metadata.creationTimestamp`, Unix seconds.
    pub fn created_at(&self) -> f64 {
        self.facts.created_at
    }
}

/// Equal when they release the same pod version the same way.
impl PartialEq for PendingPod {
    fn eq(&self, other: &Self) -> bool {
        self.gate_index == other.gate_index
            && self.pod() == other.pod()
            && self.resource_version() == other.resource_version()
            && self.affinity() == other.affinity()
            && self.created_at() == other.created_at()
    }
}

/// A pod counted as running (bound, or released and pinned), sharing the pod store's facts.
#[derive(Debug, Clone)]
pub struct RunningRef {
    facts: Arc<PodFacts>,
    pub bound: bool,
}

impl RunningRef {
    pub fn pod(&self) -> &PodRef {
        &self.facts.reference
    }
}

impl PartialEq for RunningRef {
    fn eq(&self, other: &Self) -> bool {
        self.bound == other.bound && self.pod() == other.pod()
    }
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
    /// Group `w` is parallel to `snapshot.pending[w].pods`.
    pub pending: Grouped<PendingPod>,
    /// Parallel to `snapshot.running`.
    pub running: Vec<RunningRef>,
    /// Per queue (in `snapshot.queues` order).
    pub usage: IndexVec<QueueId, QueueUse>,
    /// Per pool: GPU-equivalents of its nodes.
    pub pool_capacity: IndexVec<PoolId, f64>,
    /// Per queue, when [`Memory::usage_spans`] asks: each bound pod's span of use, running or
    /// finished (while its object is kept), for charging a stretch no cycle watched.
    pub usage_spans: IndexVec<QueueId, Vec<UsageSpan>>,
    /// Released pods not bound yet, and the node each is pinned to.
    pub unbound: Vec<(PodRef, String)>,
    /// Pods left out, and why.
    pub skipped: Vec<(PodRef, String)>,
    /// Problems worth a log line (bad quantities, unvalued GPU resources, invalid Queues).
    pub warnings: Vec<String>,
}

impl Drop for Built {
    /// Each waiting pod's handle releases its share of the pod's facts, a write to memory the
    /// build last read long ago: done in order, with the pods a few workloads on already loading.
    fn drop(&mut self) {
        drop_ahead(std::mem::take(&mut self.pending).into_items(), |pod| {
            &pod.facts.state
        });
    }
}

/// Everything the builder reads.
pub struct Objects<'a> {
    pub pods: &'a [Arc<Pod>],
    pub nodes: &'a [Arc<Node>],
    pub queues: &'a [Arc<Queue>],
    pub reports: &'a [Arc<GpuNodeReport>],
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Since when a bound pod holds its node's GPUs, for its span of use: its binding, else its
/// start, else (neither recorded) all along.
fn held_since(facts: &PodFacts) -> f64 {
    facts
        .bound_at
        .or(facts.started_at.map(crate::facts::mid_second))
        .unwrap_or(f64::NEG_INFINITY)
}

/// Builds the snapshot from pod objects. `gate` is the scheduling gate the webhook adds. Parses
/// every pod; the controller keeps parsed pods between cycles and calls [`build_from_facts`].
pub fn build(objects: &Objects<'_>, memory: &Memory, gate: &str, gpus: &GpuKinds) -> Built {
    let mut pods = FactsCache::default();
    pods.refresh(objects.pods, gate);
    build_from_facts(&pods, &objects.cluster(), memory, gpus)
}

/// The cluster's objects other than pods.
pub struct Cluster<'a> {
    pub nodes: &'a [Arc<Node>],
    pub queues: &'a [Arc<Queue>],
    pub reports: &'a [Arc<GpuNodeReport>],
}

impl<'a> Objects<'a> {
    pub fn cluster(&self) -> Cluster<'a> {
        Cluster {
            nodes: self.nodes,
            queues: self.queues,
            reports: self.reports,
        }
    }
}

/// The per-cycle maps are keyed by pod, node and queue names the cluster chose; foldhash is
/// seeded per process, and several times faster than SipHash on tens of thousands of keys.
type FastMap<K, V> = foldhash::HashMap<K, V>;

/// Builds the snapshot from the parsed pods in `pods` and the rest of the cluster.
pub fn build_from_facts(
    pods: &FactsCache,
    objects: &Cluster<'_>,
    memory: &Memory,
    gpus: &GpuKinds,
) -> Built {
    let mut built = Built::default();
    let queues = canonical_queues(objects.queues, &mut built.warnings);
    let pools = Pools::from_queues(queues.iter().copied());
    let nodes = canonical_nodes(objects.nodes);
    let pass = read_pods(pods, &queues, &nodes, memory, &mut built);
    let kinds = resource_kinds(&nodes, &pass, gpus, &mut built.warnings);
    let mut core_nodes = core_nodes(&nodes, &kinds, &pools, &mut built.warnings);
    let shape_sizes = shape_sizes(&kinds, &core_nodes, &pools, &mut built);
    let measured = measured_use(objects.reports);
    charge_and_request(
        &mut built,
        &mut core_nodes,
        &pass,
        &kinds,
        &shape_sizes,
        &measured,
        memory,
    );
    finish(&mut built, kinds, core_nodes, &pools, &queues, memory);
    built
}

/// The valid Queues, canonical by name; invalid specs are reported and left out.
fn canonical_queues<'q>(all: &'q [Arc<Queue>], warnings: &mut Vec<String>) -> Vec<&'q Queue> {
    let mut queues: Vec<&Queue> = Vec::new();
    for q in all {
        let name = q.metadata.name.as_deref().unwrap_or_default();
        match q.spec.validate(name) {
            Ok(()) => queues.push(q),
            Err(err) => warnings.push(err.to_string()),
        }
    }
    queues.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    queues
}

/// The nodes, canonical by name.
fn canonical_nodes(all: &[Arc<Node>]) -> Vec<&Node> {
    let mut nodes: Vec<&Node> = all.iter().map(|n| n.as_ref()).collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    nodes
}

/// The resources of the snapshot: every GPU kind nodes offer and pods request, then one
/// eligibility kind per constraint class that excludes some node; each shape as a vector.
struct ResourceKinds {
    resources: Vec<ResourceKind>,
    /// By name, for the named kinds (not the eligibility ones).
    resource_index: FastMap<String, usize>,
    /// Parallel to the named kinds.
    units: Vec<Unit>,
    /// Per constraint class: its eligibility resource, if it excludes some node.
    class_resource: Vec<Option<usize>>,
    /// Per node: the eligibility resources it offers.
    node_eligible: Vec<Vec<usize>>,
    /// Per shape: its request vector.
    shape_vectors: Vec<Vec<u32>>,
}

impl ResourceKinds {
    fn width(&self) -> usize {
        self.resources.len()
    }
}

fn resource_kinds(
    nodes: &[&Node],
    pass: &PodPass,
    gpus: &GpuKinds,
    warnings: &mut Vec<String>,
) -> ResourceKinds {
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
                    warnings.push(format!("{err}; counted as a whole GPU"));
                }
                1.0
            }
        };
        names.insert(name.to_string(), value);
    };
    for node in nodes {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for name in allocatable.into_iter().flatten().map(|(k, _)| k) {
            if gpus.value(name).is_some() {
                value_of(name, &mut names);
            }
        }
    }
    for shape in &pass.shapes {
        for (name, _) in &shape.0 {
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
    let resource_index: FastMap<String, usize> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.clone(), i))
        .collect();
    let units: Vec<Unit> = resources.iter().map(|r| Unit::of(&r.name)).collect();
    // Eligibility: which classes exclude at least one node get a resource.
    let mut class_resource: Vec<Option<usize>> = vec![None; pass.classes.len()];
    let mut node_eligible: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (c, constraints) in pass.classes.iter().enumerate() {
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
    // Each distinct shape becomes a vector once.
    let shape_vectors: Vec<Vec<u32>> = pass
        .shapes
        .iter()
        .map(|shape| {
            let mut v = vec![0u32; width];
            for (name, value) in &shape.0 {
                if let Some(&r) = resource_index.get(name) {
                    v[r] = units[r].request(*value);
                }
            }
            v
        })
        .collect();

    ResourceKinds {
        resources,
        resource_index,
        units,
        class_resource,
        node_eligible,
        shape_vectors,
    }
}

/// Each node's allocatable, and free capacity before running pods take theirs.
fn core_nodes(
    nodes: &[&Node],
    kinds: &ResourceKinds,
    pools: &Pools,
    warnings: &mut Vec<String>,
) -> IndexVec<NodeId, CoreNode> {
    // Nodes: allocatable; free starts there and loses what running pods take.
    let mut core_nodes: IndexVec<NodeId, CoreNode> = IndexVec::with_capacity(nodes.len());
    for (n, node) in nodes.iter().enumerate() {
        let mut allocatable = vec![0u32; kinds.width()];
        let offered = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for (name, q) in offered.into_iter().flatten() {
            if let Some(&r) = kinds.resource_index.get(name) {
                match parse_quantity(&q.0) {
                    Ok(v) => allocatable[r] = kinds.units[r].capacity(v),
                    Err(err) => warnings.push(format!(
                        "node {}: allocatable {name}: {err}",
                        node.metadata.name.as_deref().unwrap_or_default()
                    )),
                }
            }
        }
        for &r in &kinds.node_eligible[n] {
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
            vec![0; kinds.width()]
        };
        core_nodes.push(CoreNode {
            name: node.metadata.name.clone().unwrap_or_default(),
            pool: pools.of_node(node),
            allocatable,
            free,
        });
    }
    core_nodes
}

/// Each shape's size in GPU-equivalents; also sets each pool's capacity in `built`.
fn shape_sizes(
    kinds: &ResourceKinds,
    core_nodes: &IndexVec<NodeId, CoreNode>,
    pools: &Pools,
    built: &mut Built,
) -> Vec<f64> {
    let resources = &kinds.resources;
    let shape_vectors = &kinds.shape_vectors;
    let gpu_size = |v: &[u32]| -> f64 {
        v.iter()
            .zip(resources)
            .map(|(c, r)| f64::from(*c) * r.gpu_equivalents)
            .sum()
    };
    let shape_sizes: Vec<f64> = shape_vectors.iter().map(|v| gpu_size(v)).collect();
    built.pool_capacity = IndexVec::from_elem(0.0, pools.pools.len());
    for node in core_nodes {
        built.pool_capacity[node.pool] += gpu_size(&node.allocatable);
    }

    shape_sizes
}

/// Measured use per pod UID (and by namespace/name where the report has no UID).
fn measured_use(reports: &[Arc<GpuNodeReport>]) -> HashMap<String, f64> {
    let mut measured: HashMap<String, f64> = HashMap::new();
    for report in reports {
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

    measured
}

/// What running pods take from their nodes and charge their queues, and what pending pods
/// ask for, now that the resources are known.
fn charge_and_request(
    built: &mut Built,
    core_nodes: &mut IndexVec<NodeId, CoreNode>,
    pass: &PodPass,
    kinds: &ResourceKinds,
    shape_sizes: &[f64],
    measured: &HashMap<String, f64>,
    memory: &Memory,
) {
    // Now that the resources are known: what running pods take and charge, and what pending
    // pods ask for. Only the pods' shapes are read here, never their facts again.
    for &(n, shape) in &pass.taken {
        for (slot, taken) in core_nodes[n]
            .free
            .iter_mut()
            .zip(&kinds.shape_vectors[shape])
        {
            *slot = slot.saturating_sub(*taken);
        }
    }
    if memory.usage_spans {
        built.usage_spans = IndexVec::from_elem(Vec::new(), built.usage.len());
        for &(queue, shape, start, end) in &pass.finished {
            let size = shape_sizes[shape];
            built.usage_spans[queue].push(UsageSpan {
                start,
                end: Some(end),
                allocated: size,
                // No report covers a finished pod: charged as fully used.
                utilized: size,
            });
        }
    }
    for ((running, reference), &shape) in built
        .snapshot
        .running
        .iter_mut()
        .zip(&built.running)
        .zip(&pass.running_shapes)
    {
        running.requests = kinds.shape_vectors[shape].clone();
        if reference.bound {
            let size = shape_sizes[shape];
            let usage = &mut built.usage[running.queue];
            usage.allocated += size;
            // No report covers the pod: charged as fully used.
            let fraction = if measured.is_empty() {
                1.0
            } else {
                let pod = reference.pod();
                measured
                    .get(&*pod.uid)
                    .or_else(|| measured.get(&format!("{}/{}", pod.namespace, pod.name)))
                    .copied()
                    .unwrap_or(1.0)
            };
            usage.utilized += size * fraction;
            if memory.usage_spans {
                built.usage_spans[running.queue].push(UsageSpan {
                    start: held_since(&reference.facts),
                    end: None,
                    allocated: size,
                    utilized: size * fraction,
                });
            }
        }
    }
    for &(w, pod, shape, class) in &pass.pending_shapes {
        let mut requests = kinds.shape_vectors[shape].clone();
        if let Some(r) = class.and_then(|c| kinds.class_resource[c]) {
            requests[r] = 1;
        }
        built.snapshot.pending[w].pods[pod].requests = requests;
    }
}

/// The snapshot's resources, pools, nodes and queues, and what earlier cycles left.
fn finish(
    built: &mut Built,
    kinds: ResourceKinds,
    core_nodes: IndexVec<NodeId, CoreNode>,
    pools: &Pools,
    queues: &[&Queue],
    memory: &Memory,
) {
    let now = memory.now;
    built.snapshot.now = now;
    built.snapshot.resources = kinds.resources;
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
                last_preemption_at: None,
                last_evicted_at: None,
                name,
            }
        })
        .collect();
    // Preemption times, the last hour's evictions, holds (by node name) and their backfill.
    memory.carried.recall(&mut built.snapshot);
    built.snapshot.refused_victims = memory
        .refused_evictions
        .iter()
        .filter(|(_, at)| now - **at < REFUSED_EVICTION_BACKOFF_S)
        .map(|(workload, _)| workload.clone())
        .collect();
}
