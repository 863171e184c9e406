//! The storm's steady work: GPU pods submitted through the API (and so through admission) to
//! keep a backlog waiting at the gate, each running a few seconds; and, as a cluster's garbage
//! collectors would, finished pods and their Events removed so the store stays small over
//! thousands of pods, with every removed `Released` Event counted first.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cluster::Monitor;
use crate::cluster::events::pod_event;
use crate::cluster::monitor::GATE;
use crate::cluster::pods::gpu_pod;
use crate::standin::RUN_SECONDS;
use crate::standin::State;

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

/// `Released` Events counted per pod UID as they are removed with their pods.
#[derive(Debug, Clone, Default)]
pub struct ReleaseTally {
    removed: Arc<Mutex<HashMap<String, (String, u64)>>>,
}

impl ReleaseTally {
    fn add(&self, uid: &str, pod: String, count: u64) {
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed.entry(uid.to_string()).or_insert((pod, 0)).1 += count;
    }

    /// Pods with more than one `Released` Event: those already removed plus those still stored.
    pub fn released_more_than_once(&self, state: &State) -> Vec<(String, u64)> {
        // Store first, then the tally (the reaper's order): no Event is between the two.
        let inner = state.store.lock();
        let mut events = Vec::new();
        for group in ["", "events.k8s.io"] {
            if let Ok(kind) = inner.kind(group, "events") {
                events.extend(inner.iter(&kind, None).cloned());
            }
        }
        let mut counts = self
            .removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        drop(inner);
        for event in events {
            if let Some(event) = pod_event(&event)
                && event.reason == "Released"
            {
                counts
                    .entry(event.pod_uid.clone())
                    .or_insert((format!("{}/{}", event.namespace, event.pod), 0))
                    .1 += event.count;
            }
        }
        let mut twice: Vec<(String, u64)> = counts.into_values().filter(|(_, n)| *n > 1).collect();
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
    /// How long a finished pod stays in the store before it is removed, as a Job's
    /// `ttlSecondsAfterFinished` or a cleanup controller would remove it.
    pub finished_pod_ttl: Duration,
    pub seed: u64,
}

impl Workload {
    /// Starts submitting through `client` and reaping in `state`.
    pub fn start(
        client: kube::Client,
        state: Arc<State>,
        monitor: Monitor,
        options: WorkloadOptions,
    ) -> Workload {
        let counts = Arc::new(Mutex::new(SubmitCounts::default()));
        let tally = ReleaseTally::default();
        let stop_submitting = CancellationToken::new();
        let stop_reaping = CancellationToken::new();
        let finished_pod_ttl = options.finished_pod_ttl;
        let tasks = vec![
            tokio::spawn(submit(
                client,
                monitor.clone(),
                options,
                Arc::clone(&counts),
                stop_submitting.clone(),
            )),
            tokio::spawn(reap(
                state,
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
            pod["metadata"]["annotations"][RUN_SECONDS] = json!(seconds.to_string());
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

/// Finished pods are removed `ttl` after the monitor saw them finish (checked every half
/// second); their Events ten seconds after that, once counted (a removed pod gets no new Events).
async fn reap(
    state: Arc<State>,
    monitor: Monitor,
    tally: ReleaseTally,
    ttl: Duration,
    stop: CancellationToken,
) {
    let mut removed_at: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.cancelled() => return,
        }
        let finished: Vec<_> = monitor
            .pods()
            .into_iter()
            .filter(|p| p.gone.is_none() && p.finished.is_some_and(|t| t.elapsed() >= ttl))
            .collect();
        {
            let mut inner = state.store.lock();
            let Ok(pods) = inner.kind("", "pods") else {
                continue;
            };
            for pod in &finished {
                let uid_matches = inner
                    .try_get(&pods, &pod.namespace, &pod.name)
                    .is_some_and(|p| p["metadata"]["uid"] == pod.uid.as_str());
                if uid_matches {
                    inner.remove_now(&pods, &pod.namespace, &pod.name);
                    removed_at.insert(pod.uid.clone(), Instant::now());
                }
            }
        }
        let settled: HashSet<String> = removed_at
            .iter()
            .filter(|(_, at)| at.elapsed() >= Duration::from_secs(10))
            .map(|(uid, _)| uid.clone())
            .collect();
        if settled.is_empty() {
            continue;
        }
        let mut inner = state.store.lock();
        for group in ["", "events.k8s.io"] {
            let Ok(kind) = inner.kind(group, "events") else {
                continue;
            };
            let doomed: Vec<(String, String, serde_json::Value)> = inner
                .iter(&kind, None)
                .filter_map(|event| {
                    let parsed = pod_event(event)?;
                    settled.contains(&parsed.pod_uid).then(|| {
                        (
                            event["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            event["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            event.clone(),
                        )
                    })
                })
                .collect();
            for (namespace, name, event) in doomed {
                if let Some(parsed) = pod_event(&event)
                    && parsed.reason == "Released"
                {
                    tally.add(
                        &parsed.pod_uid,
                        format!("{}/{}", parsed.namespace, parsed.pod),
                        parsed.count,
                    );
                }
                inner.remove_now(&kind, &namespace, &name);
            }
        }
        for uid in &settled {
            removed_at.remove(uid);
        }
    }
}
