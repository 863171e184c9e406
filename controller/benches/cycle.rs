//! One controller cycle at scale: building the snapshot from cached objects plus core's decision,
//! over 1,000 queues, 50,000 gated pods and 5,000 nodes (15,000 running pods), and the process's
//! resident memory holding those objects.
//!
//! `cargo bench -p gpufair-controller --bench cycle`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group};
use gpufair_controller::fixtures::cluster;
use gpufair_controller::snapshot::{GpuKinds, Memory, Objects, build};
use gpufair_core::admission::{DecideOptions, decide};
use gpufair_core::mutation::{DEFAULT_GATE, ResourcePattern};
use gpufair_core::units::ResourceTable;

fn gpus() -> GpuKinds {
    GpuKinds {
        patterns: vec![
            ResourcePattern::parse("nvidia.com/gpu"),
            ResourcePattern::parse("nvidia.com/mig-*"),
        ],
        table: ResourceTable::default(),
    }
}

/// Resident and peak resident memory of this process, in MiB (Linux).
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn bench(c: &mut Criterion) {
    let world = cluster(1000, 50_000, 5000);
    let memory = Memory {
        now: 1_700_003_600.0,
        ..Memory::default()
    };
    let gpus = gpus();
    let options = DecideOptions::default();
    let objects = Objects {
        pods: &world.pods,
        nodes: &world.nodes,
        queues: &world.queues,
        reports: &[],
    };
    let built = build(&objects, &memory, DEFAULT_GATE, &gpus);
    let decisions = decide(&built.snapshot, &options);
    eprintln!(
        "snapshot: {} resources, {} nodes, {} queues, {} running pods, {} pending workloads; \
         decided {} releases, {} holds, {} preemptions",
        built.snapshot.resources.len(),
        built.snapshot.nodes.len(),
        built.snapshot.queues.len(),
        built.snapshot.running.len(),
        built.snapshot.pending.len(),
        decisions.releases.len(),
        decisions.holds.len(),
        decisions.preemptions.len()
    );
    let mut group = c.benchmark_group("controller_cycle");
    group.sample_size(10);
    group.bench_function("build_snapshot_1000q_50000pending_5000nodes", |b| {
        b.iter(|| black_box(build(&objects, &memory, DEFAULT_GATE, &gpus)))
    });
    group.bench_function("build_and_decide_1000q_50000pending_5000nodes", |b| {
        b.iter(|| {
            let built = build(&objects, &memory, DEFAULT_GATE, &gpus);
            black_box(decide(&built.snapshot, &options))
        })
    });
    group.finish();
}

/// Memory at scale, with pods the size real ones are: a real pod carries managed fields, a
/// last-applied configuration, environment and volumes, about 4 kB of JSON more than the
/// fixture; each cached pod here gets an annotation of that size.
fn memory_at_scale() {
    let (before, _) = rss_mib();
    let mut world = cluster(1000, 50_000, 5000);
    let padding = "x".repeat(4096);
    world.pods = world
        .pods
        .into_iter()
        .map(|p| {
            let mut pod = (*p).clone();
            pod.metadata.annotations.get_or_insert_default().insert(
                "kubectl.kubernetes.io/last-applied-configuration".into(),
                padding.clone(),
            );
            Arc::new(pod)
        })
        .collect();
    let objects = Objects {
        pods: &world.pods,
        nodes: &world.nodes,
        queues: &world.queues,
        reports: &[],
    };
    let memory = Memory {
        now: 1_700_003_600.0,
        ..Memory::default()
    };
    let built = build(&objects, &memory, DEFAULT_GATE, &gpus());
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    let (after, peak) = rss_mib();
    eprintln!(
        "memory: {} cached pods (~4 kB padding each), {} nodes, {} queues; RSS {before:.0} MiB \
         before, {after:.0} MiB holding caches + snapshot + decisions, peak {peak:.0} MiB ({} releases)",
        world.pods.len(),
        world.nodes.len(),
        world.queues.len(),
        decisions.releases.len()
    );
    black_box((&built, &decisions));
}

criterion_group!(benches, bench);

fn main() {
    memory_at_scale();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
