//! A hold that ends its drain by evicting for a share chooses where to evict by the work that
//! loses. Its nodes are chosen to drain (the freest first, so that it assembles from what frees
//! up); by the time its queue may evict for it, what still stands on them is whatever happened
//! to be there, hours-old gangs included, while other nodes could be cleared of work minutes
//! old. So before such an eviction the hold is planned again by least work lost
//! (`hold::plan_hold_losing_least`), and where clearing those nodes loses less, within the
//! same guards, the hold moves there and evicts that instead. Where its own nodes cannot be
//! cleared for a share at all, clearing the others is the only eviction there is, and it moves
//! there too. A drain ended early (idle time outweighing what eviction loses) whose nodes cannot
//! be cleared within its bound moves the same way.
//! For a share and for a drain ended early, the plan by least work lost never clears a node
//! running the holder's own queue's work: no eviction for a share takes that work, and a drain
//! ended early takes only what was queued after the held workload, so such a node is where the
//! hold would otherwise wait out its own queue's pods while other nodes hold work it may take
//! back. For a guarantee it does not spare them: a queue below its guarantee is served first as
//! its own pods there end, within minutes, and clearing other nodes instead threw away a gang
//! just started beside the guarantees for two GPUs' worth (BENCHMARKS.md, issue 27).

use super::Cycle;
use super::eviction::Eviction;
use super::hold_split::Split;
use crate::admission::decision::PreemptionReason;
use crate::snapshot::{NodeId, PoolId, QueueId};

impl Cycle<'_> {
    /// The eviction for a share (a guarantee, or fair share far below) that clears room for
    /// entry `e` of queue `q` in `pool` with the least work lost: on its planned nodes, whose
    /// `missing` part still stands, or on the nodes planned by least work lost, with that plan
    /// where it is the one chosen. The nodes planned by least work lost are tried also where
    /// nothing may clear the planned ones (a pod there is one the guards keep: the holder's own
    /// queue's, one of a queue at or below its share, one too young): an eviction that cannot
    /// happen loses without bound, and the queue owed the share would otherwise wait for those
    /// nodes to drain while other nodes hold work it may take back. `None` where neither plan
    /// can be cleared for a share.
    pub(super) fn cheapest_share_eviction(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
    ) -> Option<(Eviction, Option<Split>)> {
        let reason = self.share_reason(e, q)?;
        let spare_own = matches!(reason, PreemptionReason::FarBelowFairShare { .. });
        let planned = self.share_eviction(e, q, missing, reason);
        if planned.as_ref().is_some_and(|p| p.lost_gpu_s <= 0.0) {
            return planned.map(|p| (p, None));
        }
        let least_loss = self
            .plan_losing_least(pool, e, spare_own)
            .map(|plan| self.split(&plan));
        let Some(split) = least_loss.filter(|split| split.missing_total > 0.0) else {
            return planned.map(|p| (p, None));
        };
        match (self.share_eviction(e, q, &split.missing, reason), planned) {
            (Some(there), Some(planned)) if there.lost_gpu_s >= planned.lost_gpu_s => {
                Some((planned, None))
            }
            (Some(there), _) => Some((there, Some(split))),
            (None, planned) => planned.map(|p| (p, None)),
        }
    }

    /// The eviction that ends the drain of entry `e`'s hold early (`reason`, losing at most
    /// `max_lost_gpu_s`): on its planned nodes, whose `missing` part still stands, or where
    /// nothing may clear that within the bound (its own queue's work queued before it stands
    /// there, or work too old to throw away), on the nodes planned by least work lost, with that
    /// plan, if that plan too stands at least half assembled (as an early drain must). The hold
    /// would otherwise keep what it has assembled idle while it waits for the one pod it may not
    /// evict, though other nodes hold work it may.
    pub(super) fn early_drain_eviction(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
        reason: PreemptionReason,
        max_lost_gpu_s: f64,
    ) -> Option<(Eviction, Option<Split>)> {
        if let Some(planned) = self.eviction(e, q, missing, reason, max_lost_gpu_s) {
            return Some((planned, None));
        }
        let split = self
            .plan_losing_least(pool, e, true)
            .map(|plan| self.split(&plan))
            .filter(|split| split.missing_total > 0.0)
            .filter(|split| self.half_assembled(e, split.missing_total))?;
        self.eviction(e, q, &split.missing, reason, max_lost_gpu_s)
            .map(|eviction| (eviction, Some(split)))
    }
}
