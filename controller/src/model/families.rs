//! Per workload family, the smoothed peak GPU memory of its pods, from GpuNodeReports.
//!
//! Each cycle the tracker reads every report: a pod's peak is the most memory per device it was
//! seen holding while it ran. When a pod drops out of every report (it finished, failed or was
//! evicted) its peak is folded into its family's history with core's smoothing. Pure: the
//! controller feeds it the caches and writes what [`FamilyTracker::changed`] returns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use gpufair_api::{GpuNodeReport, WorkloadFamily, WorkloadFamilySpec, WorkloadFamilyStatus};
use gpufair_core::rightsize::{FAMILY_LABEL, FamilyHistory, OwnerFacts, family_of, name_prefix};
use k8s_openapi::api::core::v1::Pod;

/// A family's key: (namespace, family name).
pub type FamilyKey = (String, String);

/// One family's history and what the controller writes for it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedFamily {
    pub spec: WorkloadFamilySpec,
    pub history: FamilyHistory,
    pub last_peak_bytes: u64,
    /// Unix seconds of the last fold.
    pub updated_at: f64,
    /// Folded into since the last write.
    pub dirty: bool,
}

impl TrackedFamily {
    pub fn status(&self) -> WorkloadFamilyStatus {
        let peak = self.history.smoothed_peak_bytes.max(0.0).round() as u64;
        WorkloadFamilyStatus {
            smoothed_peak_bytes: peak,
            smoothed_peak_mib: peak >> 20,
            samples: self.history.samples,
            last_peak_bytes: self.last_peak_bytes,
            updated: k8s_openapi::jiff::Timestamp::from_millisecond(
                (self.updated_at * 1000.0) as i64,
            )
            .ok()
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        }
    }
}

#[derive(Debug, Clone)]
struct RunningPeak {
    family: FamilyKey,
    spec: WorkloadFamilySpec,
    peak_bytes: u64,
}

/// The tracker the leader keeps between cycles.
#[derive(Debug, Default)]
pub struct FamilyTracker {
    /// Pods seen running, by UID (or namespace/name when a report has no UID).
    running: HashMap<String, RunningPeak>,
    families: BTreeMap<FamilyKey, TrackedFamily>,
}

fn owner_of(pod: &Pod) -> Option<OwnerFacts> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| OwnerFacts {
            kind: o.kind.clone(),
            name: o.name.clone(),
        })
}

/// The family a pod belongs to, with how it was recognised; `None` for a pod with no family or
/// a bad label (the webhook denies those at creation; older pods are skipped).
pub fn pod_family(pod: &Pod) -> Option<(FamilyKey, WorkloadFamilySpec)> {
    let namespace = pod.metadata.namespace.clone()?;
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let owner = owner_of(pod);
    let name = family_of(labels, owner.as_ref()).ok()??;
    let spec = match labels.get(FAMILY_LABEL) {
        Some(label) => WorkloadFamilySpec {
            label: Some(label.clone()),
            ..WorkloadFamilySpec::default()
        },
        None => {
            let owner = owner?;
            WorkloadFamilySpec {
                owner_kind: Some(owner.kind.clone()),
                name_prefix: Some(name_prefix(&owner.name).to_string()),
                label: None,
            }
        }
    };
    Some(((namespace, name), spec))
}

impl FamilyTracker {
    /// Starts from the histories stored in the cluster (a new leader's memory).
    pub fn adopt(&mut self, stored: &[WorkloadFamily]) {
        for family in stored {
            let (Some(namespace), Some(name), Some(status)) = (
                family.metadata.namespace.clone(),
                family.metadata.name.clone(),
                family.status.as_ref(),
            ) else {
                continue;
            };
            let updated_at = status
                .updated
                .as_ref()
                .map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0);
            self.families
                .entry((namespace, name))
                .or_insert(TrackedFamily {
                    spec: family.spec.clone(),
                    history: status.history(),
                    last_peak_bytes: status.last_peak_bytes,
                    updated_at,
                    dirty: false,
                });
        }
    }

    /// Reads this cycle's reports: updates running pods' peaks and folds in the pods that left.
    pub fn observe(
        &mut self,
        reports: &[Arc<GpuNodeReport>],
        pods: &[Arc<Pod>],
        alpha: f64,
        now: f64,
    ) {
        let mut by_uid: HashMap<&str, &Pod> = HashMap::new();
        let mut by_name: HashMap<(&str, &str), &Pod> = HashMap::new();
        for pod in pods {
            if let Some(uid) = pod.metadata.uid.as_deref() {
                by_uid.insert(uid, pod);
            }
            if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
                by_name.insert((ns.as_str(), name.as_str()), pod);
            }
        }
        self.observe_by(
            reports,
            |uid, namespace, name| {
                let pod = if uid.is_empty() {
                    by_name.get(&(namespace, name)).copied()
                } else {
                    by_uid.get(uid).copied()
                };
                pod.and_then(pod_family)
            },
            alpha,
            now,
        );
    }

    /// As [`Self::observe`], with each reported pod's family (by UID, or by namespace and name
    /// where the report has no UID) from `family_of`.
    pub fn observe_by(
        &mut self,
        reports: &[Arc<GpuNodeReport>],
        family_of: impl Fn(&str, &str, &str) -> Option<(FamilyKey, WorkloadFamilySpec)>,
        alpha: f64,
        now: f64,
    ) {
        let mut seen: HashSet<String> = HashSet::new();
        for report in reports {
            for usage in &report.spec.pods {
                let key = if usage.uid.is_empty() {
                    format!("{}/{}", usage.namespace, usage.name)
                } else {
                    usage.uid.clone()
                };
                // The plugin's kept peak covers what this leader did not see (it may have taken
                // over while the pod ran); older plugins report 0 there.
                let held = usage.memory_bytes.max(usage.peak_memory_bytes);
                let per_device = held / usage.devices.len().max(1) as u64;
                if let Some(running) = self.running.get_mut(&key) {
                    running.peak_bytes = running.peak_bytes.max(per_device);
                    seen.insert(key);
                    continue;
                }
                if let Some((family, spec)) = family_of(&usage.uid, &usage.namespace, &usage.name) {
                    self.running.insert(
                        key.clone(),
                        RunningPeak {
                            family,
                            spec,
                            peak_bytes: per_device,
                        },
                    );
                    seen.insert(key);
                }
            }
        }
        let mut finished: Vec<String> = self
            .running
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        // Fold in a fixed order: the smoothed value depends on it.
        finished.sort();
        for key in finished {
            let Some(pod) = self.running.remove(&key) else {
                continue;
            };
            // A pod never seen holding memory tells nothing about its family's need; folding
            // a zero in would pull the prediction down towards slices that are too small.
            if pod.peak_bytes == 0 {
                continue;
            }
            let entry = self
                .families
                .entry(pod.family)
                .or_insert_with(|| TrackedFamily {
                    spec: pod.spec.clone(),
                    history: FamilyHistory::default(),
                    last_peak_bytes: 0,
                    updated_at: now,
                    dirty: false,
                });
            entry.history = entry.history.observe(pod.peak_bytes as f64, alpha);
            entry.last_peak_bytes = pod.peak_bytes;
            entry.updated_at = now;
            entry.dirty = true;
        }
    }

    /// Families folded into since they were last written.
    pub fn changed(&self) -> Vec<(FamilyKey, TrackedFamily)> {
        self.families
            .iter()
            .filter(|(_, f)| f.dirty)
            .map(|(k, f)| (k.clone(), f.clone()))
            .collect()
    }

    /// Marks a family written.
    pub fn written(&mut self, key: &FamilyKey) {
        if let Some(family) = self.families.get_mut(key) {
            family.dirty = false;
        }
    }

    pub fn get(&self, key: &FamilyKey) -> Option<&TrackedFamily> {
        self.families.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
        uid: &str,
        name: &str,
        labels: serde_json::Value,
        owner: Option<(&str, &str)>,
    ) -> Arc<Pod> {
        let owners = owner.map(|(kind, owner_name)| {
            json!([{"apiVersion": "batch/v1", "kind": kind, "name": owner_name, "uid": "o",
                    "controller": true}])
        });
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": labels,
                             "ownerReferences": owners},
            }))
            .unwrap(),
        )
    }

    fn report(pods: &[(&str, u64, usize)]) -> Arc<GpuNodeReport> {
        let pods: Vec<_> = pods
            .iter()
            .map(|(uid, memory, devices)| {
                json!({"namespace": "ml", "name": "x", "uid": uid,
                       "deviceIds": vec!["GPU-1"; *devices], "devices": vec!["GPU-1"; *devices],
                       "smUtilization": 0.5, "memoryBytes": memory, "perProcess": true})
            })
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gpufair.io/v1alpha1", "kind": "GpuNodeReport",
                "metadata": {"name": "n1"},
                "spec": {"nodeName": "n1", "timestamp": "2026-01-01T00:00:00Z",
                         "intervalSeconds": 10.0, "deviceCount": 1, "podCount": pods.len(),
                         "pods": pods}
            }))
            .unwrap(),
        )
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_pod_peak_is_folded_when_it_leaves_the_reports() {
        let pods = vec![
            pod("a", "train-1-xyz", json!({}), Some(("Job", "train-1"))),
            pod("b", "train-2-xyz", json!({}), Some(("Job", "train-2"))),
            pod("c", "solo", json!({"gpufair.io/family": "llama"}), None),
        ];
        let mut tracker = FamilyTracker::default();
        tracker.observe(
            &[report(&[("a", 4 * GIB, 1), ("c", 6 * GIB, 2)])],
            &pods,
            0.3,
            10.0,
        );
        tracker.observe(
            &[report(&[("a", 10 * GIB, 1), ("b", 8 * GIB, 1)])],
            &pods,
            0.3,
            20.0,
        );
        assert!(
            tracker.changed().iter().all(|(k, _)| k.1 == "llama"),
            "c left"
        );
        let llama = tracker.get(&("ml".into(), "llama".into())).unwrap();
        assert_eq!(llama.last_peak_bytes, 3 * GIB, "memory per device");
        assert_eq!(llama.spec.label.as_deref(), Some("llama"));
        tracker.observe(&[], &pods, 0.3, 30.0);
        let job = tracker.get(&("ml".into(), "job.train".into())).unwrap();
        assert_eq!(job.history.samples, 2);
        // a (10 GiB) is folded first, then b (8 GiB): 0.3·8 + 0.7·10.
        let smoothed = job.history.smoothed_peak_bytes / GIB as f64;
        assert!((smoothed - 9.4).abs() < 1e-9, "{smoothed}");
        assert_eq!(job.spec.owner_kind.as_deref(), Some("Job"));
        assert_eq!(job.status().samples, 2);
        for (key, _) in tracker.changed() {
            tracker.written(&key);
        }
        assert!(tracker.changed().is_empty());
    }

    #[test]
    fn a_new_leader_learns_the_peak_the_plugin_kept() {
        let pods = vec![pod(
            "c",
            "solo",
            json!({"gpufair.io/family": "llama"}),
            None,
        )];
        // This leader took over while the pod ran: it sees 2 GiB held now, but the plugin saw
        // 12 GiB earlier in the pod's life.
        let mut kept = report(&[("c", 2 * GIB, 1)]);
        Arc::make_mut(&mut kept).spec.pods[0].peak_memory_bytes = 12 * GIB;
        let mut tracker = FamilyTracker::default();
        tracker.observe(&[kept], &pods, 0.3, 10.0);
        tracker.observe(&[], &pods, 0.3, 20.0);
        let llama = tracker.get(&("ml".into(), "llama".into())).unwrap();
        assert_eq!(llama.last_peak_bytes, 12 * GIB);
    }

    #[test]
    fn pods_without_family_or_memory_teach_nothing() {
        let pods = vec![
            pod("a", "bare", json!({}), None),
            pod("b", "bad", json!({"gpufair.io/family": "Not_OK"}), None),
            pod("c", "idle-1", json!({}), Some(("Job", "idle-1"))),
        ];
        let mut tracker = FamilyTracker::default();
        tracker.observe(
            &[report(&[("a", GIB, 1), ("b", GIB, 1), ("c", 0, 1)])],
            &pods,
            0.3,
            1.0,
        );
        tracker.observe(&[], &pods, 0.3, 2.0);
        assert!(tracker.changed().is_empty());
    }

    #[test]
    fn adoption_keeps_the_stored_history() {
        let mut stored = WorkloadFamily::new("job.train", WorkloadFamilySpec::default());
        stored.metadata.namespace = Some("ml".into());
        stored.status = Some(WorkloadFamilyStatus {
            smoothed_peak_bytes: 5 * GIB,
            samples: 7,
            ..WorkloadFamilyStatus::default()
        });
        let mut tracker = FamilyTracker::default();
        tracker.adopt(&[stored]);
        let pods = vec![pod("a", "train-9-x", json!({}), Some(("Job", "train-9")))];
        tracker.observe(&[report(&[("a", 10 * GIB, 1)])], &pods, 0.3, 1.0);
        tracker.observe(&[], &pods, 0.3, 2.0);
        let job = tracker.get(&("ml".into(), "job.train".into())).unwrap();
        assert_eq!(job.history.samples, 8);
        assert!((job.history.smoothed_peak_bytes / GIB as f64 - 6.5).abs() < 1e-9);
    }
}
