//! The policy's promises against thrash, as properties over random snapshots:
//! - stability: once a cycle's releases and evictions are applied (pods start, evicted
//!   workloads come back as pending, time moves on by one cycle), the next cycle evicts nothing
//!   the first released and releases nothing the first evicted;
//! - guarantees first: no release or hold goes to a queue at or above its guarantee while a
//!   queue below its guarantee waits for capacity it could use;
//! - no needless eviction: every victim frees capacity the preemptor's hold is missing, and
//!   none could be spared;
//! - a drain ended early, within its idle budget, throws away at most half the GPU-time its
//!   hold has kept idle, only for a hold at least half assembled, and never below a victim's
//!   guarantee.
//! - a stalled drain evicts only once its hold has left idle what it may before eviction (its
//!   idle budget, less for a hold of more than half its pool), and throws away at most four
//!   times that.

use std::collections::HashSet;

use gpufair_core::admission::best_fit;
use gpufair_core::admission::{
    DecideOptions, Decisions, Preemption, PreemptionReason, WaitReason, decide,
};
use gpufair_core::fixtures::{self, node, one_gpu_pool};
use gpufair_core::index::IndexVec;
use gpufair_core::labels::Tier;
use gpufair_core::snapshot::*;
use proptest::prelude::*;

mod common;
use common::arb_snapshot;

/// One cycle's length in these tests: shorter than the preemption cooldown, as every sensible
/// controller setting is.
const CYCLE_S: f64 = 10.0;

/// Preemption switched on and easy to trigger, so the properties see many evictions.
fn eager() -> DecideOptions {
    let mut options = DecideOptions::default();
    options.preemption.fair_share_threshold = 0.9;
    options.preemption.max_victims_per_hour = 1000;
    options
}

/// The snapshot the next cycle sees after `decisions` are carried out.
fn apply(snapshot: &Snapshot, decisions: &Decisions) -> Snapshot {
    let now = snapshot.now;
    let mut next = snapshot.clone();
    next.now = now + CYCLE_S;
    let mut gone: HashSet<usize> = HashSet::new();
    for preemption in &decisions.preemptions {
        let preemptor = snapshot.pending[preemption.for_workload].queue;
        next.queues[preemptor].last_preemption_at = Some(now);
        let first = &snapshot.running[preemption.pods[0]];
        next.queues[first.queue].last_evicted_at = Some(now);
        // The owner recreates the evicted workload; it waits under the same identity.
        next.pending.push(PendingWorkload {
            uid: preemption.victim_workload.clone(),
            queue: first.queue,
            tier: first.tier,
            deadline: None,
            urgency: gpufair_core::labels::Urgency::Medium,
            user_tier: gpufair_core::labels::UserTier::Standard,
            created_at: now,
            min_member: preemption.pods.len() as u32,
            pods: preemption
                .pods
                .iter()
                .map(|&p| PodRequest {
                    requests: snapshot.running[p].requests.clone(),
                })
                .collect(),
        });
        for &pod in &preemption.pods {
            let running = &snapshot.running[pod];
            for (free, have) in next.nodes[running.node]
                .free
                .iter_mut()
                .zip(&running.requests)
            {
                *free += have;
            }
            next.recent_preemptions.push(now);
            gone.insert(pod);
        }
    }
    next.running = snapshot
        .running
        .iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(_, pod)| pod.clone())
        .collect();
    let released: HashSet<usize> = decisions.releases.iter().map(|r| r.workload).collect();
    for release in &decisions.releases {
        let workload = &snapshot.pending[release.workload];
        for (p, (pod, &node)) in workload.pods.iter().zip(&release.placements).enumerate() {
            for (free, want) in next.nodes[node].free.iter_mut().zip(&pod.requests) {
                *free -= want;
            }
            next.running.push(RunningPod {
                uid: format!("{}-{p}", workload.uid),
                workload: workload.uid.clone(),
                queue: workload.queue,
                node,
                requests: pod.requests.clone(),
                tier: workload.tier,
                started_at: now,
                queued_at: now,
            });
        }
    }
    let kept: Vec<PendingWorkload> = snapshot
        .pending
        .iter()
        .enumerate()
        .filter(|(i, _)| !released.contains(i))
        .map(|(_, w)| w.clone())
        .collect();
    let recreated = next.pending.split_off(snapshot.pending.len());
    next.pending = kept;
    next.pending.extend(recreated);
    next.previous_holds = decisions
        .holds
        .iter()
        .map(|h| h.carried(snapshot.pending[h.workload].uid.clone(), snapshot.now))
        .collect();
    next
}

/// What the pods of `victims` give back on `node`.
fn freed_on(snapshot: &Snapshot, victims: &[&[usize]], node: NodeId, width: usize) -> Vec<u32> {
    let mut freed = vec![0u32; width];
    for pods in victims {
        for &pod in *pods {
            let running = &snapshot.running[pod];
            if running.node == node {
                for (slot, have) in freed.iter_mut().zip(&running.requests) {
                    *slot += have;
                }
            }
        }
    }
    freed
}

fn covers(snapshot: &Snapshot, missing: &[(NodeId, Vec<u32>)], victims: &[&[usize]]) -> bool {
    missing.iter().all(|(node, need)| {
        let freed = freed_on(snapshot, victims, *node, need.len());
        need.iter().zip(&freed).all(|(n, f)| f >= n)
    })
}

/// `draining`'s idle limit: a long one, so that drains within it often reach the point of ending
/// early.
const DRAINING_IDLE_LIMIT_S: f64 = 8.0 * 3600.0;

/// The cycle after `snapshot`'s (with an idle budget of 8 h per held GPU), every hold of the
/// first kept and counted as having left `spent` of its idle budget idle so far, and each pod standing on a held node finished with
/// odds `finished` (its drain has progressed): the snapshot it sees, and its decisions.
fn draining(snapshot: &Snapshot, spent: f64, finished: f64) -> (Snapshot, Decisions) {
    draining_with(&eager(), snapshot, spent, finished)
}

/// `draining` under `options`, with `DRAINING_IDLE_LIMIT_S` as the idle limit.
fn draining_with(
    options: &DecideOptions,
    snapshot: &Snapshot,
    spent: f64,
    finished: f64,
) -> (Snapshot, Decisions) {
    // A long idle budget: drains within it often reach the point of ending early.
    let mut options = options.clone();
    options.fairshare.hold_idle_limit_s = DRAINING_IDLE_LIMIT_S;
    let mut next = apply(snapshot, &decide(snapshot, &options));
    let limit = options.fairshare.hold_idle_limit_s;
    let sizes: Vec<f64> = next
        .previous_holds
        .iter()
        .map(|h| {
            next.pending
                .iter()
                .position(|w| w.uid == h.workload)
                .map_or(0.0, |w| pending_size(&next, w))
        })
        .collect();
    for (hold, size) in next.previous_holds.iter_mut().zip(sizes) {
        hold.cost.idle_gpu_s = spent * size * limit;
    }
    let held: HashSet<NodeId> = next
        .previous_holds
        .iter()
        .flat_map(|h| h.nodes.iter().copied())
        .collect();
    let mut running = Vec::new();
    for (i, pod) in std::mem::take(&mut next.running).into_iter().enumerate() {
        // Which pods finish is spread evenly over the running list, whatever `finished` is.
        let odds = ((i as f64) * 0.618_033_988_75).fract();
        if held.contains(&pod.node) && odds < finished {
            for (free, had) in next.nodes[pod.node].free.iter_mut().zip(&pod.requests) {
                *free += had;
            }
        } else {
            running.push(pod);
        }
    }
    next.running = running;
    let decisions = decide(&next, &options);
    (next, decisions)
}

/// The evictions `decisions` make for pending workload `w` for a reason `kind` accepts.
fn evictions_for(
    decisions: &Decisions,
    w: usize,
    kind: impl Fn(&PreemptionReason) -> bool,
) -> Vec<&Preemption> {
    decisions
        .preemptions
        .iter()
        .filter(|p| p.for_workload == w && kind(&p.reason))
        .collect()
}

/// GPU-equivalents pending workload `w` asks for.
fn pending_size(snapshot: &Snapshot, w: usize) -> f64 {
    snapshot.pending[w]
        .pods
        .iter()
        .map(|p| snapshot.gpu_equivalents(&p.requests))
        .sum()
}

/// GPU-seconds running pod `i` has delivered: what evicting it throws away.
fn work_of(snapshot: &Snapshot, i: usize) -> f64 {
    let pod = &snapshot.running[i];
    snapshot.gpu_equivalents(&pod.requests) * (snapshot.now - pod.started_at).max(0.0)
}

/// A full pool where one queue holds most GPUs and others wait: the cases where holds turn into
/// preemptions. Running pods form gangs across nodes and started long enough ago to be victims.
fn arb_crowded_snapshot() -> impl Strategy<Value = Snapshot> {
    (
        3..=8usize,
        proptest::collection::vec((0.2..4.0f64, 0.0..12.0f64, 0.0..1.0f64, 0.0..1.0f64), 2..5),
        proptest::collection::vec((0..4usize, 1..=4u32, 0..3usize, 0.0..8000.0f64), 4..40),
        proptest::collection::vec((1..4usize, proptest::collection::vec(1..=8u32, 1..4)), 1..6),
    )
        .prop_map(|(nodes, queues, running, pending)| {
            let n_queues = queues.len();
            let mut free = vec![8u32; nodes];
            let mut placed = Vec::new();
            for (i, (queue, gpus, gang, started)) in running.iter().enumerate() {
                // Mostly the first queue: it is the one over its share.
                let queue = if *queue >= n_queues { 0 } else { *queue };
                if let Some(node) = (0..nodes).find(|&n| free[n] >= *gpus) {
                    free[node] -= gpus;
                    placed.push(RunningPod {
                        workload: format!("gang-{queue}-{gang}"),
                        ..fixtures::running(&format!("run-{i:03}"), queue, node, *gpus, *started)
                    });
                }
            }
            Snapshot {
                queues: queues
                    .iter()
                    .enumerate()
                    .map(|(i, (weight, guaranteed, fair, usage))| QueueState {
                        name: format!("queue-{i}"),
                        pool: PoolId::new(0),
                        weight: *weight,
                        guaranteed: *guaranteed,
                        limit: None,
                        min_run_time_s: 0.0,
                        shares: LedgerShares {
                            fair_share: *fair,
                            usage_share: *usage,
                            decayed_capacity: 3600.0 * 64.0,
                            recent_entitled: 0.0,
                        },
                        last_preemption_at: None,
                        last_evicted_at: None,
                    })
                    .collect(),
                running: placed,
                pending: pending
                    .iter()
                    .enumerate()
                    .map(|(i, (queue, pods))| PendingWorkload {
                        created_at: i as f64,
                        ..fixtures::pending(&format!("wl-{i:03}"), (*queue).min(n_queues - 1), pods)
                    })
                    .collect(),
                ..pool_of_8_gpu_nodes(&free)
            }
        })
}

/// A snapshot at 10,000 s of one pool of 8-GPU nodes with `free` GPUs each, and nothing else.
fn pool_of_8_gpu_nodes(free: &[u32]) -> Snapshot {
    let nodes: Vec<Node> = free
        .iter()
        .enumerate()
        .map(|(n, &free)| node(&format!("node-{n:02}"), 8, free))
        .collect();
    one_gpu_pool("pool", nodes)
}

/// Preemption on, but only a drain's end may evict (no fair-share preemption): what holds of
/// most of a pool need to reach the end of their drain.
fn drain_only() -> DecideOptions {
    let mut options = eager();
    options.preemption.fair_share_threshold = 0.0;
    options
}

/// A full pool of one to three 8-GPU nodes running other queues' work, and a gang of 2-GPU pods
/// of more than half the pool, up to all of it, from a queue owed enough to hold for it.
fn arb_small_pool_snapshot() -> impl Strategy<Value = Snapshot> {
    (
        1..=3usize,
        0.0..1.0f64,
        proptest::collection::vec((1..=4u32, 0.0..8000.0f64), 24),
    )
        .prop_map(|(nodes, fraction, fill)| {
            let pool = 8 * nodes;
            // More than half the pool, in 2-GPU pods: pool/4 + 1 ..= pool/2 of them.
            let least = pool / 4 + 1;
            let pods =
                least + ((fraction * (pool / 2 + 1 - least) as f64) as usize).min(pool / 2 - least);
            let mut free = vec![8u32; nodes];
            let mut running = Vec::new();
            for (i, (gpus, started)) in fill.iter().enumerate() {
                if let Some(node) = (0..nodes).find(|&n| free[n] >= *gpus) {
                    free[node] -= gpus;
                    running.push(fixtures::running(
                        &format!("run-{i:03}"),
                        1 + i % 2,
                        node,
                        *gpus,
                        *started,
                    ));
                }
            }
            let queue = |i: usize, owed: bool| QueueState {
                name: format!("queue-{i}"),
                pool: PoolId::new(0),
                weight: 1.0,
                guaranteed: 0.0,
                limit: None,
                min_run_time_s: 0.0,
                shares: if owed {
                    LedgerShares {
                        fair_share: 0.5,
                        usage_share: 0.0,
                        decayed_capacity: 100.0 * 3600.0 * pool as f64,
                        recent_entitled: 0.0,
                    }
                } else {
                    LedgerShares::NEUTRAL
                },
                last_preemption_at: None,
                last_evicted_at: None,
            };
            Snapshot {
                queues: vec![queue(0, true), queue(1, false), queue(2, false)].into(),
                running,
                pending: vec![fixtures::pending("big", 0, &vec![2; pods])],
                ..pool_of_8_gpu_nodes(&free)
            }
        })
}

/// Either kind of snapshot: the general one, or a crowded pool.
fn arb_any_snapshot() -> impl Strategy<Value = Snapshot> {
    prop_oneof![
        arb_snapshot(),
        arb_crowded_snapshot(),
        arb_served_beside_starved_snapshot()
    ]
}

/// A crowded pool whose ledger says the first queue (the one running most) received at least
/// its entitlement and every other queue less than half of its own: where a share eviction may
/// leave a victim's queue below its share.
fn arb_served_beside_starved_snapshot() -> impl Strategy<Value = Snapshot> {
    (
        arb_crowded_snapshot(),
        0.1..1.0f64,
        1.0..1.5f64,
        0.0..0.5f64,
    )
        .prop_map(|(mut snapshot, fair, over, under)| {
            for (i, queue) in snapshot.queues.iter_mut().enumerate() {
                queue.shares.fair_share = fair;
                queue.shares.usage_share = fair * if i == 0 { over } else { under };
            }
            snapshot
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn the_next_cycle_never_undoes_this_one(snapshot in arb_any_snapshot()) {
        let options = eager();
        let first = decide(&snapshot, &options);
        let next = apply(&snapshot, &first);
        let second = decide(&next, &options);

        let released: HashSet<&str> = first
            .releases
            .iter()
            .map(|r| snapshot.pending[r.workload].uid.as_str())
            .collect();
        for preemption in &second.preemptions {
            prop_assert!(
                !released.contains(preemption.victim_workload.as_str()),
                "{} was released and then evicted", preemption.victim_workload
            );
        }
        let evicted: HashSet<&str> = first
            .preemptions
            .iter()
            .map(|p| p.victim_workload.as_str())
            .collect();
        for release in &second.releases {
            let uid = next.pending[release.workload].uid.as_str();
            prop_assert!(!evicted.contains(uid), "{} was evicted and then released", uid);
        }
    }

    #[test]
    fn a_victims_queue_ends_below_its_share_only_for_a_starved_queue_and_not_far_below_it(
        snapshot in arb_any_snapshot(),
    ) {
        let options = eager();
        let decisions = decide(&snapshot, &options);
        let floor = options.preemption.fair_share_threshold;
        for preemption in &decisions.preemptions {
            if !matches!(preemption.reason, PreemptionReason::FarBelowFairShare { .. }) {
                continue;
            }
            let victim = snapshot.running[preemption.pods[0]].queue;
            let preemptor = snapshot.pending[preemption.for_workload].queue;
            // Where the victim's queue ends: with what this cycle released to it (the guard
            // judges a queue as it stands once they start), less all that is taken from it.
            let taken: f64 = decisions
                .preemptions
                .iter()
                .filter(|p| snapshot.running[p.pods[0]].queue == victim)
                .map(|p| p.size)
                .sum();
            let outcome = &decisions.queues[victim];
            let left = outcome.allocated_after - taken;
            if left >= outcome.fair_share - 1e-9 {
                continue;
            }
            prop_assert!(
                snapshot.queues[victim].shares.received_entitlement(),
                "{} ends below its share without having received its entitlement",
                snapshot.queues[victim].name
            );
            prop_assert!(snapshot.queues[preemptor].shares.shortfall() >= 0.5);
            prop_assert!(left + 1e-9 >= floor * outcome.fair_share, "{left} of {}", outcome.fair_share);
        }
    }

    #[test]
    fn capacity_goes_first_to_work_its_guarantee_covers(snapshot in arb_any_snapshot()) {
        let decisions = decide(&snapshot, &DecideOptions::default());
        let guaranteed = |q: QueueId| snapshot.queues[q].guaranteed;
        let size_of = |w: usize| snapshot.workload_gpu_equivalents(&snapshot.pending[w]);
        // Whether a workload of `size` is covered by what is left of its queue's guarantee.
        let covered = |q: QueueId, allocated: f64, size: f64| {
            allocated + 1e-9 < guaranteed(q) && allocated + size <= guaranteed(q) + 1e-9
        };
        // Replay each queue's releases in order to know which its guarantee covered.
        let mut allocated: IndexVec<QueueId, f64> = decisions.queues.iter().map(|o| o.allocated).collect();
        let mut free: IndexVec<NodeId, Vec<u32>> = snapshot.nodes.iter().map(|n| n.free.clone()).collect();
        let mut to_others = false;
        for release in &decisions.releases {
            let workload = &snapshot.pending[release.workload];
            let q = workload.queue;
            let size = size_of(release.workload);
            if covered(q, allocated[q], size) {
                for (pod, &node) in workload.pods.iter().zip(&release.placements) {
                    for (slot, want) in free[node].iter_mut().zip(&pod.requests) {
                        *slot -= want;
                    }
                }
            } else {
                to_others = true;
            }
            allocated[q] += size;
        }
        for hold in &decisions.holds {
            let q = snapshot.pending[hold.workload].queue;
            if covered(q, decisions.queues[q].allocated, size_of(hold.workload)) {
                for (node, amounts) in &hold.nodes {
                    for (slot, held) in free[*node].iter_mut().zip(amounts) {
                        *slot = slot.saturating_sub(*held);
                    }
                }
            } else {
                to_others = true;
            }
        }
        if !to_others {
            return Ok(());
        }
        let weights: Vec<f64> = snapshot.resources.iter().map(|r| r.gpu_equivalents).collect();
        for waiting in &decisions.waiting {
            let workload = &snapshot.pending[waiting.workload];
            let q = workload.queue;
            // Only a queue's first workload is sure of its turn on the guarantee's account: one
            // behind a workload the guarantee does not cover waits for that one's turn first.
            let first = waiting.position == 1;
            let below = first && covered(q, decisions.queues[q].allocated_after, size_of(waiting.workload));
            let wants_room = matches!(
                waiting.reason,
                WaitReason::NoFit | WaitReason::CapacityHeld { .. } | WaitReason::NotEarned { .. }
            );
            if !(below && wants_room) {
                continue;
            }
            let pool = snapshot.queues[q].pool;
            let nodes: Vec<NodeId> = snapshot.nodes.indices().filter(|&n| snapshot.nodes[n].pool == pool).collect();
            let pods: Vec<&[u32]> = workload.pods.iter().map(|p| p.requests.as_slice()).collect();
            prop_assert!(
                best_fit(&nodes, |n| free[n].as_slice(), &pods, &weights).is_none(),
                "{} waits first in its queue, covered by its guarantee, for room that went to others", workload.uid
            );
        }
    }

    #[test]
    fn every_victim_is_needed_by_its_preemptor(snapshot in arb_any_snapshot()) {
        let decisions = decide(&snapshot, &eager());
        for hold in &decisions.holds {
            let victims: Vec<&[usize]> = decisions
                .preemptions
                .iter()
                .filter(|p| p.for_workload == hold.workload)
                .map(|p| p.pods.as_slice())
                .collect();
            if victims.is_empty() {
                continue;
            }
            prop_assert!(covers(&snapshot, &hold.missing, &victims), "victims do not make the room");
            for skip in 0..victims.len() {
                let others: Vec<&[usize]> = victims
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != skip)
                    .map(|(_, v)| *v)
                    .collect();
                prop_assert!(!covers(&snapshot, &hold.missing, &others), "a victim could be spared");
            }
        }
        // Whole workloads only: no running pod of a victim's workload is left running.
        for preemption in &decisions.preemptions {
            for (i, pod) in snapshot.running.iter().enumerate() {
                if pod.workload == preemption.victim_workload {
                    prop_assert!(preemption.pods.contains(&i), "a gang was split");
                }
            }
        }
    }

    #[test]
    fn a_guarantee_evicts_no_more_work_than_its_wait_has_cost(
        snapshot in arb_any_snapshot(),
        waits in proptest::collection::vec(0.0..1.5f64, 8),
    ) {
        // Each waiting workload submitted between now and one and a half cooldowns ago.
        let options = eager();
        let cooldown_s = options.preemption.cooldown_s;
        let mut snapshot = snapshot;
        for (i, pending) in snapshot.pending.iter_mut().enumerate() {
            pending.created_at = snapshot.now - waits[i % waits.len()] * cooldown_s;
        }
        let decisions = decide(&snapshot, &options);
        for hold in &decisions.holds {
            let for_guarantee: Vec<_> = decisions
                .preemptions
                .iter()
                .filter(|p| p.for_workload == hold.workload)
                .filter(|p| matches!(p.reason, PreemptionReason::BelowGuarantee { .. }))
                .collect();
            let pending = &snapshot.pending[hold.workload];
            let waited = snapshot.now - pending.created_at;
            if for_guarantee.is_empty() || pending.tier == Tier::Realtime || waited >= cooldown_s {
                continue;
            }
            let lost: f64 = for_guarantee.iter().flat_map(|p| &p.pods).map(|&i| work_of(&snapshot, i)).sum();
            let cost = pending_size(&snapshot, hold.workload) * waited;
            prop_assert!(lost <= cost + 1e-6, "lost {lost} GPU-s for a wait that cost {cost}");
        }
    }

    #[test]
    fn a_drain_ended_early_loses_at_most_half_what_its_hold_kept_idle(
        snapshot in arb_any_snapshot(),
        spent in 0.0..1.0f64,
        finished in 0.0..1.0f64,
    ) {
        let (next, second) = draining(&snapshot, spent, finished);
        for hold in &second.holds {
            let early = evictions_for(&second, hold.workload, |r| {
                matches!(r, PreemptionReason::IdleOutweighsLoss { .. })
            });
            let Some(first) = early.first() else { continue };
            let PreemptionReason::IdleOutweighsLoss { idle_gpu_hours, .. } = first.reason else {
                unreachable!()
            };
            let lost: f64 = early.iter().flat_map(|p| &p.pods).map(|&i| work_of(&next, i)).sum();
            prop_assert!(lost <= idle_gpu_hours * 3600.0 / 2.0 + 1e-6, "lost {lost} for {idle_gpu_hours} GPU-h idle");
            let size = pending_size(&next, hold.workload);
            prop_assert!(2.0 * hold.missing_gpu_equivalents <= size + 1e-9, "evicted for a hold {} short of {size}", hold.missing_gpu_equivalents);
            let holder = next.pending[hold.workload].queue;
            for p in &early {
                let victim = next.running[p.pods[0]].queue;
                if victim == holder {
                    // Its own queue's work only where queued after the held workload.
                    let queued = p.pods.iter().map(|&i| next.running[i].queued_at).fold(f64::INFINITY, f64::min);
                    prop_assert!(queued > next.pending[hold.workload].created_at, "own work queued at {queued} evicted for a workload queued after it");
                    continue;
                }
                // What the victim's queue holds once the cycle is carried out: its running work,
                // with what the same cycle released for it, less what it evicts.
                let running: f64 = next.running.iter().filter(|r| r.queue == victim).map(|r| next.gpu_equivalents(&r.requests)).sum();
                let released: f64 = second.releases.iter().filter(|r| next.pending[r.workload].queue == victim).map(|r| pending_size(&next, r.workload)).sum();
                let evicted: f64 = early.iter().filter(|e| next.running[e.pods[0]].queue == victim).map(|e| e.size).sum();
                prop_assert!(running + released - evicted + 1e-9 >= next.queues[victim].guaranteed, "victim's queue left below its guarantee");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// A stalled drain evicts only once its hold has left idle what it may before eviction (its
    /// idle budget, times `2 × (1 − size ÷ pool)` for a hold of more than half its pool), and
    /// loses at most four times what the hold kept idle.
    #[test]
    fn a_stalled_drain_evicts_only_past_its_share_of_the_budget_losing_at_most_four_times_its_idle(
        (snapshot, options) in prop_oneof![
            arb_any_snapshot().prop_map(|s| (s, eager())),
            arb_small_pool_snapshot().prop_map(|s| (s, drain_only())),
        ],
        spent in 0.0..1.5f64,
        finished in 0.0..1.0f64,
    ) {
        let (next, second) = draining_with(&options, &snapshot, spent, finished);
        for hold in &second.holds {
            let stalled = evictions_for(&second, hold.workload, |r| {
                matches!(r, PreemptionReason::StalledDrain { .. })
            });
            let Some(first) = stalled.first() else { continue };
            let PreemptionReason::StalledDrain { idle_gpu_hours, budget_gpu_hours } = first.reason else {
                unreachable!()
            };
            let size = pending_size(&next, hold.workload);
            let pool: f64 = next
                .nodes
                .iter()
                .filter(|n| n.pool == hold.pool)
                .map(|n| next.gpu_equivalents(&n.allocatable))
                .sum();
            let share = (2.0 * (1.0 - size / pool)).clamp(0.0, 1.0);
            let expected = size * DRAINING_IDLE_LIMIT_S * share;
            prop_assert!((budget_gpu_hours * 3600.0 - expected).abs() < 1e-6 * expected.max(1.0), "budget {budget_gpu_hours} GPU-h, expected {expected} GPU-s");
            prop_assert!(idle_gpu_hours * 3600.0 + 1e-6 >= expected, "evicted at {idle_gpu_hours} GPU-h idle, before {expected} GPU-s");
            let lost: f64 = stalled.iter().flat_map(|p| &p.pods).map(|&i| work_of(&next, i)).sum();
            prop_assert!(lost <= 4.0 * idle_gpu_hours * 3600.0 + 1e-6, "lost {lost} for {idle_gpu_hours} GPU-h idle");
        }
    }
}

/// The properties above are only as good as the cases they see: the generator must produce
/// holds, preemptions, evictions undone-able in the next cycle and drains ended early often
/// enough to matter.
#[test]
fn the_generated_cases_exercise_holds_and_preemptions() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    // Enough that each kind of case turns up a score of times or more.
    const CASES: usize = 1024;
    let mut runner = TestRunner::deterministic();
    let strategy = arb_any_snapshot();
    let (mut holding, mut preempting, mut gangs, mut early, mut stalled) = (0, 0, 0, 0, 0);
    let mut below_share = 0;
    for _ in 0..CASES {
        let snapshot = strategy
            .new_tree(&mut runner)
            .expect("a snapshot")
            .current();
        let decisions = decide(&snapshot, &eager());
        holding += usize::from(!decisions.holds.is_empty());
        preempting += usize::from(!decisions.preemptions.is_empty());
        gangs += usize::from(decisions.preemptions.iter().any(|p| p.pods.len() > 1));
        below_share += usize::from(leaves_a_victims_queue_below_its_share(
            &snapshot, &decisions,
        ));
        let (_, next) = draining(&snapshot, 0.75, 0.5);
        early += usize::from(
            next.preemptions
                .iter()
                .any(|p| matches!(p.reason, PreemptionReason::IdleOutweighsLoss { .. })),
        );
    }
    let small = arb_small_pool_snapshot();
    for _ in 0..256 {
        let snapshot = small.new_tree(&mut runner).expect("a snapshot").current();
        let (_, next) = draining_with(&drain_only(), &snapshot, 0.4, 0.2);
        stalled += usize::from(
            next.preemptions
                .iter()
                .any(|p| matches!(p.reason, PreemptionReason::StalledDrain { .. })),
        );
    }
    eprintln!(
        "of {CASES} cases: {holding} hold, {preempting} preempt, {gangs} evict a gang, {early} end a drain early, \
         {below_share} leave a victim's queue below its share; \
         of 256 small pools: {stalled} end a stalled drain within the budget"
    );
    assert!(holding >= 80, "only {holding} cases hold capacity");
    assert!(preempting >= 20, "only {preempting} cases preempt");
    assert!(gangs >= 6, "only {gangs} cases evict a gang");
    assert!(early >= 8, "only {early} cases end a drain early");
    assert!(
        below_share >= 3,
        "only {below_share} cases leave a victim's queue below its share"
    );
    assert!(
        stalled >= 20,
        "only {stalled} small pools end a stalled drain within the budget"
    );
}

/// Whether a preemption for a share leaves a victim's queue below its fair share (for a starved
/// queue, taken from one that received its entitlement).
fn leaves_a_victims_queue_below_its_share(snapshot: &Snapshot, decisions: &Decisions) -> bool {
    let mut lost = vec![0.0; snapshot.queues.len()];
    for p in &decisions.preemptions {
        if matches!(p.reason, PreemptionReason::FarBelowFairShare { .. }) {
            lost[snapshot.running[p.pods[0]].queue.get()] += p.size;
        }
    }
    decisions.queues.iter().any(|q| {
        lost[q.queue.get()] > 0.0 && q.allocated - lost[q.queue.get()] < q.fair_share - 1e-9
    })
}
