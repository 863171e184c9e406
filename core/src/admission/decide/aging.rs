//! A workload that has waited long enough has earned its hold, if its queue is still short of
//! its entitlement. A queue's claim grows with what the ledger says it is owed, and the ledger
//! forgets: a queue that keeps receiving part of its entitlement (through its smaller work,
//! started while its larger workload waits) is owed at most its shortfall `s` times what a
//! queue given nothing is owed. The claim reaches the whole pool at half of that most
//! (`REACHABLE_FRACTION`), so with `s` below a half a job the size of the pool would wait for as
//! long as the queue's small work keeps running, while the queue stays short of its
//! entitlement. The wait makes up for what the ledger forgot: a workload has earned its hold
//! once it has waited `T · max(1, ½ / s)`, where `T` is how long a queue given nothing takes to
//! claim its pool (`pool_division::earning_bound_s`). At `s = ½` that is `T`, as the claim
//! itself would take; below, the wait grows as the shortfall shrinks, so a queue that received
//! nearly all of its entitlement gains almost nothing by it, and one that received it all (or
//! more) nothing.

use super::Cycle;
use super::pool_division::REACHABLE_FRACTION;
use crate::snapshot::QueueId;

impl Cycle<'_> {
    /// Seconds until entry `e` of queue `q` has earned its hold by waiting (0 once it has), or
    /// `None` where waiting earns it nothing: its queue is short of nothing, its pool keeps no
    /// history, or the workload's submission is unknown.
    pub(super) fn earned_by_waiting_in_s(&self, q: QueueId, e: usize) -> Option<f64> {
        let shortfall = self.shortfall[q];
        if shortfall <= 0.0 {
            return None;
        }
        let snapshot = self.snapshot;
        let bound = self.earning_bound_s[snapshot.queues[q].pool]
            * (REACHABLE_FRACTION / shortfall).max(1.0);
        let waited = snapshot.now - snapshot.pending[self.entries[e].workload].created_at;
        (bound > 0.0 && bound.is_finite() && waited.is_finite()).then(|| (bound - waited).max(0.0))
    }

    /// Whether entry `e` of queue `q` has earned its hold by waiting (see the module's docs).
    pub(super) fn earned_by_waiting(&self, q: QueueId, e: usize) -> bool {
        self.earned_by_waiting_in_s(q, e) == Some(0.0)
    }
}
