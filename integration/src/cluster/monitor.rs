//! Watches the stand-in's store as the components work and keeps, per pod, when it was first
//! seen gated, released (gate gone), bound, running and finished; and checks on every change
//! that no node is promised more GPUs than it has: bound pods that have not finished, plus
//! pods released onto the node (pinned by `metadata.name`) that have not bound yet.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::standin::State;
use crate::standin::store::{name_of, namespace_of, resource_version_of};

/// gpufair's scheduling gate.
pub const GATE: &str = "gpufair.io/admission";
/// The GPU resource the tests use.
pub const GPU: &str = "nvidia.com/gpu";

/// What happened to one pod, as the store showed it (times from the monitor's clock).
#[derive(Debug, Clone, Default)]
pub struct PodRecord {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub group: Option<String>,
    pub gpus: u32,
    pub first_seen: Option<Instant>,
    pub gated_at_first_sight: bool,
    pub released: Option<Instant>,
    pub bound: Option<Instant>,
    pub running: Option<Instant>,
    pub finished: Option<Instant>,
    /// Deletion started (eviction or delete) while the pod ran.
    pub deleting: Option<Instant>,
    pub gone: Option<Instant>,
    pub node: Option<String>,
    pub phase: String,
}

impl PodRecord {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The monitor task's own memory between looks: each pod's last version seen, and where each
/// unfinished pod is bound or pinned (node, GPUs, `namespace/name`), by UID.
#[derive(Default)]
struct Tracked {
    versions: HashMap<String, u64>,
    promises: HashMap<String, (String, u32, String)>,
}

#[derive(Default)]
struct Seen {
    pods: BTreeMap<String, PodRecord>,
    violations: Vec<String>,
}

/// The monitor's findings so far; cheap to clone.
#[derive(Clone)]
pub struct Monitor {
    seen: Arc<Mutex<Seen>>,
    pub started: Instant,
}

/// GPUs a pod requests (sum over containers, requests defaulting to limits).
pub fn pod_gpus(pod: &Value) -> u32 {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let resources = &c["resources"];
            let quantity = resources["requests"][GPU]
                .as_str()
                .or_else(|| resources["limits"][GPU].as_str())
                .unwrap_or("0");
            quantity.parse::<u32>().unwrap_or(0)
        })
        .sum()
}

fn gated(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|gates| gates.iter().any(|g| g["name"] == GATE))
}

/// The node a released, unbound pod is pinned to (a `metadata.name` matchField).
pub fn pinned_node(pod: &Value) -> Option<String> {
    let terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()?;
    terms.iter().find_map(|term| {
        term["matchFields"]
            .as_array()?
            .iter()
            .find(|f| f["key"] == "metadata.name" && f["operator"] == "In")
            .and_then(|f| f["values"].as_array())
            .filter(|v| v.len() == 1)
            .and_then(|v| v[0].as_str())
            .map(str::to_string)
    })
}

fn finished(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

impl Monitor {
    /// Starts following the store; the task ends with the stand-in.
    pub fn start(state: Arc<State>) -> (Monitor, JoinHandle<()>) {
        let monitor = Monitor {
            seen: Arc::new(Mutex::new(Seen::default())),
            started: Instant::now(),
        };
        let task_monitor = monitor.clone();
        let task = tokio::spawn(async move {
            let mut revisions = state.store.revisions();
            let mut tracked = Tracked::default();
            loop {
                revisions.mark_unchanged();
                task_monitor.observe(&state, &mut tracked);
                tokio::select! {
                    changed = revisions.changed() => if changed.is_err() { return },
                    _ = state.shutdown.cancelled() => return,
                }
            }
        });
        (monitor, task)
    }

    /// One look at the store. Only pods whose resourceVersion moved since the last look are
    /// copied out of the store (under its lock): copying every pod on every change held the lock
    /// long enough, with thousands of pods, to slow the API server the components use.
    fn observe(&self, state: &State, tracked: &mut Tracked) {
        let now = Instant::now();
        let (changed, present, nodes) = {
            let inner = state.store.lock();
            let (Ok(pod_kind), Ok(node_kind)) = (inner.kind("", "pods"), inner.kind("", "nodes"))
            else {
                return;
            };
            let mut changed = Vec::new();
            let mut present = HashSet::new();
            for pod in inner.iter(&pod_kind, None) {
                let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
                let version = resource_version_of(pod);
                present.insert(uid.to_string());
                if tracked.versions.get(uid) != Some(&version) {
                    tracked.versions.insert(uid.to_string(), version);
                    changed.push(pod.clone());
                }
            }
            let nodes: HashMap<String, u32> = inner
                .iter(&node_kind, None)
                .map(|n| {
                    let gpus = n["status"]["allocatable"][GPU]
                        .as_str()
                        .and_then(|q| q.parse().ok())
                        .unwrap_or(0);
                    (name_of(n).to_string(), gpus)
                })
                .collect();
            (changed, present, nodes)
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for pod in &changed {
            let uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let record = seen.pods.entry(uid.clone()).or_insert_with(|| PodRecord {
                uid: uid.clone(),
                namespace: namespace_of(pod).to_string(),
                name: name_of(pod).to_string(),
                queue: pod["metadata"]["labels"]["gpufair.io/queue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                group: pod["metadata"]["labels"]["gpufair.io/pod-group"]
                    .as_str()
                    .map(str::to_string),
                gpus: pod_gpus(pod),
                first_seen: Some(now),
                gated_at_first_sight: gated(pod),
                ..PodRecord::default()
            });
            let is_gated = gated(pod);
            if record.gated_at_first_sight && !is_gated && record.released.is_none() {
                record.released = Some(now);
            }
            let node = pod["spec"]["nodeName"].as_str().map(str::to_string);
            if node.is_some() && record.bound.is_none() {
                record.bound = Some(now);
            }
            record.phase = pod["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if record.phase == "Running" && record.running.is_none() {
                record.running = Some(now);
            }
            if finished(pod) && record.finished.is_none() {
                record.finished = Some(now);
            }
            if !pod["metadata"]["deletionTimestamp"].is_null() && record.deleting.is_none() {
                record.deleting = Some(now);
            }
            let place = node.clone().or_else(|| {
                (!is_gated && record.gated_at_first_sight)
                    .then(|| pinned_node(pod))
                    .flatten()
            });
            if node.is_some() {
                record.node = node;
            } else if record.node.is_none() {
                record.node = place.clone();
            }
            let promise = place
                .filter(|_| !finished(pod))
                .map(|node| (node, record.gpus, record.key()));
            match promise {
                Some(promise) => tracked.promises.insert(uid, promise),
                None => tracked.promises.remove(&uid),
            };
        }
        tracked.versions.retain(|uid, _| present.contains(uid));
        tracked.promises.retain(|uid, _| present.contains(uid));
        for record in seen.pods.values_mut() {
            if !present.contains(&record.uid) && record.gone.is_none() {
                record.gone = Some(now);
                if record.running.is_some() && record.finished.is_none() {
                    record.finished = Some(now);
                }
            }
        }
        let mut promised: HashMap<&str, (u32, Vec<&str>)> = HashMap::new();
        for (node, gpus, key) in tracked.promises.values() {
            let entry = promised.entry(node).or_default();
            entry.0 += gpus;
            entry.1.push(key);
        }
        let mut violations = Vec::new();
        for (node, (gpus, holders)) in promised {
            let allocatable = nodes.get(node).copied().unwrap_or(0);
            if gpus > allocatable {
                let at = now.duration_since(self.started).as_secs_f64();
                let mut holders = holders;
                holders.sort_unstable();
                violations.push(format!(
                    "at {at:.2}s node {node} was promised {gpus} GPUs but has {allocatable}: {holders:?}"
                ));
            }
        }
        seen.violations.extend(violations);
    }

    /// Every pod seen so far, by UID.
    pub fn pods(&self) -> Vec<PodRecord> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pods
            .values()
            .cloned()
            .collect()
    }

    /// How many pods seen so far satisfy `state` (without copying the records).
    pub fn count(&self, state: impl Fn(&PodRecord) -> bool) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pods
            .values()
            .filter(|p| state(p))
            .count()
    }

    /// The pod `namespace/name` (the latest one of that name).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodRecord> {
        self.pods()
            .into_iter()
            .filter(|p| p.namespace == namespace && p.name == name)
            .max_by_key(|p| p.first_seen)
    }

    /// Nodes promised more GPUs than they have, as found so far.
    pub fn capacity_violations(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .violations
            .clone()
    }

    /// Seconds since the monitor started.
    pub fn since_start(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }
}
