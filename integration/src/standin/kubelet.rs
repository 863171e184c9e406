//! A kubelet stand-in for every node: a bound pod starts Running (and Ready) at once; a pod
//! with the annotation [`RUN_SECONDS`] finishes (Succeeded, exit code 0) that many seconds after
//! it started; a pod in graceful deletion is removed once its grace period has passed since
//! the kubelet saw the deletion. Pods without the annotation run until deleted.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::scheduler::set_condition;
use super::status::ApiError;
use super::store::{Inner, Target, name_of, namespace_of, now_rfc3339};

/// Annotation giving a pod's run time in seconds (a decimal number).
pub const RUN_SECONDS: &str = "standin.gpufair.io/run-seconds";

/// What the kubelet remembers between passes: when each pod started and when each deletion
/// is due, at sub-second precision (object timestamps have whole seconds).
#[derive(Default)]
pub struct Kubelet {
    started: HashMap<String, Instant>,
    deletions: HashMap<String, Instant>,
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn run_time(pod: &Value) -> Option<Duration> {
    let text = pod["metadata"]["annotations"][RUN_SECONDS].as_str()?;
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

fn container_statuses(pod: &Value, state: Value, ready: bool) -> Value {
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "containerID": format!("standin://{}-{}", uid(pod), c["name"].as_str().unwrap_or_default()),
                "ready": ready,
                "started": ready,
                "restartCount": 0,
                "state": state,
            })
        })
        .collect();
    json!(statuses)
}

impl Kubelet {
    /// One pass over all pods; returns how many pods changed.
    pub fn sync_once(&mut self, inner: &mut Inner) -> Result<usize, ApiError> {
        let pods_kind = inner.kind("", "pods")?;
        // Only pods with something to do are copied: with thousands of running pods, copying
        // every bound pod on every pass (each change to the store runs one) held the store's
        // lock for tens of milliseconds at a time.
        let mut live = HashSet::new();
        let mut bound = Vec::new();
        for pod in inner.iter(&pods_kind, None) {
            if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
                continue;
            }
            live.insert(uid(pod));
            let acts = !pod["metadata"]["deletionTimestamp"].is_null()
                || match pod["status"]["phase"].as_str() {
                    Some("Pending") | None => true,
                    Some("Running") => run_time(pod).is_some(),
                    _ => false,
                };
            if acts {
                bound.push(pod.clone());
            }
        }
        let now = Instant::now();
        let mut changed = 0;
        for pod in bound {
            let uid = uid(&pod);
            let namespace = namespace_of(&pod).to_string();
            let name = name_of(&pod).to_string();
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                    .as_f64()
                    .unwrap_or(0.0);
                let due = *self
                    .deletions
                    .entry(uid.clone())
                    .or_insert_with(|| now + Duration::from_secs_f64(grace.max(0.0)));
                if now >= due {
                    inner.remove_now(&pods_kind, &namespace, &name);
                    changed += 1;
                }
                continue;
            }
            match pod["status"]["phase"].as_str() {
                Some("Pending") | None => {
                    let mut new = pod.clone();
                    let started_at = now_rfc3339();
                    new["status"]["phase"] = json!("Running");
                    new["status"]["startTime"] = json!(started_at);
                    new["status"]["hostIP"] = json!("10.0.0.1");
                    new["status"]["podIP"] = json!("10.1.0.1");
                    new["status"]["containerStatuses"] = container_statuses(
                        &pod,
                        json!({"running": {"startedAt": started_at}}),
                        true,
                    );
                    for condition in ["Initialized", "ContainersReady", "Ready"] {
                        set_condition(&mut new, condition, "True", None, None);
                    }
                    inner.update(&pods_kind, &namespace, &name, new, Target::System)?;
                    self.started.insert(uid, now);
                    changed += 1;
                }
                Some("Running") => {
                    let started = *self.started.entry(uid.clone()).or_insert(now);
                    if let Some(run) = run_time(&pod)
                        && now.duration_since(started) >= run
                    {
                        let mut new = pod.clone();
                        let finished = now_rfc3339();
                        new["status"]["phase"] = json!("Succeeded");
                        let started_at = pod["status"]["startTime"].clone();
                        new["status"]["containerStatuses"] = container_statuses(
                            &pod,
                            json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started_at, "finishedAt": finished}}),
                            false,
                        );
                        for condition in ["ContainersReady", "Ready"] {
                            set_condition(&mut new, condition, "False", Some("PodCompleted"), None);
                        }
                        inner.update(&pods_kind, &namespace, &name, new, Target::System)?;
                        changed += 1;
                    }
                }
                _ => {}
            }
        }
        self.started.retain(|uid, _| live.contains(uid));
        self.deletions.retain(|uid, _| live.contains(uid));
        Ok(changed)
    }
}
