//! What keeps a workload waiting before its placement is tried, and whether its queue has
//! earned a hold for it.

use super::{Cycle, EPSILON};
use crate::admission::decision::WaitReason;
use crate::snapshot::QueueId;

impl Cycle<'_> {
    /// Why entry `e` of queue `q` cannot be released this cycle, if anything stops it before
    /// placement is tried. With `backfill`, other queues' guarantees do not stop it: it only
    /// takes what the pass left idle, and gives it back by preemption when they want it.
    pub(super) fn blocked(&self, q: QueueId, e: usize, backfill: bool) -> Option<WaitReason> {
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
        let beyond = |holding: f64| {
            holding > outcome.fair_share + EPSILON && holding > self.headroom[q] + EPSILON
        };
        // A kept hold is judged as `hold_refusal` judges it: without what its queue started
        // while it waited (see `ran_ahead`). Counted here, that work would drop the hold before
        // its queue's standing is even asked. That work is asked for (a scan of the running
        // pods) only where the whole allocation is beyond, most workloads of a cycle being not.
        if self.holds_in(snapshot.queues[q].pool) && !backfill && beyond(after) {
            let holding = after - self.started_while_held_waited(q, e);
            if beyond(holding) {
                // Borrowing idle capacity is fine, but not what other queues are guaranteed:
                // it would have to be taken back by preemption as soon as they want it.
                // (Keeping it free for them is a hold, so it goes with holding.)
                return Some(WaitReason::BeyondGuarantees {
                    needed: holding,
                    available: self.headroom[q],
                });
            }
        }
        // A workload larger than its queue's time-aware share used to wait through a lull in
        // others' demand. It no longer does: GPUs left dark while work that fits them waits are
        // lost for good, while a queue that runs ahead of its share in a lull pays later,
        // through its deficit δ. Earning still decides holds, which keep capacity from others.
        None
    }

    /// Whether queue `q` has earned a hold for entry `e`: its time-aware share (or its
    /// guarantee) covers what it would hold with it, or will within the pool's `holdLead` at
    /// the pace it grows now, or the workload has waited long enough while its queue is short
    /// of its entitlement (see `aging`); and the pool leaves that much beside the other queues'
    /// guarantees. A hold kept from last cycle does not count what the queue
    /// started while it waited (see `ran_ahead`). The reason it has not, otherwise.
    pub(super) fn hold_refusal(&self, q: QueueId, e: usize) -> Option<WaitReason> {
        self.hold_refusal_after(q, e, -self.started_while_held_waited(q, e))
    }

    /// Whether queue `q`'s time-aware share (or its guarantee) covers entry `e` now, not only
    /// within the pool's `holdLead`, counted as [`hold_refusal`](Self::hold_refusal) counts it,
    /// or the workload has earned its hold by waiting.
    pub(super) fn earned_now(&self, q: QueueId, e: usize) -> bool {
        let (after, earned) = self.standing_with(q, e, -self.started_while_held_waited(q, e));
        after <= earned + EPSILON || self.earned_by_waiting(q, e)
    }

    /// What queue `q` would run with entry `e` once `ahead` more GPU-equivalents of its work
    /// have started, and what it has earned: its time-aware share or its guarantee.
    fn standing_with(&self, q: QueueId, e: usize, ahead: f64) -> (f64, f64) {
        let after = self.decisions.queues[q].allocated_after + ahead + self.entries[e].size;
        (after, self.claim(q).max(self.views[q].guaranteed))
    }

    /// Whether queue `q` has earned a hold for entry `e` once `ahead` more GPU-equivalents of its
    /// work have started (negative: once that much is not counted), counting all its work.
    pub(super) fn hold_refusal_after(
        &self,
        q: QueueId,
        e: usize,
        ahead: f64,
    ) -> Option<WaitReason> {
        let (after, earned) = self.standing_with(q, e, ahead);
        if after > self.headroom[q] + EPSILON {
            Some(WaitReason::BeyondGuarantees {
                needed: after,
                available: self.headroom[q],
            })
        } else if after > earned + EPSILON {
            let by_waiting_in_s = self.earned_by_waiting_in_s(q, e);
            if by_waiting_in_s == Some(0.0) {
                return None;
            }
            // The hold may begin `holdLead` before the share covers the workload: its nodes
            // drain meanwhile (see `FairShareParams::hold_lead_s`).
            let lead = self.pool_settings[self.snapshot.queues[q].pool]
                .fairshare
                .hold_lead_s;
            let rate = self.earning_per_s[q];
            let covered_in_s = (rate > 0.0).then(|| (after - self.earned[q]).max(0.0) / rate);
            match covered_in_s {
                Some(covered_in) if covered_in <= lead => None,
                _ => Some(WaitReason::NotEarned {
                    needed: after,
                    earned,
                    eta_s: match (
                        covered_in_s.map(|covered_in| covered_in - lead),
                        by_waiting_in_s,
                    ) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                }),
            }
        } else {
            None
        }
    }
}
