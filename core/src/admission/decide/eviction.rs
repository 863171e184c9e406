//! Evictions a hold orders on its nodes: the backfill standing there, or victims chosen within
//! the guards every preemption keeps.

use super::Cycle;
use super::running::RunningGroups;
use crate::admission::decision::{Preemption, PreemptionReason};
use crate::admission::preempt::{
    Preemptor, QueueView, RunningIndex, choose_backfill_victims, choose_victims,
    guarantee_patience, preemption_reason,
};
use crate::index::IndexVec;
use crate::labels::Tier;
use crate::snapshot::{NodeId, QueueId};

/// Victims chosen for a hold, with what their eviction leaves each queue and the work it
/// loses; nothing is evicted until it is carried out.
pub(super) struct Eviction {
    preemptions: Vec<Preemption>,
    views: IndexVec<QueueId, QueueView>,
    pub(super) lost_gpu_s: f64,
}

impl Cycle<'_> {
    /// Evicts the backfill standing on the held nodes of entry `e` once nothing else is
    /// missing there. Returns whether it did.
    pub(super) fn evict_backfill(&mut self, e: usize, missing: &[(NodeId, Vec<u32>)]) -> bool {
        if self.backfill.is_empty() {
            return false;
        }
        let snapshot = self.snapshot;
        let weights = &self.weights;
        let running = self
            .running
            .get_or_insert_with(|| RunningGroups::new(snapshot, weights));
        let backfill = &self.backfill;
        let Some(victims) = choose_backfill_victims(
            snapshot,
            &self.options.preemption,
            missing,
            &RunningIndex {
                workloads: &running.workloads,
                workload_of_pod: &running.workload_of_pod,
                by_node: &running.by_node,
            },
            |id| backfill.contains(id),
        ) else {
            return false;
        };
        for victim in victims {
            let victim = &running.workloads[victim];
            self.views[victim.queue].allocated -= victim.size;
            self.decisions.preemptions.push(Preemption {
                victim_workload: victim.id.clone(),
                pods: victim.pods.clone(),
                size: victim.size,
                for_workload: self.entries[e].workload,
                reason: PreemptionReason::Backfill,
            });
        }
        true
    }

    /// Victims on the nodes of `missing` for entry `e` of queue `q`, whose queue may evict on
    /// its share for `reason` (see `share_reason`); not carried out.
    pub(super) fn share_eviction(
        &mut self,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
        reason: PreemptionReason,
    ) -> Option<Eviction> {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let size = self.entries[e].size;
        // Realtime work (serving) takes its guarantee back at once: its wait is the latency
        // its users see. Other tiers wait while waiting costs less than evicting.
        let pending = &snapshot.pending[self.entries[e].workload];
        let max_lost_gpu_s = match reason {
            PreemptionReason::BelowGuarantee { .. } if pending.tier != Tier::Realtime => {
                guarantee_patience(size, snapshot.now - pending.created_at, params.cooldown_s)
            }
            _ => f64::INFINITY,
        };
        self.eviction(e, q, missing, reason, max_lost_gpu_s)
    }

    /// Why queue `q` may evict for its entry `e` on its share (below its guarantee, or far below
    /// its fair share), if it may.
    pub(super) fn share_reason(&self, e: usize, q: QueueId) -> Option<PreemptionReason> {
        let size = self.entries[e].size;
        let params = &self.options.preemption;
        // Asked only where it matters: the check walks the queue's running pods.
        let earned = size > self.views[q].fair_share && self.earned_now(q, e);
        preemption_reason(self.snapshot, params, q, size, earned, &self.views[q])
    }

    /// Victims on entry `e`'s held nodes that clear what is `missing` there, for `reason`,
    /// unless together they would lose more than `max_lost_gpu_s` of work. Nothing is recorded
    /// until it is carried out (`carry_out`).
    pub(super) fn eviction(
        &mut self,
        e: usize,
        q: QueueId,
        missing: &[(NodeId, Vec<u32>)],
        reason: PreemptionReason,
        max_lost_gpu_s: f64,
    ) -> Option<Eviction> {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let w = self.entries[e].workload;
        let weights = &self.weights;
        let running = self
            .running
            .get_or_insert_with(|| RunningGroups::new(snapshot, weights));
        let backfill = &self.backfill;
        let is_backfill = |id: &str| backfill.contains(id);
        // Committed only if the victims are taken.
        let mut views = self.views.clone();
        let preemptor = Preemptor {
            queue: q,
            tier: snapshot.pending[w].tier,
            queued_at: snapshot.pending[w].created_at,
            missing,
            backfill: &is_backfill,
        };
        let victims = choose_victims(
            snapshot,
            params,
            &preemptor,
            reason,
            &RunningIndex {
                workloads: &running.workloads,
                workload_of_pod: &running.workload_of_pod,
                by_node: &running.by_node,
            },
            &mut views,
        )?;
        let lost_gpu_s: f64 = victims
            .iter()
            .map(|(v, _)| running.workloads[*v].work)
            .sum();
        if lost_gpu_s > max_lost_gpu_s {
            return None;
        }
        let preemptions = victims
            .into_iter()
            .map(|(victim, reason)| {
                let victim = &running.workloads[victim];
                Preemption {
                    victim_workload: victim.id.clone(),
                    pods: victim.pods.clone(),
                    size: victim.size,
                    for_workload: w,
                    reason,
                }
            })
            .collect();
        Some(Eviction {
            preemptions,
            views,
            lost_gpu_s,
        })
    }

    /// Records `eviction`.
    pub(super) fn carry_out(&mut self, eviction: Eviction) {
        self.views = eviction.views;
        self.decisions.preemptions.extend(eviction.preemptions);
    }
}
