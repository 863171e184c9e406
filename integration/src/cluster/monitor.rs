//! Watches the stand-in's store as the components work and keeps, per pod, when it was first
//! seen gated, released (gate gone), bound, running and finished; and checks, after each batch
//! of changes, that no node is promised more GPUs than it has: bound pods that have not
//! finished, plus pods released onto the node (pinned by `metadata.name`) that have not bound
//! yet.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;

use crate::standin::State;
use crate::standin::store::{Change, EventType, name_of, namespace_of, resource_version_of};

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

/// The monitor task's own memory: each pod's last version seen, where each unfinished pod is
/// bound or pinned (node, GPUs, `namespace/name`, by UID), the same promises gathered by node,
/// and each node's allocatable GPUs.
#[derive(Default)]
struct Tracked {
    versions: HashMap<String, u64>,
    promises: HashMap<String, (String, u32, String)>,
    by_node: HashMap<String, HashMap<String, (u32, String)>>,
    nodes: HashMap<String, u32>,
    /// Changes at or below this version were already read by the last full look.
    looked_at: u64,
}

impl Tracked {
    /// Records where pod `uid` is promised now (`None`: nowhere); returns the nodes whose
    /// total moved.
    fn promise(&mut self, uid: &str, promise: Option<(String, u32, String)>) -> Vec<String> {
        let mut touched = Vec::new();
        if let Some((node, _, _)) = self.promises.remove(uid) {
            if let Some(holders) = self.by_node.get_mut(&node) {
                holders.remove(uid);
                if holders.is_empty() {
                    self.by_node.remove(&node);
                }
            }
            touched.push(node);
        }
        if let Some((node, gpus, key)) = promise {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(uid.to_string(), (gpus, key.clone()));
            self.promises
                .insert(uid.to_string(), (node.clone(), gpus, key));
            touched.push(node);
        }
        touched
    }

    /// A node promised more GPUs than it has, described, or `None`.
    fn over(&self, node: &str, at: f64) -> Option<String> {
        let holders = self.by_node.get(node)?;
        let gpus: u32 = holders.values().map(|(g, _)| g).sum();
        let allocatable = self.nodes.get(node).copied().unwrap_or(0);
        if gpus <= allocatable {
            return None;
        }
        let mut holders: Vec<&str> = holders.values().map(|(_, k)| k.as_str()).collect();
        holders.sort_unstable();
        Some(format!(
            "at {at:.2}s node {node} was promised {gpus} GPUs but has {allocatable}: {holders:?}"
        ))
    }
}

fn node_gpus(node: &Value) -> u32 {
    node["status"]["allocatable"][GPU]
        .as_str()
        .and_then(|q| q.parse().ok())
        .unwrap_or(0)
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
    ///
    /// The monitor reads the store's change stream and folds each change into what it knows,
    /// so its work per change does not grow with the number of pods. Only when it falls
    /// behind the stream (and so has missed changes) does it look at every pod again.
    pub fn start(state: Arc<State>) -> (Monitor, JoinHandle<()>) {
        let monitor = Monitor {
            seen: Arc::new(Mutex::new(Seen::default())),
            started: Instant::now(),
        };
        let task_monitor = monitor.clone();
        let task = tokio::spawn(async move {
            let mut changes = state.store.subscribe();
            let mut tracked = Tracked::default();
            task_monitor.look_at_everything(&state, &mut tracked);
            loop {
                let first = tokio::select! {
                    received = changes.recv() => received,
                    _ = state.shutdown.cancelled() => return,
                };
                let mut batch = Vec::new();
                let mut behind = false;
                match first {
                    Ok(change) => batch.push(change),
                    Err(RecvError::Lagged(_)) => behind = true,
                    Err(RecvError::Closed) => return,
                }
                // Everything already waiting is folded in one go, and the capacity check runs
                // once after it, as it ran once per look before.
                loop {
                    match changes.try_recv() {
                        Ok(change) => batch.push(change),
                        Err(TryRecvError::Lagged(_)) => behind = true,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Closed) => return,
                    }
                }
                if behind {
                    task_monitor.look_at_everything(&state, &mut tracked);
                } else {
                    task_monitor.fold(&batch, &mut tracked);
                }
            }
        });
        (monitor, task)
    }

    /// Takes in one pod as the store holds it now.
    fn fold_pod(seen: &mut Seen, tracked: &mut Tracked, pod: &Value, now: Instant) -> Vec<String> {
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        tracked
            .versions
            .insert(uid.clone(), resource_version_of(pod));
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
        tracked.promise(&uid, promise)
    }

    /// Notes that pod `uid` is gone from the store.
    fn fold_gone(seen: &mut Seen, tracked: &mut Tracked, uid: &str, now: Instant) -> Vec<String> {
        tracked.versions.remove(uid);
        if let Some(record) = seen.pods.get_mut(uid)
            && record.gone.is_none()
        {
            record.gone = Some(now);
            if record.running.is_some() && record.finished.is_none() {
                record.finished = Some(now);
            }
        }
        tracked.promise(uid, None)
    }

    /// Checks the nodes whose promises or allocatable moved.
    fn check(&self, seen: &mut Seen, tracked: &Tracked, touched: BTreeSet<String>, now: Instant) {
        let at = now.duration_since(self.started).as_secs_f64();
        for node in touched {
            if let Some(violation) = tracked.over(&node, at) {
                seen.violations.push(violation);
            }
        }
    }

    /// Folds a batch of changes, in the order the store made them.
    fn fold(&self, batch: &[Arc<Change>], tracked: &mut Tracked) {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut touched = BTreeSet::new();
        for change in batch {
            if change.resource_version <= tracked.looked_at {
                continue;
            }
            let object = &change.object;
            match (change.resource.as_str(), change.event_type) {
                ("pods", EventType::Deleted) => {
                    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
                    touched.extend(Self::fold_gone(&mut seen, tracked, uid, now));
                }
                ("pods", _) => touched.extend(Self::fold_pod(&mut seen, tracked, object, now)),
                ("nodes", EventType::Deleted) => {
                    tracked.nodes.remove(name_of(object));
                    touched.insert(name_of(object).to_string());
                }
                ("nodes", _) => {
                    tracked
                        .nodes
                        .insert(name_of(object).to_string(), node_gpus(object));
                    touched.insert(name_of(object).to_string());
                }
                _ => {}
            }
        }
        self.check(&mut seen, tracked, touched, now);
    }

    /// One look at every pod and node in the store: at the start, and after falling behind
    /// the change stream. Only pods whose resourceVersion moved since they were last seen are
    /// copied out of the store (under its lock).
    fn look_at_everything(&self, state: &State, tracked: &mut Tracked) {
        let now = Instant::now();
        let (changed, present, version) = {
            let inner = state.store.lock();
            let (Ok(pod_kind), Ok(node_kind)) = (inner.kind("", "pods"), inner.kind("", "nodes"))
            else {
                return;
            };
            let mut changed = Vec::new();
            let mut present = HashSet::new();
            for pod in inner.iter(&pod_kind, None) {
                let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
                present.insert(uid.to_string());
                if tracked.versions.get(uid) != Some(&resource_version_of(pod)) {
                    changed.push(pod.clone());
                }
            }
            tracked.nodes = inner
                .iter(&node_kind, None)
                .map(|n| (name_of(n).to_string(), node_gpus(n)))
                .collect();
            (changed, present, inner.resource_version())
        };
        tracked.looked_at = version;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for pod in &changed {
            Self::fold_pod(&mut seen, tracked, pod, now);
        }
        let vanished: Vec<String> = seen
            .pods
            .keys()
            .filter(|uid| !present.contains(*uid))
            .cloned()
            .collect();
        for uid in vanished {
            Self::fold_gone(&mut seen, tracked, &uid, now);
        }
        let every_node: BTreeSet<String> = tracked.by_node.keys().cloned().collect();
        self.check(&mut seen, tracked, every_node, now);
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
