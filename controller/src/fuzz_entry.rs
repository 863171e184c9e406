//! Bodies of the fuzz targets that exercise this crate, behind a plain API so the same code runs
//! under libFuzzer (`fuzz/`, nightly) and in the stable replay of the kept corpus
//! (`tests/fuzz_corpus.rs`). Each body panics only when a promise is broken.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gpufair_api::{GpuNodeReport, Queue};
use gpufair_core::admission::{CycleMemory, DecideOptions, KeptHold, decide};
use gpufair_core::mutation::{DEFAULT_GATE, ResourcePattern};
use gpufair_core::units::ResourceTable;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Deserialize;
use serde_json::Value;

use crate::plan::plan;
use crate::snapshot::{GpuKinds, Memory, Objects, build};

/// What the controller's caches could hold, as JSON: any pods, nodes, Queues and
/// GpuNodeReports, plus the parts of its memory that come from earlier cycles.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Cached {
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    queues: Vec<Queue>,
    reports: Vec<GpuNodeReport>,
    now: f64,
    /// Pod UID → node it was released to by this leader.
    released: HashMap<String, String>,
    /// Pod UID → resourceVersion whose release failed.
    stale: HashMap<String, String>,
    expired: HashSet<String>,
    previous_holds: Vec<(String, Vec<String>)>,
    /// Victim workload → when its eviction was refused.
    refused_evictions: HashMap<String, f64>,
}

/// One controller cycle without the API calls: snapshot, decision, and the requests it would
/// send. Whatever the caches hold, it answers; the indices it hands out stay parallel; and
/// every release patch applies to the cached pod it was built from.
pub fn controller_snapshot(data: &[u8]) {
    let Ok(cached) = serde_json::from_slice::<Cached>(data) else {
        return;
    };
    let pods: Vec<Arc<Pod>> = cached.pods.into_iter().map(Arc::new).collect();
    let nodes: Vec<Arc<Node>> = cached.nodes.into_iter().map(Arc::new).collect();
    let queues: Vec<Arc<Queue>> = cached.queues.into_iter().map(Arc::new).collect();
    let reports: Vec<Arc<GpuNodeReport>> = cached.reports.into_iter().map(Arc::new).collect();
    let memory = Memory {
        now: if cached.now.is_finite() {
            cached.now
        } else {
            0.0
        },
        released: cached.released,
        stale: cached.stale,
        expired: cached.expired,
        carried: CycleMemory::with_holds(
            cached
                .previous_holds
                .into_iter()
                .map(|(workload, nodes)| KeptHold {
                    workload,
                    nodes,
                    ..KeptHold::default()
                })
                .collect(),
        ),
        refused_evictions: cached.refused_evictions,
        ..Memory::default()
    };
    let gpus = GpuKinds {
        patterns: [
            "nvidia.com/gpu",
            "nvidia.com/mig-*",
            "nvidia.com/gpu.shared",
        ]
        .into_iter()
        .map(ResourcePattern::parse)
        .collect(),
        table: ResourceTable::default(),
    };
    let objects = Objects {
        pods: &pods,
        nodes: &nodes,
        queues: &queues,
        reports: &reports,
    };
    let built = build(&objects, &memory, DEFAULT_GATE, &gpus);
    assert_eq!(built.pending.groups(), built.snapshot.pending.len());
    assert_eq!(built.running.len(), built.snapshot.running.len());
    assert_eq!(built.usage.len(), built.snapshot.queues.len());
    for (pods, workload) in built.pending.iter().zip(&built.snapshot.pending) {
        assert_eq!(pods.len(), workload.pods.len());
    }
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    let actions = plan(&built, &decisions, DEFAULT_GATE);

    // Release patches against the cached pods, where the cache is one a real API server could
    // produce (unique UIDs, a resourceVersion on every pod).
    let mut by_uid: HashMap<&str, &Pod> = HashMap::new();
    let mut unique = true;
    for pod in &pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        unique &= by_uid.insert(uid, pod).is_none() && pod.metadata.resource_version.is_some();
    }
    if !unique {
        return;
    }
    for release in actions.releases.iter().flat_map(|w| &w.pods) {
        let pod = by_uid[&*release.pod().uid];
        let mut document: Value = serde_json::to_value(pod).expect("a Pod serializes");
        let patch: json_patch::Patch =
            serde_json::from_value(release.json_patch()).expect("the release is a JSON patch");
        if let Err(err) = json_patch::patch(&mut document, &patch) {
            panic!("release patch does not apply to the cached pod: {err}");
        }
    }
}
