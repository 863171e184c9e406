//! The decision cycle.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::decision::*;
use super::hold::plan_hold;
use super::options::{DecideOptions, PoolSettings};
use super::order::{QueueTurn, share_ratio, total_order};
use super::placement::{best_fit, subtract};
use super::preempt::{
    Preemptor, QueueView, RunningIndex, choose_backfill_victims, choose_victims, preemption_reason,
};
use super::score::ReleaseScore;
use super::victims::{RunningWorkload, group_running};
use crate::division::{Claim, divide};
use crate::index::IndexVec;
use crate::labels::Tier;
use crate::params::FairShareParams;
use crate::snapshot::{LedgerShares, NodeId, PoolId, QueueId, Snapshot};
use crate::weight::effective_weight;

const EPSILON: f64 = 1e-9;

/// How many GPU-seconds of work a hold past its idle budget may throw away, per GPU-second it
/// has kept idle, to end its drain by eviction instead of being given up. Giving up wastes every
/// idle GPU-second the hold spent, and its queue, still owed, holds again later and drains
/// again at about the same cost, so eviction pays even when it loses somewhat more than the
/// hold has spent. Measured on the bundled scenarios, their variants and both traces
/// (BENCHMARKS.md, issue 27): 1 and 2 leave most stalled drains in Philly abandoned; no bound
/// at all evicts work far older than any drain (Philly's lost GPU-hours 3.4 times as many);
/// 4 ends the drains of the single-node pools and keeps lost work within 1.8 times.
const STALLED_DRAIN_LOSS_RATIO: f64 = 4.0;

/// The fraction of the most a queue can ever be owed at which it may claim its whole pool. A
/// queue's claim is what it is owed spread over the catch-up period; with a share that is a
/// fraction of one GPU, the most it can be owed (its share over the decayed window) spread over
/// that period may never reach the size of its largest job, which would then never be held
/// for. The claim's period is shortened so that half of that most reaches the whole pool: any
/// job that fits its pool is earned in bounded time (half the decayed window's accrual), and
/// half leaves room for the ledger's bucketing and for entitlement that dips while others'
/// demand does.
const REACHABLE_FRACTION: f64 = 0.5;

/// Seconds of entitlement at a steady rate that the ledger remembers: the window weighed by
/// decay, `∫₀^window e^(−rate·t) dt`. A queue entitled to `s` GPU-equivalents and given nothing
/// is owed at most `s` times this.
fn decayed_window_s(params: &FairShareParams) -> f64 {
    let window = if params.window_s.is_finite() {
        params.window_s.max(0.0)
    } else {
        0.0
    };
    let rate = params.decay_rate_per_s();
    if rate > 0.0 {
        (1.0 - (-rate * window).exp()) / rate
    } else {
        window
    }
}

/// The period a queue's owed GPU-seconds are spread over in its claim: the pool's catch-up
/// period, shortened for a queue whose steady share could never be owed enough to claim the
/// whole pool (see [`REACHABLE_FRACTION`]).
fn claim_period_s(catch_up: f64, steady: f64, capacity: f64, params: &FairShareParams) -> f64 {
    if catch_up <= 0.0 || steady <= 0.0 || capacity <= steady {
        return catch_up;
    }
    let reachable = REACHABLE_FRACTION * steady * decayed_window_s(params);
    catch_up.min(reachable / (capacity - steady))
}

/// Request vectors padded or cut to the snapshot's resource count, so a short or long vector is
/// read the same way everywhere.
fn normalise(requests: &[u32], width: usize) -> Vec<u32> {
    let mut v = requests.to_vec();
    v.resize(width, 0);
    v
}

/// GPU-equivalents of `requests` padded or cut to `weights.len()` resources: the same products,
/// summed in the same order, as the size of [`normalise`]'s copy, without making the copy.
fn padded_size(requests: &[u32], weights: &[f64]) -> f64 {
    requests
        .iter()
        .copied()
        .chain(std::iter::repeat(0))
        .zip(weights)
        .map(|(c, w)| f64::from(c) * w)
        .sum()
}

/// Whether queue `q` exists and belongs to a pool that exists.
fn valid_queue(snapshot: &Snapshot, q: QueueId) -> bool {
    snapshot
        .queues
        .get(q)
        .is_some_and(|queue| snapshot.pools.contains(queue.pool))
}

/// Whether running pod `i` counts: its queue and its node exist.
fn valid_running(snapshot: &Snapshot, i: usize) -> bool {
    let pod = &snapshot.running[i];
    valid_queue(snapshot, pod.queue) && snapshot.nodes.contains(pod.node)
}

/// `indices` in canonical order: by `name`, then by index. An unstable sort is exact here,
/// since every comparison ends on the unique index.
fn by_name<'s, I: Copy + Ord>(mut indices: Vec<I>, name: impl Fn(I) -> &'s str) -> Vec<I> {
    indices.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
    indices
}

/// The running pods that count, in canonical (UID) order.
fn running_in_uid_order(snapshot: &Snapshot) -> Vec<usize> {
    by_name(
        (0..snapshot.running.len())
            .filter(|&i| valid_running(snapshot, i))
            .collect(),
        |i| &snapshot.running[i].uid,
    )
}

/// The request vectors of a workload's pods: a lone pod's borrowed in place, since most
/// workloads are one pod and are looked at once per cycle; a gang's collected.
enum Requests<'r> {
    One([&'r [u32]; 1]),
    Many(Vec<&'r [u32]>),
}

impl<'r> std::ops::Deref for Requests<'r> {
    type Target = [&'r [u32]];

    fn deref(&self) -> &Self::Target {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }
}

/// The request vector of pod `p` in `pod_requests` (`width` counts each).
fn pod_request(pod_requests: &[u32], width: usize, p: usize) -> &[u32] {
    &pod_requests[p * width..(p + 1) * width]
}

/// The request vector of each pod of `entry`.
fn requests_of<'r>(pod_requests: &'r [u32], width: usize, entry: &Entry) -> Requests<'r> {
    if entry.pods == 1 {
        return Requests::One([pod_request(pod_requests, width, entry.first_pod)]);
    }
    Requests::Many(
        (entry.first_pod..entry.first_pod + entry.pods)
            .map(|p| pod_request(pod_requests, width, p))
            .collect(),
    )
}

/// A pending workload of a valid queue, as a pool's pass reads it. Entries are stored queue
/// after queue, each queue's in its release order: a pass serves each queue in that order, so
/// it reads them front to back instead of jumping around `Snapshot::pending` (which, at
/// 100,000s of workloads, missed the cache at every step). Decisions name workloads by
/// `workload`, their index in the snapshot.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Index into `Snapshot::pending`.
    workload: usize,
    /// GPU-equivalents of all its pods.
    size: f64,
    /// Its first pod's index in `pod_requests` (in pods).
    first_pod: usize,
    /// How many pods it has.
    pods: usize,
    min_member: u32,
    /// Its release score this cycle.
    score: ReleaseScore,
}

/// What [`compare_workloads`](super::order::compare_workloads) orders a queue's workloads by,
/// read once per workload instead of at every comparison of a sort. Kept small, as a cycle
/// scatters and sorts one per pending workload; the entry it orders stays where it was found.
#[derive(Clone, Copy)]
struct ReleaseKey {
    /// The tier, then the score total, highest first, as `f64::total_cmp` orders it.
    tier_score: u128,
    /// The creation time as `f64::total_cmp` orders it, then [`uid_prefix`] of the UID past
    /// the prefix all UIDs of the queue share.
    created_uid: u128,
    /// Its entry's place among the entries found in snapshot order.
    at: usize,
}

impl ReleaseKey {
    /// Fills a list before every place in it is written.
    const PLACEHOLDER: Self = Self {
        tier_score: 0,
        created_uid: 0,
        at: 0,
    };

    fn new(tier: Tier, total: f64, created_at: f64, uid_next: u64, at: usize) -> Self {
        Self {
            // A derived order of variants is that of their discriminants. Highest score first:
            // the total's bits, inverted.
            tier_score: u128::from(tier as u8) << 64 | u128::from(!total_order(total)),
            created_uid: u128::from(total_order(created_at)) << 64 | u128::from(uid_next),
            at,
        }
    }

    /// [`compare_workloads`](super::order::compare_workloads), then the snapshot index: the
    /// release order inside a queue.
    fn cmp(&self, other: &Self, entries: &[Entry], snapshot: &Snapshot) -> Ordering {
        let workload = |key: &Self| entries[key.at].workload;
        self.tier_score
            .cmp(&other.tier_score)
            // Both UIDs start with the queue's shared prefix: the bytes after it decide, and
            // where their first 8 bytes differ, those do.
            .then(self.created_uid.cmp(&other.created_uid))
            .then_with(|| {
                let (a, b) = (workload(self), workload(other));
                snapshot.pending[a].uid.cmp(&snapshot.pending[b].uid)
            })
            .then_with(|| workload(self).cmp(&workload(other)))
    }
}

/// The first 8 bytes of `bytes` (zero-padded) as a big-endian integer. Where two of them differ,
/// they order as the byte strings do: the first differing byte is either a real byte of both,
/// or the end of the shorter string, which is a prefix of the other and so comes first.
fn uid_prefix(bytes: &[u8]) -> u64 {
    if let Some(first) = bytes.first_chunk::<8>() {
        return u64::from_be_bytes(*first);
    }
    // Byte by byte rather than through a copy of unknown length: this runs once per pending
    // workload.
    bytes
        .iter()
        .enumerate()
        .fold(0, |prefix, (i, &b)| prefix | u64::from(b) << (56 - 8 * i))
}

/// Running pods grouped into workloads, each running pod's workload, and each node's running
/// pods, all in UID order. Only preemption reads them, and building them costs a sort of every
/// running pod by UID and a string key per workload, so they are built on first use.
struct RunningGroups {
    workloads: Vec<RunningWorkload>,
    workload_of_pod: Vec<usize>,
    by_node: IndexVec<NodeId, Vec<usize>>,
}

impl RunningGroups {
    fn new(snapshot: &Snapshot, weights: &[f64]) -> Self {
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

/// Single-pod shapes already checked against capacity ignoring the hold, with the node that
/// showed each fits (`None`: fits nowhere). Free capacity only shrinks within a pool's pass,
/// so "fits nowhere" stays true, and "fits" needs only its witness node re-checked; a release
/// never empties the cache, which would make every later check rescan the pool.
#[derive(Default)]
struct HeldFitCache {
    shapes: Vec<(Vec<u32>, Option<NodeId>)>,
}

impl HeldFitCache {
    fn clear(&mut self) {
        self.shapes.clear();
    }
}

fn fits_on(free: &[u32], request: &[u32]) -> bool {
    request
        .iter()
        .enumerate()
        .all(|(r, want)| free.get(r).copied().unwrap_or(0) >= *want)
}

/// Whether the pods would fit if nothing were held. Only asked to label a wait reason, yet asked
/// for every waiting workload once a hold exists, so single-pod answers are remembered.
fn fits_ignoring_hold(
    cache: &mut HeldFitCache,
    candidates: &[NodeId],
    free: &IndexVec<NodeId, Vec<u32>>,
    requests: &[&[u32]],
    weights: &[f64],
) -> bool {
    let [shape] = requests else {
        return best_fit(candidates, |n| free[n].as_slice(), requests, weights).is_some();
    };
    let known = cache
        .shapes
        .iter()
        // Compared count by count rather than through `==` on slices, which calls out to a
        // byte comparison for a few counts, once per waiting workload.
        .position(|(known, _)| {
            known.len() == shape.len() && known.iter().zip(*shape).all(|(a, b)| a == b)
        });
    if let Some(i) = known {
        match cache.shapes[i].1 {
            None => return false,
            Some(node) if fits_on(&free[node], shape) => return true,
            Some(_) => {}
        }
    }
    let witness = candidates
        .iter()
        .copied()
        .find(|&n| fits_on(&free[n], shape));
    match known {
        Some(i) => cache.shapes[i].1 = witness,
        None => cache.shapes.push((shape.to_vec(), witness)),
    }
    witness.is_some()
}

/// Decides one cycle. Pure and deterministic: the same snapshot, in any order of its vectors,
/// gives the same decisions (entries are processed in a canonical order of names and UIDs).
/// Entries that refer to a pool, node or queue that does not exist are ignored.
pub fn decide(snapshot: &Snapshot, options: &DecideOptions) -> Decisions {
    Cycle::new(snapshot, options).run()
}

/// A candidate's place in line for a pool's earned hold, lowest first: not kept from last
/// cycle, share ratio (as `total_order` bits), the claim (higher first), the queue's rank.
type HoldRank = (bool, u64, Reverse<u64>, usize);

/// What ending a stalled drain came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrainOutcome {
    /// What stood on the held nodes is evicted.
    Evicted,
    /// The hold waits for its nodes to drain.
    Wait,
    /// The hold is past its idle budget and its drain cannot be ended: it is given up.
    GiveUp,
}

/// What asking for a hold came to.
enum HoldOutcome {
    /// Held; the GPU-equivalents taken out of ordinary use.
    Held(f64),
    /// The workload cannot fit in the pool even when it is empty.
    NeverFits,
    /// The hold had left its idle budget standing free and nothing still on its nodes may be
    /// evicted: it is given up.
    GivenUp,
}

/// What one pool's pass through its waiting workloads keeps track of.
struct PoolPass {
    /// GPU-equivalents ordinary workloads may still use in the pool.
    usable_total: f64,
    /// The workload capacity is held for, if any: at most one for a queue below its guarantee
    /// and one earned by the most deserving other workload, per pool and cycle.
    hold: Option<usize>,
    /// The hold made for a queue below its guarantee, if any.
    guarantee_hold: Option<usize>,
    /// The hold earned by any other queue, if any.
    earned_hold: Option<usize>,
    /// A workload held last cycle whose queue starts earlier workloads first this cycle: the
    /// pool's earned hold is kept for it until its turn (see [`Cycle::kept_hold_behind`]).
    reserved_hold: Option<usize>,
    /// Workloads held for this cycle.
    held_for: Vec<usize>,
    /// Per queue: whether one of its workloads has failed to fit this cycle.
    misfit_seen: IndexVec<QueueId, bool>,
    /// Workloads released ahead of their turn because the capacity held for them drained.
    released_early: Vec<usize>,
    /// Single-pod shapes already known not to fit: anything at least as large fails too,
    /// because capacity only shrinks within a cycle.
    failed_shapes: Vec<Vec<u32>>,
    /// Entries left waiting by the pass, with their place in `Decisions::waiting`.
    waited: Vec<(usize, usize)>,
    /// The first of this pool's holds in `Decisions::holds`.
    first_hold: usize,
}

struct Cycle<'a> {
    snapshot: &'a Snapshot,
    options: &'a DecideOptions,
    /// Per pool: its fair-share parameters and whether it holds capacity.
    pool_settings: IndexVec<PoolId, PoolSettings>,
    weights: Vec<f64>,
    /// Nodes of each pool in canonical (name) order.
    pool_nodes: IndexVec<PoolId, Vec<NodeId>>,
    /// What is free on each node, less this cycle's placements.
    free: IndexVec<NodeId, Vec<u32>>,
    /// What is held on each node for the pool's held workload.
    held: IndexVec<NodeId, Vec<u32>>,
    allocatable: IndexVec<NodeId, Vec<u32>>,
    /// Free minus held, per node: what an ordinary workload may use.
    usable: IndexVec<NodeId, Vec<u32>>,
    /// Per node: it runs a workload whose eviction was refused (empty when none was).
    refused_on_node: IndexVec<NodeId, bool>,
    /// Running pods grouped for preemption, once it is first tried.
    running: Option<RunningGroups>,
    /// Valid pending workloads, queue after queue, each queue's in release order.
    entries: Vec<Entry>,
    /// Per queue: its range of `entries`.
    queue_entries: IndexVec<QueueId, (usize, usize)>,
    queue_rank: IndexVec<QueueId, usize>,
    /// Queues in canonical (name) order: the queue of each rank.
    queue_order: Vec<QueueId>,
    /// Every valid pending pod's request, `width` counts each, entry after entry: one
    /// allocation per cycle instead of one per pod, read front to back as queues are served.
    pod_requests: Vec<u32>,
    width: usize,
    /// Single-pod shapes already checked against capacity ignoring the hold, in this pool.
    held_fit_cache: HeldFitCache,
    views: IndexVec<QueueId, QueueView>,
    /// Per queue: the most it may hold beside the guarantees of the other queues of its pool
    /// that have demand (capacity − Σ others' min(guarantee, demand)).
    headroom: IndexVec<QueueId, f64>,
    /// Per queue: its time-aware share, fair share plus what it is owed spread over the catch-up
    /// period. A hold is made only for a workload this covers.
    earned: IndexVec<QueueId, f64>,
    /// Per queue: how fast its time-aware share grows now, GPU-equivalents per second (what it
    /// is owed grows by its entitlement less what it runs, spread over its claim period); 0 or
    /// less where it does not grow.
    earning_per_s: IndexVec<QueueId, f64>,
    /// GPU-equivalents each pool has in all.
    pool_capacity: IndexVec<PoolId, f64>,
    open: OpenNodes,
    /// Per hold in `Decisions::holds`: what of its held capacity nothing uses yet, per node.
    hold_left: Vec<Vec<(NodeId, Vec<u32>)>>,
    /// Per hold in `Decisions::holds`: it evicts for its workload this cycle. Its capacity takes
    /// no backfill then: what it holds is about to be used, and new backfill would only be
    /// evicted in turn next cycle.
    closing: Vec<bool>,
    /// `Snapshot::backfill`, for lookups.
    backfill: foldhash::HashSet<&'a str>,
    /// Per entry of `Decisions::waiting`: released after all, by backfill.
    backfilled: Vec<bool>,
    decisions: Decisions,
}

/// Nodes of each pool (canonical order) that may still have some GPU usable. A node with none
/// can never take a pod asking for a GPU again this cycle, because usable capacity only
/// shrinks within a cycle; leaving such nodes out of the search changes no placement and
/// spares a scan of every full node for every pod.
struct OpenNodes {
    lists: IndexVec<PoolId, Vec<NodeId>>,
    /// Per pool: how many nodes at the front of its list are known to be without usable GPU.
    /// Best fit fills nodes about in list order, so most nodes close at the front; skipping
    /// them there keeps each search from rescanning them until the next compaction.
    front: IndexVec<PoolId, usize>,
    /// Per pool: nodes in its list past `front` found without usable GPU since it was last
    /// compacted.
    stale: IndexVec<PoolId, usize>,
    /// Per node: no GPU usable any more.
    exhausted: IndexVec<NodeId, bool>,
}

impl OpenNodes {
    fn new(pool_nodes: &IndexVec<PoolId, Vec<NodeId>>, exhausted: IndexVec<NodeId, bool>) -> Self {
        Self {
            lists: pool_nodes
                .iter()
                .map(|nodes| nodes.iter().copied().filter(|&n| !exhausted[n]).collect())
                .collect(),
            front: IndexVec::from_elem(0, pool_nodes.len()),
            stale: IndexVec::from_elem(0, pool_nodes.len()),
            exhausted,
        }
    }

    /// The nodes of `pool` that may still have a GPU usable, in canonical order.
    fn of(&self, pool: PoolId) -> &[NodeId] {
        &self.lists[pool][self.front[pool]..]
    }

    /// Records that `node` of `pool` has no usable GPU left. The pool's list is compacted once
    /// an eighth of it is stale, so the cost stays proportional to the pool over a cycle.
    fn close(&mut self, pool: PoolId, node: NodeId) {
        if self.exhausted[node] {
            return;
        }
        self.exhausted[node] = true;
        let list = &self.lists[pool];
        let mut front = self.front[pool];
        if list.get(front) == Some(&node) {
            // Nodes passed here that closed earlier stay counted as stale: that only brings
            // the next compaction forward.
            while front < list.len() && self.exhausted[list[front]] {
                front += 1;
            }
            self.front[pool] = front;
        } else {
            self.stale[pool] += 1;
        }
        let open = self.lists[pool].len() - self.front[pool];
        if self.stale[pool] * 8 >= open {
            let exhausted = &self.exhausted;
            let front = self.front[pool];
            self.lists[pool].drain(..front);
            self.lists[pool].retain(|&n| !exhausted[n]);
            self.front[pool] = 0;
            self.stale[pool] = 0;
        }
    }
}

/// What every stage of a cycle's set-up reads: the snapshot, the resources' weights in
/// GPU-equivalents, which queues are valid, and each pool's settings.
struct Setup<'a> {
    snapshot: &'a Snapshot,
    options: &'a DecideOptions,
    width: usize,
    weights: Vec<f64>,
    queue_valid: IndexVec<QueueId, bool>,
    pool_settings: IndexVec<PoolId, PoolSettings>,
}

/// Each node's capacity, per pool in canonical (name) order.
struct NodeCapacity {
    pool_nodes: IndexVec<PoolId, Vec<NodeId>>,
    allocatable: IndexVec<NodeId, Vec<u32>>,
    free: IndexVec<NodeId, Vec<u32>>,
}

/// The valid pending workloads, queue after queue, each queue's in release order, with their
/// pods' requests laid out in the same order.
struct ReleaseEntries {
    entries: Vec<Entry>,
    queue_entries: IndexVec<QueueId, (usize, usize)>,
    pod_requests: Vec<u32>,
    /// Per queue: its pending GPU-equivalents, summed in snapshot order.
    pending_total: IndexVec<QueueId, f64>,
}

/// The per-pool division: each queue's outcome, the most it may hold beside the others'
/// guarantees, and its steady share.
struct PoolDivision {
    outcomes: IndexVec<QueueId, QueueOutcome>,
    headroom: IndexVec<QueueId, f64>,
    steady: IndexVec<QueueId, f64>,
}

impl<'a> Setup<'a> {
    fn new(snapshot: &'a Snapshot, options: &'a DecideOptions) -> Self {
        let weights: Vec<f64> = snapshot
            .resources
            .iter()
            .map(|r| {
                if r.gpu_equivalents.is_finite() && r.gpu_equivalents > 0.0 {
                    r.gpu_equivalents
                } else {
                    0.0
                }
            })
            .collect();
        Self {
            snapshot,
            options,
            width: snapshot.resources.len(),
            weights,
            queue_valid: snapshot
                .queues
                .indices()
                .map(|q| valid_queue(snapshot, q))
                .collect(),
            pool_settings: snapshot
                .pools
                .iter()
                .map(|p| options.pool_settings(&p.name))
                .collect(),
        }
    }

    fn size(&self, v: &[u32]) -> f64 {
        v.iter()
            .zip(&self.weights)
            .map(|(c, w)| f64::from(*c) * w)
            .sum()
    }

    fn is_valid(&self, q: QueueId) -> bool {
        self.queue_valid.get(q).copied().unwrap_or(false)
    }

    fn guaranteed_of(&self, q: QueueId) -> f64 {
        let g = self.snapshot.queues[q].guaranteed;
        if g.is_finite() { g.max(0.0) } else { 0.0 }
    }

    fn weight_of(&self, q: QueueId) -> f64 {
        let w = self.snapshot.queues[q].weight;
        if w.is_finite() && w > 0.0 { w } else { 0.0 }
    }

    /// A pool with time-aware sharing off ignores its queues' history altogether, so it
    /// divides exactly as stateless fair share would.
    fn shares_of(&self, q: QueueId) -> LedgerShares {
        let snapshot = self.snapshot;
        if self.pool_settings[snapshot.queues[q].pool].time_aware {
            snapshot.queues[q].shares
        } else {
            LedgerShares::NEUTRAL
        }
    }

    fn catch_up_of(&self, pool: PoolId) -> f64 {
        let catch_up = self.pool_settings[pool].fairshare.catch_up_s;
        if catch_up.is_finite() && catch_up > 0.0 {
            catch_up
        } else {
            0.0
        }
    }

    /// Each pool's nodes in canonical order, and every node's allocatable and free capacity
    /// padded to the snapshot's resources.
    fn node_capacity(&self) -> NodeCapacity {
        let snapshot = self.snapshot;
        let node_order: Vec<NodeId> = by_name(
            snapshot
                .nodes
                .indices()
                .filter(|&n| snapshot.pools.contains(snapshot.nodes[n].pool))
                .collect(),
            |n| &snapshot.nodes[n].name,
        );
        let mut pool_nodes = IndexVec::from_elem(Vec::new(), snapshot.pools.len());
        for &n in &node_order {
            pool_nodes[snapshot.nodes[n].pool].push(n);
        }
        let padded = |v: &[u32]| normalise(v, self.width);
        NodeCapacity {
            pool_nodes,
            allocatable: snapshot
                .nodes
                .iter()
                .map(|n| padded(&n.allocatable))
                .collect(),
            free: snapshot.nodes.iter().map(|n| padded(&n.free)).collect(),
        }
    }

    /// Each queue's running GPU-equivalents.
    fn allocations(&self) -> IndexVec<QueueId, f64> {
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
    fn refused_nodes(&self) -> IndexVec<NodeId, bool> {
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
                let key = if pod.workload.is_empty() {
                    pod.uid.as_str()
                } else {
                    pod.workload.as_str()
                };
                if is_valid(pod.queue) && snapshot.nodes.contains(pod.node) && refused.contains(key)
                {
                    refused_on_node[pod.node] = true;
                }
            }
        }

        refused_on_node
    }

    /// The valid pending workloads in release order.
    fn release_entries(&self) -> ReleaseEntries {
        let snapshot = self.snapshot;
        let options = self.options;
        let queues = snapshot.queues.len();
        let width = self.width;
        let is_valid = |q: QueueId| self.is_valid(q);
        let size = |v: &[u32]| self.size(v);
        // Valid pending workloads grouped by queue (in snapshot order), then each queue's put in
        // release order.
        let mut queue_entries = IndexVec::from_elem((0, 0), queues);
        // Per queue: the UID prefix all its workloads share (as found so far). Within a queue
        // UIDs often share a long prefix (a namespace), so the sort compares the bytes that
        // follow it, read once per workload, and reaches the strings only on a tie there.
        let mut shared_uid: IndexVec<QueueId, &[u8]> = IndexVec::from_elem(&[], queues);
        for w in &snapshot.pending {
            if is_valid(w.queue) {
                let uid = w.uid.as_bytes();
                let shared = &mut shared_uid[w.queue];
                if queue_entries[w.queue].1 == 0 {
                    *shared = uid;
                } else {
                    let common = shared.iter().zip(uid).take_while(|(a, b)| a == b).count();
                    *shared = &shared[..common];
                }
                queue_entries[w.queue].1 += 1;
            }
        }
        let mut next = 0;
        for range in &mut queue_entries {
            let count = range.1;
            *range = (next, next);
            next += count;
        }
        // One pass in snapshot order reads each workload where it lies and records its entry in
        // `found`; only a small sort key goes to the next place of its queue. Each queue's keys
        // are then sorted and the entries gathered in that order. Walking the snapshot's
        // workloads in release order instead missed the cache for each of them, and moving
        // whole entries while sorting cost more than gathering them once.
        // Keys are filled queue by queue: `queue_entries[q].1` is where queue `q`'s next goes.
        let mut found: Vec<Entry> = Vec::with_capacity(next);
        let mut keys = vec![ReleaseKey::PLACEHOLDER; next];
        // In snapshot order first; copied in release order below.
        let mut found_requests: Vec<u32> = Vec::new();
        let mut pods_found = 0;
        // Summed in snapshot order, as the division has always seen it.
        let mut pending_total = IndexVec::from_elem(0.0, queues);
        for (w, workload) in snapshot.pending.iter().enumerate() {
            if !is_valid(workload.queue) {
                continue;
            }
            let first_pod = pods_found;
            pods_found += workload.pods.len();
            for pod in &workload.pods {
                let start = found_requests.len();
                found_requests.extend(pod.requests.iter().take(width));
                found_requests.resize(start + width, 0);
            }
            let count = workload.pods.len();
            let size: f64 = (first_pod..first_pod + count)
                .map(|p| size(pod_request(&found_requests, width, p)))
                .sum();
            pending_total[workload.queue] += size;
            let score = ReleaseScore::of(workload, snapshot.now, &options.score);
            let shared = shared_uid[workload.queue].len();
            let range = &mut queue_entries[workload.queue];
            let at = range.1;
            range.1 += 1;
            keys[at] = ReleaseKey::new(
                workload.tier,
                score.total(),
                workload.created_at,
                uid_prefix(&workload.uid.as_bytes()[shared..]),
                found.len(),
            );
            found.push(Entry {
                workload: w,
                size,
                first_pod,
                pods: count,
                min_member: workload.min_member,
                score,
            });
        }
        for &(start, end) in &queue_entries {
            keys[start..end].sort_unstable_by(|a, b| a.cmp(b, &found, snapshot));
        }
        let mut entries: Vec<Entry> = keys.iter().map(|key| found[key.at]).collect();
        drop(keys);
        drop(found);
        // The pass reads requests entry after entry, so they are laid out that way too.
        let mut pod_requests: Vec<u32> = Vec::with_capacity(found_requests.len());
        let mut pods_placed = 0;
        for entry in &mut entries {
            pod_requests.extend_from_slice(
                &found_requests[entry.first_pod * width..(entry.first_pod + entry.pods) * width],
            );
            entry.first_pod = pods_placed;
            pods_placed += entry.pods;
        }
        drop(found_requests);
        ReleaseEntries {
            entries,
            queue_entries,
            pod_requests,
            pending_total,
        }
    }

    /// Division per pool: K = 0 entitlement, the steady share, and the history-corrected fair
    /// share.
    fn divide_pools(
        &self,
        capacity: &NodeCapacity,
        queue_order: &[QueueId],
        allocated: &IndexVec<QueueId, f64>,
        pending_total: &IndexVec<QueueId, f64>,
    ) -> PoolDivision {
        let snapshot = self.snapshot;
        let queues = snapshot.queues.len();
        let pool_settings = &self.pool_settings;
        let (pool_nodes, allocatable) = (&capacity.pool_nodes, &capacity.allocatable);
        let size = |v: &[u32]| self.size(v);
        let guaranteed_of = |q: QueueId| self.guaranteed_of(q);
        let weight_of = |q: QueueId| self.weight_of(q);
        let shares_of = |q: QueueId| self.shares_of(q);
        let catch_up_of = |pool: PoolId| self.catch_up_of(pool);
        let mut outcomes: IndexVec<QueueId, QueueOutcome> = snapshot
            .queues
            .indices()
            .map(|q| QueueOutcome {
                queue: q,
                allocated: allocated[q],
                pending: pending_total[q],
                allocated_after: allocated[q],
                ..QueueOutcome::default()
            })
            .collect();
        let mut headroom = IndexVec::from_elem(0.0, queues);
        // The share a queue gets whatever the others' demand does from minute to minute: its
        // guarantee plus its weight's part of what the guarantees leave, among the queues that
        // have demand at all (never more than its entitlement). The catch-up claim is built on
        // it rather than on the instantaneous division, so a dip in someone else's demand does
        // not earn a hold, and it sets how much history δ needs before it moves a weight fully.
        let mut steady = IndexVec::from_elem(0.0, queues);
        for (pool, nodes) in pool_nodes.iter_enumerated() {
            let catch_up = catch_up_of(pool);
            let capacity: f64 = nodes.iter().map(|&n| size(&allocatable[n])).sum();
            let members: Vec<QueueId> = queue_order
                .iter()
                .copied()
                .filter(|&q| valid_queue(snapshot, q) && snapshot.queues[q].pool == pool)
                .collect();
            let claim = |q: QueueId, weight: f64| {
                let state = &snapshot.queues[q];
                Claim {
                    demand: allocated[q] + pending_total[q],
                    guaranteed: state.guaranteed,
                    limit: state.limit,
                    weight,
                }
            };
            let base: Vec<Claim> = members
                .iter()
                .map(|&q| claim(q, snapshot.queues[q].weight))
                .collect();
            let entitled = divide(capacity, &base);

            let protected: Vec<f64> = members
                .iter()
                .zip(&base)
                .map(|(&q, c)| guaranteed_of(q).min(c.cap()))
                .collect();
            let protected_total: f64 = protected.iter().sum();
            let wanting_weight: f64 = members
                .iter()
                .zip(&base)
                .filter(|(_, c)| c.cap() > 0.0)
                .map(|(&q, _)| weight_of(q))
                .sum();
            let left = (capacity - protected_total).max(0.0);
            for (i, &q) in members.iter().enumerate() {
                headroom[q] = (capacity - (protected_total - protected[i])).max(0.0);
                if base[i].cap() > 0.0 {
                    let part = if wanting_weight > 0.0 {
                        left * weight_of(q) / wanting_weight
                    } else {
                        0.0
                    };
                    // The last ledger bucket's entitlement, when there is one, is the better
                    // estimate: it has seen others' real demand over an hour.
                    let recent = shares_of(q).recent_entitled;
                    let weighted = protected[i] + part;
                    let estimate = if recent.is_finite() && recent > 0.0 {
                        recent.max(weighted)
                    } else {
                        weighted
                    };
                    steady[q] = estimate.min(entitled[i]);
                }
            }

            let effective: Vec<f64> = members
                .iter()
                .map(|&q| {
                    effective_weight(
                        snapshot.queues[q].weight,
                        shares_of(q),
                        steady[q] * catch_up,
                        &pool_settings[pool].fairshare,
                    )
                })
                .collect();
            let corrected: Vec<Claim> = members
                .iter()
                .zip(&effective)
                .map(|(&q, &w)| claim(q, w))
                .collect();
            let fair = divide(capacity, &corrected);
            for (i, &q) in members.iter().enumerate() {
                outcomes[q].demand = base[i].cap();
                outcomes[q].entitled = entitled[i];
                outcomes[q].effective_weight = effective[i];
                outcomes[q].fair_share = fair[i];
            }
        }
        PoolDivision {
            outcomes,
            headroom,
            steady,
        }
    }

    /// Per queue: its time-aware share (fair share plus what it is owed spread over its claim
    /// period), and how fast that grows now.
    fn earned_shares(
        &self,
        division: &PoolDivision,
        pool_capacity: &IndexVec<PoolId, f64>,
        allocated: &IndexVec<QueueId, f64>,
    ) -> (IndexVec<QueueId, f64>, IndexVec<QueueId, f64>) {
        let snapshot = self.snapshot;
        let steady = &division.steady;
        // Each valid queue's claim period, once: both the share and its pace are spread over it.
        let periods: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| {
                if !self.is_valid(q) {
                    return 0.0;
                }
                let pool = snapshot.queues[q].pool;
                claim_period_s(
                    self.catch_up_of(pool),
                    steady[q],
                    pool_capacity[pool],
                    &self.pool_settings[pool].fairshare,
                )
            })
            .collect();
        let earned: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| {
                let period = periods[q];
                let owed = if self.is_valid(q) && period > 0.0 {
                    self.shares_of(q).deficit_gpu_s().max(0.0) / period
                } else {
                    0.0
                };
                steady[q] + owed
            })
            .collect();
        let earning_per_s: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| match periods[q] {
                period if period > 0.0 => (division.outcomes[q].entitled - allocated[q]) / period,
                _ => 0.0,
            })
            .collect();
        (earned, earning_per_s)
    }
}

impl<'a> Cycle<'a> {
    fn new(snapshot: &'a Snapshot, options: &'a DecideOptions) -> Self {
        let setup = Setup::new(snapshot, options);
        let queues = snapshot.queues.len();
        let queue_order: Vec<QueueId> = by_name(snapshot.queues.indices().collect(), |q| {
            &snapshot.queues[q].name
        });
        let mut queue_rank = IndexVec::from_elem(0, queues);
        for (rank, &q) in queue_order.iter().enumerate() {
            queue_rank[q] = rank;
        }
        let capacity = setup.node_capacity();
        let allocated = setup.allocations();
        let refused_on_node = setup.refused_nodes();
        let ReleaseEntries {
            entries,
            queue_entries,
            pod_requests,
            pending_total,
        } = setup.release_entries();
        let division = setup.divide_pools(&capacity, &queue_order, &allocated, &pending_total);
        let views: IndexVec<QueueId, QueueView> = snapshot
            .queues
            .indices()
            .map(|q| QueueView {
                allocated: allocated[q],
                guaranteed: setup.guaranteed_of(q),
                fair_share: division.outcomes[q].fair_share,
            })
            .collect();
        let pool_capacity: IndexVec<PoolId, f64> = capacity
            .pool_nodes
            .iter()
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|&n| setup.size(&capacity.allocatable[n]))
                    .sum()
            })
            .collect();
        let (earned, earning_per_s) = setup.earned_shares(&division, &pool_capacity, &allocated);
        let exhausted: IndexVec<NodeId, bool> = capacity
            .free
            .iter()
            .map(|free| setup.size(free) <= 0.0)
            .collect();
        let NodeCapacity {
            pool_nodes,
            allocatable,
            free,
        } = capacity;
        let Setup {
            width,
            weights,
            pool_settings,
            ..
        } = setup;
        let held = IndexVec::from_elem(vec![0; width], snapshot.nodes.len());
        let usable = free.clone();
        let open = OpenNodes::new(&pool_nodes, exhausted);
        // Most workloads wait at this scale, and growing the list by doubling would copy it
        // over and over.
        let decisions = Decisions {
            queues: division.outcomes,
            waiting: Vec::with_capacity(entries.len()),
            ..Decisions::default()
        };
        Self {
            snapshot,
            options,
            pool_settings,
            weights,
            pool_nodes,
            free,
            held,
            allocatable,
            usable,
            refused_on_node,
            running: None,
            entries,
            queue_entries,
            queue_rank,
            queue_order,
            pod_requests,
            width,
            held_fit_cache: HeldFitCache::default(),
            views,
            headroom: division.headroom,
            earned,
            earning_per_s,
            pool_capacity,
            open,
            hold_left: Vec::new(),
            closing: Vec::new(),
            backfill: snapshot.backfill.iter().map(String::as_str).collect(),
            backfilled: Vec::new(),
            decisions,
        }
    }

    /// Whether capacity may be held (and preempted for) in `pool` this cycle.
    fn holds_in(&self, pool: PoolId) -> bool {
        self.pool_settings
            .get(pool)
            .is_some_and(|settings| settings.hold_capacity)
    }

    fn size(&self, v: &[u32]) -> f64 {
        v.iter()
            .zip(&self.weights)
            .map(|(c, w)| f64::from(*c) * w)
            .sum()
    }

    fn run(mut self) -> Decisions {
        // Pools in canonical order: a queue's pods can run on another pool's nodes (its pool
        // was relabelled), and what one pool's pass allocates to a queue is what the next pass's
        // preemption guards read, so the order must not follow the snapshot's.
        let snapshot = self.snapshot;
        let pools = by_name(self.pool_nodes.indices().collect(), |p| {
            snapshot.pools.get(p).map_or("", |pool| pool.name.as_str())
        });
        for pool in pools {
            self.run_pool(pool);
        }
        if self.backfilled.iter().any(|&b| b) {
            let backfilled = std::mem::take(&mut self.backfilled);
            let mut at = 0;
            self.decisions.waiting.retain(|_| {
                at += 1;
                !backfilled.get(at - 1).copied().unwrap_or(false)
            });
        }
        self.decisions
    }

    fn run_pool(&mut self, pool: PoolId) {
        let snapshot = self.snapshot;
        self.held_fit_cache.clear();
        let mut pass = PoolPass {
            usable_total: self.pool_nodes[pool]
                .iter()
                .map(|&n| self.size(&self.usable[n]))
                .sum(),
            hold: None,
            guarantee_hold: None,
            earned_hold: None,
            reserved_hold: None,
            held_for: Vec::new(),
            misfit_seen: IndexVec::from_elem(false, snapshot.queues.len()),
            released_early: Vec::new(),
            failed_shapes: Vec::new(),
            waited: Vec::new(),
            first_hold: self.decisions.holds.len(),
        };
        // Turns as their integer keys (`QueueTurn::key`), compared at every step of the heap.
        // A queue's next turn replaces its last at the top rather than being popped and pushed
        // again: keys are unique (they end on the queue's rank), so the order served is the same.
        let mut heap = BinaryHeap::new();
        // Per queue: the entry it serves next.
        let mut cursor: IndexVec<QueueId, usize> =
            self.queue_entries.iter().map(|&(start, _)| start).collect();
        for q in snapshot.queues.indices() {
            let (start, end) = self.queue_entries[q];
            if snapshot.queues[q].pool == pool && start < end {
                heap.push(Reverse(self.turn(q, start).key()));
            }
        }
        let mut guarantees_served = false;

        while let Some(&Reverse(key)) = heap.peek() {
            let (below_guarantee, rank) = QueueTurn::key_parts(key);
            let q = self.queue_order[rank];
            if !below_guarantee && !guarantees_served {
                // Every queue below its guarantee has been served. Before anyone else is, keep
                // capacity for the most deserving workload that cannot start now, so that the
                // capacity it needs is not handed out to those who merely come first in order.
                // A hold made for a queue below its guarantee does not stop this one: otherwise
                // a single cycle without it would hand the capacity drained so far to others.
                guarantees_served = true;
                if self.holds_in(pool) {
                    self.hold_most_deserving(pool, &cursor, &mut pass);
                }
            }
            let e = cursor[q];
            cursor[q] += 1;
            let reason = self.consider(pool, q, e, below_guarantee, &mut pass);
            let (start, end) = self.queue_entries[q];
            if let Some(reason) = reason {
                let entry = &self.entries[e];
                pass.waited.push((e, self.decisions.waiting.len()));
                self.decisions.waiting.push(Waiting {
                    workload: entry.workload,
                    reason,
                    score: entry.score,
                    position: e - start + 1,
                    queue_length: end - start,
                });
            }
            if cursor[q] < end {
                let next = self.turn(q, cursor[q]).key();
                if let Some(mut top) = heap.peek_mut() {
                    *top = Reverse(next);
                }
            } else {
                heap.pop();
            }
        }
        self.backfill_pool(pool, &mut pass);
        self.account_idle(&pass);
    }

    /// Why entry `e` of queue `q` cannot be released this cycle, if anything stops it before
    /// placement is tried. With `backfill`, other queues' guarantees do not stop it: it only
    /// takes what the pass left idle, and gives it back by preemption when they want it.
    fn blocked(&self, q: QueueId, e: usize, backfill: bool) -> Option<WaitReason> {
        let snapshot = self.snapshot;
        let entry = &self.entries[e];
        let outcome = &self.decisions.queues[q];
        let size = entry.size;
        let after = outcome.allocated_after + size;
        let present = u32::try_from(entry.pods).unwrap_or(u32::MAX);
        if entry.pods == 0 || present < entry.min_member {
            return Some(WaitReason::GangIncomplete {
                present,
                min_member: entry.min_member,
            });
        }
        if size > self.pool_capacity[snapshot.queues[q].pool] + EPSILON {
            return Some(WaitReason::NeverFits);
        }
        let cooldown = self.options.preemption.cooldown_s;
        if let Some(at) = snapshot.queues[q]
            .last_evicted_at
            .filter(|t| snapshot.now - t < cooldown)
        {
            let ago_s = (snapshot.now - at).max(0.0);
            return Some(WaitReason::RecentlyPreempted {
                at,
                ago_s,
                resumes_in_s: (cooldown - ago_s).max(0.0),
            });
        }
        if let Some(limit) = snapshot.queues[q].limit.filter(|l| after > l + EPSILON) {
            return Some(WaitReason::QueueLimit { limit });
        }
        let holds = self.holds_in(snapshot.queues[q].pool);
        if holds
            && !backfill
            && after > outcome.fair_share + EPSILON
            && after > self.headroom[q] + EPSILON
        {
            // Borrowing idle capacity is fine, but not what other queues are guaranteed: it
            // would have to be taken back by preemption as soon as they want it. (Keeping it
            // free for them is a hold, so it goes with holding.)
            return Some(WaitReason::BeyondGuarantees {
                needed: after,
                available: self.headroom[q],
            });
        }
        // A workload larger than its queue's time-aware share used to wait through a lull in
        // others' demand. It no longer does: GPUs left dark while work that fits them waits are
        // lost for good, while a queue that runs ahead of its share in a lull pays later,
        // through its deficit δ. Earning still decides holds, which keep capacity from others.
        None
    }

    /// Whether queue `q` has earned a hold for entry `e`: its time-aware share (or its
    /// guarantee) covers what it would hold with it, and the pool leaves that much beside the
    /// other queues' guarantees. The reason it has not, otherwise.
    fn hold_refusal(&self, q: QueueId, e: usize) -> Option<WaitReason> {
        self.hold_refusal_after(q, e, 0.0)
    }

    /// [`Self::hold_refusal`] once `ahead` more GPU-equivalents of queue `q` have started.
    fn hold_refusal_after(&self, q: QueueId, e: usize, ahead: f64) -> Option<WaitReason> {
        let after = self.decisions.queues[q].allocated_after + ahead + self.entries[e].size;
        let earned = self.earned[q]
            .max(self.views[q].guaranteed)
            .max(self.decisions.queues[q].fair_share);
        if after > self.headroom[q] + EPSILON {
            Some(WaitReason::BeyondGuarantees {
                needed: after,
                available: self.headroom[q],
            })
        } else if after > earned + EPSILON {
            let rate = self.earning_per_s[q];
            Some(WaitReason::NotEarned {
                needed: after,
                earned,
                eta_s: (rate > 0.0).then(|| (after - self.earned[q]).max(0.0) / rate),
            })
        } else {
            None
        }
    }

    /// A placement of entry `e` in what ordinary workloads may use, or `None`.
    fn place(&self, pool: PoolId, e: usize, pass: &PoolPass) -> Option<Vec<NodeId>> {
        // Once the pool is spent, most waiting workloads end here, so the cheap refusals come
        // first and nothing is allocated before the search.
        let entry = &self.entries[e];
        if entry.size > pass.usable_total + EPSILON {
            return None;
        }
        if entry.pods == 1 {
            let shape = pod_request(&self.pod_requests, self.width, entry.first_pod);
            if pass
                .failed_shapes
                .iter()
                .any(|f| f.iter().zip(shape).all(|(a, b)| b >= a))
            {
                return None;
            }
        }
        let requests = requests_of(&self.pod_requests, self.width, entry);
        // Pods that ask for no GPU at all may still fit on a node without one.
        let candidates = if requests.iter().all(|r| self.size(r) > 0.0) {
            self.open.of(pool)
        } else {
            &self.pool_nodes[pool]
        };
        best_fit(
            candidates,
            |n| self.usable[n].as_slice(),
            &requests,
            &self.weights,
        )
    }

    /// Remembers that single-pod entry `e` found no node, so that anything at least as large
    /// is refused without a search for the rest of the pass.
    fn note_misfit(&self, e: usize, pass: &mut PoolPass) {
        let entry = &self.entries[e];
        if entry.pods != 1 || pass.failed_shapes.len() >= 16 {
            return;
        }
        let shape = pod_request(&self.pod_requests, self.width, entry.first_pod);
        if !pass
            .failed_shapes
            .iter()
            .any(|f| f.iter().zip(shape).all(|(a, b)| b >= a))
        {
            pass.failed_shapes.push(shape.to_vec());
        }
    }

    /// Tries to release entry `e` of queue `q`; returns why it waits if it does.
    fn consider(
        &mut self,
        pool: PoolId,
        q: QueueId,
        e: usize,
        below_guarantee: bool,
        pass: &mut PoolPass,
    ) -> Option<WaitReason> {
        if pass.released_early.contains(&e) {
            return None;
        }
        // The hold kept for this workload behind its queue's earlier ones: its turn has come,
        // and whatever it comes to, the pool's earned hold is no longer kept for it.
        let reserved = pass.reserved_hold == Some(e);
        if reserved {
            pass.reserved_hold = None;
        }
        if pass.held_for.contains(&e) {
            // Held before its turn came: it starts once the held nodes have drained.
            return Some(WaitReason::Holding);
        }
        if let Some(reason) = self.blocked(q, e, false) {
            // A queue whose first waiting workload cannot be released does not hold for a
            // later one instead.
            pass.misfit_seen[q] = true;
            return Some(reason);
        }
        let size = self.entries[e].size;
        if let Some(nodes) = self.place(pool, e, pass) {
            self.release(q, e, nodes);
            pass.usable_total -= size;
            return None;
        }
        self.note_misfit(e, pass);
        // The first workload that does not fit may hold capacity (and preempt for it) on the
        // spot if its queue has earned it: one hold for queues below their guarantee (served
        // first) and one for the others, unless one was made before the loop.
        // Only a queue's first workload that does not fit may hold: the queue's most deserving
        // one, not whichever later one happens to be small enough.
        let first_misfit = !std::mem::replace(&mut pass.misfit_seen[q], true);
        let slot_free = (first_misfit || reserved)
            && if below_guarantee {
                pass.guarantee_hold.is_none()
            } else {
                pass.earned_hold.is_none() && pass.reserved_hold.is_none()
            };
        // A hold past its idle budget that is not made again here (no slot, no longer earned,
        // or nothing on its nodes may be evicted) is given up.
        let overdue = slot_free && self.hold_spent(pool, e);
        if self.holds_in(pool) && slot_free {
            match self.hold_refusal(q, e) {
                Some(refusal) if below_guarantee => {
                    if overdue {
                        self.give_up(e);
                    }
                    return Some(refusal);
                }
                Some(_) => {}
                None => match self.hold(pool, e, q, overdue) {
                    HoldOutcome::Held(held_total) => {
                        pass.usable_total -= held_total;
                        pass.hold = Some(e);
                        pass.held_for.push(e);
                        if below_guarantee {
                            pass.guarantee_hold = Some(e);
                        } else {
                            pass.earned_hold = Some(e);
                        }
                        return Some(WaitReason::Holding);
                    }
                    HoldOutcome::NeverFits => return Some(WaitReason::NeverFits),
                    HoldOutcome::GivenUp => {}
                },
            }
        }
        if overdue {
            self.give_up(e);
        }
        if let Some(holder) = pass.hold.filter(|_| {
            fits_ignoring_hold(
                &mut self.held_fit_cache,
                &self.pool_nodes[pool],
                &self.free,
                &requests_of(&self.pod_requests, self.width, &self.entries[e]),
                &self.weights,
            )
        }) {
            return Some(WaitReason::CapacityHeld {
                for_workload: self.entries[holder].workload,
            });
        }
        if self.holds_in(pool)
            && let Some(refusal) = self.hold_refusal(q, e)
        {
            return Some(refusal);
        }
        Some(WaitReason::NoFit)
    }

    /// Records the release of entry `e` of queue `q` on `nodes`.
    fn release(&mut self, q: QueueId, e: usize, nodes: Vec<NodeId>) {
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        for (request, &node) in requests.iter().zip(&nodes) {
            subtract(&mut self.free[node], request);
            subtract(&mut self.usable[node], request);
            if self.size(&self.usable[node]) <= 0.0 {
                self.open.close(self.snapshot.nodes[node].pool, node);
            }
        }
        let outcome = self.decisions.queues[q];
        let after = outcome.allocated_after + self.entries[e].size;
        self.decisions.queues[q].allocated_after = after;
        self.views[q].allocated = after;
        let reason = if after <= outcome.fair_share + EPSILON {
            ReleaseReason::WithinFairShare {
                allocated_after: after,
                fair_share: outcome.fair_share,
            }
        } else {
            ReleaseReason::IdleCapacity {
                allocated_after: after,
                fair_share: outcome.fair_share,
            }
        };
        self.decisions.releases.push(Release {
            workload: self.entries[e].workload,
            placements: nodes,
            reason,
        });
    }

    /// Holds capacity for the most deserving waiting workload of the pool that cannot start
    /// now and whose hold its queue has earned: per queue, its next workload if that does not
    /// fit; among queues, the one furthest below its time-aware share. A workload held last cycle comes
    /// first, and if what drained for it is now enough it is released at once, before anyone
    /// else's turn can take that capacity.
    fn hold_most_deserving(
        &mut self,
        pool: PoolId,
        cursor: &IndexVec<QueueId, usize>,
        pass: &mut PoolPass,
    ) {
        let snapshot = self.snapshot;
        let mut best: Option<(HoldRank, usize, QueueId, bool)> = None;
        // The best candidate not past its idle budget: it goes instead if the best is given up.
        let mut best_fresh: Option<(HoldRank, usize, QueueId, bool)> = None;
        let mut drained: Option<(QueueId, usize, Vec<NodeId>)> = None;
        // A workload held last cycle behind its queue's next workload, which starts now.
        let mut deferred: Option<usize> = None;
        for (q, &next) in cursor.iter_enumerated() {
            if snapshot.queues[q].pool != pool {
                continue;
            }
            // Only the queue's next workload: whether a later one fits depends on what the
            // earlier ones take.
            if next < self.queue_entries[q].1 {
                let e = next;
                if self.blocked(q, e, false).is_some() {
                    continue;
                }
                // A hold once earned is kept until the workload starts, and ahead of any new
                // one: the deficit that earned it only grows while it waits, and dropping it
                // for one cycle would give away what has drained so far.
                let kept = snapshot
                    .previous_holds
                    .iter()
                    .any(|h| h.workload == snapshot.pending[self.entries[e].workload].uid);
                if let Some(nodes) = self.place(pool, e, pass) {
                    if kept && drained.is_none() {
                        drained = Some((q, e, nodes));
                    } else if !kept && deferred.is_none() {
                        deferred = self.kept_hold_behind(q, e);
                    }
                    continue;
                }
                self.note_misfit(e, pass);
                // A hold that has left its capacity idle as long as it may ends its drain by
                // eviction, or is given up (see `end_stalled_drain`).
                let overdue = kept && self.hold_spent(pool, e);
                // A kept hold goes first, but only while its queue still has earned it.
                let still_allowed = self.hold_refusal(q, e).is_none();
                if overdue && !still_allowed {
                    self.give_up(e);
                }
                if still_allowed {
                    // Among queues, the hold goes to the one furthest below its time-aware share
                    // as it stands, whatever the size of its workload: ranking by the share it
                    // would reach would always favour small workloads, and large ones would
                    // never be held for. Between queues that stand equally (most often: holding
                    // nothing), the one with the larger time-aware share, the one owed more,
                    // goes first, so the order of names never decides who waits.
                    let outcome = &self.decisions.queues[q];
                    let claim = self.earned[q].max(outcome.fair_share);
                    let key = (
                        !kept,
                        total_order(share_ratio(outcome.allocated_after, claim)),
                        Reverse(total_order(claim)),
                        self.queue_rank[q],
                    );
                    if best.as_ref().is_none_or(|(b, ..)| key < *b) {
                        best = Some((key, e, q, overdue));
                    }
                    if !overdue && best_fresh.as_ref().is_none_or(|(b, ..)| key < *b) {
                        best_fresh = Some((key, e, q, overdue));
                    }
                }
            }
        }
        if let Some((q, e, nodes)) = drained {
            self.release(q, e, nodes);
            pass.usable_total -= self.entries[e].size;
            pass.released_early.push(e);
            return;
        }
        // A rank's first part is "not kept from last cycle".
        let kept_in_line = best.as_ref().is_some_and(|(rank, ..)| !rank.0);
        if let Some(k) = deferred.filter(|_| !kept_in_line) {
            // No hold kept from last cycle is in line itself, but one waits behind workloads of
            // its own queue that start now: it takes the hold again at its turn, instead of the
            // hold moving to another queue for a cycle and losing what has drained for it.
            pass.reserved_hold = Some(k);
            return;
        }
        let fallback = best_fresh.filter(|_| best.as_ref().is_some_and(|b| b.3));
        for (_, e, q, overdue) in best.into_iter().chain(fallback) {
            match self.hold(pool, e, q, overdue) {
                HoldOutcome::Held(held_total) => {
                    pass.usable_total -= held_total;
                    pass.hold = Some(e);
                    pass.earned_hold = Some(e);
                    pass.held_for.push(e);
                    return;
                }
                HoldOutcome::NeverFits => return,
                HoldOutcome::GivenUp => self.give_up(e),
            }
        }
    }

    /// The entry of queue `q` after `e` that was held last cycle, if its queue still may hold
    /// for it once every workload ahead of it in the queue has started: those start first, and
    /// the hold waits for its turn.
    fn kept_hold_behind(&self, q: QueueId, e: usize) -> Option<usize> {
        let snapshot = self.snapshot;
        if snapshot.previous_holds.is_empty() {
            return None;
        }
        let end = self.queue_entries[q].1;
        let k = (e + 1..end).find(|&k| {
            let uid = &snapshot.pending[self.entries[k].workload].uid;
            snapshot.previous_holds.iter().any(|h| &h.workload == uid)
        })?;
        let ahead: f64 = self.entries[e..k].iter().map(|entry| entry.size).sum();
        (self.blocked(q, k, false).is_none() && self.hold_refusal_after(q, k, ahead).is_none())
            .then_some(k)
    }

    /// Queue `q`'s place in the serving order when its entry `e` is next. The
    /// ratio counts that workload, as it would stand once released, against the queue's
    /// time-aware share (fair share plus what it is owed over the catch-up period): a queue whose
    /// next workload would take it past that share waits behind every queue whose next workload
    /// keeps it within its own, however little the first queue holds now. Without this a queue
    /// holding nothing would always be served first, and a large job would always win back the
    /// capacity it just freed, whatever the history says; with it, a large workload moves up as
    /// its queue earns it by waiting.
    fn turn(&self, q: QueueId, e: usize) -> QueueTurn {
        let outcome = &self.decisions.queues[q];
        let guaranteed = self.views[q].guaranteed;
        let below_guarantee = outcome.allocated_after + EPSILON < guaranteed;
        let next = self.entries[e].size;
        let after = outcome.allocated_after + next;
        QueueTurn {
            below_guarantee,
            ratio: if below_guarantee {
                after / guaranteed
            } else {
                share_ratio(after, self.earned[q].max(outcome.fair_share))
            },
            rank: self.queue_rank[q],
        }
    }

    /// Holds capacity for entry `e` of queue `q`. A hold past its idle budget (`overdue`)
    /// evicts what still stands on its nodes, or is given up where nothing there may be evicted.
    fn hold(&mut self, pool: PoolId, e: usize, q: QueueId, overdue: bool) -> HoldOutcome {
        let w = self.entries[e].workload;
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        // Capacity already held for another workload is neither free nor drainable for this one.
        let unheld = |totals: &IndexVec<NodeId, Vec<u32>>| -> IndexVec<NodeId, Vec<u32>> {
            totals
                .iter()
                .zip(&self.held)
                .map(|(total, held)| {
                    total
                        .iter()
                        .zip(held)
                        .map(|(t, h)| t.saturating_sub(*h))
                        .collect()
                })
                .collect()
        };
        let uid = &self.snapshot.pending[w].uid;
        let preferred: &[NodeId] = self
            .snapshot
            .previous_holds
            .iter()
            .find(|h| &h.workload == uid)
            .map_or(&[], |h| h.nodes.as_slice());
        // Backfill leaves as soon as the rest of the held nodes has drained, so a node is as
        // drained as its free capacity plus its backfill: counted so, the hold stays on the
        // nodes it filled with backfill instead of moving off them.
        let mut drainable = unheld(&self.free);
        if !self.backfill.is_empty() {
            for (i, pod) in self.snapshot.running.iter().enumerate() {
                let id = if pod.workload.is_empty() {
                    pod.uid.as_str()
                } else {
                    pod.workload.as_str()
                };
                if valid_running(self.snapshot, i)
                    && self.snapshot.nodes[pod.node].pool == pool
                    && self.backfill.contains(id)
                {
                    let request = normalise(&pod.requests, self.width);
                    super::placement::add(&mut drainable[pod.node], &request);
                }
            }
        }
        let Some(plan) = plan_hold(
            &self.pool_nodes[pool],
            preferred,
            &self.refused_on_node,
            &drainable,
            &unheld(&self.allocatable),
            &requests,
            &self.weights,
        ) else {
            return HoldOutcome::NeverFits;
        };
        // Per held node: what it takes of the capacity still usable there, and what is missing.
        let mut held_nodes = Vec::with_capacity(plan.needs.len());
        let mut missing = Vec::with_capacity(plan.needs.len());
        for (node, need) in &plan.needs {
            let take: Vec<u32> = need
                .iter()
                .zip(&self.usable[*node])
                .map(|(want, have)| (*want).min(*have))
                .collect();
            let short: Vec<u32> = need
                .iter()
                .zip(&take)
                .map(|(want, got)| want - got)
                .collect();
            held_nodes.push((*node, take));
            missing.push((*node, short));
        }
        let missing_total: f64 = missing.iter().map(|(_, m)| self.size(m)).sum();
        let evictions = self.decisions.preemptions.len();
        if missing_total > 0.0
            && !self.evict_backfill(e, &missing)
            && !self.preempt_for(e, q, &missing)
            && self.end_stalled_drain(pool, e, q, &missing, overdue) == DrainOutcome::GiveUp
        {
            return HoldOutcome::GivenUp;
        }
        let mut held_total = 0.0;
        for (node, take) in &held_nodes {
            subtract(&mut self.usable[*node], take);
            if self.size(&self.usable[*node]) <= 0.0 {
                self.open.close(pool, *node);
            }
            for (slot, t) in self.held[*node].iter_mut().zip(take) {
                *slot += t;
            }
            held_total += self.size(take);
        }
        self.hold_left.push(held_nodes.clone());
        self.closing.push(false);
        self.decisions.holds.push(Hold {
            workload: w,
            pool,
            nodes: held_nodes,
            missing_gpu_equivalents: missing_total,
            missing: missing.clone(),
            idle_gpu_s: self.idle_so_far(e),
            idle_gpu_equivalents: held_total,
        });
        if let Some(closing) = self.closing.last_mut() {
            *closing = self.decisions.preemptions.len() > evictions;
        }
        HoldOutcome::Held(held_total)
    }

    /// Ends the drain of entry `e`'s hold once it is past its idle budget (`overdue`): evicts
    /// what still stands on its held nodes (`missing`), within the guards every preemption
    /// keeps and if that loses at most [`STALLED_DRAIN_LOSS_RATIO`] times the GPU-seconds the
    /// hold has kept idle, so that the idle time pays off instead of being thrown away. A hold
    /// whose drain cannot be ended so is given up, since it would otherwise keep its nodes
    /// dark without bound; while its queue cools down from evictions it ordered, it waits for
    /// them. Within its budget a hold waits for its nodes to drain by themselves.
    fn end_stalled_drain(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
        overdue: bool,
    ) -> DrainOutcome {
        if !overdue {
            return DrainOutcome::Wait;
        }
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let idle_gpu_s = self.idle_so_far(e);
        if !params.enabled {
            return DrainOutcome::GiveUp;
        }
        if snapshot.queues[q]
            .last_preemption_at
            .is_some_and(|t| snapshot.now - t < params.cooldown_s)
        {
            return DrainOutcome::Wait;
        }
        let limit = self.pool_settings[pool].fairshare.hold_idle_limit_s;
        let reason = PreemptionReason::StalledDrain {
            idle_gpu_hours: idle_gpu_s / 3600.0,
            budget_gpu_hours: self.entries[e].size * limit / 3600.0,
        };
        let max_lost_gpu_s = STALLED_DRAIN_LOSS_RATIO * idle_gpu_s;
        if self.evict_for(e, q, missing, reason, max_lost_gpu_s) {
            DrainOutcome::Evicted
        } else {
            DrainOutcome::GiveUp
        }
    }

    /// The previous cycle's hold of entry `e`, if it had one.
    fn previous_hold(&self, e: usize) -> Option<&crate::snapshot::PreviousHold> {
        let uid = &self.snapshot.pending[self.entries[e].workload].uid;
        self.snapshot
            .previous_holds
            .iter()
            .find(|h| &h.workload == uid)
    }

    /// GPU-seconds the hold of entry `e` has left idle up to now: what it had left idle by the
    /// previous cycle, plus what it left idle then, for the time since.
    fn idle_so_far(&self, e: usize) -> f64 {
        let sane = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        self.previous_hold(e).map_or(0.0, |h| {
            sane(h.idle_gpu_s) + sane(h.idle_gpu_equivalents) * sane(self.snapshot.now - h.at)
        })
    }

    /// Whether a hold for entry `e` has left its capacity idle for as long as its pool allows:
    /// the workload's size times `hold_idle_limit_s`, in GPU-seconds.
    fn hold_spent(&self, pool: PoolId, e: usize) -> bool {
        let limit = self.pool_settings[pool].fairshare.hold_idle_limit_s;
        let limit = if limit.is_finite() {
            limit.max(0.0)
        } else {
            0.0
        };
        let idle = self.idle_so_far(e);
        idle > 0.0 && idle >= self.entries[e].size * limit
    }

    fn give_up(&mut self, e: usize) {
        let w = self.entries[e].workload;
        if !self.decisions.given_up.contains(&w) {
            self.decisions.given_up.push(w);
        }
    }

    /// Evicts the backfill standing on the held nodes of entry `e` once nothing else is
    /// missing there. Returns whether it did.
    fn evict_backfill(&mut self, e: usize, missing: &[(NodeId, Vec<u32>)]) -> bool {
        if self.backfill.is_empty() {
            return false;
        }
        let snapshot = self.snapshot;
        let weights = &self.weights;
        let running = self
            .running
            .get_or_insert_with(|| RunningGroups::new(snapshot, weights));
        let backfill = &self.backfill;
        let Some(victims) = choose_backfill_victims(
            snapshot,
            &self.options.preemption,
            missing,
            &RunningIndex {
                workloads: &running.workloads,
                workload_of_pod: &running.workload_of_pod,
                by_node: &running.by_node,
            },
            |id| backfill.contains(id),
        ) else {
            return false;
        };
        for victim in victims {
            let victim = &running.workloads[victim];
            self.views[victim.queue].allocated -= victim.size;
            self.decisions.preemptions.push(Preemption {
                victim_workload: victim.id.clone(),
                pods: victim.pods.clone(),
                size: victim.size,
                for_workload: self.entries[e].workload,
                reason: PreemptionReason::Backfill,
            });
        }
        true
    }

    /// After the pass: hands what it left idle to waiting workloads that fit it in capacity
    /// nobody holds (workloads the pass did not start because of other queues' guarantees).
    /// Queues take turns as in the pass.
    ///
    /// Held capacity waits for its workload (within `holdIdleLimit`) unless
    /// `DecideOptions::backfill_held` is on: then it goes to waiting work as preemptible
    /// backfill, evicted once the held nodes have drained otherwise. Work that would finish
    /// before the held nodes drain cannot be told apart (pods declare no run time), so every
    /// such eviction throws the backfill's work away and can delay the held workload.
    fn backfill_pool(&mut self, pool: PoolId, pass: &mut PoolPass) {
        if !self.holds_in(pool) || pass.waited.is_empty() {
            return;
        }
        for into_held in [false, true] {
            // Backfill in held capacity must be evictable, or it would keep the held workload
            // waiting for as long as it runs.
            if into_held
                && !(self.options.backfill_held
                    && self.options.preemption.enabled
                    && self.any_held_left(pass))
            {
                break;
            }
            let mut per_queue: IndexVec<QueueId, Vec<(usize, usize)>> =
                IndexVec::from_elem(Vec::new(), self.snapshot.queues.len());
            for &(e, at) in &pass.waited {
                let candidate = match self.decisions.waiting[at].reason {
                    WaitReason::BeyondGuarantees { .. } | WaitReason::NotEarned { .. } => true,
                    // A workload refused a hold of its own may still fit in another's.
                    WaitReason::CapacityHeld { .. } | WaitReason::NeverFits => into_held,
                    _ => false,
                };
                if candidate && !self.backfilled.get(at).copied().unwrap_or(false) {
                    per_queue[self.snapshot.pending[self.entries[e].workload].queue].push((e, at));
                }
            }
            let mut heap = BinaryHeap::new();
            let mut cursor: IndexVec<QueueId, usize> = IndexVec::from_elem(0, per_queue.len());
            for (q, list) in per_queue.iter_enumerated() {
                if let Some(&(e, _)) = list.first() {
                    heap.push(Reverse(self.turn(q, e).key()));
                }
            }
            let mut failed: Vec<Vec<u32>> = Vec::new();
            let mut backfillable = if into_held {
                self.backfillable(pass)
            } else {
                IndexVec::new()
            };
            while let Some(Reverse(key)) = heap.pop() {
                let (_, rank) = QueueTurn::key_parts(key);
                let q = self.queue_order[rank];
                let (e, at) = per_queue[q][cursor[q]];
                cursor[q] += 1;
                if self.blocked(q, e, true).is_none() {
                    let placed = if into_held {
                        self.place_in_free(pool, e, &backfillable, &mut failed)
                    } else {
                        self.place(pool, e, pass)
                    };
                    if let Some(nodes) = placed {
                        if into_held {
                            let requests =
                                requests_of(&self.pod_requests, self.width, &self.entries[e]);
                            for (request, &node) in requests.iter().zip(&nodes) {
                                subtract(&mut backfillable[node], request);
                            }
                            self.release_backfill(q, e, nodes, pass);
                        } else {
                            self.release(q, e, nodes);
                            pass.usable_total -= self.entries[e].size;
                        }
                        if self.backfilled.len() < self.decisions.waiting.len() {
                            self.backfilled.resize(self.decisions.waiting.len(), false);
                        }
                        self.backfilled[at] = true;
                    }
                }
                if let Some(&(next, _)) = per_queue[q].get(cursor[q]) {
                    heap.push(Reverse(self.turn(q, next).key()));
                }
            }
        }
    }

    fn any_held_left(&self, pass: &PoolPass) -> bool {
        (pass.first_hold..self.hold_left.len())
            .filter(|&h| !self.closing[h])
            .flat_map(|h| &self.hold_left[h])
            .any(|(_, left)| self.size(left) > 0.0)
    }

    /// Per node: what backfill may use, what nobody holds plus what holds that are not closing
    /// leave unused.
    fn backfillable(&self, pass: &PoolPass) -> IndexVec<NodeId, Vec<u32>> {
        let mut room = self.usable.clone();
        for h in (pass.first_hold..self.hold_left.len()).filter(|&h| !self.closing[h]) {
            for (node, left) in &self.hold_left[h] {
                super::placement::add(&mut room[*node], left);
            }
        }
        room
    }

    /// A placement of entry `e` in `room` (what backfill may use, per node), or `None`.
    /// `failed` remembers single-pod shapes that found no node, as free capacity only shrinks.
    fn place_in_free(
        &self,
        pool: PoolId,
        e: usize,
        room: &IndexVec<NodeId, Vec<u32>>,
        failed: &mut Vec<Vec<u32>>,
    ) -> Option<Vec<NodeId>> {
        let entry = &self.entries[e];
        let single =
            (entry.pods == 1).then(|| pod_request(&self.pod_requests, self.width, entry.first_pod));
        if let Some(shape) = single
            && failed
                .iter()
                .any(|f| f.iter().zip(shape).all(|(a, b)| b >= a))
        {
            return None;
        }
        let requests = requests_of(&self.pod_requests, self.width, entry);
        let placed = best_fit(
            &self.pool_nodes[pool],
            |n| room[n].as_slice(),
            &requests,
            &self.weights,
        );
        if placed.is_none()
            && let Some(shape) = single
            && failed.len() < 16
        {
            failed.push(shape.to_vec());
        }
        placed
    }

    /// Records the release of entry `e` of queue `q` on `nodes`, where it takes held capacity:
    /// what it needs beyond what nobody holds comes out of the holds on those nodes.
    fn release_backfill(&mut self, q: QueueId, e: usize, nodes: Vec<NodeId>, pass: &mut PoolPass) {
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        let mut holders: Vec<usize> = Vec::new();
        for (request, &node) in requests.iter().zip(&nodes) {
            let from_usable: Vec<u32> = request
                .iter()
                .zip(&self.usable[node])
                .map(|(want, have)| (*want).min(*have))
                .collect();
            let mut from_held: Vec<u32> = request
                .iter()
                .zip(&from_usable)
                .map(|(want, got)| want - got)
                .collect();
            pass.usable_total -= self.size(&from_usable);
            subtract(&mut self.free[node], request);
            subtract(&mut self.usable[node], &from_usable);
            subtract(&mut self.held[node], &from_held);
            if self.size(&self.usable[node]) <= 0.0 {
                self.open.close(self.snapshot.nodes[node].pool, node);
            }
            for (h, left) in self.hold_left.iter_mut().enumerate().skip(pass.first_hold) {
                if self.closing[h] {
                    continue;
                }
                let Some((_, there)) = left.iter_mut().find(|(n, _)| *n == node) else {
                    continue;
                };
                let take: Vec<u32> = from_held
                    .iter()
                    .zip(there.iter())
                    .map(|(want, have)| (*want).min(*have))
                    .collect();
                if take.iter().any(|t| *t > 0) && !holders.contains(&h) {
                    holders.push(h);
                }
                subtract(there, &take);
                subtract(&mut from_held, &take);
            }
        }
        let outcome = self.decisions.queues[q];
        let after = outcome.allocated_after + self.entries[e].size;
        self.decisions.queues[q].allocated_after = after;
        self.views[q].allocated = after;
        let reason = match holders.first() {
            Some(&h) => ReleaseReason::Backfill {
                for_workload: self.decisions.holds[h].workload,
                allocated_after: after,
                fair_share: outcome.fair_share,
            },
            None if after <= outcome.fair_share + EPSILON => ReleaseReason::WithinFairShare {
                allocated_after: after,
                fair_share: outcome.fair_share,
            },
            None => ReleaseReason::IdleCapacity {
                allocated_after: after,
                fair_share: outcome.fair_share,
            },
        };
        self.decisions.releases.push(Release {
            workload: self.entries[e].workload,
            placements: nodes,
            reason,
        });
    }

    /// Records, per hold of the pool, the capacity it leaves idle after the pass.
    fn account_idle(&mut self, pass: &PoolPass) {
        for h in pass.first_hold..self.decisions.holds.len() {
            let idle: f64 = self.hold_left[h]
                .iter()
                .map(|(_, left)| self.size(left))
                .sum();
            self.decisions.holds[h].idle_gpu_equivalents = idle;
        }
    }

    /// Preempts for entry `e` of queue `q` if its queue is below its guarantee or far below its
    /// fair share. Returns whether it evicted anything.
    fn preempt_for(&mut self, e: usize, q: QueueId, missing: &[(NodeId, Vec<u32>)]) -> bool {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let size = self.entries[e].size;
        let Some(reason) = preemption_reason(snapshot, params, q, size, &self.views[q]) else {
            return false;
        };
        self.evict_for(e, q, missing, reason, f64::INFINITY)
    }

    /// Chooses victims on entry `e`'s held nodes that clear what is `missing` there, for
    /// `reason`, and records their eviction, unless together they would lose more than
    /// `max_lost_gpu_s` of work. Returns whether it evicted anything.
    fn evict_for(
        &mut self,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
        reason: PreemptionReason,
        max_lost_gpu_s: f64,
    ) -> bool {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let w = self.entries[e].workload;
        let weights = &self.weights;
        let running = self
            .running
            .get_or_insert_with(|| RunningGroups::new(snapshot, weights));
        let backfill = &self.backfill;
        let is_backfill = |id: &str| backfill.contains(id);
        // Committed only if the victims are taken.
        let mut views = self.views.clone();
        let preemptor = Preemptor {
            queue: q,
            tier: snapshot.pending[w].tier,
            missing,
            backfill: &is_backfill,
        };
        let Some(victims) = choose_victims(
            snapshot,
            params,
            &preemptor,
            reason,
            &RunningIndex {
                workloads: &running.workloads,
                workload_of_pod: &running.workload_of_pod,
                by_node: &running.by_node,
            },
            &mut views,
        ) else {
            return false;
        };
        let lost_gpu_s: f64 = victims
            .iter()
            .map(|(v, _)| running.workloads[*v].work)
            .sum();
        if lost_gpu_s > max_lost_gpu_s {
            return false;
        }
        self.views = views;
        for (victim, reason) in victims {
            let victim = &running.workloads[victim];
            self.decisions.preemptions.push(Preemption {
                victim_workload: victim.id.clone(),
                pods: victim.pods.clone(),
                size: victim.size,
                for_workload: w,
                reason,
            });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of weight 1 with no guarantee, limit or history, in `pool`.
    fn neutral_queue(name: &str, pool: usize) -> crate::snapshot::QueueState {
        crate::snapshot::QueueState {
            name: name.into(),
            pool: PoolId::new(pool),
            weight: 1.0,
            guaranteed: 0.0,
            limit: None,
            min_run_time_s: 0.0,
            shares: LedgerShares::NEUTRAL,
            last_preemption_at: None,
            last_evicted_at: None,
        }
    }

    #[test]
    fn held_fit_cache_rechecks_its_witness_and_remembers_misfits() {
        let mut cache = HeldFitCache::default();
        let (a, b) = (NodeId::new(0), NodeId::new(1));
        let mut free: IndexVec<NodeId, Vec<u32>> = vec![vec![1], vec![2]].into();
        let mut fits = |free: &IndexVec<NodeId, Vec<u32>>, gpus: u32| {
            fits_ignoring_hold(&mut cache, &[a, b], free, &[&[gpus]], &[1.0])
        };
        assert!(fits(&free, 2));
        // The witness (node 1) fills up: the answer is found again, not taken from the cache.
        free[b][0] = 1;
        assert!(!fits(&free, 2));
        assert!(fits(&free, 1));
        // Capacity only shrinks within a pass, so a misfit stays one without a search.
        free[a][0] = 0;
        free[b][0] = 0;
        assert!(!fits(&free, 1));
        assert!(!fits(&free, 2));
    }

    #[test]
    fn open_nodes_skip_closed_ones_wherever_they_close() {
        let pool = PoolId::new(0);
        let pools = vec![(0..20).map(NodeId::new).collect::<Vec<NodeId>>()].into();
        let mut exhausted = IndexVec::from_elem(false, 20);
        exhausted[NodeId::new(3)] = true;
        let mut open = OpenNodes::new(&pools, exhausted);
        let expect = |closed: &[NodeId]| -> Vec<NodeId> {
            (0..20)
                .map(NodeId::new)
                .filter(|n| n.get() != 3 && !closed.contains(n))
                .collect()
        };
        assert_eq!(open.of(pool), expect(&[]).as_slice());
        let mut closed = Vec::new();
        // Front first (as best fit fills), then the middle and the back.
        for node in [0, 1, 2, 4, 10, 19, 5, 6, 7, 11, 12].map(NodeId::new) {
            open.close(pool, node);
            open.close(pool, node);
            closed.push(node);
            let listed = open.of(pool);
            let left: Vec<NodeId> = listed
                .iter()
                .copied()
                .filter(|n| !open.exhausted[*n])
                .collect();
            assert_eq!(left, expect(&closed), "after closing {closed:?}");
            // The search starts at an open node: closed ones at the front are skipped.
            assert!(listed.first().is_none_or(|n| !open.exhausted[*n]));
        }
    }

    #[test]
    fn uid_prefixes_that_differ_order_as_the_uids_do() {
        let uids: [&[u8]; 12] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
            b"b",
            b"\xff\xfe",
        ];
        for a in uids {
            for b in uids {
                let (pa, pb) = (uid_prefix(a), uid_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} against {b:?}");
                }
            }
        }
    }

    #[test]
    fn release_keys_order_as_compare_workloads() {
        use super::super::order::compare_workloads;
        use crate::labels::{Urgency, UserTier};
        use crate::snapshot::{PendingWorkload, Pool};
        let tiers = [Tier::Backfill, Tier::Realtime, Tier::Elastic];
        let urgencies = [Urgency::Low, Urgency::High, Urgency::Medium];
        let times = [5.0, -0.0, 0.0, f64::NAN, 5.0, -3.0, f64::INFINITY, 1e9];
        let uids = [
            "ns/a",
            "ns/b",
            "ns/abcdefghij-2",
            "ns/abcdefghij-1",
            "ns/",
            "ns/a",
        ];
        let pending: Vec<PendingWorkload> = (0..200)
            .map(|i| PendingWorkload {
                uid: uids[i % uids.len()].to_owned() + &"x".repeat(i % 7 / 5),
                queue: QueueId::new(0),
                tier: tiers[i % 3 / 2 + i % 5 / 4],
                deadline: [None, Some(10.0), Some(1e6)][i % 11 % 3],
                urgency: urgencies[i % 13 % 3],
                user_tier: UserTier::Standard,
                created_at: times[i % times.len()],
                min_member: 1,
                pods: Vec::new(),
            })
            .collect();
        let snapshot = Snapshot {
            now: 100.0,
            pools: vec![Pool {
                name: "default".into(),
            }]
            .into(),
            queues: vec![neutral_queue("q", 0)].into(),
            pending,
            ..Snapshot::default()
        };
        let options = DecideOptions::default();
        let cycle = Cycle::new(&snapshot, &options);
        let scores: Vec<ReleaseScore> = snapshot
            .pending
            .iter()
            .map(|w| ReleaseScore::of(w, snapshot.now, &options.score))
            .collect();
        let mut expected: Vec<usize> = (0..snapshot.pending.len()).collect();
        expected.sort_by(|&a, &b| {
            let (wa, wb) = (&snapshot.pending[a], &snapshot.pending[b]);
            compare_workloads(wa, &scores[a], wb, &scores[b]).then(a.cmp(&b))
        });
        let order: Vec<usize> = cycle.entries.iter().map(|e| e.workload).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn entries_follow_each_queue_release_order_and_name_snapshot_workloads() {
        use crate::labels::{Urgency, UserTier};
        use crate::snapshot::{Node, PendingWorkload, PodRequest, Pool, ResourceKind};
        let queue = neutral_queue;
        let job =
            |uid: &str, queue: usize, tier: Tier, created_at: f64, pods: &[u32]| PendingWorkload {
                uid: uid.into(),
                queue: QueueId::new(queue),
                tier,
                deadline: None,
                urgency: Urgency::Medium,
                user_tier: UserTier::Standard,
                created_at,
                min_member: 1,
                pods: pods
                    .iter()
                    .enumerate()
                    .map(|(i, g)| PodRequest {
                        requests: vec![*g, i as u32],
                    })
                    .collect(),
            };
        let snapshot = Snapshot {
            now: 100.0,
            resources: vec![
                ResourceKind {
                    name: "gpu".into(),
                    gpu_equivalents: 1.0,
                },
                ResourceKind {
                    name: "slice".into(),
                    gpu_equivalents: 0.5,
                },
            ],
            pools: vec![Pool {
                name: "default".into(),
            }]
            .into(),
            nodes: vec![Node {
                name: "n".into(),
                pool: PoolId::new(0),
                allocatable: vec![1, 0],
                free: vec![0, 0],
            }]
            .into(),
            // Queue 1 names a pool that does not exist: its workloads get no entry.
            queues: vec![queue("b", 0), queue("x", 7), queue("a", 0)].into(),
            running: Vec::new(),
            pending: vec![
                job("q0-late", 0, Tier::Elastic, 50.0, &[1]),
                job("q2-gang", 2, Tier::Elastic, 10.0, &[2, 3, 4]),
                job("q1", 1, Tier::Realtime, 0.0, &[1]),
                job("q0-realtime", 0, Tier::Realtime, 90.0, &[5]),
                job("q2-backfill", 2, Tier::Backfill, 0.0, &[6]),
                job("q0-early", 0, Tier::Elastic, 20.0, &[7, 8]),
                job("q0-early-too", 0, Tier::Elastic, 20.0, &[9]),
                // These two differ only past the first 8 bytes after the queue's shared "q0-".
                job("q0-early-too-b", 0, Tier::Elastic, 20.0, &[1]),
                job("q0-early-too-a", 0, Tier::Elastic, 20.0, &[1]),
            ],
            ..Snapshot::default()
        };
        let options = DecideOptions::default();
        let cycle = Cycle::new(&snapshot, &options);
        let names = |q: usize| -> Vec<&str> {
            let (start, end) = cycle.queue_entries[QueueId::new(q)];
            cycle.entries[start..end]
                .iter()
                .map(|e| snapshot.pending[e.workload].uid.as_str())
                .collect()
        };
        // Score waits on age: of the two created at 20 s, the UID decides.
        assert_eq!(
            names(0),
            [
                "q0-realtime",
                "q0-early",
                "q0-early-too",
                "q0-early-too-a",
                "q0-early-too-b",
                "q0-late"
            ]
        );
        assert!(names(1).is_empty());
        assert_eq!(names(2), ["q2-gang", "q2-backfill"]);
        assert_eq!(cycle.entries.len(), 8);
        for entry in &cycle.entries {
            let workload = &snapshot.pending[entry.workload];
            let requests = requests_of(&cycle.pod_requests, cycle.width, entry);
            let expected: Vec<Vec<u32>> =
                workload.pods.iter().map(|p| p.requests.clone()).collect();
            assert_eq!(
                requests.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
                expected
            );
            let size: f64 = expected
                .iter()
                .map(|r| f64::from(r[0]) + f64::from(r[1]) * 0.5)
                .sum();
            assert_eq!(entry.size, size, "{}", workload.uid);
            assert_eq!(
                entry.score,
                ReleaseScore::of(workload, snapshot.now, &options.score)
            );
        }
        // Nothing fits: every workload of a valid queue waits, named by its snapshot index,
        // with its place in its own queue.
        let decisions = cycle.run();
        let mut waiting: Vec<(usize, usize, usize)> = decisions
            .waiting
            .iter()
            .map(|w| (w.workload, w.position, w.queue_length))
            .collect();
        waiting.sort_unstable();
        assert_eq!(
            waiting,
            [
                (0, 6, 6),
                (1, 1, 2),
                (3, 1, 6),
                (4, 2, 2),
                (5, 2, 6),
                (6, 3, 6),
                (7, 5, 6),
                (8, 4, 6)
            ]
        );
    }
}
