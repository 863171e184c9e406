//! A hold that ends its drain by evicting for a share chooses where to evict by the work that
//! loses. Its nodes are chosen to drain (the freest first, so that it assembles from what frees
//! up); by the time its queue may evict for it, what still stands on them is whatever happened
//! to be there, hours-old gangs included, while other nodes could be cleared of work minutes
//! old. So before such an eviction the hold is planned again by least work lost
//! (`hold::plan_hold_losing_least`), and where clearing those nodes loses less, within the
//! same guards, the hold moves there and evicts that instead.

use super::Cycle;
use super::eviction::Eviction;
use super::holding::Split;
use crate::snapshot::{NodeId, PoolId, QueueId};

impl Cycle<'_> {
    /// The eviction for a share (a guarantee, or fair share far below) that clears room for
    /// entry `e` of queue `q` in `pool` with the least work lost: on its planned nodes, whose
    /// `missing` part still stands, or on the nodes planned by least work lost, with that plan
    /// where it is the one chosen. `None` where no eviction for a share may clear its planned
    /// nodes.
    pub(super) fn cheapest_share_eviction(
        &mut self,
        pool: PoolId,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
    ) -> Option<(Eviction, Option<Split>)> {
        let planned = self.share_eviction(e, q, missing)?;
        if planned.lost_gpu_s <= 0.0 {
            return Some((planned, None));
        }
        let Some(plan) = self.plan_losing_least(pool, e) else {
            return Some((planned, None));
        };
        let split = self.split(&plan);
        if split.missing_total <= 0.0 {
            return Some((planned, None));
        }
        match self.share_eviction(e, q, &split.missing) {
            Some(cheaper) if cheaper.lost_gpu_s < planned.lost_gpu_s => {
                Some((cheaper, Some(split)))
            }
            _ => Some((planned, None)),
        }
    }
}
