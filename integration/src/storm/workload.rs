//! The storm's steady work: GPU pods submitted through the API (and so through admission) to
//! keep a backlog waiting at the gate, each running a few seconds (kwok completes it); and, as
//! a cluster's garbage collectors would, finished pods and their Events deleted through the API
//! (with the admin's client) so etcd stays small over thousands of pods, with every deleted
//! `Released` Event counted first.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cluster::events::pod_event;
use crate::cluster::monitor::GATE;
use crate::cluster::pods::gpu_pod;
use crate::cluster::{KubeApi, Monitor};
use crate::controlplane::kwok::RUN_FOR;

/// The queues the storm's pods go to (namespace = queue name).
pub const QUEUES: [&str; 2] = ["storm-a", "storm-b"];

/// A uniform draw in `[0, 1)`.
pub fn unit(rng: &mut Pcg64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// What the submitter has done so far.
#[derive(Debug, Clone, Default)]
pub struct SubmitCounts {
    pub submitted: u64,
    /// Creates refused or failed (admission unreachable for a moment, say); retried later.
    pub failed: u64,
    /// Why the latest create failed, while the latest one did.
    pub last_error: Option<String>,
    /// The first failure's reason.
    pub first_error: Option<String>,
    /// Pods created without the gate: admission let a GPU pod past unchecked.
    pub ungated: Vec<String>,
}

/// A `Released` Event counted before it was deleted: its pod's UID, `namespace/name`, and
/// its count.
type Counted = (String, String, u64);

/// `Released` Events counted as the reaper deletes them, by the Event's own UID. Listing the
/// Events still stored and reading the tally are two steps that a deletion may fall between;
/// keyed by Event, one seen in both is counted once.
#[derive(Debug, Clone, Default)]
pub struct ReleaseTally {
    removed: Arc<Mutex<HashMap<String, Counted>>>,
}

fn released_event(event: &serde_json::Value) -> Option<(String, Counted)> {
    let parsed = pod_event(event).filter(|e| e.reason == "Released")?;
    let uid = event["metadata"]["uid"].as_str()?.to_string();
    Some((
        uid,
        (
            parsed.pod_uid,
            format!("{}/{}", parsed.namespace, parsed.pod),
            parsed.count,
        ),
    ))
}

impl ReleaseTally {
    fn add(&self, event: &serde_json::Value) {
        if let Some((uid, counted)) = released_event(event) {
            let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
            let entry = removed.entry(uid).or_insert_with(|| counted.clone());
            entry.2 = entry.2.max(counted.2);
        }
    }

    /// Pods with more than one `Released` Event: those already deleted plus `stored`, the
    /// Events the API server holds (listed before this call).
    pub fn released_more_than_once(&self, stored: &[serde_json::Value]) -> Vec<(String, u64)> {
        let mut by_event = self
            .removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (uid, counted) in stored.iter().filter_map(released_event) {
            let entry = by_event.entry(uid).or_insert_with(|| counted.clone());
            entry.2 = entry.2.max(counted.2);
        }
        let mut by_pod: HashMap<String, (String, u64)> = HashMap::new();
        for (pod_uid, pod, count) in by_event.into_values() {
            by_pod.entry(pod_uid).or_insert((pod, 0)).1 += count;
        }
        let mut twice: Vec<(String, u64)> = by_pod.into_values().filter(|(_, n)| *n > 1).collect();
        twice.sort();
        twice
    }
}

/// The running workload: a submitter and a reaper, stopped together.
pub struct Workload {
    pub counts: Arc<Mutex<SubmitCounts>>,
    pub tally: ReleaseTally,
    stop_submitting: CancellationToken,
    stop_reaping: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// How the pods look and how many wait.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    /// Gated pods kept waiting: enough that every freed GPU is taken by a release at once.
    pub backlog: usize,
    /// Run time of each pod, drawn uniformly from this range (seconds).
    pub run_seconds: (f64, f64),
    /// Share of pods asking for 2 GPUs (the rest ask for 1).
    pub two_gpu_share: f64,
    /// How long a finished pod stays before it is deleted, as a Job's
    /// `ttlSecondsAfterFinished` or a cleanup controller would delete it.
    pub finished_pod_ttl: Duration,
    pub seed: u64,
}

impl Workload {
    /// Starts submitting and reaping through `api` (the admin's client).
    pub fn start(api: KubeApi, monitor: Monitor, options: WorkloadOptions) -> Workload {
        let counts = Arc::new(Mutex::new(SubmitCounts::default()));
        let tally = ReleaseTally::default();
        let stop_submitting = CancellationToken::new();
        let stop_reaping = CancellationToken::new();
        let finished_pod_ttl = options.finished_pod_ttl;
        let tasks = vec![
            tokio::spawn(submit(
                api.client.clone(),
                monitor.clone(),
                options,
                Arc::clone(&counts),
                stop_submitting.clone(),
            )),
            tokio::spawn(reap(
                api,
                monitor,
                tally.clone(),
                finished_pod_ttl,
                stop_reaping.clone(),
            )),
        ];
        Workload {
            counts,
            tally,
            stop_submitting,
            stop_reaping,
            tasks,
        }
    }

    pub fn counts(&self) -> SubmitCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// No new pods from now on; those submitted run to the end.
    pub fn stop_submitting(&self) {
        self.stop_submitting.cancel();
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop_submitting.cancel();
        self.stop_reaping.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Gated pods not yet released (and not gone).
pub fn waiting(monitor: &Monitor) -> usize {
    monitor.count(|p| p.gated_at_first_sight && p.released.is_none() && p.gone.is_none())
}

async fn submit(
    client: kube::Client,
    monitor: Monitor,
    options: WorkloadOptions,
    counts: Arc<Mutex<SubmitCounts>>,
    stop: CancellationToken,
) {
    let mut rng = Pcg64::seed_from_u64(options.seed);
    let mut next = 0u64;
    loop {
        if waiting(&monitor) < options.backlog {
            let queue = QUEUES[(next % 2) as usize];
            let gpus = if unit(&mut rng) < options.two_gpu_share {
                2
            } else {
                1
            };
            let (low, high) = options.run_seconds;
            let seconds = ((low + (high - low) * unit(&mut rng)) * 10.0).round() / 10.0;
            let name = format!("storm-{next}");
            next += 1;
            let mut pod = gpu_pod(queue, &name, gpus);
            pod["apiVersion"] = json!("v1");
            pod["kind"] = json!("Pod");
            pod["metadata"]["annotations"][RUN_FOR] = json!(format!("{seconds}s"));
            let result = match serde_json::from_value::<Pod>(pod) {
                Ok(pod) => Api::<Pod>::namespaced(client.clone(), queue)
                    .create(&PostParams::default(), &pod)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("pod {name}: {e}")),
            };
            let refused = result.is_err();
            let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(created) => {
                    counts.submitted += 1;
                    counts.last_error = None;
                    let gated = created
                        .spec
                        .and_then(|s| s.scheduling_gates)
                        .is_some_and(|g| g.iter().any(|g| g.name == GATE));
                    if !gated {
                        counts.ungated.push(format!("{queue}/{name}"));
                    }
                }
                Err(error) => {
                    counts.failed += 1;
                    counts.first_error.get_or_insert_with(|| error.clone());
                    counts.last_error = Some(error);
                }
            }
            drop(counts);
            // A refusal (admission not reachable for a moment, a Queue not seen yet) is retried
            // after a pause rather than at once.
            if !refused {
                continue;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Finished pods are deleted `ttl` after the monitor saw them finish (checked every half
/// second); their Events ten seconds after that, each counted first (a deleted pod gets no new
/// Events).
async fn reap(
    api: KubeApi,
    monitor: Monitor,
    tally: ReleaseTally,
    ttl: Duration,
    stop: CancellationToken,
) {
    let mut removed_at: HashMap<String, Instant> = HashMap::new();
    let mut tried: HashSet<String> = HashSet::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.cancelled() => return,
        }
        let finished: Vec<_> = monitor
            .pods()
            .into_iter()
            .filter(|p| {
                p.gone.is_none()
                    && !tried.contains(&p.uid)
                    && p.finished.is_some_and(|t| t.elapsed() >= ttl)
            })
            .collect();
        for pod in &finished {
            let pods: Api<Pod> = Api::namespaced(api.client.clone(), &pod.namespace);
            // Only this pod, not a later one of the same name.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(pod.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default().grace_period(0)
            };
            match pods.delete(&pod.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                // Tried again next time round.
                Err(_) => continue,
            }
            tried.insert(pod.uid.clone());
            removed_at.insert(pod.uid.clone(), Instant::now());
        }
        let settled: HashSet<String> = removed_at
            .iter()
            .filter(|(_, at)| at.elapsed() >= Duration::from_secs(10))
            .map(|(uid, _)| uid.clone())
            .collect();
        if settled.is_empty() {
            continue;
        }
        let mut all_deleted = true;
        for namespace in QUEUES {
            let Ok(events) = api.events(Some(namespace)).await else {
                all_deleted = false;
                continue;
            };
            let deleting: Api<Event> = Api::namespaced(api.client.clone(), namespace);
            for event in events {
                if !pod_event(&event).is_some_and(|e| settled.contains(&e.pod_uid)) {
                    continue;
                }
                tally.add(&event);
                let name = event["metadata"]["name"].as_str().unwrap_or_default();
                match deleting.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(_) => all_deleted = false,
                }
            }
        }
        if all_deleted {
            for uid in &settled {
                removed_at.remove(uid);
            }
        }
    }
}
