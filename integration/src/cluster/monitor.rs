//! Watches pods and nodes through the API server as the components work and keeps, per pod,
//! when it was first seen gated, released (gate gone), bound, running and finished; and checks,
//! after each change, that no node is promised more GPUs than it has: bound pods that have not
//! finished, plus pods released onto the node (pinned by `metadata.name`) that have not bound
//! yet. The API server sends every change of a watched kind in order, so no state a pod passes
//! through is missed unless the watch is cut and relisted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::api::resource_version_of;

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// gpufair's scheduling gate.
pub const GATE: &str = "gpufair.io/admission";
/// The GPU resource the tests use: whole GPUs.
pub const GPU: &str = gpufair_core::units::WHOLE_GPU_RESOURCE;

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
/// each node's allocatable GPUs, and the nodes to check once a relist of pods is complete.
#[derive(Default)]
struct Tracked {
    versions: HashMap<String, u64>,
    promises: HashMap<String, (String, u32, String)>,
    by_node: HashMap<String, HashMap<String, (u32, String)>>,
    nodes: HashMap<String, u32>,
    /// While pods are relisted (after a cut watch), the view mixes pods as they are now with
    /// pods as they were before the cut (a pod that ended meanwhile still holds its GPUs until
    /// the relist reaches it), so checks wait for the end of the relist.
    checks_after_relist: BTreeSet<String>,
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

/// One event from either watch. Events are taken one at a time and never stored, so the
/// difference in size between a Pod and a Node is of no account.
#[allow(clippy::large_enum_variant)]
enum Watched {
    Pod(Event<Pod>),
    Node(Event<Node>),
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
            // Read by core's one quantity grammar; the harness wrote these requests itself.
            gpufair_core::quantity::parse_quantity(quantity).map_or(0, |gpus| gpus as u32)
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
    /// Starts watching pods and nodes of every namespace with `client`; the task runs until
    /// aborted.
    pub fn start(client: Client) -> (Monitor, JoinHandle<()>) {
        let monitor = Monitor {
            seen: Arc::new(Mutex::new(Seen::default())),
            started: Instant::now(),
        };
        let task_monitor = monitor.clone();
        let task = tokio::spawn(async move {
            let config = watcher::Config::default();
            // Backing off while the API server is down (the cases that restart it), rather
            // than retrying in a tight loop.
            let pods = watcher::watcher(Api::<Pod>::all(client.clone()), config.clone())
                .default_backoff()
                .map(|e| e.map(Watched::Pod))
                .boxed();
            let nodes = watcher::watcher(Api::<Node>::all(client), config)
                .default_backoff()
                .map(|e| e.map(Watched::Node))
                .boxed();
            let mut events = futures::stream::select(pods, nodes);
            let mut tracked = Tracked::default();
            let mut relisted_pods: Option<HashSet<String>> = None;
            while let Some(event) = events.next().await {
                let Ok(event) = event else {
                    // The watcher retries by itself; an error is only a missed beat.
                    continue;
                };
                task_monitor.take(event, &mut tracked, &mut relisted_pods);
            }
        });
        (monitor, task)
    }

    /// Folds one watch event in and checks the nodes it touched.
    fn take(&self, event: Watched, tracked: &mut Tracked, relisted: &mut Option<HashSet<String>>) {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut touched = BTreeSet::new();
        match event {
            Watched::Pod(Event::Apply(pod) | Event::InitApply(pod)) => {
                let pod = serde_json::to_value(pod).unwrap_or_default();
                if let Some(relisted) = relisted.as_mut() {
                    relisted.insert(
                        pod["metadata"]["uid"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    );
                }
                touched.extend(Self::fold_pod(&mut seen, tracked, &pod, now));
            }
            Watched::Pod(Event::Delete(pod)) => {
                let uid = pod.metadata.uid.unwrap_or_default();
                touched.extend(Self::fold_gone(&mut seen, tracked, &uid, now));
            }
            Watched::Node(Event::Apply(node) | Event::InitApply(node)) => {
                let node = serde_json::to_value(node).unwrap_or_default();
                tracked
                    .nodes
                    .insert(name_of(&node).to_string(), node_gpus(&node));
                touched.insert(name_of(&node).to_string());
            }
            Watched::Node(Event::Delete(node)) => {
                let name = node.metadata.name.unwrap_or_default();
                tracked.nodes.remove(&name);
                touched.insert(name);
            }
            // A (re)list of pods begins: pods it does not list again are gone.
            Watched::Pod(Event::Init) => *relisted = Some(HashSet::new()),
            Watched::Pod(Event::InitDone) => {
                if let Some(listed) = relisted.take() {
                    let vanished: Vec<String> = tracked
                        .versions
                        .keys()
                        .filter(|uid| !listed.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in vanished {
                        touched.extend(Self::fold_gone(&mut seen, tracked, &uid, now));
                    }
                }
            }
            Watched::Node(Event::Init | Event::InitDone) => {}
        }
        if relisted.is_some() {
            tracked.checks_after_relist.extend(touched);
            return;
        }
        touched.append(&mut tracked.checks_after_relist);
        self.check(&mut seen, tracked, touched, now);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn monitor() -> Monitor {
        Monitor {
            seen: Arc::new(Mutex::new(Seen::default())),
            started: Instant::now(),
        }
    }

    fn node(name: &str, gpus: u32) -> Watched {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"allocatable": {GPU: gpus.to_string()}}
        }))
        .expect("node");
        Watched::Node(Event::Apply(node))
    }

    fn bound_pod(uid: &str, node: &str, gpus: u32, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "team", "uid": uid, "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [{"name": "main",
                "resources": {"requests": {GPU: gpus.to_string()}}}]},
            "status": {"phase": phase}
        }))
        .expect("pod")
    }

    fn feed(monitor: &Monitor, events: Vec<Watched>) {
        let (mut tracked, mut relisted) = (Tracked::default(), None);
        for event in events {
            monitor.take(event, &mut tracked, &mut relisted);
        }
    }

    #[test]
    fn pod_gpus_reads_requests_then_limits_as_quantities() {
        let pod = serde_json::json!({"spec": {"containers": [
            {"resources": {"requests": {GPU: "2"}}},
            {"resources": {"limits": {GPU: "1e0"}}},
            {"resources": {}}
        ]}});
        assert_eq!(pod_gpus(&pod), 3);
    }

    #[test]
    fn a_relist_that_reaches_an_ended_pod_last_is_no_violation() {
        let monitor = monitor();
        feed(
            &monitor,
            vec![
                node("gpu-1", 4),
                Watched::Pod(Event::Apply(bound_pod("old", "gpu-1", 4, "Running"))),
                // The watch is cut; meanwhile `old` ended and `new` took its GPUs.
                Watched::Pod(Event::Init),
                Watched::Pod(Event::InitApply(bound_pod("new", "gpu-1", 4, "Running"))),
                Watched::Pod(Event::InitApply(bound_pod("old", "gpu-1", 4, "Succeeded"))),
                Watched::Pod(Event::InitDone),
            ],
        );
        assert_eq!(monitor.capacity_violations(), Vec::<String>::new());
    }

    #[test]
    fn a_node_over_promised_once_the_relist_is_complete_is_a_violation() {
        let monitor = monitor();
        feed(
            &monitor,
            vec![
                node("gpu-1", 4),
                Watched::Pod(Event::Init),
                Watched::Pod(Event::InitApply(bound_pod("a", "gpu-1", 4, "Running"))),
                Watched::Pod(Event::InitApply(bound_pod("b", "gpu-1", 1, "Running"))),
                Watched::Pod(Event::InitDone),
            ],
        );
        let violations = monitor.capacity_violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("promised 5 GPUs but has 4"));
    }

    #[test]
    fn outside_a_relist_each_change_is_checked_at_once() {
        let monitor = monitor();
        feed(
            &monitor,
            vec![
                node("gpu-1", 2),
                Watched::Pod(Event::Apply(bound_pod("a", "gpu-1", 2, "Running"))),
                Watched::Pod(Event::Apply(bound_pod("b", "gpu-1", 1, "Pending"))),
            ],
        );
        assert_eq!(monitor.capacity_violations().len(), 1);
    }
}
