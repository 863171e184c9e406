//! Held capacity a hold leaves idle, taken by a workload whose queue stands further below its
//! time-aware share than the hold's queue, and what taking held capacity does to the holds.
//!
//! A hold keeps free capacity from ordinary use so that its nodes drain for one workload. It is
//! given to the queue furthest below its time-aware share, but it outlives the cycle that made
//! it while others' standing moves on: a queue that has since fallen further below would have
//! been the one held for, and keeping its work off the held GPUs makes it wait for a less
//! deserving queue. Such work takes the idle held capacity as an ordinary release, not as
//! backfill: it is the more deserving, so it is not evicted for the hold; the hold drains
//! around it or moves to other nodes. Its idle budget counts the lent capacity as it counts idle
//! capacity, and a loan of a node the hold had drained also spends a share of what is left of
//! that budget at once (see `DRAINED_NODE_LENT_BUDGET_SHARE`): that node's drain starts over.
//!
//! Realtime work (serving, whose users wait for an answer within minutes) that keeps its queue
//! within its time-aware share takes idle capacity held for work of a lower tier the same way:
//! its queue may have that capacity, and a drain for a training job can take hours. No
//! preemption takes work of a more important tier than the preemptor's, so the hold drains
//! around it.

use std::collections::HashMap;

use super::entries::requests_of;
use super::held_fit::fits_ignoring_hold;
use super::loan::Loan;
use super::pool_pass::PoolPass;
use super::release::share_reason;
use super::{Cycle, EPSILON};
use crate::admission::decision::ReleaseReason;
use crate::admission::order::share_ratio;
use crate::admission::placement::{add, best_fit, subtract};
use crate::labels::Tier;
use crate::snapshot::{NodeId, PoolId, QueueId};

impl Cycle<'_> {
    /// What queue `q` may claim now: its time-aware share, or its fair share if that is larger.
    /// Serving order, holds, lending and drains ended early all measure a queue against it.
    pub(super) fn claim(&self, q: QueueId) -> f64 {
        self.views[q].claim
    }

    /// Queue `q`'s allocation over its [`claim`](Self::claim): the standing a pool's hold is
    /// given by, lowest first.
    pub(super) fn share_standing(&self, q: QueueId) -> f64 {
        share_ratio(self.decisions.queues[q].allocated_after, self.claim(q))
    }

    /// Releases entry `e` of queue `q` into what nobody holds plus the idle capacity of this
    /// pass's holds whose queues stand above `q`'s (see the module's documentation), if it fits
    /// there. Whether it did.
    pub(super) fn release_past_holds(
        &mut self,
        pool: PoolId,
        q: QueueId,
        e: usize,
        pass: &mut PoolPass,
    ) -> bool {
        let standing = self.share_standing(q);
        let realtime_within_share = self.realtime_within_share(q, e);
        let outranked: Vec<usize> = (pass.first_hold..self.hold_left.len())
            .filter(|&h| {
                let holder = self.snapshot.pending[self.decisions.holds[h].workload].queue;
                !self.closing[h] && standing < self.share_standing(holder)
                    || realtime_within_share && self.lends_to_realtime(h)
            })
            .collect();
        if outranked.is_empty() {
            return false;
        }
        let mut room: HashMap<NodeId, Vec<u32>> = HashMap::new();
        for &h in &outranked {
            for (node, left) in &self.hold_left[h] {
                add(
                    room.entry(*node)
                        .or_insert_with(|| self.usable[*node].clone()),
                    left,
                );
            }
        }
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        let Some(nodes) = best_fit(
            &self.pool_nodes[pool],
            |n| room.get(&n).unwrap_or(&self.usable[n]).as_slice(),
            &requests,
            &self.weights,
        ) else {
            return false;
        };
        let lenders = self.take_capacity(e, &nodes, |h| outranked.contains(&h), pass);
        self.charge_drained_nodes_lent(pool, &lenders);
        // Named after the first hold it took from; one that fitted in what nobody holds after
        // all is an ordinary release.
        let lender = lenders.first().map(|loan| {
            let for_workload = self.decisions.holds[loan.hold].workload;
            let holder = self.snapshot.pending[for_workload].queue;
            (for_workload, self.share_standing(holder))
        });
        let claim = self.claim(q);
        self.record_release(q, e, nodes, |allocated_after, fair_share| match lender {
            Some((for_workload, holder_standing)) if standing < holder_standing => {
                ReleaseReason::Lent {
                    for_workload,
                    standing,
                    holder_standing,
                    allocated_after,
                    fair_share,
                }
            }
            Some((for_workload, _)) => ReleaseReason::RealtimePastHold {
                for_workload,
                allocated_after,
                claim,
            },
            None => share_reason(allocated_after, fair_share),
        });
        true
    }

    /// Whether entry `e` of queue `q` is realtime work within its queue's share that would fit
    /// but for this pass's holds, one of them for work of a lower tier: it is released past them
    /// ([`release_past_holds`](Self::release_past_holds)) rather than held for.
    pub(super) fn passes_holds(
        &mut self,
        pool: PoolId,
        q: QueueId,
        e: usize,
        pass: &PoolPass,
    ) -> bool {
        if !self.realtime_within_share(q, e) {
            return false;
        }
        (pass.first_hold..self.decisions.holds.len()).any(|h| self.lends_to_realtime(h))
            && fits_ignoring_hold(
                &mut self.held_fit_cache,
                &self.pool_nodes[pool],
                &self.free,
                &requests_of(&self.pod_requests, self.width, &self.entries[e]),
                &self.weights,
            )
    }

    /// Whether hold `h` (of `Decisions::holds`) lends its idle capacity to realtime work within
    /// its queue's share: it is for work of a lower tier and does not evict this cycle.
    fn lends_to_realtime(&self, h: usize) -> bool {
        !self.closing[h]
            && self.snapshot.pending[self.decisions.holds[h].workload].tier != Tier::Realtime
    }

    /// Whether entry `e` of queue `q` is realtime work that keeps its queue within its
    /// time-aware share once released.
    fn realtime_within_share(&self, q: QueueId, e: usize) -> bool {
        let entry = &self.entries[e];
        self.snapshot.pending[entry.workload].tier == Tier::Realtime
            && self.decisions.queues[q].allocated_after + entry.size <= self.claim(q) + EPSILON
    }

    /// Takes what entry `e` needs on `nodes`: what nobody holds first, the rest from the idle
    /// capacity of this pass's holds that `from_hold` accepts, counted as lent by each. The holds
    /// it took from, in order, each with the nodes it took from it on.
    pub(super) fn take_capacity(
        &mut self,
        e: usize,
        nodes: &[NodeId],
        from_hold: impl Fn(usize) -> bool,
        pass: &mut PoolPass,
    ) -> Vec<Loan> {
        let requests = requests_of(&self.pod_requests, self.width, &self.entries[e]);
        let mut holders: Vec<Loan> = Vec::new();
        for (request, &node) in requests.iter().zip(nodes) {
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
                if !from_hold(h) {
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
                let taken: f64 = take
                    .iter()
                    .zip(&self.weights)
                    .map(|(t, w)| f64::from(*t) * w)
                    .sum();
                if taken > 0.0 {
                    self.lent[h] += taken;
                    match holders.iter_mut().find(|loan| loan.hold == h) {
                        Some(loan) => loan.nodes.push(node),
                        None => holders.push(Loan {
                            hold: h,
                            nodes: vec![node],
                        }),
                    }
                }
                subtract(there, &take);
                subtract(&mut from_held, &take);
            }
        }
        holders
    }
}
