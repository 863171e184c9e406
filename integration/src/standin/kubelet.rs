//! A kubelet stand-in for every node: a bound pod starts Running (and Ready) at once; a pod
//! with the annotation [`RUN_SECONDS`] finishes (Succeeded, exit code 0) that many seconds after
//! it started; a pod in graceful deletion is removed once its grace period has passed since
//! the kubelet saw the deletion. Pods without the annotation run until deleted.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::journal::JournalId;
use super::scheduler::set_condition;
use super::status::ApiError;
use super::store::{Inner, Key, Target, name_of, namespace_of, now_rfc3339};

/// Annotation giving a pod's run time in seconds (a decimal number).
pub const RUN_SECONDS: &str = "standin.gpufair.io/run-seconds";

/// What the kubelet remembers between passes: when each pod started and when each deletion
/// is due, at sub-second precision (object timestamps have whole seconds); which UID each bound
/// pod has; and which bound pods have something left to do. Each pass takes in the pods that
/// changed since the last one (its journal) and then looks at the pods with work only.
pub struct Kubelet {
    journal: JournalId,
    started: HashMap<String, Instant>,
    deletions: HashMap<String, Instant>,
    bound: HashMap<Key, String>,
    work: BTreeSet<Key>,
}

/// Whether the kubelet has something to do for a bound pod: start it, finish it after its
/// run time, or remove it once its grace period is over.
fn has_work(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
        || match pod["status"]["phase"].as_str() {
            Some("Pending") | None => true,
            Some("Running") => run_time(pod).is_some(),
            _ => false,
        }
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
    /// A kubelet that starts from every pod the store holds now.
    pub fn new(inner: &mut Inner) -> Self {
        Self {
            journal: inner.open_journal(&["pods"]),
            started: HashMap::new(),
            deletions: HashMap::new(),
            bound: HashMap::new(),
            work: BTreeSet::new(),
        }
    }

    /// Forgets the timers of a pod that is no longer bound under this UID.
    fn forget(&mut self, uid: &str) {
        self.started.remove(uid);
        self.deletions.remove(uid);
    }

    /// Takes in the pods changed since the last pass.
    fn catch_up(&mut self, inner: &mut Inner) -> Result<(), ApiError> {
        let pods_kind = inner.kind("", "pods")?;
        for (_, key) in inner.take_journal(self.journal) {
            let pod = inner.try_get(&pods_kind, &key.0, &key.1).filter(|p| {
                p["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
            });
            let Some(pod) = pod else {
                if let Some(old) = self.bound.remove(&key) {
                    self.forget(&old);
                }
                self.work.remove(&key);
                continue;
            };
            let uid = uid(pod);
            let acts = has_work(pod);
            if let Some(old) = self.bound.insert(key.clone(), uid.clone())
                && old != uid
            {
                self.forget(&old);
            }
            if acts {
                self.work.insert(key);
            } else {
                self.work.remove(&key);
            }
        }
        Ok(())
    }

    /// One pass over the bound pods with something to do; returns how many pods changed.
    pub fn sync_once(&mut self, inner: &mut Inner) -> Result<usize, ApiError> {
        self.catch_up(inner)?;
        let pods_kind = inner.kind("", "pods")?;
        // Only pods with something to do are copied: with thousands of running pods, copying
        // every bound pod on every pass held the store's lock for tens of milliseconds.
        let bound: Vec<Value> = self
            .work
            .iter()
            .filter_map(|(namespace, name)| inner.try_get(&pods_kind, namespace, name))
            .cloned()
            .collect();
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
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standin::scheduler::bind;
    use crate::standin::store::{DeleteOptions, Store, with_default_namespace};

    fn store() -> Store {
        with_default_namespace(100)
    }

    fn create_pod(inner: &mut Inner, name: &str, run_seconds: Option<&str>) {
        let pods = inner.kind("", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": name}, "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "x"}]}});
        if let Some(seconds) = run_seconds {
            pod["metadata"]["annotations"] = json!({RUN_SECONDS: seconds});
        }
        inner.prepare_create(&pods, "default", &mut pod).unwrap();
        inner.create(&pods, pod).unwrap();
    }

    fn phase(inner: &Inner, name: &str) -> Option<String> {
        let pods = inner.kind("", "pods").unwrap();
        inner.try_get(&pods, "default", name).map(|p| {
            p["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
    }

    #[test]
    fn bound_pods_start_timed_pods_finish_and_deleted_pods_are_forgotten() {
        let store = store();
        let mut inner = store.lock();
        let mut kubelet = Kubelet::new(&mut inner);
        create_pod(&mut inner, "forever", None);
        create_pod(&mut inner, "brief", Some("0"));
        // Unbound pods are not the kubelet's.
        assert_eq!(kubelet.sync_once(&mut inner).unwrap(), 0);
        bind(&mut inner, "default", "forever", "n1").unwrap();
        bind(&mut inner, "default", "brief", "n1").unwrap();
        assert_eq!(kubelet.sync_once(&mut inner).unwrap(), 2);
        assert_eq!(phase(&inner, "forever").as_deref(), Some("Running"));
        // "brief" runs for no time: it finishes on the next pass; "forever" has no more work.
        assert_eq!(kubelet.sync_once(&mut inner).unwrap(), 1);
        assert_eq!(phase(&inner, "brief").as_deref(), Some("Succeeded"));
        // The next pass takes in that write and finds nothing left to do for either pod.
        assert_eq!(kubelet.sync_once(&mut inner).unwrap(), 0);
        assert!(kubelet.work.is_empty());
        assert_eq!(kubelet.started.len(), 2);
        let pods = inner.kind("", "pods").unwrap();
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        inner.delete(&pods, "default", "brief", &options).unwrap();
        assert_eq!(phase(&inner, "brief"), None);
        kubelet.sync_once(&mut inner).unwrap();
        assert_eq!(kubelet.started.len(), 1);
        assert_eq!(kubelet.bound.len(), 1);
    }

    #[test]
    fn a_pod_in_graceful_deletion_is_removed_when_its_grace_is_over() {
        let store = store();
        let mut inner = store.lock();
        let mut kubelet = Kubelet::new(&mut inner);
        create_pod(&mut inner, "p", None);
        bind(&mut inner, "default", "p", "n1").unwrap();
        kubelet.sync_once(&mut inner).unwrap();
        let pods = inner.kind("", "pods").unwrap();
        let options = DeleteOptions {
            grace_period_seconds: Some(30),
            ..DeleteOptions::default()
        };
        inner.delete(&pods, "default", "p", &options).unwrap();
        kubelet.sync_once(&mut inner).unwrap();
        assert_eq!(phase(&inner, "p").as_deref(), Some("Running"));
        // Its deadline, as the kubelet noted it, is moved to now.
        for due in kubelet.deletions.values_mut() {
            *due = Instant::now();
        }
        assert_eq!(kubelet.sync_once(&mut inner).unwrap(), 1);
        assert_eq!(phase(&inner, "p"), None);
        kubelet.sync_once(&mut inner).unwrap();
        assert!(kubelet.deletions.is_empty() && kubelet.bound.is_empty());
    }
}
