//! Holding capacity for a workload that cannot start now: which workload of a pool the earned
//! hold goes to, and what holding takes from the nodes, drained, evicted or still missing.

use std::cmp::Reverse;

use super::entries::requests_of;
use super::hold_split::Split;
use super::idle_budget::DrainOutcome;
use super::pool_pass::PoolPass;
use super::running::work_run_per_node;
use super::{Cycle, EPSILON};
use crate::admission::decision::{Hold, WaitReason};
use crate::admission::hold::{HoldPlan, TieBreaks, plan_hold, plan_hold_losing_least};
use crate::admission::hold_cost::HoldCost;
use crate::admission::order::total_order;
use crate::admission::placement::{add, subtract};
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId, QueueId};

/// A candidate's place in line for a pool's earned hold, lowest first: not kept from last
/// cycle, share ratio (as `total_order` bits), the claim (higher first), the queue's rank.
type HoldRank = (bool, u64, Reverse<u64>, usize);

/// What asking for a hold came to.
pub(super) enum HoldOutcome {
    /// Held; the GPU-equivalents taken out of ordinary use.
    Held(f64),
    /// The workload cannot fit in the pool even when it is empty.
    NeverFits,
    /// The hold had left its idle budget standing free and nothing still on its nodes may be
    /// evicted: it is given up. What stood where capacity was missing comes with it.
    GivenUp(Vec<String>),
    /// Only the nodes where what blocked the workload's last hold still runs could take it: no
    /// hold for it while that runs (see `given_up`).
    AroundBlockers,
    /// Its holds given up after the first have spent more of their idle budgets than its pool
    /// allows by now: no hold for it until time catches up (see `given_up`).
    GivenUpTooOften,
}

impl Cycle<'_> {
    /// Holds capacity for the most deserving waiting workload of the pool that cannot start
    /// now and whose hold its queue has earned: per queue, its next workload if that does not
    /// fit (or the later one held last cycle behind a next one that others' guarantees block,
    /// see `kept_hold_past_blocked`); among queues, the one furthest below its time-aware
    /// share. A workload held last cycle comes first, and if what drained for it is now enough
    /// it is released at once, before anyone else's turn can take that capacity.
    pub(super) fn hold_most_deserving(
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
            // The queue's next workload, as a rule: whether a later one fits depends on what
            // the earlier ones take. A later one only where the next is beyond others'
            // guarantees or not earned (see the two calls below).
            if next < self.queue_entries[q].1 {
                let mut e = next;
                if let Some(reason) = self.blocked(q, e, false) {
                    // Where the queue's next workload would take it beyond what the other
                    // queues' guarantees leave, a later one of the queue may hold instead (see
                    // `consider`): a hold kept for such a later one stays in line as kept
                    // holds do.
                    match self.kept_hold_past_blocked(q, e, reason) {
                        Some(k) => e = k,
                        None => continue,
                    }
                }
                if let Some(k) = self.earned_behind_unearned(q, e) {
                    e = k;
                }
                // A hold once earned is kept until the workload starts, and ahead of any new
                // one: the deficit that earned it only grows while it waits, and dropping it
                // for one cycle would give away what has drained so far.
                let kept = self.previous_hold(e).is_some();
                if let Some(nodes) = self.place(pool, e, pass) {
                    if kept && drained.is_none() {
                        drained = Some((q, e, nodes));
                    } else if !kept && deferred.is_none() {
                        deferred = self.kept_hold_behind(q, e);
                    }
                    continue;
                }
                // Realtime work that fits past the holds made so far starts on its turn.
                if self.passes_holds(pool, q, e, pass) {
                    continue;
                }
                self.note_misfit(e, pass);
                // A hold that has left its capacity idle as long as it may ends its drain by
                // eviction, or is given up (see `end_stalled_drain`).
                let overdue = kept && self.hold_spent(pool, e);
                // A kept hold goes first, but only while its queue still has earned it.
                let still_allowed = self.hold_refusal(q, e).is_none();
                if overdue && !still_allowed {
                    self.give_up(e, Vec::new());
                }
                // What blocked an earlier hold's drain for good still stands where this one
                // would have to drain: no hold until it ends or other nodes can be drained.
                if still_allowed && self.has_blockers(e) && self.plan(pool, e).is_none() {
                    pass.around_blockers.push(e);
                    continue;
                }
                // Holds for it given up too often: none until time catches up (see `given_up`).
                if still_allowed && !kept && self.given_up_too_often(pool, e).is_some() {
                    pass.given_up_too_often.push(e);
                    continue;
                }
                if still_allowed {
                    // Among queues, the hold goes to the one furthest below its time-aware share
                    // as it stands, whatever the size of its workload: ranking by the share it
                    // would reach would always favour small workloads, and large ones would
                    // never be held for. Between queues that stand equally (most often: holding
                    // nothing), the one with the larger time-aware share, the one owed more,
                    // goes first, so the order of names never decides who waits.
                    let claim = self.claim(q);
                    let key = (
                        !kept,
                        total_order(self.share_standing(q)),
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
                HoldOutcome::GivenUp(blockers) => self.give_up(e, blockers),
                HoldOutcome::AroundBlockers => pass.around_blockers.push(e),
                HoldOutcome::GivenUpTooOften => pass.given_up_too_often.push(e),
            }
        }
    }

    /// The entry of queue `q` after `e` that was held last cycle and is not blocked itself, if
    /// `e` is blocked for `reason` as beyond what others' guarantees leave its queue, which
    /// leaves the queue's later work free to hold (see `consider`).
    fn kept_hold_past_blocked(&self, q: QueueId, e: usize, reason: WaitReason) -> Option<usize> {
        if !matches!(reason, WaitReason::BeyondGuarantees { .. })
            || self.snapshot.previous_holds.is_empty()
        {
            return None;
        }
        let end = self.queue_entries[q].1;
        (e + 1..end)
            .find(|&k| self.previous_hold(k).is_some() && self.blocked(q, k, false).is_none())
    }

    /// The first entry of queue `q` after `e` that its fair share covers on top of what it runs
    /// (or that was held last cycle), if the queue has not earned a hold for `e`, which was not
    /// held last cycle either, and may hold for that entry. Otherwise a queue far below its
    /// share, whose next workload is larger than its share has grown to cover, gets no hold and
    /// so evicts nothing even for work its fair share covers, and waits on while others' work
    /// started in a lull runs on. Only work within the fair share: beyond it, holding for a
    /// later workload would drain capacity for work no more earned than the first, and in a
    /// pool shared by many queues, each with a fraction of a GPU, every queue would hold. The
    /// larger workload keeps its place: it is held for once earned, by its queue's deficit or
    /// by waiting (see `aging`), as it would be behind the queue's smaller work anyway.
    fn earned_behind_unearned(&self, q: QueueId, e: usize) -> Option<usize> {
        if self.previous_hold(e).is_some()
            || !matches!(self.hold_refusal(q, e), Some(WaitReason::NotEarned { .. }))
        {
            return None;
        }
        let room = self.views[q].fair_share - self.decisions.queues[q].allocated_after;
        let end = self.queue_entries[q].1;
        (e + 1..end).find(|&k| {
            self.blocked(q, k, false).is_none()
                && (self.previous_hold(k).is_some()
                    || (self.entries[k].size <= room + EPSILON
                        && self.hold_refusal(q, k).is_none()))
        })
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
        let k = (e + 1..end).find(|&k| self.previous_hold(k).is_some())?;
        let ahead: f64 = self.entries[e..k].iter().map(|entry| entry.size).sum();
        (self.blocked(q, k, false).is_none() && self.hold_refusal_after(q, k, ahead).is_none())
            .then_some(k)
    }

    /// Holds capacity for entry `e` of queue `q`. A hold past its idle budget (`overdue`)
    /// evicts what still stands on its nodes, or is given up where nothing there may be evicted.
    pub(super) fn hold(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        overdue: bool,
    ) -> HoldOutcome {
        let w = self.entries[e].workload;
        if self.previous_hold(e).is_none() && self.given_up_too_often(pool, e).is_some() {
            return HoldOutcome::GivenUpTooOften;
        }
        let Some(plan) = self.plan(pool, e) else {
            return if self.has_blockers(e) {
                HoldOutcome::AroundBlockers
            } else {
                HoldOutcome::NeverFits
            };
        };
        let Split {
            mut held_nodes,
            mut missing,
            mut missing_total,
        } = self.split(&plan);
        let evictions = self.decisions.preemptions.len();
        if missing_total > 0.0 && !self.evict_backfill(e, &missing) {
            // A hold begun within `holdLead` of being earned drains its nodes but evicts
            // nothing: others' work is not thrown away for a workload its queue has not earned
            // yet. Past its idle budget so, it is given up.
            let given_up = if self.earned_now(q, e) {
                match self.cheapest_share_eviction(pool, e, q, &missing) {
                    Some((eviction, cheaper)) => {
                        if let Some(split) = cheaper {
                            Split {
                                held_nodes,
                                missing,
                                missing_total,
                            } = split;
                        }
                        self.carry_out(eviction);
                        false
                    }
                    None => {
                        match self.end_stalled_drain(pool, e, q, (&missing, missing_total), overdue)
                        {
                            DrainOutcome::GiveUp => true,
                            DrainOutcome::Evicted(Some(split)) => {
                                Split {
                                    held_nodes,
                                    missing,
                                    missing_total,
                                } = split;
                                false
                            }
                            DrainOutcome::Evicted(None) | DrainOutcome::Wait => false,
                        }
                    }
                }
            } else {
                overdue && self.budget_spent_for_giving_up(pool, e)
            };
            if given_up {
                return HoldOutcome::GivenUp(self.standing_on(&missing));
            }
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
        self.lent.push(0.0);
        self.decisions.holds.push(Hold {
            workload: w,
            pool,
            nodes: held_nodes,
            missing_gpu_equivalents: missing_total,
            missing: missing.clone(),
            cost: HoldCost {
                idle_gpu_s: self.idle_so_far(e),
                idle_gpu_equivalents: held_total,
                lent_gpu_equivalents: 0.0,
                unwanted_idle_gpu_s: self.unwanted_idle_so_far(e),
                unwanted_idle_gpu_equivalents: 0.0,
            },
        });
        if let Some(closing) = self.closing.last_mut() {
            *closing = self.decisions.preemptions.len() > evictions;
        }
        HoldOutcome::Held(held_total)
    }

    /// Where a hold for entry `e` would go in `pool`: the nodes it would drain, assuming they
    /// could be emptied of all but what a given-up hold found blocking (see `given_up`).
    fn plan(&mut self, pool: PoolId, e: usize) -> Option<HoldPlan> {
        let (drainable, drainable_at_most) = self.drainable(pool, e);
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        let preferred: &[NodeId] = self.previous_hold(e).map_or(&[], |h| h.nodes.as_slice());
        let (snapshot, weights) = (self.snapshot, &self.weights);
        let work = self
            .node_work
            .get_or_insert_with(|| work_run_per_node(snapshot, weights));
        let ties = TieBreaks {
            refused: &self.refused_on_node,
            preferred,
            work,
        };
        plan_hold(
            &self.pool_nodes[pool],
            ties,
            &drainable,
            &drainable_at_most,
            &requests,
            &self.weights,
        )
    }

    /// Where a hold for entry `e` would go in `pool` if it cleared its nodes by eviction now:
    /// see [`plan_hold_losing_least`]. With `spare_own`, nodes running its own queue's work are
    /// not cleared (see `least_loss`).
    pub(super) fn plan_losing_least(
        &mut self,
        pool: PoolId,
        e: usize,
        spare_own: bool,
    ) -> Option<HoldPlan> {
        let (drainable, drainable_at_most) = self.drainable(pool, e);
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        // Missing entries count as not spared, so without `spare_own` nothing is built.
        let mut spared = IndexVec::new();
        if spare_own {
            let queue = self.snapshot.pending[self.entries[e].workload].queue;
            spared = IndexVec::from_elem(false, self.snapshot.nodes.len());
            for (node, _) in self.running_in_pool(pool, |pod| pod.queue == queue) {
                spared[node] = true;
            }
        }
        let (snapshot, weights) = (self.snapshot, &self.weights);
        let work = self
            .node_work
            .get_or_insert_with(|| work_run_per_node(snapshot, weights));
        plan_hold_losing_least(
            &self.pool_nodes[pool],
            work,
            &spared,
            &drainable,
            &drainable_at_most,
            &requests,
            &self.weights,
        )
    }

    /// Per node, for a hold of entry `e` in `pool`: what is drained for it already (free
    /// capacity no other hold has, plus backfill), and the most that draining could give it
    /// (capacity no other hold has, less what a given-up hold found blocking, see `given_up`).
    fn drainable(
        &self,
        pool: PoolId,
        e: usize,
    ) -> (IndexVec<NodeId, Vec<u32>>, IndexVec<NodeId, Vec<u32>>) {
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
        // Backfill leaves as soon as the rest of the held nodes has drained, so a node is as
        // drained as its free capacity plus its backfill: counted so, the hold stays on the
        // nodes it filled with backfill instead of moving off them.
        let mut drainable = unheld(&self.free);
        if !self.backfill.is_empty() {
            for (node, request) in self.pods_in_pool(pool, |id| self.backfill.contains(id)) {
                add(&mut drainable[node], &request);
            }
        }
        let mut drainable_at_most = unheld(&self.allocatable);
        self.subtract_blockers(pool, e, &mut drainable_at_most);
        (drainable, drainable_at_most)
    }
}
