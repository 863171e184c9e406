//! After a pool's pass: what it left idle goes to waiting workloads as backfill, in capacity
//! nobody holds and, where allowed, in held capacity not yet used.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::entries::requests_of;
use super::pool_pass::PoolPass;
use super::release::share_reason;
use super::requests::pod_request;
use super::{Cycle, EPSILON};
use crate::admission::decision::{ReleaseReason, WaitReason};
use crate::admission::order::QueueTurn;
use crate::admission::placement::{add, best_fit, subtract};
use crate::index::IndexVec;
use crate::labels::Tier;
use crate::snapshot::{NodeId, PoolId, QueueId};

impl Cycle<'_> {
    /// After the pass: hands what it left idle to waiting workloads that fit it in capacity
    /// nobody holds (workloads the pass did not start because of other queues' guarantees).
    /// Queues take turns as in the pass.
    ///
    /// Held capacity a pass leaves idle goes, as backfill evicted once the held nodes have
    /// drained otherwise, to waiting work of the backfill tier (`ai-task-type: processing`),
    /// whose owners declared it gap-filling, so that losing it is what they asked for (see
    /// [`gap_filling`](Self::gap_filling)). With the
    /// pool's `holdBackfill` on, other waiting work may take it too, if it keeps its queue
    /// within its share (see [`keeps_within_share`](Self::keeps_within_share)). Work that
    /// would finish before the held nodes drain cannot be told apart (pods declare no run
    /// time), so every such eviction throws the backfill's work away; the hold counts what
    /// backfill takes as lent (see `account_idle`).
    pub(super) fn backfill_pool(&mut self, pool: PoolId, pass: &mut PoolPass) {
        if !self.holds_in(pool) || pass.waited.is_empty() {
            return;
        }
        for into_held in [false, true] {
            // Backfill in held capacity must be evictable, or it would keep the held workload
            // waiting for as long as it runs.
            if into_held && !(self.options.preemption.enabled && self.any_held_left(pass)) {
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
                if candidate
                    && (!into_held || self.may_backfill_held(pool, e))
                    && !self.backfilled.get(at).copied().unwrap_or(false)
                {
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
            if heap.is_empty() {
                continue;
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
                if self.blocked(q, e, true).is_none()
                    && (!into_held || self.gap_filling(e) || self.keeps_within_share(q, e))
                {
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

    /// Whether entry `e` may take held capacity left idle in `pool`: work of the backfill tier
    /// always may; other work where the pool's `holdBackfill` is on.
    fn may_backfill_held(&self, pool: PoolId, e: usize) -> bool {
        self.gap_filling(e) || self.pool_settings[pool].fairshare.hold_backfill
    }

    /// Whether entry `e` is gap-filling: of the backfill tier, work its owners declared may be
    /// evicted for what it fills in for, in a queue that sets no `minRunTime` (backfill leaves
    /// whatever its age, which would break that promise unless the admin chose `holdBackfill`).
    /// It takes held capacity whatever its queue's share, as any work takes idle capacity in a
    /// lull: its queue pays through δ for what it runs, and the holder loses nothing, as the
    /// hold counts it as lent.
    fn gap_filling(&self, e: usize) -> bool {
        let workload = &self.snapshot.pending[self.entries[e].workload];
        workload.tier == Tier::Backfill
            && self.snapshot.queues[workload.queue].min_run_time_s <= 0.0
    }

    /// Whether entry `e` of queue `q` may run as backfill in held capacity: with it, the queue
    /// stays within both its entitlement now and its time-aware share. The holder's queue pays
    /// for held capacity with its wait; handing it to a queue already at what it is owed only
    /// takes that queue further past it, which is unfair by the same measure the hold serves,
    /// and costs an eviction once the hold drains.
    fn keeps_within_share(&self, q: QueueId, e: usize) -> bool {
        let outcome = &self.decisions.queues[q];
        let after = outcome.allocated_after + self.entries[e].size;
        after <= outcome.entitled.min(self.claim(q)) + EPSILON
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
                add(&mut room[*node], left);
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
        // Backfill takes from every hold that does not evict for its workload this cycle.
        let closing = self.closing.clone();
        let holders = self.take_capacity(e, &nodes, |h| !closing[h], pass);
        let holder = holders
            .first()
            .map(|loan| self.decisions.holds[loan.hold].workload);
        self.record_release(q, e, nodes, |after, fair_share| match holder {
            Some(for_workload) => ReleaseReason::Backfill {
                for_workload,
                allocated_after: after,
                fair_share,
            },
            None => share_reason(after, fair_share),
        });
    }
}
