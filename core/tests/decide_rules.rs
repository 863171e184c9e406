//! The admission rules, one small cluster at a time.

use gpufair_core::admission::{
    DecideOptions, Decisions, GivenUp, HoldCost, PreemptionReason, ReleaseReason, WaitReason,
    decide,
};
use gpufair_core::fixtures::{node, one_gpu_pool, pending as job, queue, running};
use gpufair_core::labels::Tier;
use gpufair_core::params::PreemptionParams;
use gpufair_core::snapshot::*;

fn snapshot(
    nodes: Vec<Node>,
    queues: Vec<QueueState>,
    running: Vec<RunningPod>,
    pending: Vec<PendingWorkload>,
) -> Snapshot {
    Snapshot {
        queues: queues.into(),
        running,
        pending,
        ..one_gpu_pool("default", nodes)
    }
}

fn no_preemption() -> DecideOptions {
    DecideOptions {
        preemption: PreemptionParams {
            enabled: false,
            ..PreemptionParams::default()
        },
        ..DecideOptions::default()
    }
}

fn wait_reason(
    decisions: &gpufair_core::admission::Decisions,
    workload: usize,
) -> Option<WaitReason> {
    decisions
        .waiting
        .iter()
        .find(|w| w.workload == workload)
        .map(|w| w.reason)
}

/// A node of 6 whole GPUs and 7 MIG 1g.10gb instances (one GPU's worth), all in use by two
/// queues that want whole GPUs only, with more of that waiting.
fn whole_gpu_work_beside_idle_slices(slices_wanted: u32) -> Snapshot {
    let mut s = snapshot(
        vec![Node {
            name: "mixed".into(),
            pool: PoolId::new(0),
            allocatable: vec![6, 7],
            free: vec![0, 7 - slices_wanted],
        }],
        vec![queue("a", 1.0, 0.0), queue("b", 1.0, 0.0)],
        vec![
            running("a-run", 0, 0, 4, 0.0),
            running("b-run", 1, 0, 2, 0.0),
        ],
        vec![job("a-next", 0, &[2]), job("b-next", 1, &[4])],
    );
    s.resources.push(ResourceKind {
        name: "nvidia.com/mig-1g.10gb".into(),
        gpu_equivalents: 1.0 / 7.0,
    });
    if slices_wanted > 0 {
        s.running.push(RunningPod {
            requests: vec![0, slices_wanted],
            ..running("b-slices", 1, 0, 0, 0.0)
        });
    }
    s
}

#[test]
fn queues_are_entitled_only_to_capacity_their_work_can_use() {
    // Nobody asks for the slices: the two queues divide the six whole GPUs, not seven.
    let d = decide(&whole_gpu_work_beside_idle_slices(0), &no_preemption());
    let entitled: Vec<f64> = d.queues.iter().map(|q| q.entitled).collect();
    assert!(
        entitled.iter().all(|e| (e - 3.0).abs() < 1e-9),
        "{entitled:?}"
    );
    // Slices in use count: b's three instances add 3/7 of a GPU to what is divided.
    let d = decide(&whole_gpu_work_beside_idle_slices(3), &no_preemption());
    let total: f64 = d.queues.iter().map(|q| q.entitled).sum();
    assert!((total - (6.0 + 3.0 / 7.0)).abs() < 1e-9, "{total}");
}

#[test]
fn a_pod_needs_one_node_with_room_not_free_gpus_summed_over_the_pool() {
    let s = snapshot(
        vec![node("a", 8, 2), node("b", 8, 2)],
        vec![queue("q", 1.0, 0.0)],
        vec![],
        vec![job("big", 0, &[4])],
    );
    let d = decide(&s, &no_preemption());
    assert!(d.releases.is_empty());
    assert!(matches!(
        wait_reason(&d, 0),
        Some(WaitReason::Holding | WaitReason::NoFit)
    ));
}

#[test]
fn capacity_is_held_for_the_most_deserving_head_and_others_use_only_the_rest() {
    // "llm" has nothing and wants 8 GPUs on one node; "vision" is over its share with small jobs.
    let nodes = vec![node("a", 8, 3), node("b", 8, 1)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![running("v-a", 1, 0, 5, 0.0), running("v-b", 1, 1, 7, 0.0)];
    let pending = vec![
        job("llm-8", 0, &[8]),
        job("v-1", 1, &[1]),
        job("v-2", 1, &[1]),
    ];
    let d = decide(&snapshot(nodes, queues, busy, pending), &no_preemption());
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.holds[0].workload, 0);
    assert_eq!(
        d.holds[0].nodes,
        vec![(NodeId::new(0), vec![3])],
        "node a is the most drained"
    );
    assert_eq!(wait_reason(&d, 0), Some(WaitReason::Holding));
    // One small job fits on node b's free GPU; the other fits only in held capacity. With
    // preemption off, backfill there could never be made to leave, so the capacity stays held.
    assert_eq!(d.releases.len(), 1);
    assert_eq!(d.releases[0].placements, vec![NodeId::new(1)]);
    assert_eq!(
        wait_reason(&d, 2),
        Some(WaitReason::CapacityHeld { for_workload: 0 })
    );
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 3.0);
    // With preemption on, the capacity stays held too by default: backfill there would be
    // evicted, its work lost, once node a has drained. Even with `holdBackfill`, vision, already
    // past what it is entitled to, gets none of it (see the test after `hold_backfill`).
    let s = snapshot(
        vec![node("a", 8, 3), node("b", 8, 1)],
        vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)],
        vec![
            running("v-a", 1, 0, 5, 9_990.0),
            running("v-b", 1, 1, 7, 9_990.0),
        ],
        vec![
            job("llm-8", 0, &[8]),
            job("v-1", 1, &[1]),
            job("v-2", 1, &[1]),
        ],
    );
    for options in [DecideOptions::default(), hold_backfill()] {
        let d = decide(&s, &options);
        assert!(d.preemptions.is_empty(), "the running jobs are too young");
        assert_eq!(d.releases.len(), 1);
        assert_eq!(
            wait_reason(&d, 2),
            Some(WaitReason::CapacityHeld { for_workload: 0 })
        );
        assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 3.0);
    }
}

/// A gang of pods smaller than a node is held on free room wherever the pool has it, not only
/// on the nodes it would fill once drained: counted so, it misses only what free room cannot
/// seat, and a freed half node elsewhere is not handed to others while it waits.
#[test]
fn a_gang_of_pods_smaller_than_a_node_is_held_on_free_room_first() {
    // Three 4-GPU nodes, each partly taken by "small": a has 3 GPUs free, b and c 2 each.
    let nodes = vec![node("a", 4, 3), node("b", 4, 2), node("c", 4, 2)];
    let queues = vec![
        queue("big", 1.0, 8.0),
        queue("small", 1.0, 0.0),
        queue("other", 1.0, 0.0),
    ];
    let busy = vec![
        running("s-a", 1, 0, 1, 0.0),
        running("s-b", 1, 1, 2, 0.0),
        running("s-c", 1, 2, 2, 0.0),
    ];
    // "big" waits with four pods of 2 GPUs; free room seats three of them.
    let pending = vec![job("gang", 0, &[2, 2, 2, 2]), job("o-2", 2, &[2])];
    let d = decide(&snapshot(nodes, queues, busy, pending), &no_preemption());
    let gang = d
        .holds
        .iter()
        .find(|h| h.workload == 0)
        .expect("the gang is held for");
    let mut held = gang.nodes.clone();
    held.sort();
    assert_eq!(
        held,
        vec![
            (NodeId::new(0), vec![3]),
            (NodeId::new(1), vec![2]),
            (NodeId::new(2), vec![2]),
        ],
        "every node's free room is held"
    );
    assert_eq!(
        gang.missing_gpu_equivalents, 1.0,
        "only s-a's GPU has to drain: the fourth pod shares node a with the first"
    );
    // Node c's free half is the gang's: "other"'s pod, which fits only there, does not start.
    assert!(d.releases.is_empty(), "{:?}", d.releases);
    assert!(wait_reason(&d, 1).is_some());
}

/// Default options with `holdBackfill` on.
fn hold_backfill() -> DecideOptions {
    let mut options = DecideOptions::default();
    options.fairshare.hold_backfill = true;
    options
}

/// Queue `llm` (weight 2, entitled to all 8 GPUs it wants) waits with `llm-8` for node a, where
/// vision's young 5-GPU job leaves 3 GPUs free; vision's 8-GPU job fills node b. `queues` come
/// after llm, `waiting` after llm-8.
fn node_a_held_for_llm(queues: Vec<QueueState>, waiting: Vec<PendingWorkload>) -> Snapshot {
    let mut pending = vec![job("llm-8", 0, &[8])];
    pending.extend(waiting);
    snapshot(
        vec![node("a", 8, 3), node("b", 8, 0)],
        std::iter::once(queue("llm", 2.0, 0.0))
            .chain(queues)
            .collect(),
        vec![
            running("v-a", 1, 0, 5, 9_990.0),
            running("v-b", 1, 1, 8, 9_990.0),
        ],
        pending,
    )
}

#[test]
fn backfill_in_held_capacity_goes_only_to_work_that_keeps_its_queue_within_its_share() {
    // Node a is held for llm-8; vision, past what it is entitled to, waits with two 1-GPU jobs;
    // audio, entitled to its one, waits with it.
    let s = node_a_held_for_llm(
        vec![queue("vision", 1.0, 0.0), queue("audio", 1.0, 0.0)],
        vec![
            job("v-1", 1, &[1]),
            job("v-2", 1, &[1]),
            job("a-1", 2, &[1]),
        ],
    );
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.holds.len(), 1, "{:?}", d.holds);
    assert_eq!(d.holds[0].nodes, vec![(NodeId::new(0), vec![3])]);
    let held = |d: &Decisions| {
        d.releases
            .iter()
            .filter(|r| r.placements == vec![NodeId::new(0)])
            .map(|r| r.workload)
            .collect::<Vec<_>>()
    };
    assert!(held(&d).is_empty(), "held capacity waits by default");
    // With `holdBackfill`, audio's job runs there as backfill; vision's do not, though they
    // would fit: each would only take vision further past its entitlement.
    let d = decide(&s, &hold_backfill());
    assert!(d.preemptions.is_empty(), "the running jobs are too young");
    assert_eq!(held(&d), vec![3]);
    let audio = d.releases.iter().find(|r| r.workload == 3).unwrap();
    assert!(matches!(
        audio.reason,
        ReleaseReason::Backfill {
            for_workload: 0,
            ..
        }
    ));
    assert_eq!(d.releases.len(), 1, "{:?}", d.releases);
    // What backfill took counts against the hold's idle budget as lent: it leaves, its work
    // lost, once the node has drained otherwise, so the hold waits for it all the same.
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 2.0);
    assert_eq!(d.holds[0].cost.lent_gpu_equivalents, 1.0);
}

#[test]
fn gap_filling_work_takes_held_capacity_by_default() {
    // As above, node a is held for llm-8 with 3 GPUs free. Vision, past what it is entitled to,
    // waits with an elastic 1-GPU job and two of the backfill tier (`ai-task-type:
    // processing`), whose owners declared them gap-filling.
    let processing = |uid: &str| {
        let mut j = job(uid, 1, &[1]);
        j.tier = Tier::Backfill;
        j
    };
    let s = node_a_held_for_llm(
        vec![queue("vision", 1.0, 0.0)],
        vec![
            job("v-train", 1, &[1]),
            processing("v-proc-1"),
            processing("v-proc-2"),
        ],
    );
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.holds.len(), 1, "{:?}", d.holds);
    assert!(d.preemptions.is_empty(), "the running jobs are too young");
    // Both processing jobs run in held capacity as backfill, evicted once node a has drained
    // otherwise; the elastic job waits, as it would with nothing to fill in for.
    let mut released: Vec<usize> = d.releases.iter().map(|r| r.workload).collect();
    released.sort_unstable();
    assert_eq!(released, vec![2, 3], "{:?}", d.releases);
    for release in &d.releases {
        assert_eq!(release.placements, vec![NodeId::new(0)]);
        assert!(
            matches!(
                release.reason,
                ReleaseReason::Backfill {
                    for_workload: 0,
                    ..
                }
            ),
            "{:?}",
            release.reason
        );
    }
    assert_eq!(
        wait_reason(&d, 1),
        Some(WaitReason::CapacityHeld { for_workload: 0 })
    );
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 1.0);
    assert_eq!(d.holds[0].cost.lent_gpu_equivalents, 2.0);
    // With preemption off, nothing could make backfill leave: held capacity waits.
    let d = decide(&s, &no_preemption());
    assert!(d.releases.is_empty(), "{:?}", d.releases);
    // Nor does it go to a queue that sets `minRunTime`: backfill leaves whatever its age.
    let mut protected = s.clone();
    protected.queues[QueueId::new(1)].min_run_time_s = 3_600.0;
    let d = decide(&protected, &DecideOptions::default());
    assert!(d.releases.is_empty(), "{:?}", d.releases);
}

#[test]
fn backfill_standing_in_a_hold_counts_against_its_idle_budget() {
    // Node a is held for llm-8: vision's `v-a` (5 GPUs, old) is still to drain, and `v-fill`
    // (2 GPUs) runs there as backfill, released into the hold in an earlier cycle.
    let nodes = vec![node("a", 8, 1), node("b", 8, 0)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![
        running("v-a", 1, 0, 5, 9_990.0),
        running("v-fill", 1, 0, 2, 9_990.0),
        running("v-b", 1, 1, 8, 9_990.0),
    ];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    s.previous_holds = vec![PreviousHold {
        workload: "llm-8".into(),
        nodes: vec![NodeId::new(0)],
        at: s.now - 30.0,
        ..PreviousHold::default()
    }];
    s.backfill = vec!["v-fill".into()];
    let d = decide(&s, &hold_backfill());
    assert_eq!(d.holds.len(), 1, "{:?}", d.holds);
    assert!(d.preemptions.is_empty(), "{:?}", d.preemptions);
    // One GPU stands idle; the backfill's two are lent, and the budget counts both.
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 1.0);
    assert_eq!(d.holds[0].cost.lent_gpu_equivalents, 2.0);
    // Not listed as backfill, the same pod is one more straggler to drain: nothing is lent.
    s.backfill.clear();
    let d = decide(&s, &hold_backfill());
    assert_eq!(d.holds[0].cost.lent_gpu_equivalents, 0.0);
}

#[test]
fn backfill_leaves_once_the_held_node_has_drained_otherwise() {
    // Node a is held for llm-8; vision's old job there has ended, and only backfill is left.
    let nodes = vec![node("a", 8, 6), node("b", 8, 0)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![
        running("v-fill", 1, 0, 2, 9_990.0),
        running("v-b", 1, 1, 8, 0.0),
    ];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    s.previous_holds = vec![PreviousHold {
        workload: "llm-8".into(),
        nodes: vec![NodeId::new(0)],
        ..PreviousHold::default()
    }];
    // Not backfill: it is younger than any guard allows, so nobody is evicted.
    let d = decide(&s, &DecideOptions::default());
    assert!(d.preemptions.is_empty());
    // As backfill it leaves at once, whatever its age.
    s.backfill = vec!["v-fill".into()];
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].victim_workload, "v-fill");
    assert_eq!(d.preemptions[0].reason, PreemptionReason::Backfill);
}

/// The pending workloads whose holds `d` gave up.
fn given_up(d: &Decisions) -> Vec<usize> {
    d.given_up.iter().map(|g| g.workload).collect()
}

#[test]
fn a_hold_given_up_is_planned_around_what_blocked_it_while_that_runs() {
    // Node a: `v-a` runs 5 of 8 GPUs (3 free); node b: `v-b` runs all 8. Left to itself the
    // hold for `llm-8` takes node a, the freer one.
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![running("v-a", 1, 0, 5, 0.0), running("v-b", 1, 1, 8, 0.0)];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    let options = no_preemption();
    let held_on = |s: &Snapshot| -> Vec<Vec<usize>> {
        decide(s, &options)
            .holds
            .iter()
            .map(|h| h.nodes.iter().map(|(n, _)| n.get()).collect())
            .collect()
    };
    assert_eq!(held_on(&s), vec![vec![0]]);
    // Its last hold was given up waiting for `v-a`: while `v-a` runs, the hold drains node b.
    s.given_up_holds = vec![GivenUpHold {
        workload: "llm-8".into(),
        blockers: vec!["v-a".into()],
        ..GivenUpHold::default()
    }];
    assert_eq!(held_on(&s), vec![vec![1]]);
    // Blocked on both nodes: no hold at all, and the workload is not called one that never fits.
    s.given_up_holds[0].blockers.push("v-b".into());
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    // It is not called one that never fits, nor one with no room: it waits for its blockers.
    assert_eq!(
        wait_reason(&d, 0),
        Some(WaitReason::HoldGivenUp { blockers: 2 }),
        "{:?}",
        d.waiting
    );
    // Once `v-a` has ended, node a is as drainable as any other: other work standing there
    // (`v-c`, started since) did not block the hold given up.
    s.running.retain(|p| p.workload != "v-a");
    s.running.push(running("v-c", 1, 0, 5, s.now - 60.0));
    assert_eq!(held_on(&s), vec![vec![0]]);
}

#[test]
fn a_workload_whose_holds_were_given_up_too_often_is_held_again_once_time_catches_up() {
    // Node a: `v-a` runs 5 of 8 GPUs; node b: `v-b` runs all 8. `llm-8` would hold node a.
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let queues = vec![
        queue("llm", 2.0, 0.0),
        queue("ml", 1.0, 0.0),
        queue("vision", 1.0, 0.0),
    ];
    let busy = vec![running("v-a", 2, 0, 5, 0.0), running("v-b", 2, 1, 8, 0.0)];
    let waiting = vec![job("llm-8", 0, &[8]), job("ml-4", 1, &[4])];
    let mut s = snapshot(nodes, queues, busy, waiting);
    s.now = 1_000_000.0;
    let options = no_preemption();
    let held_for = |d: &Decisions| d.holds.iter().map(|h| h.workload).collect::<Vec<_>>();
    assert_eq!(held_for(&decide(&s, &options)), vec![0]);
    // Its holds given up after the first left 8 GPU-hours idle; the first was given up 1,000 s
    // ago, so its 16-GPU pool allows 3% × 16 × 1,000 = 480 GPU-seconds by now.
    let share = 0.03 * 16.0;
    s.given_up_holds = vec![GivenUpHold {
        workload: "llm-8".into(),
        blockers: Vec::new(),
        spent_gpu_s: 8.0 * 3_600.0,
        first_given_up_at: s.now - 1_000.0,
    }];
    let d = decide(&s, &options);
    // No hold for it: the pool's hold goes to the next most deserving workload instead.
    assert_eq!(held_for(&d), vec![1]);
    let resumes_in_s = (8.0 * 3_600.0 - share * 1_000.0) / share;
    match wait_reason(&d, 0) {
        Some(WaitReason::GivenUpTooOften {
            spent_gpu_s,
            allowed_gpu_s,
            resumes_in_s: eta,
        }) => {
            assert_eq!(spent_gpu_s, 8.0 * 3_600.0);
            assert!(
                (allowed_gpu_s - share * 1_000.0).abs() < 1e-6,
                "{allowed_gpu_s}"
            );
            assert!(
                (eta - resumes_in_s).abs() < 1e-6,
                "{eta} against {resumes_in_s}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        d.waiting
            .iter()
            .find(|w| w.workload == 0)
            .unwrap()
            .reason
            .to_string(),
        "its holds given up after the first left 8.0 GPU-hours idle, more than the 0.1 its pool allows by now; it is held again in 16 h 23 min"
    );
    // A hold it still has is not dropped for it: the rule only stops new ones.
    s.previous_holds = vec![PreviousHold {
        workload: "llm-8".into(),
        nodes: vec![NodeId::new(0)],
        cost: HoldCost {
            idle_gpu_s: 0.0,
            idle_gpu_equivalents: 3.0,
            lent_gpu_equivalents: 0.0,
            ..Default::default()
        },
        at: s.now - 30.0,
    }];
    assert_eq!(held_for(&decide(&s, &options)), vec![0]);
    s.previous_holds.clear();
    // Once time has caught up, it is held again.
    s.now += resumes_in_s - 1.0;
    assert_eq!(held_for(&decide(&s, &options)), vec![1]);
    s.now += 2.0;
    assert_eq!(held_for(&decide(&s, &options)), vec![0]);
    // What its first given-up hold spent is not counted: nothing later, no wait.
    s.given_up_holds[0].spent_gpu_s = 0.0;
    s.given_up_holds[0].first_given_up_at = s.now;
    assert_eq!(held_for(&decide(&s, &options)), vec![0]);
}

#[test]
fn a_hold_that_left_its_capacity_idle_too_long_is_given_up() {
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![running("v-a", 1, 0, 5, 0.0), running("v-b", 1, 1, 8, 0.0)];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    let options = no_preemption();
    let limit_s = options.fairshare.hold_idle_limit_s;
    // 3 GPUs idle since `at`: just under the limit of 8 GPUs × limit, the hold stands.
    let idle_for = |seconds: f64| PreviousHold {
        workload: "llm-8".into(),
        nodes: vec![NodeId::new(0)],
        cost: HoldCost {
            idle_gpu_s: 0.0,
            idle_gpu_equivalents: 3.0,
            lent_gpu_equivalents: 0.0,
            ..Default::default()
        },
        at: s.now - seconds,
    };
    s.previous_holds = vec![idle_for(0.99 * 8.0 * limit_s / 3.0)];
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert!(d.given_up.is_empty());
    assert!(d.holds[0].cost.idle_gpu_s > 0.98 * 8.0 * limit_s);
    s.previous_holds = vec![idle_for(8.0 * limit_s / 3.0)];
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    // Given up, with what stood where capacity was missing: `v-a` on node a.
    assert_eq!(
        d.given_up,
        vec![GivenUp {
            workload: 0,
            blockers: vec!["v-a".into()],
            spent_gpu_s: 8.0 * limit_s,
        }]
    );
    // Capacity lent to a more deserving queue's work counts against the budget as idle does:
    // 1 GPU idle and 2 lent for as long is given up the same.
    s.previous_holds = vec![PreviousHold {
        cost: HoldCost {
            idle_gpu_equivalents: 1.0,
            lent_gpu_equivalents: 2.0,
            ..Default::default()
        },
        ..idle_for(8.0 * limit_s / 3.0)
    }];
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    assert_eq!(given_up(&d), vec![0]);
}

/// "llm", which received `received` of its entitlement over the window (half the pool's), and
/// "vision", which ran the rest; both of weight 1.
fn llm_received_of_its_entitlement(received: f64, pool_gpus: f64) -> Vec<QueueState> {
    let shares = |fair_share: f64, usage_share: f64| LedgerShares {
        fair_share,
        usage_share,
        decayed_capacity: pool_gpus * 7.0 * 86_400.0,
        recent_entitled: 0.0,
    };
    vec![
        QueueState {
            shares: shares(0.5, 0.5 * received),
            ..queue("llm", 1.0, 0.0)
        },
        QueueState {
            shares: shares(0.5, 1.0 - 0.5 * received),
            ..queue("vision", 1.0, 0.0)
        },
    ]
}

#[test]
fn a_starved_queues_hold_whose_idle_capacity_no_waiting_work_could_use_is_not_given_up_for_it() {
    // `llm-8` is held on node a, where `v-a` still runs 5 of 8 GPUs; vision's next job needs a
    // whole node too, so nothing waiting could use node a's 3 idle GPUs. "llm" received a fifth
    // of its entitlement over the window.
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let busy = vec![running("v-a", 1, 0, 5, 0.0), running("v-b", 1, 1, 8, 0.0)];
    let waiting = vec![job("llm-8", 0, &[8]), job("v-next", 1, &[8])];
    let queues = llm_received_of_its_entitlement(0.2, 16.0);
    let mut s = snapshot(nodes, queues, busy, waiting);
    let options = no_preemption();
    let budget_s = 8.0 * options.fairshare.hold_idle_limit_s;
    // Its whole budget left idle, 3 GPUs for budget ÷ 3 seconds.
    let past_budget = PreviousHold {
        workload: "llm-8".into(),
        nodes: vec![NodeId::new(0)],
        cost: HoldCost {
            idle_gpu_equivalents: 3.0,
            ..Default::default()
        },
        at: s.now - budget_s / 3.0,
    };
    // Idle that waiting work could have used spends the budget: the hold is given up.
    s.previous_holds = vec![past_budget.clone()];
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    assert_eq!(given_up(&d), vec![0]);
    // Idle that no waiting workload could have used does not: the hold stands.
    let unwanted = PreviousHold {
        cost: HoldCost {
            unwanted_idle_gpu_equivalents: 3.0,
            ..past_budget.cost
        },
        ..past_budget.clone()
    };
    s.previous_holds = vec![unwanted.clone()];
    let d = decide(&s, &options);
    assert!(d.given_up.is_empty(), "{:?}", d.given_up);
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 3.0);
    assert_eq!(d.holds[0].cost.unwanted_idle_gpu_equivalents, 3.0);
    assert!(d.holds[0].cost.unwanted_idle_gpu_s >= 0.99 * budget_s);
    // Half of it wanted, half of it not, is not yet the budget either.
    s.previous_holds = vec![PreviousHold {
        cost: HoldCost {
            unwanted_idle_gpu_s: budget_s / 2.0,
            ..past_budget.cost
        },
        ..past_budget.clone()
    }];
    assert_eq!(given_up(&decide(&s, &options)), Vec::<usize>::new());
    // A queue that received most of its entitlement gives its hold up on the whole budget, as
    // before: in a larger pool its next hold drains other nodes.
    s.queues = llm_received_of_its_entitlement(0.8, 16.0).into();
    s.previous_holds = vec![unwanted];
    assert_eq!(given_up(&decide(&s, &options)), vec![0]);
    // A waiting 2-GPU job that node a's idle GPUs could take makes them wanted from now on:
    // the hold keeps it out (vision runs past its share), and counts them again.
    s.queues = llm_received_of_its_entitlement(0.2, 16.0).into();
    s.pending.push(job("v-small", 1, &[2]));
    s.previous_holds = vec![PreviousHold {
        at: s.now,
        ..past_budget
    }];
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 3.0);
    assert_eq!(d.holds[0].cost.unwanted_idle_gpu_equivalents, 0.0);
}

/// Queues "llm", owed a week of `fair_share` of a pool of `pool_gpus` (it ran nothing over the
/// window), "vision" and "audio", all of weight 1.
fn llm_owed_a_week_beside_vision_and_audio(fair_share: f64, pool_gpus: f64) -> Vec<QueueState> {
    let owed = LedgerShares {
        fair_share,
        usage_share: 0.0,
        decayed_capacity: pool_gpus * 7.0 * 86_400.0,
        recent_entitled: 0.0,
    };
    vec![
        QueueState {
            shares: owed,
            ..queue("llm", 1.0, 0.0)
        },
        queue("vision", 1.0, 0.0),
        queue("audio", 1.0, 0.0),
    ]
}

#[test]
fn work_of_a_queue_further_below_its_share_than_the_holder_takes_idle_held_capacity() {
    // "llm" is owed a week of half the pool, runs 2 GPUs, and holds node a's 3 free GPUs for
    // its 8-GPU job. "audio" runs nothing, so it stands further below its share than llm: its
    // 1-GPU job takes a held GPU, lent, not as backfill. "vision" is over its share: its job
    // waits for the hold.
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let queues = llm_owed_a_week_beside_vision_and_audio(0.5, 16.0);
    let busy = vec![
        running("v-a", 1, 0, 5, 0.0),
        running("v-b", 1, 1, 6, 0.0),
        running("l-b", 0, 1, 2, 0.0),
    ];
    let pending = vec![
        job("llm-8", 0, &[8]),
        job("v-1", 1, &[1]),
        job("au-1", 2, &[1]),
    ];
    let d = decide(&snapshot(nodes, queues, busy, pending), &no_preemption());
    assert_eq!(d.holds.len(), 1, "{:?}", d.holds);
    assert_eq!(d.holds[0].workload, 0);
    assert_eq!(wait_reason(&d, 0), Some(WaitReason::Holding));
    assert_eq!(d.releases.len(), 1, "{:?}", d.releases);
    assert_eq!(d.releases[0].workload, 2);
    assert_eq!(d.releases[0].placements, vec![NodeId::new(0)]);
    match d.releases[0].reason {
        ReleaseReason::Lent {
            for_workload,
            standing,
            holder_standing,
            ..
        } => {
            assert_eq!(for_workload, 0);
            assert!(
                standing < holder_standing,
                "{standing} vs {holder_standing}"
            );
        }
        ref other => panic!("lent, not {other:?}"),
    }
    assert!(
        d.releases[0]
            .reason
            .to_string()
            .contains("not evicted for the hold")
    );
    assert_eq!(
        wait_reason(&d, 1),
        Some(WaitReason::CapacityHeld { for_workload: 0 })
    );
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 2.0);
    assert_eq!(d.holds[0].cost.lent_gpu_equivalents, 1.0);
    // Node a still misses capacity: lending there spends nothing of the budget up front.
    assert_eq!(d.holds[0].cost.idle_gpu_s, 0.0);
}

/// "llm", owed a week of two thirds of the pool and running 2 GPUs, holds node a (drained, all
/// 8 GPUs free) and one busy node for its 16-GPU job; "audio", running nothing, has a 1-GPU job
/// waiting if `audio_waits`.
fn drained_node_held(audio_waits: bool) -> (Snapshot, DecideOptions) {
    let nodes = vec![node("a", 8, 8), node("b", 8, 0), node("c", 8, 0)];
    let queues = llm_owed_a_week_beside_vision_and_audio(2.0 / 3.0, 24.0);
    let busy = vec![
        running("v-b", 1, 1, 8, 0.0),
        running("v-c", 1, 2, 6, 0.0),
        running("l-c", 0, 2, 2, 0.0),
    ];
    let mut pending = vec![job("llm-16", 0, &[8, 8])];
    if audio_waits {
        pending.push(job("au", 2, &[1]));
    }
    let mut s = snapshot(nodes, queues, busy, pending);
    s.now = 3600.0;
    (s, no_preemption())
}

#[test]
fn a_hold_that_lends_a_node_it_drained_spends_a_share_of_what_is_left_of_its_idle_budget() {
    let (s, options) = drained_node_held(false);
    let budget = 16.0 * options.fairshare.hold_idle_limit_s;
    let alone = decide(&s, &options);
    assert_eq!(alone.holds.len(), 1, "{:?}", alone.holds);
    assert_eq!(alone.holds[0].cost.idle_gpu_s, 0.0);
    // Audio's job can only go on the drained node a: lent, and that node's drain starts over.
    let (s, options) = drained_node_held(true);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1, "{:?}", d.holds);
    assert!(matches!(d.releases[..], [ref r] if r.workload == 1
        && r.placements == vec![NodeId::new(0)]
        && matches!(r.reason, ReleaseReason::Lent { for_workload: 0, .. })));
    assert_eq!(d.holds[0].cost.idle_gpu_s, budget / 4.0);
    // What it had spent before counts: a quarter of the rest.
    let (mut s, options) = drained_node_held(true);
    s.previous_holds = vec![PreviousHold {
        workload: "llm-16".into(),
        nodes: d.holds[0].nodes.iter().map(|(n, _)| *n).collect(),
        cost: HoldCost {
            idle_gpu_s: budget / 2.0,
            idle_gpu_equivalents: 0.0,
            lent_gpu_equivalents: 0.0,
            ..Default::default()
        },
        at: s.now,
    }];
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1, "{:?}", d.holds);
    assert_eq!(d.holds[0].cost.idle_gpu_s, 0.625 * budget);
}

/// A pending workload of `queue` of tier `tier`.
fn tiered(uid: &str, queue: usize, pods: &[u32], tier: Tier) -> PendingWorkload {
    PendingWorkload {
        tier,
        ..job(uid, queue, pods)
    }
}

/// Realtime work within its queue's time-aware share does not wait for a hold for training:
/// it takes the idle held capacity, as an ordinary release. Training of the same queue, and
/// realtime work of a queue past its share, still wait for the hold.
#[test]
fn realtime_work_within_its_share_takes_capacity_held_for_a_lower_tier() {
    // Node a has 3 GPUs free, held for llm's 8-GPU job; vision runs 13 GPUs, past its share.
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let queues = vec![
        queue("llm", 2.0, 0.0),
        queue("vision", 1.0, 0.0),
        queue("serve", 1.0, 0.0),
    ];
    let busy = vec![running("v-a", 1, 0, 5, 0.0), running("v-b", 1, 1, 8, 0.0)];
    let pending = vec![
        job("llm-8", 0, &[8]),
        tiered("serve-answer", 2, &[1], Tier::Realtime),
        job("serve-train", 2, &[1]),
        tiered("vision-answer", 1, &[1], Tier::Realtime),
    ];
    let d = decide(&snapshot(nodes, queues, busy, pending), &no_preemption());
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.holds[0].workload, 0);
    assert_eq!(d.releases.len(), 1, "{:?}", d.releases);
    assert_eq!(d.releases[0].workload, 1);
    assert!(
        matches!(
            d.releases[0].reason,
            ReleaseReason::RealtimePastHold {
                for_workload: 0,
                ..
            }
        ),
        "{:?}",
        d.releases[0].reason
    );
    assert!(
        d.releases[0]
            .reason
            .to_string()
            .contains("not evicted for the hold")
    );
    for waits in [2, 3] {
        assert_eq!(
            wait_reason(&d, waits),
            Some(WaitReason::CapacityHeld { for_workload: 0 }),
            "workload {waits}"
        );
    }
    assert_eq!(d.holds[0].cost.idle_gpu_equivalents, 2.0);
}

/// The same beside a hold made for a queue below its guarantee, before the pool's earned hold
/// is given: the realtime workload is released past it, not held for itself (a hold of its own
/// would keep it waiting on nodes that cannot drain).
#[test]
fn realtime_work_within_its_share_is_released_past_a_guarantee_hold_not_held_for() {
    // Node gpu-1 is full with busy's pod; on gpu-2, small's 1-GPU pod keeps big's 4-GPU pod
    // (guaranteed 4) waiting. Neither running pod may be evicted within the hour.
    let nodes = vec![node("gpu-1", 4, 0), node("gpu-2", 4, 3)];
    let protected = |name: &str| QueueState {
        min_run_time_s: 3600.0,
        ..queue(name, 1.0, 0.0)
    };
    let queues = vec![
        protected("busy"),
        protected("small"),
        queue("big", 1.0, 4.0),
        queue("serve", 1.0, 0.0),
    ];
    let busy = vec![
        running("four", 0, 0, 4, 9_990.0),
        running("one", 1, 1, 1, 9_990.0),
    ];
    let pending = vec![
        job("whole", 2, &[4]),
        tiered("answer", 3, &[1], Tier::Realtime),
    ];
    let d = decide(
        &snapshot(nodes, queues, busy, pending),
        &DecideOptions::default(),
    );
    let held: Vec<usize> = d.holds.iter().map(|h| h.workload).collect();
    assert_eq!(held, vec![0], "only big's pod is held for");
    assert_eq!(d.releases.len(), 1, "{:?}", d.releases);
    assert_eq!(d.releases[0].placements, vec![NodeId::new(1)]);
    assert!(matches!(
        d.releases[0].reason,
        ReleaseReason::RealtimePastHold {
            for_workload: 0,
            ..
        }
    ));
}

#[test]
fn a_kept_hold_stays_with_its_workload_while_its_queue_starts_earlier_work() {
    // "llm" was held for last cycle for its 3-GPU job. Now a realtime job of its own, which comes
    // first in its queue, fits on one of the 2 free GPUs and starts. The hold must not move to
    // "vision" for that cycle: it would hand vision what has drained for llm, and llm's hold
    // would start over, its idle budget with it.
    let mut realtime = job("llm-rt", 0, &[1]);
    realtime.tier = Tier::Realtime;
    let case = |kept: bool| {
        let mut s = snapshot(
            vec![node("a", 12, 2)],
            vec![
                queue("llm", 2.0, 0.0),
                queue("vision", 2.0, 0.0),
                queue("other", 1.0, 0.0),
            ],
            vec![running("o-run", 2, 0, 10, 0.0)],
            vec![realtime.clone(), job("llm-3", 0, &[3]), job("v-3", 1, &[3])],
        );
        if kept {
            s.previous_holds = vec![PreviousHold {
                workload: "llm-3".into(),
                nodes: vec![NodeId::new(0)],
                at: s.now - 60.0,
                ..PreviousHold::default()
            }];
        }
        decide(&s, &no_preemption())
    };
    let d = case(true);
    assert_eq!(d.releases.len(), 1);
    assert_eq!(d.releases[0].workload, 0, "the realtime job starts");
    let held: Vec<usize> = d.holds.iter().map(|h| h.workload).collect();
    assert_eq!(held, vec![1], "the hold stays with llm-3");
    assert_eq!(wait_reason(&d, 1), Some(WaitReason::Holding));
    // Without a hold to keep, vision's workload, the only one in line, is held for, and takes
    // the free GPUs before anyone is served; llm's realtime job, within llm's share, still
    // starts in what that hold leaves idle.
    let d = case(false);
    let held: Vec<usize> = d.holds.iter().map(|h| h.workload).collect();
    assert_eq!(held, vec![2]);
    assert_eq!(d.releases.len(), 1);
    assert!(matches!(
        d.releases[0].reason,
        ReleaseReason::RealtimePastHold {
            for_workload: 2,
            ..
        }
    ));
}

#[test]
fn a_kept_hold_is_not_lost_to_work_its_queue_started_while_it_waited() {
    // Two 8-GPU nodes shared by llm and vision (8 GPUs' fair share each). Node a: vision's `v-a`
    // runs 5 GPUs, 3 are free; node b: vision's `v-b` runs 7, llm's 1-GPU `llm-1` the last one.
    // llm's 8-GPU `llm-8` waits; with `llm-1` its queue would hold 9, more than its share.
    let case = |kept: bool, llm_1_started: f64| {
        let mut s = snapshot(
            vec![node("a", 8, 3), node("b", 8, 0)],
            vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)],
            vec![
                running("v-a", 1, 0, 5, 0.0),
                running("v-b", 1, 1, 7, 0.0),
                running("llm-1", 0, 1, 1, llm_1_started),
            ],
            vec![job("llm-8", 0, &[8]), job("v-2", 1, &[2])],
        );
        s.pending[0].created_at = 5_000.0;
        if kept {
            s.previous_holds = held_on_node_a(0.0, 3.0, s.now - 30.0);
        }
        decide(&s, &no_preemption())
    };
    let held = |d: &Decisions| d.holds.iter().map(|h| h.workload).collect::<Vec<_>>();
    // Not held yet: all of llm's running work counts, and 9 is not earned.
    let d = case(false, 8_000.0);
    assert!(!held(&d).contains(&0), "{:?}", d.holds);
    assert!(matches!(
        wait_reason(&d, 0),
        Some(WaitReason::NotEarned { needed, .. }) if (needed - 9.0).abs() < 1e-9
    ));
    // Held last cycle, and `llm-1` started after `llm-8` was submitted, in capacity the hold did
    // not need: the hold stays, and its drain with it.
    let d = case(true, 8_000.0);
    assert_eq!(held(&d), vec![0]);
    assert_eq!(wait_reason(&d, 0), Some(WaitReason::Holding));
    // `llm-1` ran before `llm-8` was submitted: it counts, and the hold is not earned.
    let d = case(true, 1_000.0);
    assert!(!held(&d).contains(&0), "{:?}", d.holds);
}

#[test]
fn a_kept_hold_for_the_whole_pool_is_not_lost_to_work_its_queue_started_while_it_waited() {
    // Two 8-GPU nodes; llm is owed the whole pool and waits with a gang of two
    // 8-GPU pods, the whole pool. Vision runs 5 GPUs on node a and 7 on node b; llm's 1-GPU
    // `llm-1` the last one on b. With `llm-1` llm would hold 17 GPUs, more than the pool.
    let case = |kept: bool, llm_1_started: f64| {
        let mut s = snapshot(
            vec![node("a", 8, 3), node("b", 8, 0)],
            vec![owed_a_whole_pool("llm", 16.0), queue("vision", 1.0, 0.0)],
            vec![
                running("v-a", 1, 0, 5, 0.0),
                running("v-b", 1, 1, 7, 0.0),
                running("llm-1", 0, 1, 1, llm_1_started),
            ],
            vec![job("llm-16", 0, &[8, 8])],
        );
        s.pending[0].created_at = 5_000.0;
        if kept {
            s.previous_holds = vec![PreviousHold {
                workload: "llm-16".into(),
                nodes: vec![NodeId::new(0), NodeId::new(1)],
                at: s.now - 30.0,
                cost: HoldCost {
                    idle_gpu_equivalents: 3.0,
                    ..Default::default()
                },
            }];
        }
        decide(&s, &no_preemption())
    };
    let held = |d: &Decisions| d.holds.iter().map(|h| h.workload).collect::<Vec<_>>();
    // A new hold counts all of llm's running work: 17 is more than the pool leaves it.
    let d = case(false, 8_000.0);
    assert!(held(&d).is_empty(), "{:?}", d.holds);
    assert!(matches!(
        wait_reason(&d, 0),
        Some(WaitReason::BeyondGuarantees { needed, available })
            if (needed - 17.0).abs() < 1e-9 && (available - 16.0).abs() < 1e-9
    ));
    // Held last cycle, and `llm-1` started after the gang was submitted: the hold stays, as it
    // would for a workload smaller than the pool, instead of ending with its drain lost.
    let d = case(true, 8_000.0);
    assert_eq!(held(&d), vec![0]);
    assert_eq!(wait_reason(&d, 0), Some(WaitReason::Holding));
    // `llm-1` ran before the gang was submitted: it counts, and the hold ends.
    let d = case(true, 1_000.0);
    assert!(held(&d).is_empty(), "{:?}", d.holds);
}

#[test]
fn a_queue_whose_next_workload_is_beyond_others_guarantees_holds_for_a_later_one() {
    // Two 4-GPU nodes. "b" is guaranteed 4 GPUs and runs 3 on node 0; "a", owed the whole
    // pool, runs 3 on node 1 and waits with a gang of the whole pool, then a 2-GPU job;
    // "c", owed as much and running nothing, waits with a 2-GPU job in some cases.
    // With the gang a would hold 11 GPUs where b's guarantee leaves it 5. The 2-GPU job fits
    // once a node drains, and a has earned it.
    let case = |rival: bool, kept: bool| {
        let mut pending = vec![job("a-gang", 0, &[4, 4]), job("a-2", 0, &[2])];
        if rival {
            pending.push(job("c-2", 2, &[2]));
        }
        let mut s = snapshot(
            vec![node("n0", 4, 1), node("n1", 4, 1)],
            vec![
                owed_a_whole_pool("a", 8.0),
                queue("b", 1.0, 4.0),
                owed_a_whole_pool("c", 8.0),
            ],
            vec![
                running("b-run", 1, 0, 3, 0.0),
                running("a-run", 0, 1, 3, 0.0),
            ],
            pending,
        );
        s.pending[1].created_at = 10.0;
        if kept {
            s.previous_holds = vec![PreviousHold {
                workload: "a-2".into(),
                nodes: vec![NodeId::new(0)],
                at: s.now - 30.0,
                cost: HoldCost {
                    idle_gpu_equivalents: 1.0,
                    ..Default::default()
                },
            }];
        }
        decide(&s, &no_preemption())
    };
    let held = |d: &Decisions| d.holds.iter().map(|h| h.workload).collect::<Vec<_>>();
    let d = case(false, false);
    assert!(matches!(
        wait_reason(&d, 0),
        Some(WaitReason::BeyondGuarantees { needed, available })
            if (needed - 11.0).abs() < 1e-9 && (available - 5.0).abs() < 1e-9
    ));
    assert_eq!(held(&d), vec![1], "{:?}", d.holds);
    assert_eq!(wait_reason(&d, 1), Some(WaitReason::Holding));
    // Held last cycle, a's later job keeps its hold as kept holds do, ahead of c's new one,
    // though c stands further below its time-aware share.
    let d = case(true, true);
    assert_eq!(held(&d), vec![1], "{:?}", d.holds);
    // Not held before, the pool's hold goes to c, the queue furthest below its share.
    let d = case(true, false);
    assert_eq!(held(&d), vec![2], "{:?}", d.holds);
}

/// A hold on node "a" for `llm-8` that has left `idle_gpu_s` idle so far, 3 GPUs free there and
/// `v-a` running on the other 5 since `v_a_started`, with fair-share preemption out of reach, so
/// only a stalled drain can evict. Its idle budget is 8 GPUs × `holdIdleLimit`.
fn drain_case(idle_gpu_s: f64, v_a_started: f64) -> (Snapshot, DecideOptions) {
    let nodes = vec![node("a", 8, 3), node("b", 8, 0)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![
        running("v-a", 1, 0, 5, v_a_started),
        running("v-b", 1, 1, 8, 0.0),
    ];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    s.previous_holds = held_on_node_a(idle_gpu_s, 3.0, s.now);
    (s, drain_options())
}

/// Last cycle's hold for `llm-8` on node "a", leaving `free` GPUs idle there, `idle_gpu_s`
/// counted so far.
fn held_on_node_a(idle_gpu_s: f64, free: f64, now: f64) -> Vec<PreviousHold> {
    vec![PreviousHold {
        workload: "llm-8".into(),
        nodes: vec![NodeId::new(0)],
        cost: HoldCost {
            idle_gpu_s,
            idle_gpu_equivalents: free,
            lent_gpu_equivalents: 0.0,
            ..Default::default()
        },
        at: now,
    }]
}

/// Fair-share preemption out of reach, so that only the end of a drain can evict.
fn drain_options() -> DecideOptions {
    DecideOptions {
        preemption: PreemptionParams {
            fair_share_threshold: 0.0,
            ..PreemptionParams::default()
        },
        ..DecideOptions::default()
    }
}

fn budget_gpu_s(options: &DecideOptions) -> f64 {
    8.0 * options.fairshare.hold_idle_limit_s
}

#[test]
fn a_hold_past_its_idle_budget_evicts_what_still_stands_on_its_nodes() {
    let (s, options) = drain_case(0.0, 0.0);
    let budget = budget_gpu_s(&options);
    // `v-a` has run 5 GPUs since 0: eviction loses 5 × now GPU-seconds, less than the budget.
    assert!(5.0 * s.now < budget);
    let (s, options) = drain_case(0.99 * budget, 0.0);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert!(
        d.preemptions.is_empty(),
        "within its budget the drain runs its course"
    );

    let (s, options) = drain_case(budget, 0.0);
    let d = decide(&s, &options);
    assert!(d.given_up.is_empty());
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.holds[0].nodes, vec![(NodeId::new(0), vec![3])]);
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].victim_workload, "v-a");
    assert!(matches!(
        d.preemptions[0].reason,
        PreemptionReason::StalledDrain { idle_gpu_hours, budget_gpu_hours }
            if (idle_gpu_hours * 3600.0 - budget).abs() < 1e-6
                && (budget_gpu_hours * 3600.0 - budget).abs() < 1e-6
    ));
}

/// `drain_case`'s hold for `llm-8` on node "a" (3 GPUs free, `v-a` on the other 5 since
/// `v_a_started`), in a pool of node "a" and, if `other_gpus` > 0, a node "b" of that many GPUs
/// that `v-b` fills.
fn drain_in_pool(other_gpus: u32, idle_gpu_s: f64, v_a_started: f64) -> (Snapshot, DecideOptions) {
    let mut nodes = vec![node("a", 8, 3)];
    let mut busy = vec![running("v-a", 1, 0, 5, v_a_started)];
    if other_gpus > 0 {
        nodes.push(node("b", other_gpus, 0));
        busy.push(running("v-b", 1, 1, other_gpus, 0.0));
    }
    // llm has been owed half the pool for 100 hours, so its claim covers the hold in any pool.
    let mut llm = queue("llm", 1.0, 0.0);
    llm.shares = LedgerShares {
        fair_share: 0.5,
        usage_share: 0.0,
        decayed_capacity: 100.0 * 3600.0 * f64::from(8 + other_gpus),
        recent_entitled: 0.0,
    };
    let queues = vec![llm, queue("vision", 1.0, 0.0)];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    s.previous_holds = held_on_node_a(idle_gpu_s, 3.0, s.now);
    (s, drain_options())
}

#[test]
fn a_hold_of_most_of_its_pool_may_end_its_stalled_drain_before_its_budget_is_spent() {
    let budget = budget_gpu_s(&drain_options());
    let stalled_budget = |d: &Decisions| match d.preemptions.as_slice() {
        [p] if p.victim_workload == "v-a" => match p.reason {
            PreemptionReason::StalledDrain {
                budget_gpu_hours, ..
            } => Some(budget_gpu_hours * 3600.0),
            _ => None,
        },
        _ => None,
    };
    // Half the pool (8 of 16 GPUs): the whole budget first, as `drain_case` shows.
    let (s, options) = drain_in_pool(8, 0.9 * budget, 0.0);
    assert!(decide(&s, &options).preemptions.is_empty());
    // Two thirds of it (8 of 12): from 2 × (1 − 2/3) of the budget on, if eviction loses at most
    // four times what the hold kept idle (`v-a` has run 5 GPUs for most of `now`).
    let (s, options) = drain_in_pool(4, 0.6 * budget, 0.0);
    assert!(5.0 * s.now <= 4.0 * 0.6 * budget);
    let d = decide(&s, &options);
    assert!(d.preemptions.is_empty(), "{:?}", d.preemptions);
    assert_eq!(d.holds.len(), 1);
    let (s, options) = drain_in_pool(4, 0.7 * budget, 0.0);
    let d = decide(&s, &options);
    let share = stalled_budget(&d).expect("v-a evicted as a stalled drain");
    assert!((share - 2.0 / 3.0 * budget).abs() < 1e-6, "{share}");
    // The whole pool: as soon as the hold has left anything idle, within the same loss bound;
    // past it, the hold waits on instead of being given up before its budget is spent.
    // (`v-a` has run longer than the cool-down that protects pods just started.)
    let idle = 2_000.0;
    let (s, options) = drain_in_pool(0, idle, 10_000.0 - 4.0 * idle / 5.0);
    assert!(idle < 0.1 * budget);
    let d = decide(&s, &options);
    assert_eq!(stalled_budget(&d), Some(0.0));
    let (s, options) = drain_in_pool(0, idle, 10_000.0 - 4.1 * idle / 5.0);
    assert_eq!(s.now, 10_000.0);
    let d = decide(&s, &options);
    assert!(d.preemptions.is_empty() && d.given_up.is_empty());
    assert_eq!(d.holds.len(), 1);
}

#[test]
fn a_hold_past_its_idle_budget_whose_drain_would_lose_more_is_given_up() {
    // Eviction may lose up to 4 times what the hold kept idle. `v-a` runs 5 GPUs.
    let (s, options) = drain_case(0.0, 0.0);
    let budget = budget_gpu_s(&options);
    let (s, options) = drain_case(budget, s.now - 3.9 * budget / 5.0);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.preemptions.len(), 1);
    let (s, options) = drain_case(budget, s.now - 4.1 * budget / 5.0);
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    assert!(d.preemptions.is_empty());
    assert_eq!(given_up(&d), vec![0]);
}

#[test]
fn a_hold_waits_out_the_evictions_it_ordered() {
    // Its queue evicted a minute ago, for this hold: past its budget, it stays while they end.
    let (mut s, options) = drain_case(0.0, 0.0);
    let budget = budget_gpu_s(&options);
    s.previous_holds[0].cost.idle_gpu_s = 1.5 * budget;
    s.queues[QueueId::new(0)].last_preemption_at = Some(s.now - 60.0);
    let d = decide(&s, &options);
    assert!(d.given_up.is_empty());
    assert_eq!(d.holds.len(), 1);
    assert!(d.preemptions.is_empty());
}

#[test]
fn a_hold_past_its_idle_budget_is_given_up_where_nothing_may_be_evicted() {
    let overdue = || {
        let (mut s, options) = drain_case(0.0, 0.0);
        s.previous_holds[0].cost.idle_gpu_s = budget_gpu_s(&options);
        (s, options)
    };
    // The straggler's queue guarantees what it runs: the hold is no longer allowed at all.
    let (mut s, options) = overdue();
    s.queues[QueueId::new(1)].guaranteed = 13.0;
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    assert!(d.preemptions.is_empty());
    // The straggler is younger than its queue's minimum run time.
    let (mut s, options) = overdue();
    s.queues[QueueId::new(1)].min_run_time_s = 2.0 * s.now;
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    assert!(d.preemptions.is_empty());
    assert_eq!(given_up(&d), vec![0]);
    // Preemption is off.
    let (s, mut options) = overdue();
    options.preemption.enabled = false;
    let d = decide(&s, &options);
    assert!(d.holds.is_empty());
    assert_eq!(given_up(&d), vec![0]);
}

/// A hold on node "a" for `llm-8` that has left `idle_gpu_s` idle so far, well within its
/// budget: 5 GPUs free there, `v-a` running on the other 3 since `v_a_started`. Vision also runs
/// `v_b_gpus` on node "b" and llm (of twice vision's weight) 8 on node "c", so both queues have
/// a standing to compare.
fn early_drain_case(idle_gpu_s: f64, v_a_started: f64, v_b_gpus: u32) -> (Snapshot, DecideOptions) {
    let nodes = vec![node("a", 8, 5), node("b", 8, 8 - v_b_gpus), node("c", 8, 0)];
    let queues = vec![queue("llm", 2.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![
        running("v-a", 1, 0, 3, v_a_started),
        running("v-b", 1, 1, v_b_gpus, 0.0),
        running("l-c", 0, 2, 8, 0.0),
    ];
    let mut s = snapshot(nodes, queues, busy, vec![job("llm-8", 0, &[8])]);
    s.previous_holds = held_on_node_a(idle_gpu_s, 5.0, s.now);
    (s, drain_options())
}

#[test]
fn a_drain_whose_idle_time_outweighs_what_eviction_loses_ends_early() {
    // `v-a` has run 3 GPUs for 1000 s: evicting it loses 3,000 GPU-seconds. The hold, 5 of its
    // 8 GPUs assembled, evicts once it has left twice that idle, long before its budget.
    let started = 10_000.0 - 1000.0;
    let (s, options) = early_drain_case(5_999.0, started, 8);
    assert!(6_000.0 < budget_gpu_s(&options));
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert!(
        d.preemptions.is_empty(),
        "idle below twice the loss: it waits"
    );
    let (s, options) = early_drain_case(6_001.0, started, 8);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].victim_workload, "v-a");
    assert!(matches!(
        d.preemptions[0].reason,
        PreemptionReason::IdleOutweighsLoss { idle_gpu_hours, .. }
            if (idle_gpu_hours * 3600.0 - 6_001.0).abs() < 1e-6
    ));
    // Less than half assembled (3 held, 5 missing), the same idle time does not end it.
    let (s, options) = drain_case(6_001.0, started);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert!(d.preemptions.is_empty());
}

#[test]
fn a_drain_ended_early_leaves_the_victims_queue_no_more_deserving_than_the_holders() {
    let started = 10_000.0 - 1000.0;
    // Vision runs 11 GPUs and keeps 8 after the eviction: it still stands ahead of llm.
    let (s, options) = early_drain_case(7_000.0, started, 8);
    let d = decide(&s, &options);
    let Some(PreemptionReason::IdleOutweighsLoss {
        holder_standing, ..
    }) = d.preemptions.first().map(|p| p.reason)
    else {
        panic!("expected an early drain, got {:?}", d.preemptions);
    };
    assert!(
        holder_standing > 0.0 && holder_standing < 1.0,
        "{holder_standing}"
    );
    // The Event says why, in the figures it was decided by.
    let said = d.preemptions[0].reason.to_string();
    let standing = format!(
        "holds {:.0}% of its time-aware share",
        holder_standing * 100.0
    );
    assert!(
        said.contains("kept 1.9 GPU-hours idle") && said.contains(&standing),
        "{said}"
    );
    // Vision runs 5 GPUs and would keep 2: it would fall behind llm, which already runs 8.
    let (s, options) = early_drain_case(7_000.0, started, 2);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert!(d.preemptions.is_empty(), "{:?}", d.preemptions);
}

/// The early drain of `early_drain_case`, where what still stands on node "a" is llm's own
/// `l-a` (3 GPUs, run 1,000 s, queued at `l_a_queued_at`) and the held `llm-8` was queued at
/// 1,000; vision runs the other two nodes.
fn own_straggler_case(l_a_queued_at: f64) -> (Snapshot, DecideOptions) {
    let nodes = vec![node("a", 8, 5), node("b", 8, 0), node("c", 8, 0)];
    let queues = vec![queue("llm", 2.0, 0.0), queue("vision", 1.0, 0.0)];
    let mut l_a = running("l-a", 0, 0, 3, 9_000.0);
    l_a.queued_at = l_a_queued_at;
    let busy = vec![
        l_a,
        running("v-b", 1, 1, 8, 0.0),
        running("v-c", 1, 2, 8, 0.0),
    ];
    let mut held = job("llm-8", 0, &[8]);
    held.created_at = 1_000.0;
    let mut s = snapshot(nodes, queues, busy, vec![held]);
    s.previous_holds = held_on_node_a(7_000.0, 5.0, s.now);
    (s, drain_options())
}

#[test]
fn a_drain_ends_by_evicting_its_own_queues_work_queued_after_the_held_workload() {
    // `l-a` was queued after `llm-8` and started only because `llm-8` did not fit yet: the
    // hold, having left idle more than twice what evicting it loses, evicts it.
    let (s, options) = own_straggler_case(2_000.0);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert_eq!(d.preemptions.len(), 1, "{:?}", d.preemptions);
    assert_eq!(d.preemptions[0].victim_workload, "l-a");
    assert!(matches!(
        d.preemptions[0].reason,
        PreemptionReason::IdleOutweighsLoss { .. }
    ));
    // Queued before `llm-8`, it is ahead of it in its queue's order: spared.
    let (s, options) = own_straggler_case(500.0);
    let d = decide(&s, &options);
    assert_eq!(d.holds.len(), 1);
    assert!(d.preemptions.is_empty(), "{:?}", d.preemptions);
}

/// Where what keeps a drain from ending early is its own queue's work queued before it, which
/// no eviction for it takes, the drain ends on nodes it may clear within the same bound: the
/// hold moves there with what it has assembled, if that too stands at least half assembled.
/// Here `l-a`, queued before `llm-8`, stands on the held node; on node c, 5 GPUs are free and
/// vision's `v-c` has run 3 GPUs for 600 s, and the hold has left 12,000 GPU-seconds idle, more
/// than twice the 1,800 evicting `v-c` loses.
#[test]
fn a_drain_its_own_earlier_work_blocks_ends_on_nodes_it_may_clear() {
    let case = |idle_gpu_s: f64| {
        let (mut s, options) = own_straggler_case(500.0);
        s.previous_holds = held_on_node_a(idle_gpu_s, 5.0, s.now);
        s.nodes[NodeId::new(2)].free = vec![5];
        let v_c = s.running.iter_mut().find(|pod| pod.uid == "v-c").unwrap();
        v_c.requests = vec![3];
        v_c.started_at = s.now - 600.0;
        v_c.queued_at = v_c.started_at;
        decide(&s, &options)
    };
    let d = case(12_000.0);
    assert_eq!(d.preemptions.len(), 1, "{:?}", d.preemptions);
    assert_eq!(d.preemptions[0].victim_workload, "v-c");
    assert!(matches!(
        d.preemptions[0].reason,
        PreemptionReason::IdleOutweighsLoss { .. }
    ));
    assert_eq!(d.holds[0].nodes, vec![(NodeId::new(2), vec![5])]);
    // Left idle less than twice what it would lose: the hold waits on node a.
    let d = case(3_000.0);
    assert!(d.preemptions.is_empty(), "{:?}", d.preemptions);
    assert_eq!(d.holds[0].nodes[0].0, NodeId::new(0));
}

/// Queue "a" of weight 1, owed `owed_share` of forty hours of an 8-GPU pool and charged nothing.
fn owed_queue(owed_share: f64) -> QueueState {
    let mut a = queue("a", 1.0, 0.0);
    a.shares = LedgerShares {
        fair_share: owed_share,
        usage_share: 0.0,
        decayed_capacity: 8.0 * 40.0 * 3600.0,
        recent_entitled: 0.0,
    };
    a
}

/// A queue that has not earned a hold is told how long until it is held for: until its
/// time-aware share, at the pace it grows now, covers the workload, or comes within `holdLead`
/// of covering it. What it is owed grows by its entitlement less what it runs (here 4 − 0
/// GPUs), spread over the 8-hour catch-up period.
#[test]
fn a_workload_not_yet_earned_says_when_it_will_be_held_for() {
    let case = |owed_share: f64, options: &DecideOptions| {
        let s = snapshot(
            vec![node("n", 8, 0)],
            vec![owed_queue(owed_share), queue("b", 1.0, 0.0)],
            (0..8)
                .map(|i| running(&format!("b-{i}"), 1, 0, 1, 0.0))
                .collect(),
            vec![job("big", 0, &[8]), job("small", 1, &[1])],
        );
        wait_reason(&decide(&s, options), 0)
    };
    let not_earned = |owed_share: f64, options: &DecideOptions| match case(owed_share, options) {
        Some(WaitReason::NotEarned {
            needed,
            earned,
            eta_s,
        }) => (needed, earned, eta_s),
        other => panic!("{other:?}"),
    };
    let mut options = no_preemption();
    options.fairshare.hold_lead_s = 0.0;
    let lead = no_preemption();
    assert_eq!(lead.fairshare.hold_lead_s, 1800.0, "the default lead");
    // Owed nothing yet: its share is its steady 4 GPUs, and it grows by 4/8 h each second, so
    // it covers the 8 GPUs in 8 hours; with a lead of 30 minutes it is held for 30 minutes
    // before.
    let (needed, earned, eta) = not_earned(0.0, &options);
    assert_eq!((needed, earned), (8.0, 4.0));
    assert!((eta.unwrap() - 8.0 * 3600.0).abs() < 1.0, "{eta:?}");
    let (_, _, eta) = not_earned(0.0, &lead);
    assert!((eta.unwrap() - 7.5 * 3600.0).abs() < 1.0, "{eta:?}");
    // Owed 57,600 GPU-s (2 GPUs over 8 h): half-way there, so half the time.
    let (needed, earned, eta) = not_earned(0.05, &options);
    assert!(
        (needed - 8.0).abs() < 1e-9 && (earned - 6.0).abs() < 1e-9,
        "{earned}"
    );
    assert!((eta.unwrap() - 4.0 * 3600.0).abs() < 1.0, "{eta:?}");
    // Owed enough for 7.8 GPUs: the share covers the workload in 24 minutes. Without a lead it
    // waits those 24 minutes before its nodes begin to drain; within a lead of 30 minutes its
    // nodes are held now and drain meanwhile.
    let (_, earned, eta) = not_earned(0.095, &options);
    assert!((earned - 7.8).abs() < 1e-9, "{earned}");
    assert!((eta.unwrap() - 24.0 * 60.0).abs() < 1.0, "{eta:?}");
    assert_eq!(case(0.095, &lead), Some(WaitReason::Holding));
}

#[test]
fn a_hold_begun_ahead_of_being_earned_evicts_nothing() {
    // "a" owes its 8-GPU job to its ledger: owed `owed_share`, its time-aware share covers the
    // job now (0.11: 8.4 GPUs) or within 24 minutes (0.095: 7.8 GPUs), inside a 30-minute
    // lead. Its hold on the only node, 4 GPUs free and "b" on the other 4, has left its whole
    // idle budget standing, so a drain that may end by eviction evicts "b" now.
    let case = |owed_share: f64| {
        let mut s = snapshot(
            vec![node("n", 8, 4)],
            vec![owed_queue(owed_share), queue("b", 1.0, 0.0)],
            (0..4)
                .map(|i| running(&format!("b-{i}"), 1, 0, 1, 9_000.0))
                .collect(),
            vec![job("big", 0, &[8]), job("small", 1, &[1])],
        );
        let options = drain_options();
        s.previous_holds = vec![PreviousHold {
            workload: "big".into(),
            nodes: vec![NodeId::new(0)],
            cost: HoldCost {
                idle_gpu_s: budget_gpu_s(&options),
                idle_gpu_equivalents: 4.0,
                lent_gpu_equivalents: 0.0,
                ..Default::default()
            },
            at: s.now,
        }];
        decide(&s, &options)
    };
    let earned = case(0.11);
    assert_eq!(earned.holds.len(), 1, "{earned:?}");
    assert!(
        matches!(
            earned.preemptions.as_slice(),
            [p, ..] if matches!(p.reason, PreemptionReason::StalledDrain { .. })
        ),
        "{earned:?}"
    );
    // Not earned yet, the hold drains but throws away nobody's work; past its budget so, it
    // is given up.
    let ahead = case(0.095);
    assert!(ahead.preemptions.is_empty(), "{ahead:?}");
    assert_eq!(given_up(&ahead), [0], "{ahead:?}");
}

#[test]
fn without_holding_small_jobs_take_every_free_gpu() {
    let nodes = vec![node("a", 8, 3), node("b", 8, 1)];
    let queues = vec![queue("llm", 1.0, 0.0), queue("vision", 1.0, 0.0)];
    let busy = vec![running("v-a", 1, 0, 5, 0.0), running("v-b", 1, 1, 7, 0.0)];
    let pending = vec![
        job("llm-8", 0, &[8]),
        job("v-1", 1, &[1]),
        job("v-2", 1, &[1]),
    ];
    let options = DecideOptions {
        hold_capacity: false,
        ..no_preemption()
    };
    let d = decide(&snapshot(nodes, queues, busy, pending), &options);
    assert!(d.holds.is_empty());
    assert_eq!(d.releases.len(), 2);
}

#[test]
fn gangs_wait_for_all_members_and_start_whole() {
    let mut gang = job("gang", 0, &[2, 2, 2]);
    gang.min_member = 4;
    let s = snapshot(
        vec![node("a", 8, 8)],
        vec![queue("q", 1.0, 0.0)],
        vec![],
        vec![gang],
    );
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(
        wait_reason(&d, 0),
        Some(WaitReason::GangIncomplete {
            present: 3,
            min_member: 4
        })
    );
    let s = snapshot(
        vec![node("a", 8, 8)],
        vec![queue("q", 1.0, 0.0)],
        vec![],
        vec![job("gang", 0, &[2, 2, 2, 2])],
    );
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.releases.len(), 1);
    assert_eq!(d.releases[0].placements, vec![NodeId::new(0); 4]);
}

#[test]
fn a_workload_larger_than_its_pool_never_gets_a_hold() {
    let s = snapshot(
        vec![node("a", 8, 8)],
        vec![queue("q", 1.0, 0.0)],
        vec![],
        vec![job("huge", 0, &[8, 8])],
    );
    let d = decide(&s, &DecideOptions::default());
    assert!(d.holds.is_empty());
    assert_eq!(wait_reason(&d, 0), Some(WaitReason::NeverFits));
}

#[test]
fn queue_limit_is_respected() {
    let mut q = queue("q", 1.0, 0.0);
    q.limit = Some(4.0);
    let s = snapshot(
        vec![node("a", 8, 8)],
        vec![q],
        vec![],
        vec![job("one", 0, &[3]), job("two", 0, &[3])],
    );
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.releases.len(), 1);
    assert_eq!(
        wait_reason(&d, 1),
        Some(WaitReason::QueueLimit { limit: 4.0 })
    );
}

#[test]
fn inside_a_queue_tier_then_deadline_goes_first() {
    let mut late = job("late", 0, &[4]);
    late.deadline = Some(50_000.0);
    let mut soon = job("soon", 0, &[4]);
    soon.deadline = Some(20_000.0);
    let mut realtime = job("realtime", 0, &[4]);
    realtime.tier = Tier::Realtime;
    realtime.created_at = 9_000.0;
    let s = snapshot(
        vec![node("a", 8, 8)],
        vec![queue("q", 1.0, 0.0)],
        vec![],
        vec![late, soon, realtime],
    );
    let d = decide(&s, &no_preemption());
    let released: Vec<usize> = d.releases.iter().map(|r| r.workload).collect();
    assert_eq!(released, vec![2, 1]);
}

#[test]
fn the_most_below_share_queue_is_served_first() {
    // Two queues of equal weight; "rich" already holds 6 GPUs, "poor" none; 2 GPUs free.
    let queues = vec![queue("rich", 1.0, 0.0), queue("poor", 1.0, 0.0)];
    let busy = vec![running("r", 0, 0, 6, 0.0)];
    let pending = vec![job("rich-2", 0, &[2]), job("poor-2", 1, &[2])];
    let d = decide(
        &snapshot(vec![node("a", 8, 2)], queues, busy, pending),
        &no_preemption(),
    );
    assert_eq!(d.releases.len(), 1);
    assert_eq!(d.releases[0].workload, 1);
}

fn preemption_case(
    min_run_time_s: f64,
    last_preemption_at: Option<f64>,
    recent: usize,
    victim_guarantee: f64,
) -> Snapshot {
    // "train" (guarantee 8) has nothing; "batch" fills the only node.
    let mut batch = queue("batch", 1.0, victim_guarantee);
    batch.min_run_time_s = min_run_time_s;
    let mut train = queue("train", 1.0, 8.0);
    train.last_preemption_at = last_preemption_at;
    let busy = vec![
        running("b-old", 0, 0, 4, 1_000.0),
        running("b-young", 0, 0, 4, 9_000.0),
    ];
    let mut s = snapshot(
        vec![node("a", 8, 0)],
        vec![batch, train],
        busy,
        vec![job("train-8", 1, &[8])],
    );
    s.recent_preemptions = vec![9_500.0; recent];
    s
}

#[test]
fn a_queue_below_its_guarantee_preempts_what_it_needs() {
    let d = decide(
        &preemption_case(0.0, None, 0, 0.0),
        &DecideOptions::default(),
    );
    let mut victims: Vec<usize> = d
        .preemptions
        .iter()
        .flat_map(|p| p.pods.iter().copied())
        .collect();
    victims.sort_unstable();
    assert_eq!(victims, vec![0, 1]);
    assert!(d.preemptions.iter().all(|p| p.for_workload == 0));
    assert!(matches!(
        d.preemptions[0].reason,
        PreemptionReason::BelowGuarantee { .. }
    ));
    assert!(d.preemptions[0].reason.to_string().contains("guaranteed"));
}

#[test]
fn a_queue_below_its_guarantee_evicts_once_its_wait_has_cost_what_eviction_loses() {
    // "train" (guarantee 8) waits for 8 GPUs on the node "batch" fills (4 + 4 GPUs, 9,000 s
    // and 1,000 s old at now = 10,000 s); the cooldown is 600 s.
    let cooldown_s = DecideOptions::default().preemption.cooldown_s;
    let evicts = |waited_s: f64, victims_started_at: f64| {
        let mut s = preemption_case(0.0, None, 0, 0.0);
        for pod in &mut s.running {
            pod.started_at = victims_started_at;
        }
        s.pending[0].created_at = s.now - waited_s;
        let d = decide(&s, &DecideOptions::default());
        assert_eq!(d.holds.len(), 1, "it holds the node either way: {d:?}");
        !d.preemptions.is_empty()
    };
    // Victims that ran 9,000 s would lose 72,000 GPU-s: a minute's wait (480 GPU-s) is not
    // worth that, and the node may free itself meanwhile (victims are at least a cooldown
    // old, so on a full node the wait is always the whole cooldown)...
    assert!(!evicts(60.0, 1_000.0));
    assert!(!evicts(cooldown_s - 1.0, 1_000.0));
    // ...but a whole cooldown is the longest a guarantee waits.
    assert!(evicts(cooldown_s, 1_000.0));

    // Where most of the node is free, the eviction loses less: 2 GPUs that ran 700 s lose
    // 1,400 GPU-s, which the 8-GPU workload's wait has cost after 175 s.
    let partly_free = |waited_s: f64| {
        let mut s = snapshot(
            vec![node("a", 8, 6)],
            vec![queue("batch", 1.0, 0.0), queue("train", 1.0, 8.0)],
            vec![running("b-2", 0, 0, 2, 10_000.0 - 700.0)],
            vec![job("train-8", 1, &[8])],
        );
        s.pending[0].created_at = s.now - waited_s;
        !decide(&s, &DecideOptions::default()).preemptions.is_empty()
    };
    assert!(!partly_free(170.0));
    assert!(partly_free(180.0));

    // Realtime work takes its guarantee back at once: its wait is its users' latency.
    let mut s = preemption_case(0.0, None, 0, 0.0);
    s.pending[0].created_at = s.now - 1.0;
    s.pending[0].tier = Tier::Realtime;
    assert!(!decide(&s, &DecideOptions::default()).preemptions.is_empty());
}

/// Evicted workloads of a decision, in order.
fn victim_workloads(snapshot: &Snapshot) -> Vec<String> {
    decide(snapshot, &DecideOptions::default())
        .preemptions
        .iter()
        .map(|p| p.victim_workload.clone())
        .collect()
}

#[test]
fn a_refused_victim_is_passed_over_for_another() {
    // "train" (guarantee 4) has nothing; "batch" runs one 4-GPU pod on each of two full nodes.
    let case = |refused: &[&str]| {
        let mut s = snapshot(
            vec![node("a", 4, 0), node("b", 4, 0)],
            vec![queue("batch", 1.0, 0.0), queue("train", 1.0, 4.0)],
            vec![
                running("on-a", 0, 0, 4, 1_000.0),
                running("on-b", 0, 1, 4, 1_000.0),
            ],
            vec![job("train-4", 1, &[4])],
        );
        s.refused_victims = refused.iter().map(|w| w.to_string()).collect();
        s
    };
    let first = victim_workloads(&case(&[]));
    assert_eq!(first.len(), 1, "one node's worth is enough: {first:?}");
    // The first choice's eviction was refused: the other node's workload goes instead.
    let other = if first[0] == "on-a" { "on-b" } else { "on-a" };
    assert_eq!(victim_workloads(&case(&[first[0].as_str()])), [other]);
    // Both refused: nobody is evicted, the preemptor waits.
    assert!(victim_workloads(&case(&["on-a", "on-b"])).is_empty());
}

#[test]
fn a_preemptor_drains_the_node_where_eviction_loses_least_counting_a_gang_whole() {
    // Three full 4-GPU nodes. "batch" runs a gang of two 4-GPU pods on a and b, 1,000 s old
    // (4,000 GPU-s per node, 8,000 for the gang); "other" runs one 4-GPU pod on c, 1,500 s old
    // (6,000 GPU-s). "train", below its guarantee of 4 for longer than the cooldown, needs 4.
    let mut gang_a = running("gang-0", 0, 0, 4, 9_000.0);
    let mut gang_b = running("gang-1", 0, 1, 4, 9_000.0);
    gang_a.workload = "gang".into();
    gang_b.workload = "gang".into();
    let s = snapshot(
        vec![node("a", 4, 0), node("b", 4, 0), node("c", 4, 0)],
        vec![
            queue("batch", 1.0, 0.0),
            queue("other", 1.0, 0.0),
            queue("train", 1.0, 4.0),
        ],
        vec![gang_a, gang_b, running("single", 1, 2, 4, 8_500.0)],
        vec![job("train-4", 2, &[4])],
    );
    // Evicting one pod of the gang ends both, so its nodes would lose 8,000 GPU-s, not 4,000:
    // the hold goes to c and only "single" is evicted.
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.holds.len(), 1, "{d:?}");
    assert_eq!(d.holds[0].nodes, [(NodeId::new(2), vec![0])], "{d:?}");
    assert_eq!(victim_workloads(&s), ["single"]);
}

/// Four 8-GPU nodes, a to d, of which a has 4 GPUs free.
fn a_half_free_beside_three_full() -> Vec<Node> {
    vec![
        node("a", 8, 4),
        node("b", 8, 0),
        node("c", 8, 0),
        node("d", 8, 0),
    ]
}

/// Checks that `s`'s one hold takes node b whole and, far below its fair share, evicts the eight
/// 1-GPU pods `young-0` to `young-7` there.
fn holds_b_evicting_its_young_pods(s: &Snapshot) {
    let d = decide(s, &DecideOptions::default());
    assert_eq!(d.holds.len(), 1, "{d:?}");
    assert_eq!(d.holds[0].nodes, [(NodeId::new(1), vec![0])], "{d:?}");
    let mut victims = victim_workloads(s);
    victims.sort();
    let young: Vec<String> = (0..8).map(|i| format!("young-{i}")).collect();
    assert_eq!(victims, young);
    assert!(
        d.preemptions
            .iter()
            .all(|p| matches!(p.reason, PreemptionReason::FarBelowFairShare { .. }))
    );
}

#[test]
fn a_hold_that_evicts_for_its_share_clears_the_node_where_that_loses_least() {
    // Four 8-GPU nodes. "hog" runs, on a, one 4-GPU pod 10,000 s old beside 4 free GPUs; on b,
    // eight 1-GPU pods 1,000 s old; on c and d, an 8-GPU pod 10,000 s old each. "idle" has
    // nothing and waits with two 8-GPU pods: far below its fair share of 16, it may evict.
    // Planned by free room, the hold would take a and evict 40,000 GPU-s of work for 4 GPUs;
    // clearing b loses 8,000.
    let mut pods = vec![running("old-4", 0, 0, 4, 0.0)];
    pods.extend((0..8).map(|i| running(&format!("young-{i}"), 0, 1, 1, 9_000.0)));
    pods.push(running("old-8", 0, 2, 8, 0.0));
    pods.push(running("old-8-too", 0, 3, 8, 0.0));
    let s = snapshot(
        a_half_free_beside_three_full(),
        vec![queue("hog", 1.0, 0.0), queue("idle", 1.0, 0.0)],
        pods,
        vec![job("idle-8", 1, &[8]), job("idle-8-later", 1, &[8])],
    );
    holds_b_evicting_its_young_pods(&s);
}

#[test]
fn a_hold_whose_nodes_cannot_be_cleared_for_its_share_evicts_where_they_can() {
    // Four 8-GPU nodes. On a, "modest" runs one 4-GPU pod 10,000 s old beside 4 free GPUs: it
    // runs no more than its fair share (4), so no share may evict it. On b, "hog" runs eight
    // 1-GPU pods 1,000 s old, and on c and d eight 10,000 s old each: 24 GPUs against a fair
    // share of 14. "idle" has nothing and waits with two 8-GPU pods: far below its fair share,
    // it may evict. Planned by free room, the hold takes a, where nothing may be evicted, and
    // would wait for "modest" to end; b can be cleared, of the least work.
    let mut pods = vec![running("modest-4", 1, 0, 4, 0.0)];
    pods.extend((0..8).map(|i| running(&format!("young-{i}"), 0, 1, 1, 9_000.0)));
    for (n, node) in [(2, "c"), (3, "d")] {
        pods.extend((0..8).map(|i| running(&format!("old-{node}-{i}"), 0, n, 1, 0.0)));
    }
    let s = snapshot(
        a_half_free_beside_three_full(),
        vec![
            queue("hog", 1.0, 0.0),
            queue("modest", 1.0, 0.0),
            queue("idle", 1.0, 0.0),
        ],
        pods,
        vec![job("idle-8", 2, &[8]), job("idle-8-later", 2, &[8])],
    );
    holds_b_evicting_its_young_pods(&s);
}

#[test]
fn preemption_guards_hold() {
    let options = DecideOptions::default();
    // The young pod is protected by minRunTime, so the node cannot be cleared: nobody is evicted.
    assert!(
        decide(&preemption_case(3_600.0, None, 0, 0.0), &options)
            .preemptions
            .is_empty()
    );
    // Cooldown: this queue preempted 5 minutes ago.
    assert!(
        decide(&preemption_case(0.0, Some(9_700.0), 0, 0.0), &options)
            .preemptions
            .is_empty()
    );
    // Rate limit: the hour's budget is spent.
    assert!(
        decide(&preemption_case(0.0, None, 60, 0.0), &options)
            .preemptions
            .is_empty()
    );
    // The victim queue would drop below its own guarantee.
    assert!(
        decide(&preemption_case(0.0, None, 0, 8.0), &options)
            .preemptions
            .is_empty()
    );
    // Switched off.
    assert!(
        decide(&preemption_case(0.0, None, 0, 0.0), &no_preemption())
            .preemptions
            .is_empty()
    );
}

#[test]
fn far_below_fair_share_preempts_only_from_queues_well_above_theirs() {
    // No guarantees. "idle" has nothing and wants 4; "hog" holds all 8 with two pods.
    let queues = vec![queue("hog", 1.0, 0.0), queue("idle", 1.0, 0.0)];
    let busy = vec![running("h1", 0, 0, 4, 0.0), running("h2", 0, 0, 4, 100.0)];
    let s = snapshot(
        vec![node("a", 8, 0)],
        queues,
        busy,
        vec![job("idle-4", 1, &[4])],
    );
    let d = decide(&s, &DecideOptions::default());
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(
        d.preemptions[0].pods,
        vec![1],
        "the least work lost goes first"
    );
    match d.preemptions[0].reason {
        PreemptionReason::FarBelowFairShare {
            preemptor_ratio,
            victim_ratio,
        } => {
            assert_eq!(preemptor_ratio, 0.0);
            assert!((victim_ratio - 2.0).abs() < 1e-9);
        }
        other => panic!("unexpected reason {other:?}"),
    }
}

/// Node a full and node b half full of "hog"'s 4-GPU pods, 1,000 s old; "idle" has nothing and
/// waits with two 6-GPU pods, so it needs 2 GPUs more than b has free. The two queues' weights
/// are `hog_weight` and `idle_weight`.
fn hog_of_whole_pods_beside_a_6_gpu_wait(hog_weight: f64, idle_weight: f64) -> Snapshot {
    snapshot(
        vec![node("a", 8, 0), node("b", 8, 4)],
        vec![
            queue("hog", hog_weight, 0.0),
            queue("idle", idle_weight, 0.0),
        ],
        vec![
            running("a-1", 0, 0, 4, 9_000.0),
            running("a-2", 0, 0, 4, 9_000.0),
            running("b-1", 0, 1, 4, 9_000.0),
        ],
        vec![
            job("hog-4", 0, &[4]),
            job("idle-6", 1, &[6]),
            job("idle-6-later", 1, &[6]),
        ],
    )
}

/// Sets each listed queue's ledger: `(queue, fair share, received)`, the share of the pool it
/// was entitled to over a week's window and the fraction of that it received, on a pool of
/// `gpus` GPUs.
fn set_ledger(snapshot: &mut Snapshot, gpus: f64, queues: &[(usize, f64, f64)]) {
    for &(q, fair_share, received) in queues {
        snapshot.queues[QueueId::new(q)].shares = LedgerShares {
            fair_share,
            usage_share: fair_share * received,
            decayed_capacity: gpus * 7.0 * 86_400.0,
            recent_entitled: 0.0,
        };
    }
}

/// `snapshot` with the ledger saying "hog" received `hog_received` of its entitlement over the
/// window and "idle" `idle_received` of its own, each entitled to half the pool.
fn with_history(mut snapshot: Snapshot, hog_received: f64, idle_received: f64) -> Snapshot {
    set_ledger(
        &mut snapshot,
        16.0,
        &[(0, 0.5, hog_received), (1, 0.5, idle_received)],
    );
    snapshot
}

/// hog's fair share in `snapshot`, and whether the 8 GPUs evicting its pod on b would leave it
/// are below that share only by that whole pod, within 0.9 × the share.
fn hog_share_just_above_what_is_left(snapshot: &Snapshot) -> (f64, bool) {
    let share = decide(snapshot, &DecideOptions::default()).queues[QueueId::new(0)].fair_share;
    (
        share,
        12.0 > 1.1 * share && 8.0 < share && 8.0 >= 0.9 * share,
    )
}

#[test]
fn a_queue_that_received_its_entitlement_may_end_below_its_share_for_a_starved_one() {
    // hog runs 12 of the 16 GPUs and received its entitlement; idle received a third of its
    // own. Their shares leave hog above 1.1 × its share, and evicting its pod on b leaves it
    // 8, below its share only because victims go whole, and above 0.9 × it.
    let near = with_history(
        hog_of_whole_pods_beside_a_6_gpu_wait(28.0, 15.0),
        1.0,
        1.0 / 3.0,
    );
    let (share, just_above) = hog_share_just_above_what_is_left(&near);
    assert!(just_above, "{share}");
    let d = decide(&near, &DecideOptions::default());
    assert_eq!(victim_workloads(&near), ["b-1"], "{d:?}");
    assert!(matches!(
        d.preemptions[0].reason,
        PreemptionReason::FarBelowFairShare { .. }
    ));
    // Not when hog is still owed part of its entitlement, nor when idle received more than
    // half of its own, nor without history: hog keeps its share, and idle waits.
    let hog_owed = with_history(
        hog_of_whole_pods_beside_a_6_gpu_wait(28.0, 15.0),
        0.95,
        1.0 / 3.0,
    );
    let idle_served = with_history(hog_of_whole_pods_beside_a_6_gpu_wait(25.0, 15.0), 1.0, 0.52);
    let unknown = hog_of_whole_pods_beside_a_6_gpu_wait(16.0, 14.0);
    for case in [hog_owed, idle_served, unknown] {
        let (share, just_above) = hog_share_just_above_what_is_left(&case);
        assert!(just_above, "{share}");
        assert!(victim_workloads(&case).is_empty());
    }
    // Also where what is left is further below the share, down to half of it.
    let further = with_history(
        hog_of_whole_pods_beside_a_6_gpu_wait(36.0, 15.0),
        1.0,
        1.0 / 3.0,
    );
    let (share, _) = hog_share_just_above_what_is_left(&further);
    assert!(8.0 < 0.9 * share && 8.0 >= 0.5 * share, "{share}");
    assert_eq!(victim_workloads(&further), ["b-1"]);
    // Not below half: for a gang of two 6-GPU pods, which would take all three of hog's pods,
    // idle holds and waits.
    let mut far = with_history(
        hog_of_whole_pods_beside_a_6_gpu_wait(28.0, 15.0),
        1.0,
        1.0 / 3.0,
    );
    far.pending[1] = job("idle-12", 1, &[6, 6]);
    let d = decide(&far, &DecideOptions::default());
    assert!(d.preemptions.is_empty(), "{d:?}");
    assert_eq!(wait_reason(&d, 1), Some(WaitReason::Holding));
}

/// A queue of weight 1, no guarantee, given nothing for forty hours of a pool of `pool_gpus`
/// while entitled to a fifth of it: owed the whole pool over the 8-hour catch-up period.
fn owed_a_whole_pool(name: &str, pool_gpus: f64) -> QueueState {
    QueueState {
        shares: LedgerShares {
            fair_share: 0.2,
            usage_share: 0.0,
            decayed_capacity: pool_gpus * 40.0 * 3600.0,
            recent_entitled: 0.0,
        },
        ..queue(name, 1.0, 0.0)
    }
}

/// Others' guarantees limit a hold only by what their queues' work can take back through them.
/// Queue `a`, owed enough to claim the whole 8-GPU node, waits with an 8-GPU job beside `g`,
/// guaranteed 2 GPUs: where `g` waits only with an 8-GPU job of its own, which can never start
/// through a 2-GPU guarantee, `a`'s job is held for; where `g` waits with a 1-GPU job, which can,
/// it is not: the hold leaves room for that one GPU (7 of 8), not for the whole guarantee, and
/// `a`'s job would be taken back for it.
#[test]
fn a_guarantee_its_queue_cannot_claim_leaves_room_for_holds() {
    let case = |g_waits: &[u32]| {
        let a = owed_a_whole_pool("a", 8.0);
        let s = snapshot(
            vec![node("n", 8, 0)],
            vec![a, queue("b", 1.0, 0.0), queue("g", 1.0, 2.0)],
            (0..8)
                .map(|i| running(&format!("b-{i}"), 1, 0, 1, 0.0))
                .collect(),
            vec![job("a-big", 0, &[8]), job("g-next", 2, g_waits)],
        );
        wait_reason(&decide(&s, &no_preemption()), 0)
    };
    assert_eq!(case(&[8]), Some(WaitReason::Holding));
    assert_eq!(
        case(&[1]),
        Some(WaitReason::BeyondGuarantees {
            needed: 8.0,
            available: 7.0
        })
    );
}

/// Only work a queue's guarantee covers is served ahead of every other queue's. `hollow` is
/// guaranteed 4 GPUs and holds nothing; `wide` is owed enough to claim the whole 16-GPU node,
/// which has just freed. Waiting with a 16-GPU job of its own, which no 4-GPU guarantee can
/// give it, `hollow` is served in the order of the time-aware shares like anyone else, so
/// `wide`'s job takes the node; waiting with a 4-GPU job, `hollow` gets it first on its
/// guarantee's account.
#[test]
fn only_work_its_guarantee_covers_is_served_first() {
    let released = |hollow_gpus: u32| {
        let wide = owed_a_whole_pool("wide", 16.0);
        let s = snapshot(
            vec![node("n", 16, 16)],
            vec![queue("hollow", 1.0, 4.0), wide],
            Vec::new(),
            vec![
                job("hollow-next", 0, &[hollow_gpus]),
                job("wide-16", 1, &[16]),
            ],
        );
        let d = decide(&s, &no_preemption());
        d.releases
            .iter()
            .map(|r| s.pending[r.workload].uid.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(released(16), vec!["wide-16".to_string()]);
    assert_eq!(released(4), vec!["hollow-next".to_string()]);
}

/// A workload that has waited long enough has earned its hold while its queue is short of its
/// entitlement, even where the ledger, which forgets, never owes the queue enough. Queue `big`,
/// entitled to half of an 8-GPU node, received 80% of that over the window through its small
/// work (shortfall 0.2): owed 3.2 GPU-hours, its claim stays far below the 8-GPU job it waits
/// with. The job earns its hold once it has waited `T · ½ / 0.2` (T about 69 hours with the
/// default window and decay, so about 172 hours): not at 160 hours, at 180. A queue that
/// received all of its entitlement earns nothing by waiting.
#[test]
fn a_workload_that_waited_long_enough_earns_its_hold_while_its_queue_is_short() {
    let case = |waited_h: f64, usage_share: f64| {
        let big = QueueState {
            shares: LedgerShares {
                fair_share: 0.5,
                usage_share,
                decayed_capacity: 8.0 * 8.0 * 3600.0,
                recent_entitled: 4.0,
            },
            ..queue("big", 1.0, 0.0)
        };
        let mut s = snapshot(
            vec![node("n", 8, 0)],
            vec![big, queue("other", 1.0, 0.0)],
            (0..8)
                .map(|i| running(&format!("other-{i}"), 1, 0, 1, 0.0))
                .collect(),
            vec![job("big-8", 0, &[8]), job("other-next", 1, &[1])],
        );
        s.now = 1_000_000.0;
        s.pending[0].created_at = s.now - waited_h * 3600.0;
        wait_reason(&decide(&s, &no_preemption()), 0)
    };
    let short = 0.4;
    match case(160.0, short) {
        Some(WaitReason::NotEarned {
            eta_s: Some(eta), ..
        }) => assert!(eta > 0.0, "{eta}"),
        other => panic!("not yet earned at 160 hours: {other:?}"),
    }
    assert_eq!(case(180.0, short), Some(WaitReason::Holding));
    assert!(
        matches!(case(180.0, 0.5), Some(WaitReason::NotEarned { .. })),
        "a queue that received its entitlement earns nothing by waiting"
    );
}

/// Three full 8-GPU nodes of "busy"'s 4-GPU pods, 1,000 s old, and "big" waiting with a gang of
/// two 8-GPU pods, more than its fair share; busy waits with more work too. Over the
/// window, busy received its entitlement and big `big_received` of its own (`None`: no history).
fn busy_beside_a_gang_beyond_its_share(big_received: Option<f64>) -> Snapshot {
    let mut s = snapshot(
        vec![node("a", 8, 0), node("b", 8, 0), node("c", 8, 0)],
        vec![queue("busy", 1.0, 0.0), queue("big", 1.0, 0.0)],
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .flat_map(|(n, name)| {
                (0..2).map(move |i| running(&format!("{name}-{i}"), 0, n, 4, 9_000.0))
            })
            .collect(),
        vec![job("big-16", 1, &[8, 8]), job("busy-more", 0, &[4])],
    );
    if let Some(received) = big_received {
        set_ledger(&mut s, 24.0, &[(0, 0.5, 1.0), (1, 0.5, received)]);
    }
    s
}

/// A gang larger than its queue's fair share never fits within that share, however long its
/// queue waits; once the queue is owed enough that its hold is earned, it evicts for a share
/// like a workload within it. Here big, which received a tenth of its entitlement, takes two
/// of the three nodes from busy, which received all of its own. Without history the hold is
/// not earned, and nothing is evicted.
#[test]
fn a_gang_larger_than_its_fair_share_evicts_for_it_once_its_hold_is_earned() {
    let starved = busy_beside_a_gang_beyond_its_share(Some(0.1));
    let d = decide(&starved, &DecideOptions::default());
    assert!(d.queues[QueueId::new(1)].fair_share < 16.0, "{d:?}");
    let mut victims = victim_workloads(&starved);
    victims.sort();
    assert_eq!(victims.len(), 4, "{d:?}");
    let nodes: std::collections::BTreeSet<char> =
        victims.iter().filter_map(|v| v.chars().next()).collect();
    assert_eq!(nodes.len(), 2, "whole nodes cleared: {victims:?}");
    assert!(
        d.preemptions
            .iter()
            .all(|p| matches!(p.reason, PreemptionReason::FarBelowFairShare { .. }))
    );
    let unknown = busy_beside_a_gang_beyond_its_share(None);
    let d = decide(&unknown, &DecideOptions::default());
    assert!(d.preemptions.is_empty(), "{d:?}");
    assert!(matches!(
        wait_reason(&d, 0),
        Some(WaitReason::NotEarned { .. })
    ));
}

/// Five 8-GPU nodes. busy (weight 2) runs two 4-GPU pods on each of b–e, and received all of
/// its entitlement; big (weight 1), which received a tenth of its own, runs one 1-GPU pod on
/// a, queued after its 16-GPU gang and started only because the gang did not fit, and waits
/// for the gang.
fn own_pod_on_the_freest_node() -> Snapshot {
    let mut running_pods: Vec<RunningPod> = ["b", "c", "d", "e"]
        .iter()
        .enumerate()
        .flat_map(|(n, name)| {
            (0..2).map(move |i| running(&format!("{name}-{i}"), 0, n + 1, 4, 9_000.0))
        })
        .collect();
    running_pods.push(running("big-small", 1, 0, 1, 9_500.0));
    let mut s = snapshot(
        ["a", "b", "c", "d", "e"]
            .iter()
            .map(|name| node(name, 8, u32::from(*name == "a") * 7))
            .collect(),
        vec![queue("busy", 2.0, 0.0), queue("big", 1.0, 0.0)],
        running_pods,
        vec![job("big-16", 1, &[8, 8]), job("busy-more", 0, &[4])],
    );
    set_ledger(&mut s, 24.0, &[(0, 2.0 / 3.0, 1.0), (1, 1.0 / 3.0, 0.1)]);
    s
}

/// An eviction for a share never takes the holder's own queue's work, so a hold whose nodes
/// carry such work cannot be cleared for its share there: it clears other nodes instead of
/// waiting for its own queue's pods to end. Here the hold's freest node, a, runs big's own
/// 1-GPU pod, which has run least of all the work; b and c are cleared of busy's pods.
#[test]
fn a_share_eviction_clears_nodes_where_the_holders_own_work_does_not_run() {
    let s = own_pod_on_the_freest_node();
    let d = decide(&s, &DecideOptions::default());
    let mut victims = victim_workloads(&s);
    victims.sort();
    assert_eq!(victims, ["b-0", "b-1", "c-0", "c-1"], "{d:?}");
    assert!(
        d.preemptions
            .iter()
            .all(|p| matches!(p.reason, PreemptionReason::FarBelowFairShare { .. }))
    );
    let held: Vec<&str> = d.holds[0]
        .nodes
        .iter()
        .map(|(node, _)| s.nodes[*node].name.as_str())
        .collect();
    assert!(!held.contains(&"a"), "{held:?}");
}

/// A pool of three 4-GPU nodes that one queue fills with 1-GPU pods, beside a queue a little
/// short of its entitlement over the window, so owed too little to have earned a hold for the
/// gang of the whole pool it waits with first, then a job of one node.
fn whole_pool_gang_ahead_of_a_job_within_the_share() -> Snapshot {
    let running_pods: Vec<RunningPod> = (0..12)
        .map(|i| running(&format!("fill-{i}"), 0, i / 4, 1, 9_000.0))
        .collect();
    let mut s = snapshot(
        ["a", "b", "c"]
            .iter()
            .map(|name| node(name, 4, 0))
            .collect(),
        vec![queue("fill", 1.0, 0.0), queue("gangs", 1.0, 0.0)],
        running_pods,
        vec![job("whole", 1, &[4, 4, 4]), job("one-node", 1, &[4])],
    );
    // The gang has waited longer, so it comes first in its queue.
    s.pending[1].created_at = 8_000.0;
    set_ledger(&mut s, 12.0, &[(0, 0.5, 1.02), (1, 0.5, 0.98)]);
    s
}

/// A queue far below its share whose next workload it has not earned a hold for holds for its
/// first later workload its fair share covers: here the whole-pool gang is beyond what "gangs"
/// has earned, and the one-node job, within its share, is held for and clears a node of fill's
/// pods.
#[test]
fn a_workload_within_its_share_is_held_for_behind_one_its_queue_has_not_earned() {
    let s = whole_pool_gang_ahead_of_a_job_within_the_share();
    let d = decide(&s, &DecideOptions::default());
    let held: Vec<&str> = d
        .holds
        .iter()
        .map(|h| s.pending[h.workload].uid.as_str())
        .collect();
    assert_eq!(held, ["one-node"], "{d:?}");
    assert_eq!(victim_workloads(&s).len(), 4, "{d:?}");
    assert!(d.preemptions.iter().all(|p| matches!(
        p.reason,
        PreemptionReason::FarBelowFairShare { .. }
    ) && s.pending[p.for_workload].uid == "one-node"));
    let whole = s.pending.iter().position(|w| w.uid == "whole").unwrap();
    assert!(
        matches!(wait_reason(&d, whole), Some(WaitReason::NotEarned { .. })),
        "{d:?}"
    );
}
