//! The decision cycle.

mod canonical;
mod capacity;
mod entries;
mod held_fit;
mod open_nodes;
mod pool_division;
mod release_order;
mod requests;
mod running;
mod setup;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use self::canonical::{by_name, valid_running};
use self::capacity::NodeCapacity;
use self::entries::{Entry, requests_of};
use self::held_fit::{HeldFitCache, fits_ignoring_hold};
use self::open_nodes::OpenNodes;
use self::release_order::ReleaseEntries;
use self::requests::{normalise, pod_request};
use self::running::RunningGroups;
use self::setup::Setup;
use super::decision::*;
use super::hold::plan_hold;
use super::options::{DecideOptions, PoolSettings};
use super::order::{QueueTurn, share_ratio, total_order};
use super::placement::{best_fit, subtract};
use super::preempt::{
    Preemptor, QueueView, RunningIndex, choose_backfill_victims, choose_victims, preemption_reason,
};
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId, QueueId, Snapshot};

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
        let after = self.decisions.queues[q].allocated_after + self.entries[e].size;
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
        let slot_free = first_misfit
            && if below_guarantee {
                pass.guarantee_hold.is_none()
            } else {
                pass.earned_hold.is_none()
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
