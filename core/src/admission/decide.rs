//! The decision cycle.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::decision::*;
use super::hold::plan_hold;
use super::options::{DecideOptions, PoolSettings};
use super::order::{QueueTurn, compare_workloads, share_ratio};
use super::placement::{best_fit, subtract};
use super::preempt::{Preemptor, QueueView, RunningIndex, choose_victims, preemption_reason};
use super::score::ReleaseScore;
use super::victims::{RunningWorkload, group_running};
use crate::division::{Claim, divide};
use crate::snapshot::{LedgerShares, NodeId, PoolId, QueueId, Snapshot};
use crate::weight::effective_weight;

const EPSILON: f64 = 1e-9;

/// Request vectors padded or cut to the snapshot's resource count, so a short or long vector is
/// read the same way everywhere.
fn normalise(requests: &[u32], width: usize) -> Vec<u32> {
    let mut v = requests.to_vec();
    v.resize(width, 0);
    v
}

/// The request vector of each pod of workload `w`.
fn requests_of<'r>(
    pod_requests: &'r [u32],
    workload_pods: &[(usize, usize)],
    width: usize,
    w: usize,
) -> Vec<&'r [u32]> {
    let (first, count) = workload_pods[w];
    (first..first + count)
        .map(|p| &pod_requests[p * width..(p + 1) * width])
        .collect()
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
    free: &[Vec<u32>],
    requests: &[&[u32]],
    weights: &[f64],
) -> bool {
    let [shape] = requests else {
        return best_fit(candidates, |n| free[n].as_slice(), requests, weights).is_some();
    };
    let known = cache
        .shapes
        .iter()
        .position(|(known, _)| known.as_slice() == *shape);
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
    /// Workloads held for this cycle.
    held_for: Vec<usize>,
    /// Per queue: whether one of its workloads has failed to fit this cycle.
    misfit_seen: Vec<bool>,
    /// Workloads released ahead of their turn because the capacity held for them drained.
    released_early: Vec<usize>,
    /// Single-pod shapes already known not to fit: anything at least as large fails too,
    /// because capacity only shrinks within a cycle.
    failed_shapes: Vec<Vec<u32>>,
}

struct Cycle<'a> {
    snapshot: &'a Snapshot,
    options: &'a DecideOptions,
    /// Per pool: its fair-share parameters and whether it holds capacity.
    pool_settings: Vec<PoolSettings>,
    /// Per pending workload: its release score this cycle.
    scores: Vec<ReleaseScore>,
    /// Per pending workload of a valid queue: its 1-based place in its queue's release order.
    position: Vec<usize>,
    weights: Vec<f64>,
    /// Nodes of each pool in canonical (name) order.
    pool_nodes: Vec<Vec<NodeId>>,
    /// What is free on each node, less this cycle's placements.
    free: Vec<Vec<u32>>,
    /// What is held on each node for the pool's held workload.
    held: Vec<Vec<u32>>,
    allocatable: Vec<Vec<u32>>,
    /// Free minus held, per node: what an ordinary workload may use.
    usable: Vec<Vec<u32>>,
    running_by_node: Vec<Vec<usize>>,
    /// Per node: it runs a workload whose eviction was refused (empty when none was).
    refused_on_node: Vec<bool>,
    /// Running pods grouped into workloads, and each running pod's workload.
    running_workloads: Vec<RunningWorkload>,
    workload_of_pod: Vec<usize>,
    /// Valid pending workloads of each queue, in release order.
    queue_pending: Vec<Vec<usize>>,
    queue_rank: Vec<usize>,
    /// Every pending pod's request, `width` counts each, workload after workload: one
    /// allocation per cycle instead of one per pod.
    pod_requests: Vec<u32>,
    /// Per pending workload: its first pod's index in `pod_requests` (in pods) and pod count.
    workload_pods: Vec<(usize, usize)>,
    width: usize,
    /// Single-pod shapes already checked against capacity ignoring the hold, in this pool.
    held_fit_cache: HeldFitCache,
    pending_size: Vec<f64>,
    views: Vec<QueueView>,
    /// Per queue: the most it may hold beside the guarantees of the other queues of its pool
    /// that have demand (capacity − Σ others' min(guarantee, demand)).
    headroom: Vec<f64>,
    /// Per queue: its time-aware share, fair share plus what it is owed spread over the catch-up
    /// period. A hold is made only for a workload this covers.
    earned: Vec<f64>,
    /// GPU-equivalents each pool has in all.
    pool_capacity: Vec<f64>,
    open: OpenNodes,
    decisions: Decisions,
}

/// Nodes of each pool (canonical order) that may still have some GPU usable. A node with none
/// can never take a pod asking for a GPU again this cycle, because usable capacity only
/// shrinks within a cycle; leaving such nodes out of the search changes no placement and
/// spares a scan of every full node for every pod.
struct OpenNodes {
    lists: Vec<Vec<NodeId>>,
    /// Per pool: how many nodes at the front of its list are known to be without usable GPU.
    /// Best fit fills nodes about in list order, so most nodes close at the front; skipping
    /// them there keeps each search from rescanning them until the next compaction.
    front: Vec<usize>,
    /// Per pool: nodes in its list past `front` found without usable GPU since it was last
    /// compacted.
    stale: Vec<usize>,
    /// Per node: no GPU usable any more.
    exhausted: Vec<bool>,
}

impl OpenNodes {
    fn new(pool_nodes: &[Vec<NodeId>], exhausted: Vec<bool>) -> Self {
        Self {
            lists: pool_nodes
                .iter()
                .map(|nodes| nodes.iter().copied().filter(|&n| !exhausted[n]).collect())
                .collect(),
            front: vec![0; pool_nodes.len()],
            stale: vec![0; pool_nodes.len()],
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

impl<'a> Cycle<'a> {
    fn new(snapshot: &'a Snapshot, options: &'a DecideOptions) -> Self {
        let width = snapshot.resources.len();
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
        let size =
            |v: &[u32]| -> f64 { v.iter().zip(&weights).map(|(c, w)| f64::from(*c) * w).sum() };
        let pools = snapshot.pools.len();
        let queues = snapshot.queues.len();

        let mut node_order: Vec<NodeId> = (0..snapshot.nodes.len())
            .filter(|&n| snapshot.nodes[n].pool < pools)
            .collect();
        node_order.sort_unstable_by(|&a, &b| {
            snapshot.nodes[a]
                .name
                .cmp(&snapshot.nodes[b].name)
                .then(a.cmp(&b))
        });
        let mut pool_nodes = vec![Vec::new(); pools];
        for &n in &node_order {
            pool_nodes[snapshot.nodes[n].pool].push(n);
        }
        let allocatable: Vec<Vec<u32>> = snapshot
            .nodes
            .iter()
            .map(|n| normalise(&n.allocatable, width))
            .collect();
        let free: Vec<Vec<u32>> = snapshot
            .nodes
            .iter()
            .map(|n| normalise(&n.free, width))
            .collect();

        let mut queue_order: Vec<QueueId> = (0..queues).collect();
        queue_order.sort_unstable_by(|&a, &b| {
            snapshot.queues[a]
                .name
                .cmp(&snapshot.queues[b].name)
                .then(a.cmp(&b))
        });
        let mut queue_rank = vec![0; queues];
        for (rank, &q) in queue_order.iter().enumerate() {
            queue_rank[q] = rank;
        }

        let valid_queue = |q: QueueId| q < queues && snapshot.queues[q].pool < pools;
        let mut allocated = vec![0.0; queues];
        let mut running_by_node = vec![Vec::new(); snapshot.nodes.len()];
        let mut running_order: Vec<usize> = (0..snapshot.running.len()).collect();
        // Unstable sorts are exact here: every comparison ends on the unique index.
        running_order.sort_unstable_by(|&a, &b| {
            snapshot.running[a]
                .uid
                .cmp(&snapshot.running[b].uid)
                .then(a.cmp(&b))
        });
        let mut valid_running = Vec::with_capacity(running_order.len());
        for i in running_order {
            let pod = &snapshot.running[i];
            if !valid_queue(pod.queue) || pod.node >= snapshot.nodes.len() {
                continue;
            }
            allocated[pod.queue] += size(&normalise(&pod.requests, width));
            running_by_node[pod.node].push(i);
            valid_running.push(i);
        }
        let (running_workloads, workload_of_pod) = group_running(snapshot, &valid_running, |i| {
            size(&normalise(&snapshot.running[i].requests, width))
        });
        let mut refused_on_node = Vec::new();
        if !snapshot.refused_victims.is_empty() {
            refused_on_node = vec![false; snapshot.nodes.len()];
            for workload in &running_workloads {
                if snapshot.refused_victims.contains(&workload.id) {
                    for &pod in &workload.pods {
                        refused_on_node[snapshot.running[pod].node] = true;
                    }
                }
            }
        }

        let mut pod_requests: Vec<u32> = Vec::new();
        let mut workload_pods: Vec<(usize, usize)> = Vec::with_capacity(snapshot.pending.len());
        for w in &snapshot.pending {
            workload_pods.push((pod_requests.len() / width.max(1), w.pods.len()));
            for pod in &w.pods {
                let start = pod_requests.len();
                pod_requests.extend(pod.requests.iter().take(width));
                pod_requests.resize(start + width, 0);
            }
        }
        let pending_size: Vec<f64> = workload_pods
            .iter()
            .map(|&(first, count)| {
                (first..first + count)
                    .map(|p| size(&pod_requests[p * width..(p + 1) * width]))
                    .sum()
            })
            .collect();
        let mut queue_pending = vec![Vec::new(); queues];
        let mut pending_total = vec![0.0; queues];
        for (i, w) in snapshot.pending.iter().enumerate() {
            if valid_queue(w.queue) {
                queue_pending[w.queue].push(i);
                pending_total[w.queue] += pending_size[i];
            }
        }
        let scores: Vec<ReleaseScore> = snapshot
            .pending
            .iter()
            .map(|w| ReleaseScore::of(w, snapshot.now, &options.score))
            .collect();
        let mut position = vec![0; snapshot.pending.len()];
        for list in &mut queue_pending {
            list.sort_unstable_by(|&a, &b| {
                let (wa, wb) = (&snapshot.pending[a], &snapshot.pending[b]);
                compare_workloads(wa, &scores[a], wb, &scores[b]).then(a.cmp(&b))
            });
            for (rank, &w) in list.iter().enumerate() {
                position[w] = rank + 1;
            }
        }
        let pool_settings: Vec<PoolSettings> = snapshot
            .pools
            .iter()
            .map(|p| options.pool_settings(&p.name))
            .collect();

        // Division per pool: K = 0 entitlement and the history-corrected fair share.
        let mut outcomes: Vec<QueueOutcome> = (0..queues)
            .map(|q| QueueOutcome {
                queue: q,
                allocated: allocated[q],
                pending: pending_total[q],
                allocated_after: allocated[q],
                ..QueueOutcome::default()
            })
            .collect();
        let guaranteed_of = |q: QueueId| {
            let g = snapshot.queues[q].guaranteed;
            if g.is_finite() { g.max(0.0) } else { 0.0 }
        };
        let weight_of = |q: QueueId| {
            let w = snapshot.queues[q].weight;
            if w.is_finite() && w > 0.0 { w } else { 0.0 }
        };
        // A pool with time-aware sharing off ignores its queues' history altogether, so it
        // divides exactly as stateless fair share would.
        let shares_of = |q: QueueId| {
            if pool_settings[snapshot.queues[q].pool].time_aware {
                snapshot.queues[q].shares
            } else {
                LedgerShares::NEUTRAL
            }
        };
        let catch_up_of = |pool: PoolId| {
            let catch_up = pool_settings[pool].fairshare.catch_up_s;
            if catch_up.is_finite() && catch_up > 0.0 {
                catch_up
            } else {
                0.0
            }
        };
        let mut headroom = vec![0.0; queues];
        // The share a queue gets whatever the others' demand does from minute to minute: its
        // guarantee plus its weight's part of what the guarantees leave, among the queues that
        // have demand at all (never more than its entitlement). The catch-up claim is built on
        // it rather than on the instantaneous division, so a dip in someone else's demand does
        // not earn a hold, and it sets how much history δ needs before it moves a weight fully.
        let mut steady = vec![0.0; queues];
        for (pool, nodes) in pool_nodes.iter().enumerate() {
            let catch_up = catch_up_of(pool);
            let capacity: f64 = nodes.iter().map(|&n| size(&allocatable[n])).sum();
            let members: Vec<QueueId> = queue_order
                .iter()
                .copied()
                .filter(|&q| valid_queue(q) && snapshot.queues[q].pool == pool)
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
        let views: Vec<QueueView> = (0..queues)
            .map(|q| QueueView {
                allocated: allocated[q],
                guaranteed: guaranteed_of(q),
                fair_share: outcomes[q].fair_share,
            })
            .collect();
        let earned: Vec<f64> = (0..queues)
            .map(|q| {
                let catch_up = if valid_queue(q) {
                    catch_up_of(snapshot.queues[q].pool)
                } else {
                    0.0
                };
                let owed = if catch_up > 0.0 {
                    shares_of(q).deficit_gpu_s().max(0.0) / catch_up
                } else {
                    0.0
                };
                steady[q] + owed
            })
            .collect();

        let pool_capacity: Vec<f64> = pool_nodes
            .iter()
            .map(|nodes| nodes.iter().map(|&n| size(&allocatable[n])).sum())
            .collect();
        let held = vec![vec![0; width]; snapshot.nodes.len()];
        let usable = free.clone();
        let open = OpenNodes::new(&pool_nodes, usable.iter().map(|u| size(u) <= 0.0).collect());
        Self {
            snapshot,
            options,
            pool_settings,
            scores,
            position,
            weights,
            pool_nodes,
            free,
            held,
            allocatable,
            usable,
            running_by_node,
            refused_on_node,
            running_workloads,
            workload_of_pod,
            queue_pending,
            queue_rank,
            pod_requests,
            workload_pods,
            width,
            held_fit_cache: HeldFitCache::default(),
            pending_size,
            views,
            headroom,
            earned,
            pool_capacity,
            open,
            decisions: Decisions {
                queues: outcomes,
                ..Decisions::default()
            },
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
        for pool in 0..self.pool_nodes.len() {
            self.run_pool(pool);
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
            held_for: Vec::new(),
            misfit_seen: vec![false; snapshot.queues.len()],
            released_early: Vec::new(),
            failed_shapes: Vec::new(),
        };
        let mut heap = BinaryHeap::new();
        let mut cursor = vec![0usize; snapshot.queues.len()];
        for q in 0..snapshot.queues.len() {
            if snapshot.queues[q].pool == pool && !self.queue_pending[q].is_empty() {
                heap.push(Reverse((self.turn(q, 0), q)));
            }
        }
        let mut guarantees_served = false;

        while let Some(Reverse((turn, q))) = heap.pop() {
            if !turn.below_guarantee && !guarantees_served {
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
            let w = self.queue_pending[q][cursor[q]];
            cursor[q] += 1;
            let reason = self.consider(pool, q, w, turn.below_guarantee, &mut pass);
            if let Some(reason) = reason {
                self.decisions.waiting.push(Waiting {
                    workload: w,
                    reason,
                    score: self.scores[w],
                    position: self.position[w],
                    queue_length: self.queue_pending[q].len(),
                });
            }
            if cursor[q] < self.queue_pending[q].len() {
                heap.push(Reverse((self.turn(q, cursor[q]), q)));
            }
        }
    }

    /// Why workload `w` of queue `q` cannot be released this cycle, if anything stops it before
    /// placement is tried.
    fn blocked(&self, q: QueueId, w: usize) -> Option<WaitReason> {
        let snapshot = self.snapshot;
        let workload = &snapshot.pending[w];
        let outcome = &self.decisions.queues[q];
        let size = self.pending_size[w];
        let after = outcome.allocated_after + size;
        let present = u32::try_from(workload.pods.len()).unwrap_or(u32::MAX);
        if workload.pods.is_empty() || present < workload.min_member {
            return Some(WaitReason::GangIncomplete {
                present,
                min_member: workload.min_member,
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
        if holds && after > outcome.fair_share + EPSILON && after > self.headroom[q] + EPSILON {
            // Borrowing idle capacity is fine, but not what other queues are guaranteed: it
            // would have to be taken back by preemption as soon as they want it. (Keeping it
            // free for them is a hold, so it goes with holding.)
            return Some(WaitReason::BeyondGuarantees {
                needed: after,
                available: self.headroom[q],
            });
        }
        let earned = self.earned[q].max(self.views[q].guaranteed);
        let below_guarantee = outcome.allocated_after + EPSILON < self.views[q].guaranteed;
        if holds && !below_guarantee && after > earned + EPSILON && size > earned + EPSILON {
            // A workload larger than its queue's time-aware share starts only once the queue
            // has earned it, even if a lull in others' demand leaves room for it now: taking
            // it back later would cost the whole workload. A queue below its guarantee is
            // served first regardless.
            return Some(WaitReason::NotEarned {
                needed: after,
                earned,
            });
        }
        None
    }

    /// Whether queue `q` has earned a hold for workload `w`: its time-aware share (or its
    /// guarantee) covers what it would hold with it, and the pool leaves that much beside the
    /// other queues' guarantees. The reason it has not, otherwise.
    fn hold_refusal(&self, q: QueueId, w: usize) -> Option<WaitReason> {
        let after = self.decisions.queues[q].allocated_after + self.pending_size[w];
        let earned = self.earned[q]
            .max(self.views[q].guaranteed)
            .max(self.decisions.queues[q].fair_share);
        if after > self.headroom[q] + EPSILON {
            Some(WaitReason::BeyondGuarantees {
                needed: after,
                available: self.headroom[q],
            })
        } else if after > earned + EPSILON {
            Some(WaitReason::NotEarned {
                needed: after,
                earned,
            })
        } else {
            None
        }
    }

    /// A placement of workload `w` in what ordinary workloads may use, or `None`.
    fn place(&self, pool: PoolId, w: usize, pass: &PoolPass) -> Option<Vec<NodeId>> {
        // Once the pool is spent, most waiting workloads end here, so the cheap refusals come
        // first and nothing is allocated before the search.
        if self.pending_size[w] > pass.usable_total + EPSILON {
            return None;
        }
        let (first, count) = self.workload_pods[w];
        if count == 1 {
            let shape = &self.pod_requests[first * self.width..(first + 1) * self.width];
            if pass
                .failed_shapes
                .iter()
                .any(|f| f.iter().zip(shape).all(|(a, b)| b >= a))
            {
                return None;
            }
        }
        let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
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

    /// Remembers that single-pod workload `w` found no node, so that anything at least as large
    /// is refused without a search for the rest of the pass.
    fn note_misfit(&self, w: usize, pass: &mut PoolPass) {
        let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
        if let [shape] = requests.as_slice()
            && pass.failed_shapes.len() < 16
            && !pass
                .failed_shapes
                .iter()
                .any(|f| f.iter().zip(*shape).all(|(a, b)| b >= a))
        {
            pass.failed_shapes.push(shape.to_vec());
        }
    }

    /// Tries to release workload `w` of queue `q`; returns why it waits if it does.
    fn consider(
        &mut self,
        pool: PoolId,
        q: QueueId,
        w: usize,
        below_guarantee: bool,
        pass: &mut PoolPass,
    ) -> Option<WaitReason> {
        if pass.released_early.contains(&w) {
            return None;
        }
        if pass.held_for.contains(&w) {
            // Held before its turn came: it starts once the held nodes have drained.
            return Some(WaitReason::Holding);
        }
        if let Some(reason) = self.blocked(q, w) {
            // A queue whose first waiting workload cannot be released does not hold for a
            // later one instead.
            pass.misfit_seen[q] = true;
            return Some(reason);
        }
        let size = self.pending_size[w];
        if let Some(nodes) = self.place(pool, w, pass) {
            self.release(q, w, nodes);
            pass.usable_total -= size;
            return None;
        }
        self.note_misfit(w, pass);
        let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
        // The first workload that does not fit may hold capacity (and preempt for it) on the
        // spot if its queue has earned it: one hold for queues below their guarantee (served
        // first) and one for the others, unless one was made before the loop.
        // Only a queue's first workload that does not fit may hold: the queue's most deserving
        // one, not whichever later one happens to be small enough.
        let first_misfit = !std::mem::replace(&mut pass.misfit_seen[q], true);
        let slot_free = first_misfit
            && if below_guarantee {
                pass.guarantee_hold.is_none()
            } else {
                pass.earned_hold.is_none()
            };
        if self.holds_in(pool) && slot_free {
            match self.hold_refusal(q, w) {
                Some(refusal) if below_guarantee => return Some(refusal),
                Some(_) => {}
                None => {
                    return match self.hold(pool, w, q) {
                        Some(held_total) => {
                            pass.usable_total -= held_total;
                            pass.hold = Some(w);
                            pass.held_for.push(w);
                            if below_guarantee {
                                pass.guarantee_hold = Some(w);
                            } else {
                                pass.earned_hold = Some(w);
                            }
                            Some(WaitReason::Holding)
                        }
                        None => Some(WaitReason::NeverFits),
                    };
                }
            }
        }
        if let Some(holder) = pass.hold.filter(|_| {
            fits_ignoring_hold(
                &mut self.held_fit_cache,
                &self.pool_nodes[pool],
                &self.free,
                &requests,
                &self.weights,
            )
        }) {
            return Some(WaitReason::CapacityHeld {
                for_workload: holder,
            });
        }
        if self.holds_in(pool)
            && let Some(refusal) = self.hold_refusal(q, w)
        {
            return Some(refusal);
        }
        Some(WaitReason::NoFit)
    }

    /// Records the release of workload `w` of queue `q` on `nodes`.
    fn release(&mut self, q: QueueId, w: usize, nodes: Vec<NodeId>) {
        let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
        for (request, &node) in requests.iter().zip(&nodes) {
            subtract(&mut self.free[node], request);
            subtract(&mut self.usable[node], request);
            if self.size(&self.usable[node]) <= 0.0 {
                self.open.close(self.snapshot.nodes[node].pool, node);
            }
        }
        let outcome = self.decisions.queues[q];
        let after = outcome.allocated_after + self.pending_size[w];
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
            workload: w,
            placements: nodes,
            reason,
        });
    }

    /// Holds capacity for the most deserving waiting workload of the pool that cannot start
    /// now and whose hold its queue has earned: per queue, its next workload if that does not
    /// fit; among queues, the one furthest below its time-aware share. A workload held last cycle comes
    /// first, and if what drained for it is now enough it is released at once, before anyone
    /// else's turn can take that capacity.
    fn hold_most_deserving(&mut self, pool: PoolId, cursor: &[usize], pass: &mut PoolPass) {
        let snapshot = self.snapshot;
        let mut best: Option<((bool, QueueTurn), usize, QueueId)> = None;
        let mut drained: Option<(QueueId, usize, Vec<NodeId>)> = None;
        for (q, &next) in cursor.iter().enumerate() {
            if snapshot.queues[q].pool != pool {
                continue;
            }
            let pending = &self.queue_pending[q];
            // Only the queue's next workload: whether a later one fits depends on what the
            // earlier ones take.
            if let Some(&w) = pending.get(next) {
                if self.blocked(q, w).is_some() {
                    continue;
                }
                // A hold once earned is kept until the workload starts, and ahead of any new
                // one: the deficit that earned it only grows while it waits, and dropping it
                // for one cycle would give away what has drained so far.
                let kept = snapshot
                    .previous_holds
                    .iter()
                    .any(|h| h.workload == snapshot.pending[w].uid);
                if let Some(nodes) = self.place(pool, w, pass) {
                    if kept && drained.is_none() {
                        drained = Some((q, w, nodes));
                    }
                    continue;
                }
                self.note_misfit(w, pass);
                // A kept hold goes first, but only while its queue still has earned it.
                let still_allowed = self.hold_refusal(q, w).is_none();
                if still_allowed {
                    // Among queues, the hold goes to the one furthest below its time-aware share
                    // as it stands, whatever the size of its workload: ranking by the share it
                    // would reach would always favour small workloads, and large ones would
                    // never be held for.
                    let outcome = &self.decisions.queues[q];
                    let standing = QueueTurn {
                        below_guarantee: false,
                        ratio: share_ratio(
                            outcome.allocated_after,
                            self.earned[q].max(outcome.fair_share),
                        ),
                        rank: self.queue_rank[q],
                    };
                    let key = (!kept, standing);
                    if best.as_ref().is_none_or(|(b, _, _)| key < *b) {
                        best = Some((key, w, q));
                    }
                }
            }
        }
        if let Some((q, w, nodes)) = drained {
            self.release(q, w, nodes);
            pass.usable_total -= self.pending_size[w];
            pass.released_early.push(w);
            return;
        }
        if let Some((_, w, q)) = best
            && let Some(held_total) = self.hold(pool, w, q)
        {
            pass.usable_total -= held_total;
            pass.hold = Some(w);
            pass.earned_hold = Some(w);
            pass.held_for.push(w);
        }
    }

    /// Queue `q`'s place in the serving order when its workload at `position` is next. The
    /// ratio counts that workload, as it would stand once released, against the queue's
    /// time-aware share (fair share plus what it is owed over the catch-up period): a queue whose
    /// next workload would take it past that share waits behind every queue whose next workload
    /// keeps it within its own, however little the first queue holds now. Without this a queue
    /// holding nothing would always be served first, and a large job would always win back the
    /// capacity it just freed, whatever the history says; with it, a large workload moves up as
    /// its queue earns it by waiting.
    fn turn(&self, q: QueueId, position: usize) -> QueueTurn {
        let outcome = &self.decisions.queues[q];
        let guaranteed = self.views[q].guaranteed;
        let below_guarantee = outcome.allocated_after + EPSILON < guaranteed;
        let next = self.pending_size[self.queue_pending[q][position]];
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

    /// Holds capacity for workload `w` of queue `q`; returns the GPU-equivalents taken out of
    /// ordinary use, or `None` if the workload cannot fit in the pool even when it is empty.
    fn hold(&mut self, pool: PoolId, w: usize, q: QueueId) -> Option<f64> {
        let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
        // Capacity already held for another workload is neither free nor drainable for this one.
        let unheld = |totals: &[Vec<u32>]| -> Vec<Vec<u32>> {
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
        let plan = plan_hold(
            &self.pool_nodes[pool],
            preferred,
            &self.refused_on_node,
            &unheld(&self.free),
            &unheld(&self.allocatable),
            &requests,
            &self.weights,
        )?;
        let mut held_total = 0.0;
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
            subtract(&mut self.usable[*node], &take);
            if self.size(&self.usable[*node]) <= 0.0 {
                self.open.close(pool, *node);
            }
            for (slot, t) in self.held[*node].iter_mut().zip(&take) {
                *slot += t;
            }
            held_total += self.size(&take);
            held_nodes.push((*node, take));
            missing.push((*node, short));
        }
        let missing_total: f64 = missing.iter().map(|(_, m)| self.size(m)).sum();
        self.decisions.holds.push(Hold {
            workload: w,
            pool,
            nodes: held_nodes,
            missing_gpu_equivalents: missing_total,
            missing: missing.clone(),
        });
        if missing_total > 0.0 {
            self.preempt_for(w, q, &missing);
        }
        Some(held_total)
    }

    fn preempt_for(&mut self, w: usize, q: QueueId, missing: &[(NodeId, Vec<u32>)]) {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let size = self.pending_size[w];
        let Some(reason) = preemption_reason(snapshot, params, q, size, &self.views[q]) else {
            return;
        };
        let preemptor = Preemptor {
            queue: q,
            size,
            tier: snapshot.pending[w].tier,
            missing,
        };
        if let Some(victims) = choose_victims(
            snapshot,
            params,
            &preemptor,
            reason,
            &RunningIndex {
                workloads: &self.running_workloads,
                workload_of_pod: &self.workload_of_pod,
                by_node: &self.running_by_node,
            },
            &mut self.views,
        ) {
            for (victim, reason) in victims {
                let victim = &self.running_workloads[victim];
                self.decisions.preemptions.push(Preemption {
                    victim_workload: victim.id.clone(),
                    pods: victim.pods.clone(),
                    size: victim.size,
                    for_workload: w,
                    reason,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_fit_cache_rechecks_its_witness_and_remembers_misfits() {
        let mut cache = HeldFitCache::default();
        let mut free = vec![vec![1], vec![2]];
        let mut fits = |free: &[Vec<u32>], gpus: u32| {
            fits_ignoring_hold(&mut cache, &[0, 1], free, &[&[gpus]], &[1.0])
        };
        assert!(fits(&free, 2));
        // The witness (node 1) fills up: the answer is found again, not taken from the cache.
        free[1][0] = 1;
        assert!(!fits(&free, 2));
        assert!(fits(&free, 1));
        // Capacity only shrinks within a pass, so a misfit stays one without a search.
        free[0][0] = 0;
        free[1][0] = 0;
        assert!(!fits(&free, 1));
        assert!(!fits(&free, 2));
    }

    #[test]
    fn open_nodes_skip_closed_ones_wherever_they_close() {
        let pools = vec![(0..20).collect::<Vec<NodeId>>()];
        let mut exhausted = vec![false; 20];
        exhausted[3] = true;
        let mut open = OpenNodes::new(&pools, exhausted);
        let expect = |closed: &[NodeId]| -> Vec<NodeId> {
            (0..20).filter(|n| *n != 3 && !closed.contains(n)).collect()
        };
        assert_eq!(open.of(0), expect(&[]).as_slice());
        let mut closed = Vec::new();
        // Front first (as best fit fills), then the middle and the back.
        for node in [0, 1, 2, 4, 10, 19, 5, 6, 7, 11, 12] {
            open.close(0, node);
            open.close(0, node);
            closed.push(node);
            let listed = open.of(0);
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
}
