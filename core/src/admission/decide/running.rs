//! The running pods as a cycle reads them: each queue's allocation, the nodes that run a
//! workload whose eviction was refused, and, for preemption, the pods grouped into workloads.

use super::Cycle;
use super::canonical::{running_in_uid_order, valid_running};
use super::requests::normalise;
use super::requests::padded_size;
use super::setup::Setup;
use crate::admission::victims::{RunningWorkload, group_running};
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId, QueueId, RunningPod, Snapshot};

/// Running pods grouped into workloads, each running pod's workload, and each node's running
/// pods, all in UID order. Only preemption reads them, and building them costs a sort of every
/// running pod by UID and a string key per workload, so they are built on first use.
pub(super) struct RunningGroups {
    pub(super) workloads: Vec<RunningWorkload>,
    pub(super) workload_of_pod: Vec<usize>,
    pub(super) by_node: IndexVec<NodeId, Vec<usize>>,
}

impl RunningGroups {
    pub(super) fn new(snapshot: &Snapshot, weights: &[f64]) -> Self {
        let order = running_in_uid_order(snapshot);
        let mut by_node = IndexVec::from_elem(Vec::new(), snapshot.nodes.len());
        for &i in &order {
            by_node[snapshot.running[i].node].push(i);
        }
        let (workloads, workload_of_pod) = group_running(snapshot, &order, |i| {
            padded_size(&snapshot.running[i].requests, weights)
        });
        Self {
            workloads,
            workload_of_pod,
            by_node,
        }
    }
}

impl Cycle<'_> {
    /// Each valid running pod in `pool` whose workload `select` picks (by
    /// [`RunningPod::workload_id`](crate::snapshot::RunningPod::workload_id)), as its node and
    /// its request in this cycle's resource width.
    pub(super) fn pods_in_pool<'s>(
        &'s self,
        pool: PoolId,
        select: impl Fn(&str) -> bool + 's,
    ) -> impl Iterator<Item = (NodeId, Vec<u32>)> + 's {
        self.running_in_pool(pool, move |pod| select(pod.workload_id()))
    }

    /// Each valid running pod in `pool` that `select` picks, as its node and its request in
    /// this cycle's resource width.
    pub(super) fn running_in_pool<'s>(
        &'s self,
        pool: PoolId,
        select: impl Fn(&RunningPod) -> bool + 's,
    ) -> impl Iterator<Item = (NodeId, Vec<u32>)> + 's {
        let snapshot = self.snapshot;
        snapshot
            .running
            .iter()
            .enumerate()
            .filter(move |(i, pod)| {
                valid_running(snapshot, *i) && snapshot.nodes[pod.node].pool == pool && select(pod)
            })
            .map(|(_, pod)| (pod.node, normalise(&pod.requests, self.width)))
    }
}

/// Per node: the GPU-seconds that evicting what runs there would throw away, the whole run so
/// far of every workload with a pod on it. Among equally free nodes a hold takes the one with
/// the least: run times are heavy-tailed, so work that has run a short while is the likeliest
/// to end soon, and should the drain stall, evicting it loses the least. A gang counts whole on
/// each of its nodes, since evicting one of its pods ends all of them.
pub(super) fn work_run_per_node(snapshot: &Snapshot, weights: &[f64]) -> IndexVec<NodeId, f64> {
    // Per workload, in the order first seen (so that sums do not depend on hashing): its run so
    // far, its first node and any further nodes it spans.
    // Only an index into `workloads`: foldhash (as `group_running` uses) keeps it cheap.
    let mut index: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
    index.reserve(snapshot.running.len());
    let mut workloads: Vec<(f64, NodeId, Vec<NodeId>)> = Vec::with_capacity(snapshot.running.len());
    for (i, pod) in snapshot.running.iter().enumerate() {
        let ran = snapshot.now - pod.started_at;
        if !(valid_running(snapshot, i) && ran.is_finite() && ran > 0.0) {
            continue;
        }
        let slot = *index.entry(pod.workload_id()).or_insert_with(|| {
            workloads.push((0.0, pod.node, Vec::new()));
            workloads.len() - 1
        });
        let (work, first, more) = &mut workloads[slot];
        *work += padded_size(&pod.requests, weights) * ran;
        if *first != pod.node && !more.contains(&pod.node) {
            more.push(pod.node);
        }
    }
    let mut work = IndexVec::from_elem(0.0, snapshot.nodes.len());
    for (ran, first, more) in workloads {
        for node in std::iter::once(first).chain(more) {
            work[node] += ran;
        }
    }
    work
}

impl Setup<'_> {
    /// Each queue's running GPU-equivalents.
    pub(super) fn allocations(&self) -> IndexVec<QueueId, f64> {
        let snapshot = self.snapshot;
        let queues = snapshot.queues.len();
        let weights = &self.weights;
        let is_valid = |q: QueueId| self.is_valid(q);
        // A queue's allocation is its running pods' sizes summed in UID order. When every size
        // is a whole number and the total stays below 2^53, every partial sum is exact, so
        // summing in snapshot order gives the same values bit for bit, and the sort of every
        // running pod by UID (strings) is left to preemption, which needs it.
        let mut allocated = IndexVec::from_elem(0.0, queues);
        let mut whole = true;
        let mut total = 0.0;
        for pod in &snapshot.running {
            if is_valid(pod.queue) && snapshot.nodes.contains(pod.node) {
                let size = padded_size(&pod.requests, weights);
                whole &= size.fract() == 0.0;
                total += size;
                allocated[pod.queue] += size;
            }
        }
        if !(whole && total < 9_007_199_254_740_992.0) {
            allocated = IndexVec::from_elem(0.0, queues);
            for i in running_in_uid_order(snapshot) {
                let pod = &snapshot.running[i];
                allocated[pod.queue] += padded_size(&pod.requests, weights);
            }
        }
        allocated
    }

    /// Per node: whether it runs a workload whose eviction was refused (empty when none was).
    pub(super) fn refused_nodes(&self) -> IndexVec<NodeId, bool> {
        let snapshot = self.snapshot;
        let is_valid = |q: QueueId| self.is_valid(q);
        // A workload's id is its pods' `workload`, or the UID of a pod without one, so a pod's
        // own key says whether its workload was refused without grouping anything.
        let mut refused_on_node = IndexVec::new();
        if !snapshot.refused_victims.is_empty() {
            refused_on_node = IndexVec::from_elem(false, snapshot.nodes.len());
            let refused: foldhash::HashSet<&str> = snapshot
                .refused_victims
                .iter()
                .map(String::as_str)
                .collect();
            for pod in &snapshot.running {
                let key = pod.workload_id();
                if is_valid(pod.queue) && snapshot.nodes.contains(pod.node) && refused.contains(key)
                {
                    refused_on_node[pod.node] = true;
                }
            }
        }

        refused_on_node
    }
}
