//! Gate-release latency when many GPU pods arrive at once, through the real binaries: a real
//! control plane (etcd, kube-apiserver, kube-scheduler, kwok nodes), one `gpufair-webhook
//! serve` replica (admission and the controller), every pod created through admission and
//! gated, and every pod fitting.
//!
//! ```sh
//! cargo bench --profile dev -p gpufair-integration --bench release_burst [FILTER...]
//! ```
//!
//! Cases (name them to run only those):
//! - `burst-1000`: 1,000 one-GPU pods on 125 nodes × 8 GPUs, controller defaults
//!   (`--release-rate 50 --release-burst 1000`, debounce 0.2 s, cycle 10 s);
//! - `flat-1000`: the same with `--release-burst 1` (a flat 50 pods/s) for comparison;
//! - `burst-10000`: 10,000 one-GPU pods on 1,250 nodes × 8 GPUs, defaults again; also the
//!   controller's, kube-apiserver's and etcd's memory.
//!
//! Per pod, latency is from the moment a watch of pods (the bench's own, through the API
//! server) shows the pod created to the moment it shows the gate removed, both at full clock
//! precision on this side; the watch's own delay is in both ends and cancels out but for its
//! jitter. The controller's own `gpufair_gate_release_latency_seconds` histogram is printed
//! beside it; it starts from `creationTimestamp`, which has whole seconds, so it reads up to a
//! second high.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use gpufair_integration::cluster::monitor::GATE;
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions, NodeOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

/// One bench case.
struct Case {
    name: &'static str,
    pods: usize,
    nodes: usize,
    gpus_per_node: u32,
    release_burst: u32,
    /// Pod creations in flight at once (each is an admission call over a new TLS connection).
    creates_in_flight: usize,
    /// Give up waiting for every release after this long.
    timeout: Duration,
}

const CASES: &[Case] = &[
    Case {
        name: "burst-1000",
        pods: 1000,
        nodes: 125,
        gpus_per_node: 8,
        release_burst: 1000,
        creates_in_flight: 500,
        timeout: Duration::from_secs(120),
    },
    Case {
        name: "flat-1000",
        pods: 1000,
        nodes: 125,
        gpus_per_node: 8,
        release_burst: 1,
        creates_in_flight: 500,
        timeout: Duration::from_secs(120),
    },
    Case {
        name: "burst-10000",
        pods: 10_000,
        nodes: 1250,
        gpus_per_node: 8,
        release_burst: 1000,
        // As many as the 1,000-pod cases: admission calls run past their 5 s deadline
        // (failurePolicy Fail) if the webhook falls behind.
        creates_in_flight: 500,
        timeout: Duration::from_secs(600),
    },
];

/// When each pod was first seen and when its gate was seen gone, by UID.
#[derive(Default)]
struct Timeline {
    created: HashMap<String, Instant>,
    released: HashMap<String, Instant>,
    /// Pods seen gated, not released yet.
    gated: HashSet<String>,
    /// Watch errors (each one a relist: changes in between are seen only as their result).
    missed: u64,
}

fn gated(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|gates| gates.iter().any(|g| g["name"] == GATE))
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Records pod creations and gate removals from a watch of the namespace's pods.
fn follow(
    cluster: &Cluster,
    namespace: &str,
    timeline: Arc<Mutex<Timeline>>,
) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(cluster.api.client.clone(), namespace);
    let mut events = watcher::watcher(pods, watcher::Config::default()).boxed();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(Event::Apply(pod) | Event::InitApply(pod)) => pod,
                Ok(_) => continue,
                Err(_) => {
                    timeline.lock().unwrap_or_else(|p| p.into_inner()).missed += 1;
                    continue;
                }
            };
            let pod = serde_json::to_value(pod).unwrap_or_default();
            let now = Instant::now();
            let uid = uid(&pod);
            let mut timeline = timeline.lock().unwrap_or_else(|p| p.into_inner());
            if gated(&pod) {
                if !timeline.created.contains_key(&uid) {
                    timeline.created.insert(uid.clone(), now);
                    timeline.gated.insert(uid);
                }
            } else if timeline.gated.remove(&uid) {
                timeline.released.entry(uid).or_insert(now);
            }
        }
    })
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// A Prometheus histogram read from `/metrics` text: cumulative (upper bound, count) pairs.
fn histogram(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (bound, count) = rest.split_once("\"} ")?;
            let bound = if bound == "+Inf" {
                f64::INFINITY
            } else {
                bound.parse().ok()?
            };
            Some((bound, count.trim().parse().ok()?))
        })
        .collect()
}

/// `histogram_quantile` as Prometheus computes it: linear inside the bucket.
fn histogram_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    if total == 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return lower.0;
            }
            let inside = count - lower.1;
            let fraction = if inside > 0.0 {
                (rank - lower.1) / inside
            } else {
                1.0
            };
            return lower.0 + (bound - lower.0) * fraction;
        }
        lower = (bound, count);
    }
    lower.0
}

/// `VmHWM` and `VmRSS` of a process, in MiB.
fn memory_mib(pid: &str) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

async fn run_case(case: &Case) -> anyhow::Result<()> {
    println!(
        "\n== {}: {} one-GPU pods, {} nodes x {} GPUs, --release-rate 50 --release-burst {} ==",
        case.name, case.pods, case.nodes, case.gpus_per_node, case.release_burst
    );
    let nodes = (0..case.nodes)
        .map(|i| {
            NodeOptions::new(&format!("gpu-{i:04}"), case.gpus_per_node).without_device_plugin()
        })
        .collect();
    let options = ClusterOptions {
        nodes,
        // The controller's own defaults; the harness's are shortened for tests.
        cycle_interval: "10s".into(),
        debounce: "0.2s".into(),
        status_interval: "30s".into(),
        release_rate: 50.0,
        release_burst: case.release_burst,
        log_filter: "info".into(),
        ..ClusterOptions::default()
    };
    let setup = Instant::now();
    let cluster = Cluster::start(options).await?;
    cluster
        .wait_for_leader(Duration::from_secs(30))
        .await
        .with_context(|| cluster.logs())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.replicas[0]
        .log_lines_with("controller running")
        .is_empty()
    {
        if Instant::now() > deadline {
            bail!("the controller never started:\n{}", cluster.logs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    println!(
        "cluster ready in {:.1} s (load average {})",
        setup.elapsed().as_secs_f64(),
        load_average()
    );

    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let follower = follow(&cluster, "team", Arc::clone(&timeline));
    // The watch's first list, before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = cluster.replicas[0].pid().to_string();
    // The controller's largest RSS, sampled while pods are created and released.
    let peak_rss = Arc::new(Mutex::new(0.0f64));
    let sampler = {
        let (pid, peak_rss) = (pid.clone(), Arc::clone(&peak_rss));
        tokio::spawn(async move {
            loop {
                if let Some((_, rss)) = memory_mib(&pid) {
                    let mut peak = peak_rss.lock().unwrap_or_else(|p| p.into_inner());
                    *peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let started = Instant::now();
    let pods: Vec<Value> = (0..case.pods)
        .map(|i| gpu_pod("team", &format!("p-{i:05}"), 1))
        .collect();
    let results: Vec<_> = futures::stream::iter(pods)
        .map(|pod| cluster.api.submit_pod(pod, None))
        .buffer_unordered(case.creates_in_flight)
        .collect()
        .await;
    let created_in = started.elapsed();
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    // A failed create is reported, not fatal: the pods that were created are still measured.
    if let Some(first) = failed.first() {
        println!("{} creates failed, first: {first}", failed.len());
    }
    let expected = case.pods - failed.len();
    ensure!(expected > 0, "no pod was created");
    let ungated = results
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|p| !gated(p)))
        .count();
    ensure!(ungated == 0, "{ungated} pods were not gated at creation");

    let deadline = Instant::now() + case.timeout;
    let mut progress = Instant::now();
    loop {
        let released = timeline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .released
            .len();
        if progress.elapsed() >= Duration::from_secs(10) {
            progress = Instant::now();
            println!(
                "  {released} of {expected} released, {:.0} s after the first create",
                started.elapsed().as_secs_f64()
            );
        }
        if released >= expected {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {released} of {expected} pods released after {:?}; log tail:\n{}",
                case.timeout,
                tail(&cluster.logs(), 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_released = started.elapsed();
    // Let the last patches' follow-ups (Events, bindings) settle before reading metrics.
    tokio::time::sleep(Duration::from_millis(500)).await;
    follower.abort();
    sampler.abort();
    let peak_rss = *peak_rss.lock().unwrap_or_else(|p| p.into_inner());

    let timeline = std::mem::take(&mut *timeline.lock().unwrap_or_else(|p| p.into_inner()));
    let mut latencies: Vec<f64> = timeline
        .released
        .iter()
        .filter_map(|(uid, at)| {
            let created = timeline.created.get(uid)?;
            Some(at.saturating_duration_since(*created).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let first_created = timeline.created.values().min().copied();
    let last_created = timeline.created.values().max().copied();
    let spread = match (first_created, last_created) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => f64::NAN,
    };
    println!(
        "created {expected} pods in {:.2} s (seen over {:.2} s); all released {:.2} s after the \
         first create; {} latencies measured, {} watch errors",
        created_in.as_secs_f64(),
        spread,
        all_released.as_secs_f64(),
        latencies.len(),
        timeline.missed
    );
    println!(
        "per pod, created -> gate removed (as watched): p50 {:.3} s  p90 {:.3} s  p99 {:.3} s  max {:.3} s",
        quantile(&latencies, 0.50),
        quantile(&latencies, 0.90),
        quantile(&latencies, 0.99),
        quantile(&latencies, 1.0)
    );

    let metrics = cluster.replicas[0].metrics_text().await.unwrap_or_default();
    let buckets = histogram(&metrics, "gpufair_gate_release_latency_seconds");
    let count = buckets.last().map_or(0.0, |b| b.1);
    println!(
        "controller histogram (creationTimestamp, whole seconds), {count} releases: \
         p50 {:.3} s  p90 {:.3} s  p99 {:.3} s",
        histogram_quantile(&buckets, 0.50),
        histogram_quantile(&buckets, 0.90),
        histogram_quantile(&buckets, 0.99)
    );
    let cycles = histogram(&metrics, "gpufair_controller_cycle_seconds");
    println!(
        "controller cycles: {}  cycle p50 {:.3} s  p99 {:.3} s",
        cycles.last().map_or(0.0, |b| b.1),
        histogram_quantile(&cycles, 0.50),
        histogram_quantile(&cycles, 0.99)
    );
    if let Some((hwm, rss)) = memory_mib(&pid) {
        println!(
            "controller (gpufair-webhook serve, pid {pid}): VmHWM {hwm:.0} MiB, VmRSS {rss:.0} MiB \
             (highest RSS sampled every 0.2 s from the first create: {peak_rss:.0} MiB)"
        );
    }
    for process in [&cluster.plane.apiserver, &cluster.plane.etcd] {
        if let Some((hwm, rss)) = process.pid().and_then(|pid| memory_mib(&pid.to_string())) {
            println!("{}: VmHWM {hwm:.0} MiB, VmRSS {rss:.0} MiB", process.name);
        }
    }
    if let Some((hwm, rss)) = memory_mib("self") {
        println!(
            "this process (the bench and its watches): VmHWM {hwm:.0} MiB, VmRSS {rss:.0} MiB"
        );
    }
    println!("load average after the case: {}", load_average());
    Ok(())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() -> anyhow::Result<()> {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    gpufair_integration::binary("gpufair-webhook");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    let mut failures = 0;
    for case in CASES {
        if !filters.is_empty() && !filters.iter().any(|f| case.name == f) {
            continue;
        }
        if let Err(error) = runtime.block_on(run_case(case)) {
            failures += 1;
            println!("{} FAILED: {error:?}", case.name);
        }
    }
    if failures > 0 {
        bail!("{failures} case(s) failed");
    }
    Ok(())
}
