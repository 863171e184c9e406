//! Choosing victims so a held workload can start. Preemption is the last resort and every guard
//! here exists to keep it rare, justified and non-oscillating:
//! - only for a queue below its guarantee, or far below its fair share (with hysteresis on the
//!   victim side, so two queues cannot trade pods back and forth);
//! - never a pod younger than its queue's `minRunTime`, never from the preemptor's own queue,
//!   never a pod of a more important tier than the preemptor's;
//! - a victim's queue never drops below its guarantee (or its fair share);
//! - a per-queue cooldown and a cluster-wide hourly cap;
//! - all or nothing: if the held nodes cannot be cleared completely, nobody is evicted.

use crate::admission::decision::PreemptionReason;
use crate::params::PreemptionParams;
use crate::snapshot::{NodeId, QueueId, RunningPod, Snapshot};

const EPSILON: f64 = 1e-9;

/// What the preemption choice needs to know about each queue this cycle.
#[derive(Debug, Clone, Copy)]
pub struct QueueView {
    pub allocated: f64,
    pub guaranteed: f64,
    pub fair_share: f64,
}

/// The workload that wants room and where it was held.
pub struct Preemptor<'a> {
    pub queue: QueueId,
    pub size: f64,
    pub tier: crate::labels::Tier,
    /// Per held node: what is still missing there after its free capacity is held.
    pub missing: &'a [(NodeId, Vec<u32>)],
}

/// Why the preemptor may preempt at all, or `None`.
pub fn preemption_reason(
    snapshot: &Snapshot,
    params: &PreemptionParams,
    queue: QueueId,
    size: f64,
    view: &QueueView,
) -> Option<PreemptionReason> {
    if !params.enabled {
        return None;
    }
    let state = &snapshot.queues[queue];
    if state
        .last_preemption_at
        .is_some_and(|t| snapshot.now - t < params.cooldown_s)
    {
        return None;
    }
    if view.allocated + size <= view.guaranteed + EPSILON {
        return Some(PreemptionReason::BelowGuarantee {
            preemptor_allocated: view.allocated,
            preemptor_guaranteed: view.guaranteed,
        });
    }
    if view.fair_share > 0.0 {
        let ratio = view.allocated / view.fair_share;
        if ratio < params.fair_share_threshold && view.allocated + size <= view.fair_share + EPSILON
        {
            return Some(PreemptionReason::FarBelowFairShare {
                preemptor_ratio: ratio,
                victim_ratio: 0.0,
            });
        }
    }
    None
}

/// Picks victims on the held nodes, or `None` if the nodes cannot be cleared within the guards.
/// `views` is indexed by queue and is updated only when victims are returned.
pub fn choose_victims(
    snapshot: &Snapshot,
    params: &PreemptionParams,
    preemptor: &Preemptor<'_>,
    reason: PreemptionReason,
    running_by_node: &[Vec<usize>],
    views: &mut [QueueView],
) -> Option<Vec<(usize, PreemptionReason)>> {
    let recent = snapshot
        .recent_preemptions
        .iter()
        .filter(|t| snapshot.now - **t < 3600.0)
        .count();
    let budget = (params.max_victims_per_hour as usize).saturating_sub(recent);
    let mut trial: Vec<QueueView> = views.to_vec();
    let mut victims = Vec::new();
    for (node, missing) in preemptor.missing {
        let mut still_missing = missing.clone();
        if still_missing.iter().all(|m| *m == 0) {
            continue;
        }
        let mut candidates: Vec<usize> = running_by_node[*node]
            .iter()
            .copied()
            .filter(|&i| eligible(snapshot, preemptor, &snapshot.running[i]))
            .collect();
        // Least important tier first, then the youngest (least work lost), then UID.
        candidates.sort_by(|&a, &b| {
            let (pa, pb) = (&snapshot.running[a], &snapshot.running[b]);
            pb.tier
                .cmp(&pa.tier)
                .then(pb.started_at.total_cmp(&pa.started_at))
                .then(pa.uid.cmp(&pb.uid))
        });
        for i in candidates {
            if still_missing.iter().all(|m| *m == 0) {
                break;
            }
            let pod = &snapshot.running[i];
            let helps = pod
                .requests
                .iter()
                .zip(&still_missing)
                .any(|(have, need)| *have > 0 && *need > 0);
            if !helps {
                continue;
            }
            let size = snapshot.gpu_equivalents(&pod.requests);
            let view = &trial[pod.queue];
            let victim_reason = match reason {
                PreemptionReason::BelowGuarantee { .. } => {
                    if view.allocated - size + EPSILON < view.guaranteed {
                        continue;
                    }
                    reason
                }
                PreemptionReason::FarBelowFairShare {
                    preemptor_ratio, ..
                } => {
                    let over = view.allocated > (1.0 + params.hysteresis) * view.fair_share;
                    let stays =
                        view.allocated - size + EPSILON >= view.fair_share.max(view.guaranteed);
                    if !(over && stays) {
                        continue;
                    }
                    let victim_ratio = if view.fair_share > 0.0 {
                        view.allocated / view.fair_share
                    } else {
                        f64::INFINITY
                    };
                    PreemptionReason::FarBelowFairShare {
                        preemptor_ratio,
                        victim_ratio,
                    }
                }
            };
            trial[pod.queue].allocated -= size;
            for (slot, have) in still_missing.iter_mut().zip(&pod.requests) {
                *slot = slot.saturating_sub(*have);
            }
            victims.push((i, victim_reason));
        }
        if still_missing.iter().any(|m| *m > 0) {
            return None;
        }
    }
    if victims.is_empty() || victims.len() > budget {
        return None;
    }
    views.copy_from_slice(&trial);
    Some(victims)
}

fn eligible(snapshot: &Snapshot, preemptor: &Preemptor<'_>, pod: &RunningPod) -> bool {
    let Some(queue) = snapshot.queues.get(pod.queue) else {
        return false;
    };
    pod.queue != preemptor.queue
        && pod.tier >= preemptor.tier
        && snapshot.now - pod.started_at >= queue.min_run_time_s
}
