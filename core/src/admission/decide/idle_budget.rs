//! How long a hold may leave its capacity idle: what it has left idle so far, what it leaves
//! idle after this pass, and how a drain ends by eviction, early or past that budget.

use std::collections::HashMap;

use super::Cycle;
use super::hold_split::Split;
use super::loan::Loan;
use super::pool_pass::PoolPass;
use crate::admission::decision::PreemptionReason;
use crate::snapshot::{NodeId, PoolId, QueueId};
use crate::units::non_negative;

/// How many GPU-seconds of work a hold past its idle budget may throw away, per GPU-second it
/// has kept idle, to end its drain by eviction instead of being given up. Giving up wastes every
/// idle GPU-second the hold spent, and its queue, still owed, holds again later and drains
/// again at about the same cost, so eviction pays even when it loses somewhat more than the
/// hold has spent. Measured on the bundled scenarios, their variants and both traces
/// (BENCHMARKS.md, issue 27): 1 and 2 leave most stalled drains in Philly abandoned; no bound
/// at all evicts work far older than any drain (Philly's lost GPU-hours 3.4 times as many);
/// 4 ends the drains of the single-node pools and keeps lost work within 1.8 times.
const STALLED_DRAIN_LOSS_RATIO: f64 = 4.0;

/// How many GPU-seconds a hold within its idle budget must have left idle or lent (as the budget
/// counts them) per GPU-second of work that ending its drain by eviction throws away. Waiting
/// for the last victims costs idle time without bound (pods declare no run time), evicting them
/// costs their work so far: a rent-or-buy rule, evicting once waiting has cost this many times
/// what eviction costs, spends at most one more than this many times what the better of the two
/// would have in hindsight.
/// Measured on the bundled scenarios, their variants and both traces (BENCHMARKS.md, "Drains
/// end early"): 1 leaves Philly's stragglers evicted too eagerly (0.350× stateless's FD at 480
/// GPUs), 3 leaves single-node pools 7 points below the best utilization; 2 meets both.
const EARLY_DRAIN_LOSS_RATIO: f64 = 2.0;

/// The share of what is left of its idle budget a hold spends when it lends a node it has
/// drained: capacity it waited for, and paid for in idle time, goes to work whose run time
/// nobody knows, so that node's drain starts over. Counting only the lent GPU-seconds as they
/// pass lets a hold in a pool of many queues lend its drained nodes to one lower-standing queue
/// after another and neither assemble nor end (Helios at 608 GPUs: 1.2% of the trace's jobs
/// left unstarted beyond stateless's). Spending a share of the rest brings such a hold to the
/// end of its budget, where its drain ends by eviction or it is given up, after a few loans; a
/// share, not all of it, since a single loan of a short job costs the drain little. The charge
/// counts as idle time wherever the budget is read, the loss an eviction may cost included: it
/// stands for the idle time that node's drain cost, thrown away by the loan. Measured
/// on both traces at every size and node shape, ten cycle lengths each (BENCHMARKS.md, "Holds
/// that lend a drained node"): a quarter meets Helios' unstarted bound everywhere and keeps the
/// ledger fairer than stateless-hold on average; all of it costs that at the tightest sizes,
/// half and an eighth cost fairness elsewhere.
const DRAINED_NODE_LENT_BUDGET_SHARE: f64 = 0.25;

/// The share of its idle budget a hold waits out before its stalled drain may end by eviction:
/// all of it for a hold of at most half its pool, falling in proportion to nothing for a hold
/// of the whole pool (`2 × (1 − size ÷ pool)`). A hold that leaves out at least half the pool
/// can pick the nodes likeliest to drain soon; one that takes nearly all of it has no choice,
/// its drain waits on the slowest pods the pool runs, and its idle capacity is most of the
/// pool, so waiting the whole budget first (16 GPU-hours for an 8-GPU job with the default 2h)
/// leaves a small pool dark for hours. Giving up still waits for the whole budget. Measured on
/// the shapes not tuned on and the single-node scenarios (BENCHMARKS.md, "Holds of most of a
/// pool"): raw utilization within 3 points of the best on all but one, more useful work on
/// nearly all; no trace hold exceeds half its pool, so the traces are unchanged.
pub(super) fn budget_share_before_eviction(size: f64, pool_capacity: f64) -> f64 {
    if !(size.is_finite() && pool_capacity.is_finite() && pool_capacity > 0.0) {
        return 1.0;
    }
    (2.0 * (1.0 - size / pool_capacity)).clamp(0.0, 1.0)
}

/// What ending a stalled drain came to.
pub(super) enum DrainOutcome {
    /// What stood on the held nodes is evicted; with the hold's new plan where it moved to
    /// nodes that could be cleared instead (see `early_drain_eviction`).
    Evicted(Option<Split>),
    /// The hold waits for its nodes to drain.
    Wait,
    /// The hold is past its idle budget and its drain cannot be ended: it is given up.
    GiveUp,
}

impl<'a> Cycle<'a> {
    /// Ends the drain of entry `e`'s hold early, or once it is past its idle budget
    /// (`overdue`), by evicting what still stands on its held nodes (`missing`), within the
    /// guards every preemption keeps (`missing_total` is `missing`'s size).
    /// - Within the budget: once the hold stands at least half assembled and has left idle at
    ///   least [`EARLY_DRAIN_LOSS_RATIO`] times the work eviction would lose, and the victims'
    ///   queues are left no more deserving than the holder's (see [`PreemptionReason::IdleOutweighsLoss`]).
    /// - Past it: if eviction loses at most [`STALLED_DRAIN_LOSS_RATIO`] times the GPU-seconds
    ///   the hold has kept idle, so that the idle time pays off instead of being thrown away. A
    ///   hold whose drain cannot be ended so is given up, since it would otherwise keep its
    ///   nodes dark without bound; a starved queue's hold once the idle time others could have
    ///   used makes up its budget, and waits on till then (see `unwanted_idle`).
    /// - A hold of more than half its pool may evict so from [`budget_share_before_eviction`]
    ///   of its budget on; where it cannot, it waits on until the whole budget is spent.
    ///
    /// While its queue cools down from evictions it ordered, a hold waits for them.
    pub(super) fn end_stalled_drain(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        (missing, missing_total): (&[(NodeId, Vec<u32>)], f64),
        overdue: bool,
    ) -> DrainOutcome {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let idle_gpu_s = self.idle_so_far(e);
        let cooling = snapshot.queues[q]
            .last_preemption_at
            .is_some_and(|t| snapshot.now - t < params.cooldown_s);
        if !overdue {
            if params.enabled
                && !cooling
                && idle_gpu_s > 0.0
                && self.half_assembled(e, missing_total)
            {
                let reason = PreemptionReason::IdleOutweighsLoss {
                    idle_gpu_hours: idle_gpu_s / 3600.0,
                    holder_standing: self.share_standing(q),
                };
                let max_lost_gpu_s = idle_gpu_s / EARLY_DRAIN_LOSS_RATIO;
                if let Some((eviction, moved)) =
                    self.early_drain_eviction(pool, e, q, missing, reason, max_lost_gpu_s)
                {
                    self.carry_out(eviction);
                    return DrainOutcome::Evicted(moved);
                }
            }
            let before_eviction = self.budget_before_eviction(pool, e);
            if params.enabled
                && !cooling
                && idle_gpu_s > 0.0
                && idle_gpu_s >= before_eviction
                && self.evict_stalled(pool, e, q, missing, idle_gpu_s)
            {
                return DrainOutcome::Evicted(None);
            }
            return DrainOutcome::Wait;
        }
        if params.enabled {
            if cooling {
                return DrainOutcome::Wait;
            }
            if self.evict_stalled(pool, e, q, missing, idle_gpu_s) {
                return DrainOutcome::Evicted(None);
            }
        }
        // Past the budget, a drain that cannot be ended is given up, for a starved queue only
        // once idle capacity others could have used makes up the budget (see `unwanted_idle`).
        if self.budget_spent_for_giving_up(pool, e) {
            DrainOutcome::GiveUp
        } else {
            DrainOutcome::Wait
        }
    }

    /// Evicts what still stands on entry `e`'s held nodes (`missing`) for a drain that has
    /// waited out what its hold may leave idle before eviction (`idle_gpu_s` so far), if that
    /// loses at most [`STALLED_DRAIN_LOSS_RATIO`] times as much. Whether it did.
    fn evict_stalled(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
        idle_gpu_s: f64,
    ) -> bool {
        let reason = PreemptionReason::StalledDrain {
            idle_gpu_hours: idle_gpu_s / 3600.0,
            budget_gpu_hours: self.budget_before_eviction(pool, e) / 3600.0,
        };
        let max_lost_gpu_s = STALLED_DRAIN_LOSS_RATIO * idle_gpu_s;
        let Some(eviction) = self.eviction(e, q, missing, reason, max_lost_gpu_s) else {
            return false;
        };
        self.carry_out(eviction);
        true
    }

    /// GPU-seconds entry `e`'s hold may leave idle before its stalled drain may end by
    /// eviction: its idle budget, times [`budget_share_before_eviction`].
    fn budget_before_eviction(&self, pool: PoolId, e: usize) -> f64 {
        let size = self.entries[e].size;
        self.idle_budget(pool, e) * budget_share_before_eviction(size, self.pool_capacity[pool])
    }

    /// The idle budget of entry `e`'s hold: its size times `hold_idle_limit_s`, in GPU-seconds.
    fn idle_budget(&self, pool: PoolId, e: usize) -> f64 {
        let limit = self.pool_settings[pool].fairshare.hold_idle_limit_s;
        let limit = if limit.is_finite() {
            limit.max(0.0)
        } else {
            0.0
        };
        self.entries[e].size * limit
    }

    /// Charges each hold of `loans` that lent capacity on a node it had drained (one where it
    /// misses nothing) [`DRAINED_NODE_LENT_BUDGET_SHARE`] of what is left of its idle budget.
    pub(super) fn charge_drained_nodes_lent(&mut self, pool: PoolId, loans: &[Loan]) {
        for loan in loans {
            let hold = &self.decisions.holds[loan.hold];
            let lent_drained = hold
                .missing
                .iter()
                .any(|(node, short)| loan.nodes.contains(node) && self.size(short) <= 0.0);
            if !lent_drained {
                continue;
            }
            let workload = hold.workload;
            let Some(e) = self.entries.iter().position(|x| x.workload == workload) else {
                continue;
            };
            let budget = self.idle_budget(pool, e);
            let spent = &mut self.decisions.holds[loan.hold].cost.idle_gpu_s;
            *spent += DRAINED_NODE_LENT_BUDGET_SHARE * non_negative(budget - *spent);
        }
    }

    /// Whether entry `e`'s hold has at least as much of its size held as the `missing`
    /// GPU-equivalents still to drain. Before that, most of the drain is still to come and idle
    /// so far says little of what waiting will cost.
    pub(super) fn half_assembled(&self, e: usize, missing: f64) -> bool {
        self.entries[e].size - missing >= missing
    }

    /// The previous cycle's hold of entry `e`, if it had one.
    pub(super) fn previous_hold(&self, e: usize) -> Option<&'a crate::snapshot::PreviousHold> {
        let uid = &self.snapshot.pending[self.entries[e].workload].uid;
        self.snapshot
            .previous_holds
            .iter()
            .find(|h| &h.workload == uid)
    }

    /// GPU-seconds counted against the idle budget of entry `e`'s hold up to now: what it had
    /// counted by the previous cycle, plus what it left idle or lent then, for the time since.
    pub(super) fn idle_so_far(&self, e: usize) -> f64 {
        self.previous_hold(e)
            .map_or(0.0, |h| h.cost.idle_gpu_s_after(self.snapshot.now - h.at))
    }

    /// Whether a hold for entry `e` has left its capacity idle for as long as its pool allows:
    /// the workload's size times `hold_idle_limit_s`, in GPU-seconds.
    pub(super) fn hold_spent(&self, pool: PoolId, e: usize) -> bool {
        self.spends_budget(pool, e, self.idle_so_far(e))
    }

    /// Whether `idle_gpu_s` of entry `e`'s hold makes up its idle budget.
    pub(super) fn spends_budget(&self, pool: PoolId, e: usize, idle_gpu_s: f64) -> bool {
        idle_gpu_s > 0.0 && idle_gpu_s >= self.idle_budget(pool, e)
    }

    /// Records, per hold of the pool, the capacity it leaves idle after the pass, and what it
    /// lends: to a more deserving queue's work this pass, and to backfill, released this pass
    /// or still standing where the hold misses capacity. Backfill counts as lent because it
    /// leaves, its work lost, when the rest has drained: were it not counted, a hold filled with
    /// backfill would never spend its budget, and its last stragglers would never be evicted.
    pub(super) fn account_idle(&mut self, pass: &PoolPass) {
        let standing = self.backfill_per_node(pass);
        for h in pass.first_hold..self.decisions.holds.len() {
            let idle: f64 = self.hold_left[h]
                .iter()
                .map(|(_, left)| self.size(left))
                .sum();
            let in_backfill: f64 = self.decisions.holds[h]
                .missing
                .iter()
                .filter_map(|(node, missing)| {
                    let there = standing.get(node)?;
                    Some(there.min(self.size(missing)))
                })
                .sum();
            // Nothing idle, nothing to look for: the scan of what waits is skipped.
            let unwanted = if idle <= 0.0 || self.waiting_work_fits_hold(pass, h) {
                0.0
            } else {
                idle
            };
            let cost = &mut self.decisions.holds[h].cost;
            cost.idle_gpu_equivalents = idle;
            cost.unwanted_idle_gpu_equivalents = unwanted;
            cost.lent_gpu_equivalents = self.lent[h] + in_backfill;
        }
    }

    /// GPU-equivalents of backfill running on each node of the pass's holds since an earlier
    /// cycle (empty when the snapshot lists none).
    fn backfill_per_node(&self, pass: &PoolPass) -> HashMap<NodeId, f64> {
        let mut standing = HashMap::new();
        let Some(first) = self.decisions.holds.get(pass.first_hold) else {
            return standing;
        };
        if self.backfill.is_empty() {
            return standing;
        }
        for (node, request) in self.pods_in_pool(first.pool, |id| self.backfill.contains(id)) {
            *standing.entry(node).or_insert(0.0) += self.size(&request);
        }
        standing
    }
}

#[cfg(test)]
mod tests {
    use super::budget_share_before_eviction;

    #[test]
    fn a_hold_waits_less_of_its_budget_the_more_of_its_pool_it_takes() {
        for (size, pool, share) in [
            (1.0, 64.0, 1.0),
            (8.0, 16.0, 1.0),
            (12.0, 16.0, 0.5),
            (8.0, 12.0, 2.0 / 3.0),
            (8.0, 8.0, 0.0),
        ] {
            let got = budget_share_before_eviction(size, pool);
            assert!((got - share).abs() < 1e-12, "{size} of {pool}: {got}");
        }
        // An empty or unknown pool leaves the whole budget.
        assert_eq!(budget_share_before_eviction(8.0, 0.0), 1.0);
        assert_eq!(budget_share_before_eviction(f64::NAN, 8.0), 1.0);
    }
}
