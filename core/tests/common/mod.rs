//! Random snapshots for the policy's property tests: a few pools, nodes with whole GPUs and MIG
//! slices, queues with guarantees, limits and histories, running gangs, pending workloads and
//! holds given up.

use gpufair_core::labels::{Tier, Urgency, UserTier};
use gpufair_core::snapshot::*;
use proptest::prelude::*;

const TIERS: [Tier; 3] = [Tier::Realtime, Tier::Elastic, Tier::Backfill];
const URGENCIES: [Urgency; 3] = [Urgency::High, Urgency::Medium, Urgency::Low];
const USER_TIERS: [UserTier; 3] = [UserTier::Premium, UserTier::Standard, UserTier::Basic];

pub fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    let pools = 1..=3usize;
    pools
        .prop_flat_map(|pools| {
            let nodes = proptest::collection::vec(
                (0..pools, 1..=8u32, 0..=8u32, 0..=7u32, 0..=7u32),
                1..14,
            );
            let queues = proptest::collection::vec(
                (
                    0..pools,
                    0.1..5.0f64,
                    0.0..20.0f64,
                    proptest::option::of(1.0..40.0f64),
                    0.0..1.0f64,
                    0.0..1.0f64,
                    0.0..7200.0f64,
                ),
                1..6,
            );
            (Just(pools), nodes, queues)
        })
        .prop_flat_map(|(pools, nodes, queues)| {
            let n_nodes = nodes.len();
            let n_queues = queues.len();
            let running = proptest::collection::vec(
                (
                    0..n_queues,
                    0..n_nodes,
                    0..=4u32,
                    0..=2u32,
                    0..3usize,
                    0.0..10000.0f64,
                ),
                0..20,
            );
            let pending = proptest::collection::vec(
                (
                    0..n_queues,
                    0..3usize,
                    proptest::option::of(0.0..1e6f64),
                    0..3usize,
                    0.0..10000.0f64,
                    proptest::collection::vec((0..=8u32, 0..=3u32), 1..5),
                    any::<bool>(),
                ),
                0..25,
            );
            (Just(pools), Just(nodes), Just(queues), running, pending)
        })
        .prop_map(|(pools, nodes, queues, running, pending)| Snapshot {
            now: 10000.0,
            resources: vec![
                ResourceKind {
                    name: "nvidia.com/gpu".into(),
                    gpu_equivalents: 1.0,
                },
                ResourceKind {
                    name: "nvidia.com/mig-1g.10gb".into(),
                    gpu_equivalents: 1.0 / 7.0,
                },
            ],
            pools: (0..pools)
                .map(|p| Pool {
                    name: format!("pool-{p}"),
                })
                .collect(),
            nodes: nodes
                .iter()
                .enumerate()
                .map(|(i, (pool, gpus, free_gpus, migs, free_migs))| Node {
                    name: format!("node-{i:02}"),
                    pool: PoolId::new(*pool),
                    allocatable: vec![*gpus, *migs],
                    free: vec![(*free_gpus).min(*gpus), (*free_migs).min(*migs)],
                })
                .collect(),
            queues: queues
                .iter()
                .enumerate()
                .map(
                    |(i, (pool, weight, guaranteed, limit, fair, usage, min_run))| QueueState {
                        name: format!("queue-{i}"),
                        pool: PoolId::new(*pool),
                        weight: *weight,
                        guaranteed: *guaranteed,
                        limit: *limit,
                        min_run_time_s: *min_run,
                        shares: LedgerShares {
                            fair_share: *fair,
                            usage_share: *usage,
                            decayed_capacity: 1.0,
                            recent_entitled: 0.0,
                        },
                        last_preemption_at: None,
                        last_evicted_at: None,
                    },
                )
                .collect(),
            running: running
                .iter()
                .enumerate()
                .map(|(i, (queue, node, gpus, migs, tier, started))| RunningPod {
                    uid: format!("run-{i:03}"),
                    // Pods of a queue fall into a few gangs, spread over nodes.
                    workload: format!("gang-{queue}-{}", i % 3),
                    queue: QueueId::new(*queue),
                    node: NodeId::new(*node),
                    requests: vec![*gpus, *migs],
                    tier: TIERS[*tier],
                    started_at: *started,
                    queued_at: *started,
                })
                .collect(),
            pending: pending
                .iter()
                .enumerate()
                .map(
                    |(i, (queue, tier, deadline, urgency, created, pods, complete))| {
                        PendingWorkload {
                            uid: format!("wl-{i:03}"),
                            queue: QueueId::new(*queue),
                            tier: TIERS[*tier],
                            deadline: *deadline,
                            urgency: URGENCIES[*urgency],
                            // Varied without widening the strategy's shrinking space.
                            user_tier: USER_TIERS[i % 3],
                            created_at: *created,
                            min_member: if *complete {
                                pods.len() as u32
                            } else {
                                pods.len() as u32 + 1
                            },
                            pods: pods
                                .iter()
                                .map(|(g, m)| PodRequest {
                                    requests: vec![*g, *m],
                                })
                                .collect(),
                        }
                    },
                )
                .collect(),
            recent_preemptions: vec![],
            previous_holds: Vec::new(),
            refused_victims: Vec::new(),
            backfill: Vec::new(),
            given_up_holds: Vec::new(),
        })
        .prop_map(with_given_up_holds)
}

/// Marks every third pending workload as having had a hold given up, blocked by every fourth
/// running workload, every other one of them given up too often as well (its later holds left
/// a day of one GPU idle, ten minutes after its first was given up): derived from what was
/// drawn, so shrinking stays as it was, and every promise is also checked with holds planned
/// around blockers and refused for holds given up too often.
fn with_given_up_holds(mut snapshot: Snapshot) -> Snapshot {
    let blockers: Vec<String> = snapshot
        .running
        .iter()
        .step_by(4)
        .map(|pod| pod.workload_id().to_string())
        .collect();
    if blockers.is_empty() {
        return snapshot;
    }
    snapshot.given_up_holds = snapshot
        .pending
        .iter()
        .step_by(3)
        .enumerate()
        .map(|(i, workload)| GivenUpHold {
            workload: workload.uid.clone(),
            blockers: blockers.clone(),
            spent_gpu_s: if i % 2 == 1 { 86_400.0 } else { 0.0 },
            first_given_up_at: snapshot.now - 600.0,
        })
        .collect();
    snapshot
}
