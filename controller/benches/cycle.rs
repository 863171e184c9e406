//! One controller cycle at scale: building the snapshot from cached objects plus core's decision,
//! over 1,000 queues, 50,000 gated pods and 5,000 nodes (15,000 running pods), and the process's
//! resident memory holding those objects.
//!
//! The controller keeps no pod objects: its pod watch parses each pod version once as it
//! arrives, and a cycle builds from those parsed facts ("build from facts"). Building from pod
//! objects, parsing every one ("cold build"), is measured too: it is what the first cycle plus
//! the initial listing cost a new leader.
//!
//! The whole step (`gpufair_controller::step`), everything a cycle does but send its requests,
//! is timed last.
//!
//! `cargo bench -p gpufair-controller --bench cycle`

use std::hint::black_box;

/// The allocator the `gpufair-webhook` binary runs the controller with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group};
use gpufair_controller::facts::FactsCache;
use gpufair_controller::fixtures::{cluster, cluster_pods};
use gpufair_controller::leader_model::Model;
use gpufair_controller::plan::{explanation_turns, plan_explaining};
use gpufair_controller::snapshot::{GpuKinds, Memory, Objects, build, build_from_facts};
use gpufair_controller::step::{CycleSettings, View, step};
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

/// Nanoseconds this thread has spent on a CPU (Linux schedstat), so that a cycle's cost can be
/// read apart from the time it waited for a core on a busy machine.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Runs `step` `runs` times; prints the median wall and on-CPU milliseconds per run.
fn timed(label: &str, runs: usize, mut step: impl FnMut()) {
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (start, start_cpu) = (std::time::Instant::now(), thread_cpu_ns());
        step();
        wall.push(start.elapsed().as_secs_f64() * 1e3);
        cpu.push((thread_cpu_ns() - start_cpu) as f64 / 1e6);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "{label}: median {:.1} ms wall, {:.1} ms on CPU ({runs} runs)",
        median(&mut wall),
        median(&mut cpu)
    );
}

/// The cluster's size: 1,000 queues, 50,000 gated pods and 5,000 nodes, times `CYCLE_SCALE`
/// (default 1; 4 gives 4,000 queues, 200,000 gated pods and 20,000 nodes).
fn scale() -> usize {
    std::env::var("CYCLE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0)
        .unwrap_or(1)
}

fn bench(c: &mut Criterion) {
    let s = scale();
    let world = cluster(1000 * s, 50_000 * s, 5000 * s);
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
    let mut facts = FactsCache::default();
    facts.refresh(&world.pods, DEFAULT_GATE);
    let cluster = objects.cluster();
    timed("cold build (parse every pod)", 5, || {
        black_box(build(&objects, &memory, DEFAULT_GATE, &gpus));
    });
    timed("build from facts", 9, || {
        black_box(build_from_facts(&facts, &cluster, &memory, &gpus));
    });
    timed("decide", 9, || {
        black_box(decide(&built.snapshot, &options));
    });
    timed("build from facts + decide", 9, || {
        let built = build_from_facts(&facts, &cluster, &memory, &gpus);
        black_box(decide(&built.snapshot, &options));
    });
    // A controller's cycles come seconds apart, not back to back as above: by then the
    // allocator may have handed the last cycle's freed pages back to the kernel, and this cycle
    // faults them in again. `MIMALLOC_PURGE_DELAY` (milliseconds) sets how long it waits.
    timed("build from facts + decide, 1.5 s after the last", 5, || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let start = std::time::Instant::now();
        let built = build_from_facts(&facts, &cluster, &memory, &gpus);
        black_box(decide(&built.snapshot, &options));
        drop(built);
        eprintln!(
            "  one spaced cycle: {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
    });
    // Turning decisions into requests, as the controller does: the releases (each patch is
    // written when the release is sent), and a `Waiting` Event message for the waiting pods
    // due one, at most the controller's default cap per cycle. Once every waiting pod has been
    // told, none is due again for the explain interval: a steady cycle explains nobody.
    let (interval, cap) = (300.0, 500);
    black_box(plan_explaining(
        &built,
        &decisions,
        DEFAULT_GATE,
        explanation_turns(memory.now, interval, usize::MAX),
    ));
    timed("plan, no explanation due", 5, || {
        black_box(plan_explaining(
            &built,
            &decisions,
            DEFAULT_GATE,
            explanation_turns(memory.now, interval, cap),
        ));
    });
    let mut later = memory.now;
    timed(
        "plan, every waiting pod due, 500 explained (the cap)",
        5,
        || {
            later += interval;
            black_box(plan_explaining(
                &built,
                &decisions,
                DEFAULT_GATE,
                explanation_turns(later, interval, cap),
            ));
        },
    );
    timed("plan, every waiting pod explained (no cap)", 3, || {
        black_box(plan_explaining(&built, &decisions, DEFAULT_GATE, |_| true));
    });
    timed("release patches written, as sent", 3, || {
        for release in plan_explaining(&built, &decisions, DEFAULT_GATE, |_| false).releases {
            for pod in &release.pods {
                black_box(pod.json_patch());
            }
        }
    });
    // The controller's whole cycle as its driver runs it, less the requests: fold in reports,
    // build, decide, charge the ledgers, plan (explanations at the cap) and every Queue's status
    // body. A new leader's first step also reads each queue's spans of use; later steps find
    // the releases of the first still in flight, as a leader does between two cycles.
    let settings = CycleSettings {
        gate: DEFAULT_GATE.into(),
        gpus: gpus.clone(),
        unbound_timeout: std::time::Duration::from_secs(600),
        explain_interval: std::time::Duration::from_secs(300),
        explanations_per_cycle: cap,
        family_alpha: 0.3,
    };
    let view = View {
        pods: &facts,
        cluster: objects.cluster(),
        options: &options,
    };
    timed("step, a new leader's first (status due)", 5, || {
        black_box(step(
            &mut Model::default(),
            &view,
            &settings,
            memory.now,
            true,
        ));
    });
    let mut model = Model::default();
    let first = step(&mut model, &view, &settings, memory.now, true);
    eprintln!(
        "  first step: {} workloads released, {} explained, {} statuses",
        first.releases.len(),
        first.explanations.len(),
        first.statuses.len()
    );
    let mut now = memory.now;
    timed("step, every later cycle (status due)", 9, || {
        now += 10.0;
        black_box(step(&mut model, &view, &settings, now, true));
    });
    timed("step, every later cycle (status not due)", 9, || {
        now += 10.0;
        black_box(step(&mut model, &view, &settings, now, false));
    });
    if std::env::var_os("CYCLE_TIMED_ONLY").is_some() {
        return;
    }
    let tag = format!("{}q_{}pending_{}nodes", 1000 * s, 50_000 * s, 5000 * s);
    let mut group = c.benchmark_group("controller_cycle");
    group.sample_size(10);
    group.bench_function(format!("cold_build_{tag}"), |b| {
        b.iter(|| black_box(build(&objects, &memory, DEFAULT_GATE, &gpus)))
    });
    group.bench_function(format!("build_from_facts_{tag}"), |b| {
        b.iter(|| black_box(build_from_facts(&facts, &cluster, &memory, &gpus)))
    });
    group.bench_function(format!("decide_{tag}"), |b| {
        b.iter(|| black_box(decide(&built.snapshot, &options)))
    });
    group.bench_function(format!("build_from_facts_and_decide_{tag}"), |b| {
        b.iter(|| {
            let built = build_from_facts(&facts, &cluster, &memory, &gpus);
            black_box(decide(&built.snapshot, &options))
        })
    });
    group.finish();
}

/// Memory at scale, with pods the size real ones are: a real pod carries managed fields, a
/// last-applied configuration, an image, a command and environment, about 4 kB of JSON more
/// than the fixture. Each pod here gets that bulk and is then handled as the controller's pod
/// watch handles it: parsed into facts, the object itself dropped.
fn memory_at_scale() {
    let (before, _) = rss_mib();
    let s = scale();
    let world = cluster(1000 * s, 0, 5000 * s);
    let padding = "x".repeat(2048);
    let env: Vec<k8s_openapi::api::core::v1::EnvVar> = (0..32)
        .map(|i| k8s_openapi::api::core::v1::EnvVar {
            name: format!("SETTING_{i:02}"),
            value: Some("a-value-of-some-forty-characters-or-so...".into()),
            ..Default::default()
        })
        .collect();
    let mut facts = FactsCache::default();
    let mut pods = 0;
    facts.begin_cycle();
    for mut pod in cluster_pods(1000 * s, 50_000 * s, 5000 * s) {
        pod.metadata.annotations.get_or_insert_default().insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            padding.clone(),
        );
        let container = &mut pod
            .spec
            .as_mut()
            .expect("fixture pods have a spec")
            .containers[0];
        container.image = Some("registry.example.com/team/trainer:2026.11.30".into());
        container.command = Some(vec!["python".into(), "-m".into(), "train".into()]);
        container.env = Some(env.clone());
        facts.facts(&pod, DEFAULT_GATE);
        pods += 1;
    }
    facts.end_cycle();
    let objects = Objects {
        pods: &[],
        nodes: &world.nodes,
        queues: &world.queues,
        reports: &[],
    };
    let cluster = objects.cluster();
    let memory = Memory {
        now: 1_700_003_600.0,
        ..Memory::default()
    };
    let built = build_from_facts(&facts, &cluster, &memory, &gpus());
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    let (after, peak) = rss_mib();
    eprintln!(
        "memory: {pods} pods (~4 kB of bulk each) parsed into facts as the pod watch does, {} \
         nodes, {} queues; RSS {before:.0} MiB before, {after:.0} MiB holding nodes, queues, \
         facts, snapshot and decisions, peak {peak:.0} MiB ({} releases)",
        world.nodes.len(),
        world.queues.len(),
        decisions.releases.len()
    );
    black_box((&built, &decisions, &facts));
}

criterion_group!(benches, bench);

fn main() {
    memory_at_scale();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
