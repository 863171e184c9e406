//! Idle held capacity that no waiting workload could use. A hold's idle budget stands for what
//! holding costs others: GPUs dark while work that fits them waits. Where nothing waiting fits
//! what the held nodes have free (the pool's other work needs a whole node that a pod still
//! stands on, say), keeping the capacity costs nobody anything, while giving the hold up hands
//! the capacity back to what blocked it: a queue owed whole nodes beside a stream of long
//! serving pods had its holds given up again and again, was then held no more (its blockers
//! stood everywhere, and its give-ups had spent their share), and ran a fraction of its
//! entitlement while the pool stood a third idle (BENCHMARKS.md, "Held idle that nobody waiting
//! could use").
//!
//! So such idle time is counted apart. It still counts wherever the budget weighs waiting
//! against eviction (when a stalled drain may end by eviction, and what that may throw away).
//! But for a queue starved over the window, one that received less than
//! [`REACHABLE_FRACTION`] of its entitlement (below that the ledger alone cannot raise its
//! claim to a job the size of its pool; see `aging`), a hold whose drain cannot be ended is
//! given up only once idle time others could have used, with what it lent, makes up its budget.
//! Other queues' holds are given up on the whole budget as before: in a large pool giving up
//! lets the next hold drain other nodes, which pays for queues near their entitlement (Helios,
//! ten cycle lengths: exempting every queue's holds left up to 1.4% of the trace's jobs
//! unstarted beyond stateless's at one of them, where 0.6% were before).

use super::Cycle;
use super::entries::requests_of;
use super::held_fit::fits_on;
use super::pool_division::REACHABLE_FRACTION;
use super::pool_pass::PoolPass;
use crate::snapshot::PoolId;

impl Cycle<'_> {
    /// GPU-seconds of entry `e`'s hold's idle time up to now that no waiting workload could have
    /// used: what it had counted by the previous cycle, plus what it left so then, for the time
    /// since.
    pub(super) fn unwanted_idle_so_far(&self, e: usize) -> f64 {
        self.previous_hold(e).map_or(0.0, |h| {
            h.cost.unwanted_idle_gpu_s_after(self.snapshot.now - h.at)
        })
    }

    /// Whether entry `e`'s hold, past its idle budget with a drain that cannot be ended, is
    /// given up: once its idle time and what it lent make up its budget, leaving out, for a
    /// starved queue, the idle time no waiting workload could have used.
    pub(super) fn budget_spent_for_giving_up(&self, pool: PoolId, e: usize) -> bool {
        let idle = self.idle_so_far(e);
        let q = self.snapshot.pending[self.entries[e].workload].queue;
        let counted = if self.shortfall[q] >= REACHABLE_FRACTION {
            idle - self.unwanted_idle_so_far(e)
        } else {
            idle
        };
        self.spends_budget(pool, e, counted)
    }

    /// Whether a workload the pass left waiting, other than the held one, could use hold `h`'s
    /// nodes: each of its pods fits what one of them has free after the pass. Pods are checked
    /// one by one, so a gang that only fits pod by pod counts too: in doubt, idle capacity
    /// counts as wanted, as all of it did before.
    pub(super) fn waiting_work_fits_hold(&self, pass: &PoolPass, h: usize) -> bool {
        let hold = &self.decisions.holds[h];
        let fits_a_held_node = |pod: &&[u32]| {
            hold.nodes
                .iter()
                .any(|(node, _)| fits_on(&self.free[*node], pod))
        };
        pass.waited.iter().any(|&(e, at)| {
            let entry = &self.entries[e];
            let backfilled = self.backfilled.get(at).copied().unwrap_or(false);
            entry.workload != hold.workload
                && !backfilled
                && requests_of(&self.pod_requests, self.width, entry)
                    .iter()
                    .all(fits_a_held_node)
        })
    }
}
