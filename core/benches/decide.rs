//! Controller-scale benchmarks: one decision cycle over 1,000 queues, 50,000 pending pods and
//! 5,000 nodes in 20 pools; and one ledger update of 1,000 queues.
//!
//! Run: `cargo bench -p gpufair-core --bench decide`

use criterion::{Criterion, criterion_group, criterion_main};
use gpufair_core::admission::{DecideOptions, decide};
use gpufair_core::labels::{Tier, Urgency};
use gpufair_core::ledger::{QueueLedger, UsageSample};
use gpufair_core::params::FairShareParams;
use gpufair_core::snapshot::*;
use std::hint::black_box;

const POOLS: usize = 20;
const NODES: usize = 5_000;
const QUEUES: usize = 1_000;
const PENDING_PODS: usize = 50_000;

/// A deterministic pseudo-random sequence (no dependency needed for a fixed fixture).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

fn cluster_snapshot() -> Snapshot {
    let mut rng = Lcg(42);
    let nodes: Vec<Node> = (0..NODES)
        .map(|i| {
            // A busy cluster: most nodes full, some with a few GPUs free.
            let free = if rng.next(10) < 8 {
                0
            } else {
                rng.next(9) as u32
            };
            Node {
                name: format!("node-{i:05}"),
                pool: PoolId::new(i % POOLS),
                allocatable: vec![8],
                free: vec![free],
            }
        })
        .collect();
    let queues: Vec<QueueState> = (0..QUEUES)
        .map(|i| QueueState {
            name: format!("queue-{i:04}"),
            pool: PoolId::new(i % POOLS),
            weight: 1.0 + rng.next(5) as f64,
            guaranteed: rng.next(40) as f64,
            limit: None,
            min_run_time_s: 1800.0,
            shares: LedgerShares {
                fair_share: rng.next(100) as f64 / 1000.0,
                usage_share: rng.next(100) as f64 / 1000.0,
                decayed_capacity: 1.0,
                recent_entitled: 0.0,
            },
            last_preemption_at: None,
            last_evicted_at: None,
        })
        .collect();
    let mut running = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let mut used = node.allocatable[0] - node.free[0];
        while used > 0 {
            let gpus = (1 + rng.next(4) as u32).min(used);
            let queue = (rng.next((QUEUES / POOLS) as u64) as usize) * POOLS + node.pool.get();
            running.push(RunningPod {
                uid: format!("run-{}", running.len()),
                workload: format!("run-{}", running.len()),
                queue: QueueId::new(queue),
                node: NodeId::new(n),
                requests: vec![gpus],
                tier: Tier::Elastic,
                started_at: rng.next(100_000) as f64,
                queued_at: 0.0,
            });
            used -= gpus;
        }
    }
    let mut pending = Vec::new();
    let mut pods = 0;
    while pods < PENDING_PODS {
        let queue = rng.next(QUEUES as u64) as usize;
        let gang = rng.next(20) == 0;
        let (count, gpus) = if gang {
            (2 + rng.next(7) as usize, 8)
        } else {
            (1, 1 + rng.next(2) as u32)
        };
        let uid = format!("wl-{}", pending.len());
        pending.push(PendingWorkload {
            uid: uid.clone(),
            queue: QueueId::new(queue),
            tier: [Tier::Realtime, Tier::Elastic, Tier::Backfill][rng.next(3) as usize],
            deadline: if rng.next(4) == 0 {
                Some(rng.next(1_000_000) as f64)
            } else {
                None
            },
            urgency: [Urgency::High, Urgency::Medium, Urgency::Low][rng.next(3) as usize],
            user_tier: gpufair_core::labels::UserTier::Standard,
            created_at: rng.next(100_000) as f64,
            min_member: count as u32,
            pods: (0..count)
                .map(|_| PodRequest {
                    requests: vec![gpus],
                })
                .collect(),
        });
        pods += count;
    }
    Snapshot {
        now: 200_000.0,
        resources: vec![ResourceKind {
            name: "nvidia.com/gpu".into(),
            gpu_equivalents: 1.0,
        }],
        pools: (0..POOLS)
            .map(|p| Pool {
                name: format!("pool-{p:02}"),
            })
            .collect(),
        nodes: nodes.into(),
        queues: queues.into(),
        running,
        pending,
        recent_preemptions: vec![],
        previous_holds: Vec::new(),
        refused_victims: Vec::new(),
        backfill: Vec::new(),
        given_up_holds: Vec::new(),
    }
}

fn bench_decide(c: &mut Criterion) {
    let snapshot = cluster_snapshot();
    let options = DecideOptions::default();
    let decisions = decide(&snapshot, &options);
    eprintln!(
        "fixture: {} queues, {} pending workloads ({} pods), {} running pods, {} nodes in {} pools; one cycle: {} releases, {} holds, {} preemptions",
        snapshot.queues.len(),
        snapshot.pending.len(),
        snapshot.pending.iter().map(|w| w.pods.len()).sum::<usize>(),
        snapshot.running.len(),
        snapshot.nodes.len(),
        snapshot.pools.len(),
        decisions.releases.len(),
        decisions.holds.len(),
        decisions.preemptions.len()
    );
    let mut group = c.benchmark_group("decide");
    group.sample_size(20);
    group.bench_function("1000q_50000pods_5000nodes_20pools", |b| {
        b.iter(|| decide(black_box(&snapshot), black_box(&options)))
    });
    group.finish();
}

fn bench_ledger(c: &mut Criterion) {
    let params = FairShareParams::default();
    let mut ledgers: Vec<QueueLedger> = (0..QUEUES)
        .map(|_| QueueLedger::seeded(0.0, &params, 40_000.0, 0.0))
        .collect();
    let mut now = 0.0;
    c.bench_function("ledger/record_and_shares_1000_queues", |b| {
        b.iter(|| {
            now += 60.0;
            let mut total = 0.0;
            for (i, ledger) in ledgers.iter_mut().enumerate() {
                let sample = UsageSample {
                    allocated: (i % 50) as f64,
                    utilized: (i % 40) as f64,
                    entitled: (i % 45) as f64,
                    capacity: 40_000.0,
                };
                ledger.record(&params, now, sample);
                total += ledger.shares(&params, now).usage_share;
            }
            black_box(total)
        })
    });
}

criterion_group!(benches, bench_decide, bench_ledger);
criterion_main!(benches);
