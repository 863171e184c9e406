//! Choosing victims so a held workload can start. Preemption is the last resort and every guard
//! here exists to keep it rare, justified and non-oscillating:
//! - only for a queue below its guarantee, or far below its fair share (with hysteresis on the
//!   victim side, so two queues cannot trade pods back and forth), or for a hold past its idle
//!   budget whose drain eviction ends for a bounded loss of work;
//! - victims are whole workloads (a gang goes entirely or not at all) and every guard counts
//!   the workload's full size;
//! - never a workload younger than its queue's `minRunTime`, never from the preemptor's own
//!   queue, never one of a more important tier than the preemptor's;
//! - a victim's queue never drops below its guarantee, nor, for a share, below its fair share;
//!   for a queue that received less than half its entitlement over the window, a queue that
//!   received at least its own may be taken below its share, never so far that it would count
//!   as far below it in turn (see [`keeps_near_share`]);
//! - a per-queue cooldown and a cluster-wide hourly cap;
//! - for a guarantee, no eviction that loses more work than the preemptor has waited, until it
//!   has waited a whole cooldown ([`guarantee_patience`]);
//! - all or nothing: if the held nodes cannot be cleared completely, nobody is evicted.
//!
//! Backfill is the exception to the guards on the victim's side ([`choose_backfill_victims`]):
//! a workload released into capacity held for another ran there on the condition that it
//! leaves once the rest of the held nodes has drained, so its age, tier and queue do not
//! protect it, nor does the hourly cap (it bounds evictions the policy chooses; backfill chose
//! to run on this condition, and a hold's backfill is bounded by what it holds). Refused
//! evictions still count.

use crate::admission::decision::PreemptionReason;
use crate::admission::memory::PREEMPTION_WINDOW_S;
use crate::admission::order::share_ratio;
use crate::admission::victims::RunningWorkload;
use crate::index::IndexVec;
use crate::params::PreemptionParams;
use crate::snapshot::{NodeId, QueueId, Snapshot};

const EPSILON: f64 = 1e-9;

/// What the preemption choice needs to know about each queue this cycle.
#[derive(Debug, Clone, Copy)]
pub struct QueueView {
    pub allocated: f64,
    pub guaranteed: f64,
    pub fair_share: f64,
    /// What the queue may claim: the larger of its time-aware and its fair share. Its
    /// allocation over this is its standing, lowest the most deserving.
    pub claim: f64,
    /// Whether the ledger says the queue received at least its entitlement over the window
    /// (false without history).
    pub received_entitlement: bool,
    /// Whether the ledger says the queue received less than half its entitlement over the
    /// window: below that the ledger alone cannot raise its claim to a whole pool.
    pub starved: bool,
}

/// The workload that wants room and where it was held.
pub struct Preemptor<'a> {
    pub queue: QueueId,
    pub tier: crate::labels::Tier,
    /// When the workload was queued: its own queue's work queued later may make room for it
    /// where a drain ends by eviction (see `eligible`).
    pub queued_at: f64,
    /// Per held node: what is still missing there after its free capacity is held.
    pub missing: &'a [(NodeId, Vec<u32>)],
    /// Whether a running workload (by `RunningWorkload::id`) runs as backfill in a hold that
    /// still stands: no guard on the victim's side protects it.
    pub backfill: &'a dyn Fn(&str) -> bool,
}

/// What is running, grouped three ways: by workload, each pod's workload, and by node.
#[derive(Clone, Copy)]
pub struct RunningIndex<'a> {
    pub workloads: &'a [RunningWorkload],
    /// Index into `workloads` per running pod (`usize::MAX` for pods left out).
    pub workload_of_pod: &'a [usize],
    /// Running pod indices per node.
    pub by_node: &'a IndexVec<NodeId, Vec<usize>>,
}

/// Why the preemptor may preempt at all, or `None`, for a workload of `size` GPU-equivalents
/// whose hold is `earned` or not (its queue's time-aware share covers it, judged without what
/// the queue started while it waited). Far below its fair share, a queue evicts for a workload
/// that fits within that share, or for one larger than the share once its hold is earned: such
/// a workload never fits within the fair share however long its queue waits, and what the
/// queue is owed is what lets it start (a gang of whole nodes for a queue whose share is less).
pub fn preemption_reason(
    snapshot: &Snapshot,
    params: &PreemptionParams,
    queue: QueueId,
    size: f64,
    earned: bool,
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
        let within_share = view.allocated + size <= view.fair_share + EPSILON;
        let earned_beyond_share = earned && size > view.fair_share + EPSILON;
        if ratio < params.fair_share_threshold && (within_share || earned_beyond_share) {
            return Some(PreemptionReason::FarBelowFairShare {
                preemptor_ratio: ratio,
                victim_ratio: 0.0,
            });
        }
    }
    None
}

/// The most work (GPU-seconds) an eviction for a queue below its guarantee may throw away, for
/// a workload of `size` GPU-equivalents that has waited `waited_s`: what it has waited so far
/// (size × wait), and anything once it has waited a whole `cooldown_s`.
///
/// Rent or buy: what a queue below its guarantee waits for usually frees itself within
/// minutes as other work ends, and the queue is served first when it does, so evicting at
/// once trades minutes of its wait for the victims' whole run so far. Waiting costs the queue
/// its shortfall; eviction costs the victims' work. It evicts once the wait has cost as much
/// as the eviction would lose, and waits no longer than one cooldown in any case.
pub fn guarantee_patience(size: f64, waited_s: f64, cooldown_s: f64) -> f64 {
    let waited_s = if waited_s.is_finite() {
        waited_s.max(0.0)
    } else {
        0.0
    };
    if waited_s >= cooldown_s {
        f64::INFINITY
    } else {
        size.max(0.0) * waited_s
    }
}

/// Picks victim workloads whose pods sit on the held nodes, or `None` if the nodes cannot be
/// cleared within the guards. Victims are whole workloads: every guard counts a workload's full
/// size, and a gang's pods on other nodes go with it. Among eligible victims the least work lost
/// goes first, then the least important tier, then the workload's identity. A victim that turns
/// out not to be needed once later ones were chosen is dropped again, so nothing is evicted for
/// room the preemptor does not use.
/// `views` is indexed by queue and is updated only when victims are returned.
pub fn choose_victims(
    snapshot: &Snapshot,
    params: &PreemptionParams,
    preemptor: &Preemptor<'_>,
    reason: PreemptionReason,
    running: &RunningIndex<'_>,
    views: &mut IndexVec<QueueId, QueueView>,
) -> Option<Vec<(usize, PreemptionReason)>> {
    let workloads = running.workloads;
    let recent = snapshot
        .recent_preemptions
        .iter()
        .filter(|t| snapshot.now - **t < PREEMPTION_WINDOW_S)
        .count();
    let budget = (params.max_victims_per_hour as usize).saturating_sub(recent);
    let missing = still_missing(preemptor.missing)?;
    let mut candidates = candidates_on(&missing, running, |workload| {
        eligible(snapshot, params, preemptor, workload)
    });
    candidates.sort_by(|&a, &b| {
        let (wa, wb) = (&workloads[a], &workloads[b]);
        wa.work
            .total_cmp(&wb.work)
            .then(wb.tier.cmp(&wa.tier))
            .then(wa.id.cmp(&wb.id))
    });

    let preemptor_starved = views[preemptor.queue].starved;
    let mut trial = views.clone();
    let mut chosen: Vec<(usize, PreemptionReason)> = Vec::new();
    for w in candidates {
        let chosen_so_far = chosen.iter().map(|c| c.0);
        let Some(narrows) = narrows(snapshot, &missing, workloads, chosen_so_far, w) else {
            break;
        };
        if !narrows {
            continue;
        }
        let workload = &workloads[w];
        let victim_reason = if (preemptor.backfill)(&workload.id) {
            Some(PreemptionReason::Backfill)
        } else {
            victim_reason(
                params,
                reason,
                VictimQueue {
                    before: &views[workload.queue],
                    now: &trial[workload.queue],
                    may_end_below_share: preemptor_starved
                        && views[workload.queue].received_entitlement,
                },
                workload,
                preemptor.queue,
            )
        };
        let Some(victim_reason) = victim_reason else {
            continue;
        };
        trial[workload.queue].allocated -= workload.size;
        chosen.push((w, victim_reason));
    }
    if uncovered(snapshot, &missing, workloads, chosen.iter().map(|c| c.0)).is_some() {
        return None;
    }
    drop_unneeded(
        snapshot,
        &missing,
        workloads,
        &mut chosen,
        |c| c.0,
        |&(w, _)| trial[workloads[w].queue].allocated += workloads[w].size,
    );

    let pods: usize = chosen
        .iter()
        .filter(|(_, reason)| *reason != PreemptionReason::Backfill)
        .map(|(w, _)| workloads[*w].pods.len())
        .sum();
    if chosen.is_empty() || pods > budget {
        return None;
    }
    *views = trial;
    Some(chosen)
}

/// A victim's queue as it stood before this preemption and as the victims chosen so far leave
/// it.
struct VictimQueue<'a> {
    before: &'a QueueView,
    now: &'a QueueView,
    /// Whether, for a fair share, it may be taken down to its share and below it (see
    /// [`keeps_near_share`]): the ledger says it received at least its entitlement over the
    /// window, and the preemptor's queue less than half of its own.
    may_end_below_share: bool,
}

/// The guard a victim workload must pass, with the reason recorded for it, or `None`.
fn victim_reason(
    params: &PreemptionParams,
    reason: PreemptionReason,
    queue: VictimQueue<'_>,
    workload: &RunningWorkload,
    preemptor_queue: QueueId,
) -> Option<PreemptionReason> {
    let view = queue.now;
    if workload.queue == preemptor_queue {
        // Its own queue's work, queued after the held workload (see `eligible`): evicting it
        // moves capacity within the queue, so no queue's standing changes and no other guard
        // applies. Only a drain ended early takes it, where waiting has already cost twice
        // what eviction loses; preemption for a share or a guarantee is owed by other queues.
        return matches!(reason, PreemptionReason::IdleOutweighsLoss { .. }).then_some(reason);
    }
    match reason {
        // A stalled drain asks only what a guarantee asks: its victims' queues keep what they
        // are guaranteed. Fair share is not asked of them, since the hold's queue has earned
        // the capacity over time and the victims are what is left of a drain that has already
        // cost the pool its whole idle budget.
        PreemptionReason::BelowGuarantee { .. } | PreemptionReason::StalledDrain { .. } => {
            (view.allocated - workload.size + EPSILON >= view.guaranteed).then_some(reason)
        }
        // A drain ended early has not yet cost its pool the idle budget: beyond its guarantee,
        // the victim's queue is left no more deserving than the holder's queue stands.
        PreemptionReason::IdleOutweighsLoss {
            holder_standing, ..
        } => {
            let left = view.allocated - workload.size;
            let keeps_guarantee = left + EPSILON >= view.guaranteed;
            let stays_behind = share_ratio(left.max(0.0), view.claim) >= holder_standing;
            (keeps_guarantee && stays_behind).then_some(reason)
        }
        PreemptionReason::FarBelowFairShare {
            preemptor_ratio, ..
        } => {
            // A queue that may end below its share is judged as it stood before this
            // preemption, so it may be taken down to its share; any other as the victims
            // chosen so far leave it, so it keeps about (1 + hysteresis) × its share.
            let judged = if queue.may_end_below_share {
                queue.before
            } else {
                view
            };
            let over = judged.allocated > (1.0 + params.hysteresis) * judged.fair_share;
            if !(over && keeps_near_share(params, &queue, workload.size)) {
                return None;
            }
            let victim_ratio = if view.fair_share > 0.0 {
                view.allocated / view.fair_share
            } else {
                f64::INFINITY
            };
            Some(PreemptionReason::FarBelowFairShare {
                preemptor_ratio,
                victim_ratio,
            })
        }
        PreemptionReason::Backfill => Some(reason),
    }
}

/// Whether a queue for fair share loses a workload of `size` and keeps near its share: at or
/// above it (and its guarantee), or, where it may end below it (the ledger says it received at
/// least its entitlement over the window and the preemptor's queue less than half of its own),
/// no lower than `fairShareThreshold` × it. Without that, a starved queue's held workload waits
/// on a queue standing a few GPUs over its share in whole pods larger than the excess, or, for
/// a gang of whole nodes, on one whose work off the held nodes is already less than its share,
/// while that queue is owed nothing. What is left keeps the victim's queue above the threshold
/// that would make it a preemptor in turn, and its ledger shows it served, so the two queues
/// cannot trade pods back and forth.
fn keeps_near_share(params: &PreemptionParams, queue: &VictimQueue<'_>, size: f64) -> bool {
    let view = queue.now;
    let left = view.allocated - size;
    if left + EPSILON < view.guaranteed {
        return false;
    }
    if left + EPSILON >= view.fair_share {
        return true;
    }
    let floor = params.fair_share_threshold * view.fair_share;
    queue.may_end_below_share && left + EPSILON >= floor
}

/// Backfill workloads on the held nodes whose eviction clears everything `missing` there, or
/// `None` if anything else still stands in the way (the held nodes have not drained yet), or
/// nothing is missing. Least work lost first; a victim that later
/// choices made unnecessary is dropped again. `backfill(id)` says whether a running workload
/// was released as backfill and its hold still stands.
pub fn choose_backfill_victims(
    snapshot: &Snapshot,
    params: &PreemptionParams,
    missing: &[(NodeId, Vec<u32>)],
    running: &RunningIndex<'_>,
    backfill: impl Fn(&str) -> bool,
) -> Option<Vec<usize>> {
    if !params.enabled {
        return None;
    }
    let workloads = running.workloads;
    let missing = still_missing(missing)?;
    let mut candidates = candidates_on(&missing, running, |workload| {
        backfill(&workload.id) && !snapshot.refused_victims.contains(&workload.id)
    });
    candidates.sort_by(|&a, &b| {
        let (wa, wb) = (&workloads[a], &workloads[b]);
        wa.work.total_cmp(&wb.work).then(wa.id.cmp(&wb.id))
    });
    let mut chosen: Vec<usize> = Vec::new();
    for w in candidates {
        match narrows(snapshot, &missing, workloads, chosen.iter().copied(), w) {
            None => break,
            Some(true) => chosen.push(w),
            Some(false) => {}
        }
    }
    if chosen.is_empty()
        || uncovered(snapshot, &missing, workloads, chosen.iter().copied()).is_some()
    {
        return None;
    }
    drop_unneeded(snapshot, &missing, workloads, &mut chosen, |&w| w, |_| {});
    Some(chosen)
}

/// The held nodes of `missing` where anything is still missing, or `None` if nothing is.
fn still_missing(missing: &[(NodeId, Vec<u32>)]) -> Option<Vec<(NodeId, Vec<u32>)>> {
    let left: Vec<(NodeId, Vec<u32>)> = missing
        .iter()
        .filter(|(_, m)| m.iter().any(|c| *c > 0))
        .cloned()
        .collect();
    (!left.is_empty()).then_some(left)
}

/// The running workloads (indices into `running.workloads`) with a pod on a node of
/// `missing` that `keep` accepts, each once, in the order their pods stand there.
fn candidates_on(
    missing: &[(NodeId, Vec<u32>)],
    running: &RunningIndex<'_>,
    keep: impl Fn(&RunningWorkload) -> bool,
) -> Vec<usize> {
    let workloads = running.workloads;
    let mut candidates: Vec<usize> = Vec::new();
    for (node, _) in missing {
        for &pod in &running.by_node[*node] {
            let w = running
                .workload_of_pod
                .get(pod)
                .copied()
                .unwrap_or(usize::MAX);
            if w < workloads.len() && !candidates.contains(&w) && keep(&workloads[w]) {
                candidates.push(w);
            }
        }
    }
    candidates
}

/// Drops the victims of `chosen` that the others make unnecessary, most recently chosen
/// first, telling `dropped` of each: a victim chosen early may be covered by later, larger
/// ones, and evicting it would lose its work for nothing.
fn drop_unneeded<T>(
    snapshot: &Snapshot,
    missing: &[(NodeId, Vec<u32>)],
    workloads: &[RunningWorkload],
    chosen: &mut Vec<T>,
    workload_of: impl Fn(&T) -> usize,
    mut dropped: impl FnMut(&T),
) {
    let mut k = chosen.len();
    while k > 0 {
        k -= 1;
        let without = chosen
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != k)
            .map(|(_, c)| workload_of(c));
        if uncovered(snapshot, missing, workloads, without).is_none() {
            let victim = chosen.remove(k);
            dropped(&victim);
        }
    }
}

/// Whether evicting workload `w` as well as `chosen` would leave less of `missing` uncovered
/// than `chosen` alone; `None` once `chosen` covers it all.
fn narrows(
    snapshot: &Snapshot,
    missing: &[(NodeId, Vec<u32>)],
    workloads: &[RunningWorkload],
    chosen: impl Iterator<Item = usize> + Clone,
    w: usize,
) -> Option<bool> {
    let before = uncovered(snapshot, missing, workloads, chosen.clone())?;
    let after = uncovered(snapshot, missing, workloads, chosen.chain([w]));
    Some(after.as_ref() != Some(&before))
}

/// What is still missing on the held nodes once `victims` are gone: `None` when nothing is.
fn uncovered(
    snapshot: &Snapshot,
    missing: &[(NodeId, Vec<u32>)],
    workloads: &[RunningWorkload],
    victims: impl Iterator<Item = usize>,
) -> Option<Vec<Vec<u32>>> {
    let mut left: Vec<Vec<u32>> = missing.iter().map(|(_, m)| m.clone()).collect();
    for w in victims {
        for &pod in &workloads[w].pods {
            let pod = &snapshot.running[pod];
            if let Some(slot) = missing.iter().position(|(node, _)| *node == pod.node) {
                for (need, have) in left[slot].iter_mut().zip(&pod.requests) {
                    *need = need.saturating_sub(*have);
                }
            }
        }
    }
    left.iter()
        .any(|m| m.iter().any(|c| *c > 0))
        .then_some(left)
}

fn eligible(
    snapshot: &Snapshot,
    params: &PreemptionParams,
    preemptor: &Preemptor<'_>,
    workload: &RunningWorkload,
) -> bool {
    let Some(queue) = snapshot.queues.get(workload.queue) else {
        return false;
    };
    if (preemptor.backfill)(&workload.id) {
        // Backfill ran on condition of leaving when the hold needs its room.
        return !snapshot.refused_victims.contains(&workload.id);
    }
    // A workload started less than a cooldown ago is never a victim either: it was released
    // because the policy judged it fair, and the next cycle must not undo that.
    let protected_for = queue.min_run_time_s.max(params.cooldown_s);
    // The preemptor's own queue's work is spared, unless it was queued after the preemptor:
    // such work started ahead of its turn, only because the workload at its queue's head did
    // not fit yet, and a hold whose drain it alone keeps from ending would otherwise leave the
    // rest of its capacity idle for it (`LowerOrNewerEqualPriority` in Kueue's terms).
    let own_queued_earlier =
        workload.queue == preemptor.queue && workload.queued_at <= preemptor.queued_at;
    !own_queued_earlier
        && workload.tier >= preemptor.tier
        && snapshot.now - workload.latest_start >= protected_for
        && !snapshot.refused_victims.contains(&workload.id)
}
