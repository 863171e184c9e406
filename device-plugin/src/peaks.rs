//! Each pod's peak GPU memory, kept from one report to the next.
//!
//! A report carries what a pod holds now; right-sizing wants the most it ever held. The
//! controller keeps that maximum too, but only while it leads: a controller that takes over
//! while a pod runs would otherwise learn only what the pod held from then on. The plugin runs
//! beside the pod for its whole life on the node, so it keeps the peak and reports it with
//! every sample.

use std::collections::HashMap;

use gpufair_api::node_report::GpuNodeReportSpec;

/// Peak memory per pod on this node, by UID (or `namespace/name` where the UID is not known).
#[derive(Debug, Default)]
pub struct PeakMemory {
    peaks: HashMap<String, u64>,
}

impl PeakMemory {
    /// Raises each reported pod's peak to what it holds now and writes the peak into the report.
    /// With `complete` (the report lists every pod with devices here), pods missing from it are
    /// forgotten: they are gone. A report without its pod list (the PodResources API failed)
    /// forgets nothing.
    pub fn apply(&mut self, spec: &mut GpuNodeReportSpec, complete: bool) {
        let mut present = Vec::with_capacity(spec.pods.len());
        for pod in &mut spec.pods {
            let key = if pod.uid.is_empty() {
                format!("{}/{}", pod.namespace, pod.name)
            } else {
                pod.uid.clone()
            };
            let peak = self.peaks.entry(key.clone()).or_default();
            *peak = (*peak).max(pod.memory_bytes);
            pod.peak_memory_bytes = *peak;
            present.push(key);
        }
        if complete {
            let present: std::collections::HashSet<&str> =
                present.iter().map(String::as_str).collect();
            self.peaks.retain(|key, _| present.contains(key.as_str()));
        }
    }

    /// How many pods have a peak kept.
    pub fn len(&self) -> usize {
        self.peaks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peaks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use gpufair_api::node_report::PodGpuUsage;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn report(pods: &[(&str, &str, u64)]) -> GpuNodeReportSpec {
        GpuNodeReportSpec {
            node_name: "node-1".into(),
            timestamp: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            interval_seconds: 10.0,
            device_count: 1,
            pod_count: pods.len() as u32,
            devices: Vec::new(),
            pods: pods
                .iter()
                .map(|&(name, uid, memory_bytes)| PodGpuUsage {
                    namespace: "ml".into(),
                    name: name.into(),
                    uid: uid.into(),
                    device_ids: vec!["GPU-1".into()],
                    devices: vec!["GPU-1".into()],
                    sm_utilization: 0.5,
                    memory_bytes,
                    peak_memory_bytes: 0,
                    per_process: true,
                })
                .collect(),
        }
    }

    fn peaks(spec: &GpuNodeReportSpec) -> Vec<u64> {
        spec.pods.iter().map(|p| p.peak_memory_bytes).collect()
    }

    #[test]
    fn a_pods_peak_is_the_most_it_held_in_any_report() {
        let mut kept = PeakMemory::default();
        let mut first = report(&[("a", "uid-a", 30), ("b", "", 5)]);
        kept.apply(&mut first, true);
        assert_eq!(peaks(&first), [30, 5]);
        let mut second = report(&[("a", "uid-a", 10), ("b", "", 8)]);
        kept.apply(&mut second, true);
        assert_eq!(peaks(&second), [30, 8], "a's peak stays, b's rises");
        assert_eq!(
            second.pods[0].memory_bytes, 10,
            "the current figure is left as it is"
        );
    }

    #[test]
    fn pods_gone_are_forgotten_but_not_on_a_report_without_pods() {
        let mut kept = PeakMemory::default();
        kept.apply(&mut report(&[("a", "uid-a", 30), ("b", "uid-b", 20)]), true);
        kept.apply(&mut report(&[]), false);
        assert_eq!(kept.len(), 2, "an incomplete report forgets nothing");
        let mut later = report(&[("a", "uid-a", 1)]);
        kept.apply(&mut later, true);
        assert_eq!(peaks(&later), [30]);
        assert_eq!(kept.len(), 1, "b is gone");
        // A new pod reusing b's name but not its UID starts from its own figures.
        let mut again = report(&[("b", "uid-b2", 3)]);
        kept.apply(&mut again, true);
        assert_eq!(peaks(&again), [3]);
    }
}
