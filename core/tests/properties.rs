//! Invariants of the policy, checked on random inputs.

use std::collections::BTreeMap;

use gpufair_core::admission::best_fit;
use gpufair_core::admission::{DecideOptions, Decisions, ReleaseReason, WaitReason, decide};
use gpufair_core::division::{Claim, divide};
use gpufair_core::fixtures;
use gpufair_core::index::IndexVec;
use gpufair_core::labels::{Tier, Urgency};
use gpufair_core::ledger::{QueueLedger, UsageSample, UsageSpan, stretch_samples};
use gpufair_core::params::FairShareParams;
use gpufair_core::snapshot::*;
use gpufair_core::weight::effective_weight;
use proptest::prelude::*;

mod common;
use common::arb_snapshot;

fn arb_claim() -> impl Strategy<Value = Claim> {
    (
        0.0..200.0f64,
        0.0..60.0f64,
        proptest::option::of(0.0..150.0f64),
        0.0..5.0f64,
    )
        .prop_map(|(demand, guaranteed, limit, weight)| Claim {
            demand,
            guaranteed,
            limit,
            weight,
        })
}

/// Decisions in a form that does not depend on the order of the snapshot's vectors.
fn canonical(snapshot: &Snapshot, decisions: &Decisions) -> String {
    let wl = |i: usize| snapshot.pending[i].uid.clone();
    let node = |n: NodeId| snapshot.nodes[n].name.clone();
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for r in &decisions.releases {
        let nodes: Vec<_> = r.placements.iter().map(|n| node(*n)).collect();
        let reason = match r.reason {
            ReleaseReason::Backfill { for_workload, .. } => {
                format!("backfill for {}", wl(for_workload))
            }
            ReleaseReason::Lent {
                for_workload,
                standing,
                holder_standing,
                ..
            } => format!(
                "lent by {} {standing:.9} {holder_standing:.9}",
                wl(for_workload)
            ),
            ReleaseReason::RealtimePastHold {
                for_workload,
                allocated_after,
                claim,
            } => format!(
                "realtime past the hold for {} {allocated_after:.9} {claim:.9}",
                wl(for_workload)
            ),
            other => other.to_string(),
        };
        out.insert(
            format!("release {}", wl(r.workload)),
            format!("{nodes:?} {reason}"),
        );
    }
    for h in &decisions.holds {
        let mut nodes: Vec<_> = h.nodes.iter().map(|(n, v)| (node(*n), v.clone())).collect();
        nodes.sort();
        out.insert(
            format!("hold {}", wl(h.workload)),
            format!("{nodes:?} {:.9}", h.missing_gpu_equivalents),
        );
    }
    for p in &decisions.preemptions {
        out.insert(
            format!("preempt {}", p.victim_workload),
            format!("for {} {}", wl(p.for_workload), p.reason),
        );
    }
    for w in &decisions.waiting {
        let reason = match w.reason {
            WaitReason::CapacityHeld { for_workload } => format!("held for {}", wl(for_workload)),
            other => other.to_string(),
        };
        out.insert(format!("wait {}", wl(w.workload)), reason);
    }
    for q in &decisions.queues {
        out.insert(
            format!("queue {}", snapshot.queues[q.queue].name),
            format!(
                "{:.9} {:.9} {:.9} {:.9} {:.9}",
                q.entitled, q.fair_share, q.effective_weight, q.allocated, q.allocated_after
            ),
        );
    }
    format!("{out:#?}")
}

/// Reorders every vector of the snapshot by `seed`, remapping indices.
/// Full 8-GPU nodes, each running one or two workloads of queue "batch" that started long ago;
/// queue "train", owed 8 GPUs, waits with one 8-GPU pod; a random set of the running workloads
/// has had its eviction refused.
fn refusal_case() -> impl Strategy<Value = (Snapshot, Vec<String>)> {
    (proptest::collection::vec(any::<bool>(), 1..5), any::<u64>()).prop_map(
        |(split, refused_bits)| {
            let queue = |name: &str, guaranteed: f64| QueueState {
                shares: LedgerShares {
                    fair_share: 0.5,
                    usage_share: 0.5,
                    decayed_capacity: 1.0,
                    recent_entitled: 0.0,
                },
                ..fixtures::queue(name, 1.0, guaranteed)
            };
            let mut running = Vec::new();
            for (node, &halves) in split.iter().enumerate() {
                let parts: &[u32] = if halves { &[4, 4] } else { &[8] };
                for (i, &gpus) in parts.iter().enumerate() {
                    running.push(fixtures::running(
                        &format!("batch-{node}-{i}"),
                        0,
                        node,
                        gpus,
                        0.0,
                    ));
                }
            }
            let refused = running
                .iter()
                .enumerate()
                .filter(|(i, _)| refused_bits >> (i % 64) & 1 == 1)
                .map(|(_, r)| r.workload.clone())
                .collect();
            let nodes: Vec<Node> = (0..split.len())
                .map(|i| fixtures::node(&format!("node-{i}"), 8, 0))
                .collect();
            let snapshot = Snapshot {
                now: 100_000.0,
                queues: vec![queue("batch", 0.0), queue("train", 8.0)].into(),
                running,
                pending: vec![fixtures::pending("train-8", 1, &[8])],
                ..fixtures::one_gpu_pool("default", nodes)
            };
            (snapshot, refused)
        },
    )
}

fn shuffled(snapshot: &Snapshot, seed: u64) -> Snapshot {
    fn permutation(len: usize, seed: u64) -> Vec<usize> {
        let mut keys: Vec<(u64, usize)> = (0..len)
            .map(|i| {
                (
                    (i as u64 + 1).wrapping_mul(seed | 1).rotate_left(17) ^ seed,
                    i,
                )
            })
            .collect();
        keys.sort();
        keys.into_iter().map(|(_, i)| i).collect()
    }
    let inverse = |perm: &[usize]| {
        let mut inv = vec![0; perm.len()];
        for (new, old) in perm.iter().enumerate() {
            inv[*old] = new;
        }
        inv
    };
    let pools = permutation(snapshot.pools.len(), seed);
    let nodes = permutation(snapshot.nodes.len(), seed.rotate_left(7));
    let queues = permutation(snapshot.queues.len(), seed.rotate_left(13));
    let running = permutation(snapshot.running.len(), seed.rotate_left(19));
    let pending = permutation(snapshot.pending.len(), seed.rotate_left(23));
    let (pool_of, node_of, queue_of) = (inverse(&pools), inverse(&nodes), inverse(&queues));
    Snapshot {
        now: snapshot.now,
        resources: snapshot.resources.clone(),
        pools: pools
            .iter()
            .map(|&p| snapshot.pools[PoolId::new(p)].clone())
            .collect(),
        nodes: nodes
            .iter()
            .map(|&n| {
                let node = &snapshot.nodes[NodeId::new(n)];
                Node {
                    pool: PoolId::new(pool_of[node.pool.get()]),
                    ..node.clone()
                }
            })
            .collect(),
        queues: queues
            .iter()
            .map(|&q| {
                let queue = &snapshot.queues[QueueId::new(q)];
                QueueState {
                    pool: PoolId::new(pool_of[queue.pool.get()]),
                    ..queue.clone()
                }
            })
            .collect(),
        running: running
            .iter()
            .map(|&r| {
                let pod = &snapshot.running[r];
                RunningPod {
                    queue: QueueId::new(queue_of[pod.queue.get()]),
                    node: NodeId::new(node_of[pod.node.get()]),
                    ..pod.clone()
                }
            })
            .collect(),
        pending: pending
            .iter()
            .map(|&w| PendingWorkload {
                queue: QueueId::new(queue_of[snapshot.pending[w].queue.get()]),
                ..snapshot.pending[w].clone()
            })
            .collect(),
        recent_preemptions: snapshot.recent_preemptions.clone(),
        previous_holds: snapshot
            .previous_holds
            .iter()
            .map(|h| PreviousHold {
                workload: h.workload.clone(),
                nodes: h
                    .nodes
                    .iter()
                    .map(|&n| NodeId::new(node_of[n.get()]))
                    .collect(),
                ..h.clone()
            })
            .collect(),
        refused_victims: snapshot.refused_victims.clone(),
        backfill: Vec::new(),
        given_up_holds: snapshot.given_up_holds.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn releases_never_exceed_free_capacity_on_any_node(snapshot in arb_snapshot()) {
        let decisions = decide(&snapshot, &DecideOptions::default());
        let mut used: IndexVec<NodeId, Vec<u32>> = snapshot.nodes.iter().map(|n| vec![0; n.free.len()]).collect();
        for release in &decisions.releases {
            let workload = &snapshot.pending[release.workload];
            prop_assert_eq!(release.placements.len(), workload.pods.len(), "a gang must be released whole");
            prop_assert!(workload.pods.len() as u32 >= workload.min_member);
            for (pod, node) in workload.pods.iter().zip(&release.placements) {
                prop_assert_eq!(snapshot.nodes[*node].pool, snapshot.queues[workload.queue].pool);
                for (r, count) in pod.requests.iter().enumerate() {
                    used[*node][r] += count;
                }
            }
        }
        for (node, used) in snapshot.nodes.iter().zip(&used) {
            for (r, u) in used.iter().enumerate() {
                prop_assert!(*u <= node.free[r], "{} overcommitted", node.name);
            }
        }
    }

    #[test]
    fn a_refused_victim_is_never_chosen_and_another_node_is_tried(
        (snapshot, refused) in refusal_case()
    ) {
        let mut snapshot = snapshot;
        snapshot.refused_victims = refused;
        let decisions = decide(&snapshot, &DecideOptions::default());
        for p in &decisions.preemptions {
            prop_assert!(!snapshot.refused_victims.contains(&p.victim_workload), "{} was refused", p.victim_workload);
        }
        // A node whose every workload may still be evicted is chosen over refused ones.
        let drainable = snapshot.nodes.indices().any(|n| {
            snapshot.running.iter().filter(|r| r.node == n).all(|r| !snapshot.refused_victims.contains(&r.workload))
        });
        prop_assert_eq!(!decisions.preemptions.is_empty(), drainable);
    }

    #[test]
    fn leftover_capacity_is_explained(snapshot in arb_snapshot()) {
        // Work conservation except for held capacity: a workload left waiting for lack of room
        // really has no room in what is left after releases and holds.
        let decisions = decide(&snapshot, &DecideOptions::default());
        let mut free: IndexVec<NodeId, Vec<u32>> = snapshot.nodes.iter().map(|n| n.free.clone()).collect();
        for release in &decisions.releases {
            for (pod, node) in snapshot.pending[release.workload].pods.iter().zip(&release.placements) {
                for (r, count) in pod.requests.iter().enumerate() {
                    free[*node][r] -= count;
                }
            }
        }
        // Backfill may have taken part of what was held: what is held and still free is what
        // ordinary workloads may not use.
        let mut usable = free.clone();
        for hold in &decisions.holds {
            for (node, amounts) in &hold.nodes {
                for (r, count) in amounts.iter().enumerate() {
                    usable[*node][r] = usable[*node][r].saturating_sub(*count);
                }
            }
        }
        let weights: Vec<f64> = snapshot.resources.iter().map(|r| r.gpu_equivalents).collect();
        for waiting in &decisions.waiting {
            let workload = &snapshot.pending[waiting.workload];
            let pool = snapshot.queues[workload.queue].pool;
            let candidates: Vec<NodeId> = snapshot.nodes.indices().filter(|&n| snapshot.nodes[n].pool == pool).collect();
            let pods: Vec<&[u32]> = workload.pods.iter().map(|p| p.requests.as_slice()).collect();
            match waiting.reason {
                WaitReason::NoFit | WaitReason::Holding | WaitReason::NeverFits => {
                    prop_assert!(best_fit(&candidates, |n| usable[n].as_slice(), &pods, &weights).is_none(), "{} could fit", workload.uid);
                }
                WaitReason::CapacityHeld { for_workload } => {
                    // It fitted in held capacity when it was considered; later releases may have
                    // taken the rest, but it never fits in what is not held.
                    prop_assert!(best_fit(&candidates, |n| usable[n].as_slice(), &pods, &weights).is_none());
                    prop_assert!(decisions.holds.iter().any(|h| h.workload == for_workload && h.pool == pool));
                }
                WaitReason::HoldGivenUp { blockers } => {
                    // Refused a hold only for what blocked its last one, with no room elsewhere.
                    prop_assert!(best_fit(&candidates, |n| usable[n].as_slice(), &pods, &weights).is_none(), "{} could fit", workload.uid);
                    let given_up = snapshot.given_up_holds.iter().find(|g| g.workload == workload.uid);
                    prop_assert!(given_up.is_some_and(|g| g.blockers.len() == blockers as usize && blockers > 0));
                }
                WaitReason::GivenUpTooOften { spent_gpu_s, allowed_gpu_s, resumes_in_s } => {
                    // Refused a hold only while its given-up holds have spent more than allowed,
                    // with no room for it.
                    prop_assert!(best_fit(&candidates, |n| usable[n].as_slice(), &pods, &weights).is_none(), "{} could fit", workload.uid);
                    let given_up = snapshot.given_up_holds.iter().find(|g| g.workload == workload.uid);
                    prop_assert!(given_up.is_some_and(|g| g.spent_gpu_s == spent_gpu_s));
                    prop_assert!(spent_gpu_s > allowed_gpu_s && resumes_in_s > 0.0 && resumes_in_s.is_finite());
                }
                WaitReason::GangIncomplete { present, min_member } => prop_assert!(present < min_member),
                WaitReason::QueueLimit { .. } => prop_assert!(snapshot.queues[workload.queue].limit.is_some()),
                WaitReason::NotEarned { needed, earned, eta_s } => {
                    prop_assert!(needed > earned);
                    // An estimate is a time to come, and given only while the queue runs less
                    // than it is entitled to (what it is owed grows only then), or is short of
                    // its entitlement over the window (the workload then earns its hold by
                    // waiting).
                    if let Some(eta) = eta_s {
                        prop_assert!(eta.is_finite() && eta >= 0.0, "eta {eta}");
                        let outcome = &decisions.queues[workload.queue];
                        let short = snapshot.queues[workload.queue].shares.shortfall() > 0.0;
                        prop_assert!(outcome.entitled > outcome.allocated || short, "{outcome:?}");
                    }
                }
                WaitReason::BeyondGuarantees { needed, available } => prop_assert!(needed > available),
                WaitReason::RecentlyPreempted { at, ago_s, resumes_in_s } => {
                    prop_assert_eq!(snapshot.queues[workload.queue].last_evicted_at, Some(at));
                    prop_assert!(ago_s >= 0.0 && resumes_in_s >= 0.0);
                }
            }
        }
        prop_assert_eq!(decisions.releases.len() + decisions.waiting.len(), snapshot.pending.len());
        // At most one hold for a queue below its guarantee and one earned hold per pool.
        prop_assert!(decisions.holds.len() <= 2 * snapshot.pools.len());
    }

    #[test]
    fn no_gpu_idles_while_work_that_fits_waits(snapshot in arb_snapshot()) {
        // Work conservation: after a cycle, no waiting workload that may start (its gang is
        // complete, its queue is not at its limit nor cooling down after an eviction) has a
        // placement in what is still free outside holds. Held capacity included for work of
        // the backfill tier, and with `holdBackfill` for other work too: it goes to backfill,
        // unless its hold evicts this cycle. Only a held workload itself waits for its own
        // nodes.
        for backfill_held in [false, true] {
            let mut options = DecideOptions::default();
            options.fairshare.hold_backfill = backfill_held;
            let decisions = decide(&snapshot, &options);
            let mut free: IndexVec<NodeId, Vec<u32>> = snapshot.nodes.iter().map(|n| n.free.clone()).collect();
            for release in &decisions.releases {
                for (pod, node) in snapshot.pending[release.workload].pods.iter().zip(&release.placements) {
                    for (r, count) in pod.requests.iter().enumerate() {
                        free[*node][r] -= count;
                    }
                }
            }
            // Held capacity goes to backfill (the backfill tier's work, and with `holdBackfill`
            // other work that keeps its queue within its share), except where its hold evicts
            // this cycle: what it holds is used as soon as its victims have left, so backfill
            // there would only be evicted next (README, "Held capacity is not gambled").
            let mut unheld = free.clone();
            for hold in &decisions.holds {
                let evicts = decisions.preemptions.iter().any(|p| p.for_workload == hold.workload);
                for (node, amounts) in &hold.nodes {
                    for (r, held) in amounts.iter().enumerate() {
                        unheld[*node][r] = unheld[*node][r].saturating_sub(*held);
                        if evicts {
                            free[*node][r] = free[*node][r].saturating_sub(*held);
                        }
                    }
                }
            }
            let weights: Vec<f64> = snapshot.resources.iter().map(|r| r.gpu_equivalents).collect();
            for waiting in &decisions.waiting {
                let workload = &snapshot.pending[waiting.workload];
                let queue = &snapshot.queues[workload.queue];
                let size: f64 = workload.pods.iter().map(|p| snapshot.gpu_equivalents(&p.requests)).sum();
                let after = decisions.queues[workload.queue].allocated_after + size;
                let may_start = match waiting.reason {
                    WaitReason::GangIncomplete { .. }
                    | WaitReason::RecentlyPreempted { .. }
                    | WaitReason::QueueLimit { .. }
                    | WaitReason::Holding => false,
                    _ => queue.limit.is_none_or(|l| after <= l + 1e-9),
                };
                if !may_start {
                    continue;
                }
                let candidates: Vec<NodeId> = snapshot.nodes.indices().filter(|&n| snapshot.nodes[n].pool == queue.pool).collect();
                let pods: Vec<&[u32]> = workload.pods.iter().map(|p| p.requests.as_slice()).collect();
                // Its queue's share is at least its fair share, so with `holdBackfill` work within
                // both that and its entitlement may take held capacity, and the backfill tier's
                // always where its queue sets no `minRunTime`; other work only what holds leave.
                let outcome = &decisions.queues[workload.queue];
                let within_share = after <= outcome.entitled.min(outcome.fair_share) + 1e-9;
                let gap_filling = workload.tier == Tier::Backfill && queue.min_run_time_s <= 0.0;
                let room = if gap_filling || (backfill_held && within_share) { &free } else { &unheld };
                prop_assert!(
                    best_fit(&candidates, |n| room[n].as_slice(), &pods, &weights).is_none(),
                    "{} waits ({}) but fits what is left free (holdBackfill {})",
                    workload.uid, waiting.reason, backfill_held
                );
            }
        }
    }

    #[test]
    fn decisions_do_not_depend_on_input_order(snapshot in arb_snapshot(), seed in any::<u64>()) {
        let options = DecideOptions::default();
        let reordered = shuffled(&snapshot, seed);
        prop_assert_eq!(canonical(&snapshot, &decide(&snapshot, &options)), canonical(&reordered, &decide(&reordered, &options)));
    }

    #[test]
    fn no_queue_is_entitled_to_capacity_no_work_can_use(snapshot in arb_snapshot()) {
        let d = decide(&snapshot, &DecideOptions::default());
        let weights: Vec<f64> = snapshot.resources.iter().map(|r| r.gpu_equivalents).collect();
        let amount = |v: &[u32], kind: usize| f64::from(v.get(kind).copied().unwrap_or(0)) * weights[kind];
        for pool in snapshot.pools.indices() {
            let in_pool = |q: QueueId| snapshot.queues.get(q).is_some_and(|s| s.pool == pool);
            let mut usable = 0.0;
            let mut demand_total = 0.0;
            let mut capped_total = 0.0;
            for kind in 0..weights.len() {
                let offered: f64 = snapshot.nodes.iter().filter(|n| n.pool == pool).map(|n| amount(&n.allocatable, kind)).sum();
                let running: f64 = snapshot.running.iter()
                    .filter(|p| in_pool(p.queue) && snapshot.nodes.contains(p.node))
                    .map(|p| amount(&p.requests, kind)).sum();
                let pending: f64 = snapshot.pending.iter()
                    .filter(|w| in_pool(w.queue))
                    .flat_map(|w| &w.pods)
                    .map(|p| amount(&p.requests, kind)).sum();
                usable += offered.min(running + pending);
                demand_total += running + pending;
            }
            let entitled: f64 = d.queues.iter().filter(|o| in_pool(o.queue)).map(|o| {
                capped_total += o.demand;
                o.entitled
            }).sum();
            // Never more than the work in the pool can use, kind by kind ...
            prop_assert!(entitled <= usable + 1e-6, "pool {pool:?}: entitled {entitled} > usable {usable}");
            // ... and all of that, as far as the queues' limits let them take it.
            let expected = usable.min(capped_total).min(demand_total);
            prop_assert!(entitled >= expected - 1e-6, "pool {pool:?}: entitled {entitled} < {expected}");
        }
    }

    #[test]
    fn division_honours_guarantees_and_conserves_work(capacity in 0.0..300.0f64, claims in proptest::collection::vec(arb_claim(), 0..12)) {
        let shares = divide(capacity, &claims);
        let caps: Vec<f64> = claims.iter().map(Claim::cap).collect();
        let guaranteed: f64 = claims.iter().zip(&caps).map(|(c, cap)| c.guaranteed.min(*cap)).sum();
        for ((share, cap), claim) in shares.iter().zip(&caps).zip(&claims) {
            prop_assert!(share.is_finite() && *share >= -1e-9 && *share <= cap + 1e-9);
            if guaranteed <= capacity {
                prop_assert!(*share >= claim.guaranteed.min(*cap) - 1e-9, "guarantee not met");
            }
        }
        let total: f64 = shares.iter().sum();
        let wanted: f64 = caps.iter().sum();
        prop_assert!((total - capacity.min(wanted)).abs() < 1e-6 * (1.0 + capacity), "{total} vs min({capacity}, {wanted})");
    }

    #[test]
    fn effective_weight_never_below_floor(base in 0.001..100.0f64, fair in -1.0..2.0f64, usage in -1.0..2.0f64, k in 0.0..50.0f64, floor in 0.0..1.0f64) {
        let params = FairShareParams { k, min_weight: floor, ..FairShareParams::default() };
        let w = effective_weight(base, LedgerShares { fair_share: fair, usage_share: usage, decayed_capacity: 1.0, recent_entitled: 0.0 }, 0.0, &params);
        prop_assert!(w.is_finite() && w >= floor * base - 1e-12);
    }

    #[test]
    fn ledger_agrees_whether_sampled_each_minute_or_every_two_hours(
        rates in proptest::collection::vec((0.0..100.0f64, 0.0..100.0f64), 1..60),
        decay in 0.5..1.0f64,
        decay_hours in 1.0..96.0f64,
        start in 0.0..1e6f64,
    ) {
        let params = FairShareParams { decay, decay_period_s: decay_hours * 3600.0, ..FairShareParams::default() };
        let mut minutely = QueueLedger::new(start, &params);
        let mut two_hourly = QueueLedger::new(start, &params);
        let mut t = start;
        for (allocated, entitled) in &rates {
            let sample = UsageSample { allocated: *allocated, utilized: *allocated, entitled: *entitled, capacity: 100.0 };
            for minute in 1..=120 {
                minutely.record(&params, t + f64::from(minute) * 60.0, sample);
            }
            t += 7200.0;
            two_hourly.record(&params, t, sample);
        }
        let a = minutely.decayed_totals(&params, t);
        let b = two_hourly.decayed_totals(&params, t);
        for (x, y) in a.iter().zip(&b) {
            let scale = x.abs().max(y.abs());
            prop_assert!(scale == 0.0 || (x - y).abs() / scale <= 1e-9, "{x} vs {y}");
        }
    }

    #[test]
    fn a_stretch_charges_exactly_each_spans_overlap_with_it(
        spans in proptest::collection::vec(
            (-50.0..150.0f64, proptest::option::of(0.0..200.0f64), 0.0..8.0f64),
            0..40,
        ),
        from in 0.0..50.0f64,
        length in 0.0..100.0f64,
    ) {
        let until = from + length;
        let spans: Vec<UsageSpan> = spans
            .iter()
            .map(|&(start, duration, allocated)| UsageSpan {
                start,
                end: duration.map(|d| start + d),
                allocated,
                utilized: allocated / 2.0,
            })
            .collect();
        let samples = stretch_samples(from, until, &spans, 1.0, 64.0);
        let mut at = from;
        let mut charged = 0.0;
        for (t, sample) in &samples {
            prop_assert!(*t > at || (*t == at && length == 0.0), "times move forward");
            prop_assert!(sample.allocated >= -1e-9 && sample.utilized >= -1e-9);
            charged += sample.allocated * (t - at);
            at = *t;
        }
        prop_assert!(samples.is_empty() || at == until, "the stretch is covered to its end");
        let expected: f64 = spans
            .iter()
            .map(|s| {
                let end = s.end.unwrap_or(until).min(until);
                (end - s.start.max(from)).max(0.0) * s.allocated
            })
            .sum();
        prop_assert!((charged - expected).abs() <= 1e-6 * expected.max(1.0), "{charged} vs {expected}");
    }
}

#[test]
fn bad_input_gives_defined_results() {
    let snapshot = Snapshot {
        now: 0.0,
        resources: vec![ResourceKind {
            name: "nvidia.com/gpu".into(),
            gpu_equivalents: f64::NAN,
        }],
        pools: vec![Pool {
            name: "empty".into(),
        }]
        .into(),
        nodes: vec![Node {
            name: "orphan".into(),
            pool: PoolId::new(7),
            allocatable: vec![8],
            free: vec![8],
        }]
        .into(),
        queues: vec![
            QueueState {
                name: "nan".into(),
                pool: PoolId::new(0),
                weight: f64::NAN,
                guaranteed: 1e9,
                limit: Some(-1.0),
                min_run_time_s: 0.0,
                shares: LedgerShares {
                    fair_share: f64::NAN,
                    usage_share: f64::INFINITY,
                    decayed_capacity: 1.0,
                    recent_entitled: 0.0,
                },
                last_preemption_at: None,
                last_evicted_at: None,
            },
            QueueState {
                name: "lost".into(),
                pool: PoolId::new(3),
                weight: -2.0,
                guaranteed: -5.0,
                limit: None,
                min_run_time_s: 0.0,
                shares: LedgerShares::NEUTRAL,
                last_preemption_at: None,
                last_evicted_at: None,
            },
        ]
        .into(),
        running: vec![RunningPod {
            uid: "r".into(),
            workload: "r".into(),
            queue: QueueId::new(9),
            node: NodeId::new(9),
            requests: vec![1],
            tier: Tier::Elastic,
            started_at: 0.0,
            queued_at: 0.0,
        }],
        pending: vec![
            PendingWorkload {
                uid: "a".into(),
                queue: QueueId::new(0),
                tier: Tier::Elastic,
                deadline: Some(f64::NAN),
                urgency: Urgency::Low,
                user_tier: gpufair_core::labels::UserTier::Standard,
                created_at: f64::NAN,
                min_member: 1,
                pods: vec![PodRequest {
                    requests: vec![1, 5, 9],
                }],
            },
            PendingWorkload {
                uid: "b".into(),
                queue: QueueId::new(5),
                tier: Tier::Elastic,
                deadline: None,
                urgency: Urgency::Low,
                user_tier: gpufair_core::labels::UserTier::Standard,
                created_at: 0.0,
                min_member: 1,
                pods: vec![],
            },
        ],
        recent_preemptions: vec![],
        previous_holds: Vec::new(),
        refused_victims: Vec::new(),
        backfill: Vec::new(),
        given_up_holds: Vec::new(),
    };
    let decisions = decide(&snapshot, &DecideOptions::default());
    assert!(decisions.releases.is_empty());
    for q in &decisions.queues {
        for value in [
            q.entitled,
            q.fair_share,
            q.effective_weight,
            q.allocated,
            q.demand,
        ] {
            assert!(value.is_finite(), "{q:?}");
        }
    }
}
