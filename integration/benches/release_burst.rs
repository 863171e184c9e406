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
//! server) shows the pod created to the moment it shows the gate removed, and to the moment it
//! shows the pod bound by kube-scheduler, all at full clock precision on this side; the watch's
//! own delay is in both ends and cancels out but for its jitter. The controller's own
//! `gpufair_gate_release_latency_seconds` histogram is printed beside it; it starts from
//! `creationTimestamp`, which has whole seconds, so it reads up to a second high.
//!
//! Then, on the same control plane, the same number of plain pods (a namespace the webhook
//! skips: no admission call, no gate) on nodes with room for all: created → bound without
//! gpufair. The ratio of the two p99s is gpufair's cost to the user. Last, kube-apiserver's own
//! `apiserver_admission_webhook_admission_duration_seconds` for gpufair's webhook: its
//! latency as the API server sees it.

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
    /// Whether the same burst of plain pods follows, for gpufair's cost side by side.
    without_gpufair: bool,
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
        without_gpufair: true,
    },
    Case {
        name: "flat-1000",
        pods: 1000,
        nodes: 125,
        gpus_per_node: 8,
        release_burst: 1,
        creates_in_flight: 500,
        timeout: Duration::from_secs(120),
        without_gpufair: true,
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
        // Twice the nodes and pods would measure the control plane on two cores, not gpufair.
        without_gpufair: false,
    },
];

/// When each pod was first seen, when its gate was seen gone and when it was seen bound, by UID.
#[derive(Default)]
struct Timeline {
    created: HashMap<String, Instant>,
    released: HashMap<String, Instant>,
    bound: HashMap<String, Instant>,
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

/// Records pod creations, gate removals and bindings from a watch of the namespace's pods.
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
            let is_gated = gated(&pod);
            if !timeline.created.contains_key(&uid) {
                timeline.created.insert(uid.clone(), now);
                if is_gated {
                    timeline.gated.insert(uid.clone());
                }
            }
            if !is_gated && timeline.gated.remove(&uid) {
                timeline.released.entry(uid.clone()).or_insert(now);
            }
            if !pod["spec"]["nodeName"].is_null() {
                timeline.bound.entry(uid).or_insert(now);
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

/// A Prometheus histogram read from `/metrics` text: cumulative (upper bound, count) pairs,
/// summed over the series whose labels contain every one of `labels` (`name="x"` each).
fn histogram(text: &str, name: &str, labels: &[&str]) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((series, count)) = rest.rsplit_once("} ") else {
            continue;
        };
        if !labels.iter().all(|l| series.contains(l)) {
            continue;
        }
        let Some(bound) = series
            .split(',')
            .find_map(|l| l.strip_prefix("le=\""))
            .map(|b| b.trim_end_matches('"'))
        else {
            continue;
        };
        let bound = if bound == "+Inf" {
            f64::INFINITY
        } else {
            let Ok(bound) = bound.parse() else { continue };
            bound
        };
        let Ok(count) = count.trim().parse::<f64>() else {
            continue;
        };
        match buckets.iter_mut().find(|(b, _)| *b == bound) {
            Some(bucket) => bucket.1 += count,
            None => buckets.push((bound, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
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

/// What one burst measured.
struct Burst {
    /// Pods created (the creates that failed are reported and left out).
    created: usize,
    /// From the first create to the last create's answer.
    created_in: Duration,
    /// From the first create until every pod was bound.
    all_bound: Duration,
    /// Per pod, created → gate removed (empty for pods without a gate).
    released: Vec<f64>,
    /// Per pod, created → bound.
    bound: Vec<f64>,
    /// Watch errors (each one a relist).
    missed: u64,
}

fn sorted_latencies(from: &HashMap<String, Instant>, to: &HashMap<String, Instant>) -> Vec<f64> {
    let mut latencies: Vec<f64> = to
        .iter()
        .filter_map(|(uid, at)| {
            let created = from.get(uid)?;
            Some(at.saturating_duration_since(*created).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

fn quantiles(sorted: &[f64]) -> String {
    format!(
        "p50 {:.3} s  p90 {:.3} s  p99 {:.3} s  max {:.3} s",
        quantile(sorted, 0.50),
        quantile(sorted, 0.90),
        quantile(sorted, 0.99),
        quantile(sorted, 1.0)
    )
}

/// Creates `count` one-GPU pods in `namespace`, `in_flight` at a time, and waits until every
/// one is bound. With `gpufair`, every pod must have been gated at creation.
async fn burst(
    cluster: &Cluster,
    namespace: &str,
    count: usize,
    in_flight: usize,
    timeout: Duration,
    gpufair: bool,
) -> anyhow::Result<Burst> {
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let follower = follow(cluster, namespace, Arc::clone(&timeline));
    // The watch's first list, before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let pods: Vec<Value> = (0..count)
        .map(|i| gpu_pod(namespace, &format!("p-{i:05}"), 1))
        .collect();
    let results: Vec<_> = futures::stream::iter(pods)
        .map(|pod| cluster.api.submit_pod(pod, None))
        .buffer_unordered(in_flight)
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
    let created = count - failed.len();
    ensure!(created > 0, "no pod was created");
    let gated_at_creation = results
        .iter()
        .filter(|r| r.as_ref().is_ok_and(gated))
        .count();
    if gpufair {
        ensure!(
            gated_at_creation == created,
            "{} pods were not gated at creation",
            created - gated_at_creation
        );
    } else {
        ensure!(
            gated_at_creation == 0,
            "{gated_at_creation} plain pods were gated"
        );
    }

    let deadline = Instant::now() + timeout;
    let mut progress = Instant::now();
    loop {
        let (released, bound) = {
            let timeline = timeline.lock().unwrap_or_else(|p| p.into_inner());
            (timeline.released.len(), timeline.bound.len())
        };
        if progress.elapsed() >= Duration::from_secs(10) {
            progress = Instant::now();
            println!(
                "  {released} released, {bound} bound of {created}, {:.0} s after the first create",
                started.elapsed().as_secs_f64()
            );
        }
        if bound >= created {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {released} released and {bound} bound of {created} pods after {timeout:?}; \
                 log tail:\n{}",
                tail(&cluster.logs(), 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_bound = started.elapsed();
    follower.abort();
    let timeline = std::mem::take(&mut *timeline.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Burst {
        created,
        created_in,
        all_bound,
        released: sorted_latencies(&timeline.created, &timeline.released),
        bound: sorted_latencies(&timeline.created, &timeline.bound),
        missed: timeline.missed,
    })
}

fn report(what: &str, burst: &Burst) {
    println!(
        "{what}: created {} pods in {:.2} s ({:.0} creates/s); all bound {:.2} s after the first \
         create; {} watch errors",
        burst.created,
        burst.created_in.as_secs_f64(),
        burst.created as f64 / burst.created_in.as_secs_f64(),
        burst.all_bound.as_secs_f64(),
        burst.missed
    );
    if !burst.released.is_empty() {
        println!("  created -> gate removed: {}", quantiles(&burst.released));
    }
    println!("  created -> bound:        {}", quantiles(&burst.bound));
}

/// The same burst of plain pods on the same control plane (a namespace the webhook skips),
/// and the ratio of the two create → bound p99s.
async fn compare_without_gpufair(
    cluster: &Cluster,
    case: &Case,
    with: &Burst,
) -> anyhow::Result<()> {
    let without = burst(
        cluster,
        "plain",
        case.pods,
        case.creates_in_flight,
        case.timeout,
        false,
    )
    .await?;
    report(
        "without gpufair (same control plane, no webhook, no gate)",
        &without,
    );
    println!(
        "create -> bound p99 with gpufair / without: {:.3} s / {:.3} s = {:.2}x; p50 {:.2}x",
        quantile(&with.bound, 0.99),
        quantile(&without.bound, 0.99),
        quantile(&with.bound, 0.99) / quantile(&without.bound, 0.99),
        quantile(&with.bound, 0.50) / quantile(&without.bound, 0.50)
    );

    Ok(())
}

async fn run_case(case: &Case) -> anyhow::Result<()> {
    // Room for both bursts: gpufair's pods stay bound while the plain ones arrive.
    let node_count = if case.without_gpufair {
        case.nodes * 2
    } else {
        case.nodes
    };
    println!(
        "\n== {}: {} one-GPU pods with gpufair{}, {node_count} nodes x {} GPUs, \
         --release-rate 50 --release-burst {} ==",
        case.name,
        case.pods,
        if case.without_gpufair {
            ", then as many plain ones"
        } else {
            ""
        },
        case.gpus_per_node,
        case.release_burst
    );
    let nodes = (0..node_count)
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
    cluster
        .api
        .ensure_namespace("plain", &[("gpufair.io/webhook", "skip")])
        .await?;
    println!(
        "cluster ready in {:.1} s (load average {})",
        setup.elapsed().as_secs_f64(),
        load_average()
    );

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
    let with = burst(
        &cluster,
        "team",
        case.pods,
        case.creates_in_flight,
        case.timeout,
        true,
    )
    .await?;
    sampler.abort();
    let peak_rss = *peak_rss.lock().unwrap_or_else(|p| p.into_inner());
    report("with gpufair", &with);

    let metrics = cluster.replicas[0].metrics_text().await.unwrap_or_default();
    let buckets = histogram(&metrics, "gpufair_gate_release_latency_seconds", &[]);
    let count = buckets.last().map_or(0.0, |b| b.1);
    println!(
        "  controller histogram (creationTimestamp, whole seconds), {count} releases: \
         p50 {:.3} s  p90 {:.3} s  p99 {:.3} s",
        histogram_quantile(&buckets, 0.50),
        histogram_quantile(&buckets, 0.90),
        histogram_quantile(&buckets, 0.99)
    );
    let cycles = histogram(&metrics, "gpufair_controller_cycle_seconds", &[]);
    println!(
        "  controller cycles: {}  cycle p50 {:.3} s  p99 {:.3} s",
        cycles.last().map_or(0.0, |b| b.1),
        histogram_quantile(&cycles, 0.50),
        histogram_quantile(&cycles, 0.99)
    );
    if let Some((hwm, rss)) = memory_mib(&pid) {
        println!(
            "  controller (gpufair-webhook serve, pid {pid}): VmHWM {hwm:.0} MiB, VmRSS {rss:.0} \
             MiB (highest RSS sampled every 0.2 s from the first create: {peak_rss:.0} MiB)"
        );
    }
    // kube-apiserver's view of the webhook, before the plain burst (which calls no webhook).
    let apiserver_metrics = cluster
        .api
        .client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await
        .context("kube-apiserver's /metrics")?;
    let webhook = histogram(
        &apiserver_metrics,
        "apiserver_admission_webhook_admission_duration_seconds",
        &["name=\"pods.gpufair.io\"", "operation=\"CREATE\""],
    );
    println!(
        "  kube-apiserver's apiserver_admission_webhook_admission_duration_seconds \
         (pods.gpufair.io, CREATE), {} calls: p50 {:.4} s  p99 {:.4} s",
        webhook.last().map_or(0.0, |b| b.1),
        histogram_quantile(&webhook, 0.50),
        histogram_quantile(&webhook, 0.99)
    );

    if case.without_gpufair {
        compare_without_gpufair(&cluster, case, &with).await?;
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
