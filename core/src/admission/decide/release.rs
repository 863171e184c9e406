//! A turn of the pass: its workload is released where it fits in what ordinary workloads may
//! use, or may hold capacity, or waits, with the reason.

use super::entries::requests_of;
use super::held_fit::fits_ignoring_hold;
use super::holding::HoldOutcome;
use super::pool_pass::PoolPass;
use super::requests::pod_request;
use super::{Cycle, EPSILON};
use crate::admission::decision::{Release, ReleaseReason, WaitReason};
use crate::admission::placement::{best_fit, subtract};
use crate::snapshot::{NodeId, PoolId, QueueId};

impl Cycle<'_> {
    /// A placement of entry `e` in what ordinary workloads may use, or `None`.
    pub(super) fn place(&self, pool: PoolId, e: usize, pass: &PoolPass) -> Option<Vec<NodeId>> {
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
    pub(super) fn note_misfit(&self, e: usize, pass: &mut PoolPass) {
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
    pub(super) fn consider(
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
            // It is its queue's first workload that does not fit, so no later one holds too.
            pass.misfit_seen[q] = true;
            return Some(WaitReason::Holding);
        }
        if let Some(reason) = self.blocked(q, e, false) {
            // A queue whose first waiting workload cannot be released does not hold for a
            // later one instead, unless what keeps it is that it would take its queue beyond
            // what the other queues' guarantees leave: its queue holds nothing for it then, and
            // its later work would otherwise never be held for either.
            if !matches!(reason, WaitReason::BeyondGuarantees { .. }) {
                pass.misfit_seen[q] = true;
            }
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
        let first_misfit = !pass.misfit_seen[q];
        let slot_free = (first_misfit || reserved)
            && if below_guarantee {
                pass.guarantee_hold.is_none()
            } else {
                pass.earned_hold.is_none() && pass.reserved_hold.is_none()
            };
        // Realtime work that fits past the holds starts there rather than take a hold of its
        // own (without a hold slot it is released past them below, as any lent work is).
        if self.holds_in(pool)
            && slot_free
            && self.passes_holds(pool, q, e, pass)
            && self.release_past_holds(pool, q, e, pass)
        {
            return None;
        }
        pass.misfit_seen[q] = true;
        // A hold past its idle budget that is not made again here (no slot, no longer earned,
        // or nothing on its nodes may be evicted) is given up.
        let overdue = slot_free && self.hold_spent(pool, e);
        if self.holds_in(pool) && slot_free {
            match self.hold_refusal(q, e) {
                Some(refusal) if below_guarantee => {
                    if overdue {
                        self.give_up(e, Vec::new());
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
                    HoldOutcome::GivenUp(blockers) => self.give_up(e, blockers),
                    HoldOutcome::AroundBlockers => pass.around_blockers.push(e),
                    HoldOutcome::GivenUpTooOften => pass.given_up_too_often.push(e),
                },
            }
        }
        if overdue {
            self.give_up(e, Vec::new());
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
            if self.release_past_holds(pool, q, e, pass) {
                return None;
            }
            return Some(WaitReason::CapacityHeld {
                for_workload: self.entries[holder].workload,
            });
        }
        if pass.given_up_too_often.contains(&e)
            && let Some(idle) = self.given_up_too_often(pool, e)
        {
            return Some(WaitReason::GivenUpTooOften {
                spent_gpu_s: idle.spent_gpu_s,
                allowed_gpu_s: idle.allowed_gpu_s,
                resumes_in_s: idle.resumes_in_s,
            });
        }
        if pass.around_blockers.contains(&e) {
            return Some(WaitReason::HoldGivenUp {
                blockers: self.blocker_count(e),
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
    pub(super) fn release(&mut self, q: QueueId, e: usize, nodes: Vec<NodeId>) {
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        for (request, &node) in requests.iter().zip(&nodes) {
            subtract(&mut self.free[node], request);
            subtract(&mut self.usable[node], request);
            if self.size(&self.usable[node]) <= 0.0 {
                self.open.close(self.snapshot.nodes[node].pool, node);
            }
        }
        self.record_release(q, e, nodes, share_reason);
    }

    /// Counts entry `e` of queue `q` as released onto `nodes`, for the reason `reason` gives
    /// from the queue's allocation once it is released and the queue's fair share.
    pub(super) fn record_release(
        &mut self,
        q: QueueId,
        e: usize,
        nodes: Vec<NodeId>,
        reason: impl FnOnce(f64, f64) -> ReleaseReason,
    ) {
        let fair_share = self.decisions.queues[q].fair_share;
        let after = self.decisions.queues[q].allocated_after + self.entries[e].size;
        self.decisions.queues[q].allocated_after = after;
        self.views[q].allocated = after;
        self.decisions.releases.push(Release {
            workload: self.entries[e].workload,
            placements: nodes,
            reason: reason(after, fair_share),
        });
    }
}

/// Why a workload that takes its queue to `allocated_after` starts: within the queue's fair
/// share, or on capacity nobody else can use now.
pub(super) fn share_reason(allocated_after: f64, fair_share: f64) -> ReleaseReason {
    if allocated_after <= fair_share + EPSILON {
        ReleaseReason::WithinFairShare {
            allocated_after,
            fair_share,
        }
    } else {
        ReleaseReason::IdleCapacity {
            allocated_after,
            fair_share,
        }
    }
}
