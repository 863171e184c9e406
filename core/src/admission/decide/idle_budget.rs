//! How long a hold may leave its capacity idle: what it has left idle so far, what it leaves
//! idle after this pass, and how a drain past that budget ends.

use super::Cycle;
use super::pool_pass::PoolPass;
use crate::admission::decision::PreemptionReason;
use crate::snapshot::{NodeId, PoolId, QueueId};

/// How many GPU-seconds of work a hold past its idle budget may throw away, per GPU-second it
/// has kept idle, to end its drain by eviction instead of being given up. Giving up wastes every
/// idle GPU-second the hold spent, and its queue, still owed, holds again later and drains
/// again at about the same cost, so eviction pays even when it loses somewhat more than the
/// hold has spent. Measured on the bundled scenarios, their variants and both traces
/// (BENCHMARKS.md, issue 27): 1 and 2 leave most stalled drains in Philly abandoned; no bound
/// at all evicts work far older than any drain (Philly's lost GPU-hours 3.4 times as many);
/// 4 ends the drains of the single-node pools and keeps lost work within 1.8 times.
const STALLED_DRAIN_LOSS_RATIO: f64 = 4.0;

/// What ending a stalled drain came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DrainOutcome {
    /// What stood on the held nodes is evicted.
    Evicted,
    /// The hold waits for its nodes to drain.
    Wait,
    /// The hold is past its idle budget and its drain cannot be ended: it is given up.
    GiveUp,
}

impl Cycle<'_> {
    /// Ends the drain of entry `e`'s hold once it is past its idle budget (`overdue`): evicts
    /// what still stands on its held nodes (`missing`), within the guards every preemption
    /// keeps and if that loses at most [`STALLED_DRAIN_LOSS_RATIO`] times the GPU-seconds the
    /// hold has kept idle, so that the idle time pays off instead of being thrown away. A hold
    /// whose drain cannot be ended so is given up, since it would otherwise keep its nodes
    /// dark without bound; while its queue cools down from evictions it ordered, it waits for
    /// them. Within its budget a hold waits for its nodes to drain by themselves.
    pub(super) fn end_stalled_drain(
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

    /// GPU-seconds counted against the idle budget of entry `e`'s hold up to now: what it had
    /// counted by the previous cycle, plus what it left idle or lent then, for the time since.
    pub(super) fn idle_so_far(&self, e: usize) -> f64 {
        let sane = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        self.previous_hold(e).map_or(0.0, |h| {
            sane(h.idle_gpu_s)
                + (sane(h.idle_gpu_equivalents) + sane(h.lent_gpu_equivalents))
                    * sane(self.snapshot.now - h.at)
        })
    }

    /// Whether a hold for entry `e` has left its capacity idle for as long as its pool allows:
    /// the workload's size times `hold_idle_limit_s`, in GPU-seconds.
    pub(super) fn hold_spent(&self, pool: PoolId, e: usize) -> bool {
        let limit = self.pool_settings[pool].fairshare.hold_idle_limit_s;
        let limit = if limit.is_finite() {
            limit.max(0.0)
        } else {
            0.0
        };
        let idle = self.idle_so_far(e);
        idle > 0.0 && idle >= self.entries[e].size * limit
    }

    pub(super) fn give_up(&mut self, e: usize) {
        let w = self.entries[e].workload;
        if !self.decisions.given_up.contains(&w) {
            self.decisions.given_up.push(w);
        }
    }

    /// Records, per hold of the pool, the capacity it leaves idle after the pass.
    pub(super) fn account_idle(&mut self, pass: &PoolPass) {
        for h in pass.first_hold..self.decisions.holds.len() {
            let idle: f64 = self.hold_left[h]
                .iter()
                .map(|(_, left)| self.size(left))
                .sum();
            self.decisions.holds[h].idle_gpu_equivalents = idle;
            self.decisions.holds[h].lent_gpu_equivalents = self.lent[h];
        }
    }
}
