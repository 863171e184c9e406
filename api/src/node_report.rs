//! `GpuNodeReport`: what one node's GPUs are and what its pods measurably used of them.
//!
//! Written by the device plugin on each node (one object per node, named after the node and owned
//! by the Node so it goes away with it); read by the controller's ledger when charging measured
//! utilization instead of allocation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The report a node's device plugin publishes every measurement interval.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpufair.io",
    version = "v1alpha1",
    kind = "GpuNodeReport",
    plural = "gpunodereports",
    shortname = "gnr",
    printcolumn = r#"{"name":"Devices","type":"integer","jsonPath":".spec.deviceCount"}"#,
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".spec.podCount"}"#,
    printcolumn = r#"{"name":"Reported","type":"date","jsonPath":".spec.timestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodeReportSpec {
    /// The node this report describes (also the object's name).
    pub node_name: String,
    /// When the measurement interval ended.
    pub timestamp: Time,
    /// Length of the measurement interval, in seconds.
    pub interval_seconds: f64,
    /// Number of entries in `devices` (a printer column; kept in step by the writer).
    pub device_count: u32,
    /// Number of entries in `pods` (a printer column; kept in step by the writer).
    pub pod_count: u32,
    /// Every device advertised to kubelet: whole GPUs, MIG instances and shared slices' GPUs.
    #[serde(default)]
    pub devices: Vec<ReportedDevice>,
    /// Measured use per pod over the interval.
    #[serde(default)]
    pub pods: Vec<PodGpuUsage>,
}

/// One physical GPU or MIG instance on the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportedDevice {
    /// `GPU-…` for a whole GPU, `MIG-…` for a MIG instance.
    pub uuid: String,
    /// The GPU model, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// Total memory of the device (the instance's share for MIG), in bytes.
    pub memory_bytes: u64,
    /// MIG profile such as `3g.40gb`; absent for whole GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// For a MIG instance, the UUID of its GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_uuid: Option<String>,
    /// The extended resource it is advertised under, e.g. `nvidia.com/gpu`.
    pub resource_name: String,
    /// How many kubelet devices it is advertised as (the replica count for shared GPUs, else 1).
    pub replicas: u32,
    /// `Healthy` or `Unhealthy`.
    pub health: String,
    /// Device-level SM utilization over the interval, 0..=1, when the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<f64>,
    /// Memory in use at the end of the interval, in bytes, when the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
}

/// What one pod used over the interval.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGpuUsage {
    pub namespace: String,
    pub name: String,
    /// The pod's UID when it could be determined (from its processes' cgroups).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The kubelet device IDs allocated to the pod (as advertised: `GPU-…`, `MIG-…`, `GPU-…::N`).
    pub device_ids: Vec<String>,
    /// The physical devices (GPU or MIG UUIDs) those IDs map to.
    pub devices: Vec<String>,
    /// SM utilization attributed to the pod, summed over its devices: 1.0 = one device fully busy.
    pub sm_utilization: f64,
    /// GPU memory held by the pod's processes, in bytes.
    pub memory_bytes: u64,
    /// The most GPU memory the pod's processes held in any report since this node's plugin
    /// first saw the pod, in bytes. The plugin keeps it from report to report, so a controller
    /// that takes over while the pod runs still learns the pod's whole peak. 0 (and left out)
    /// from a plugin that does not keep it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peak_memory_bytes: u64,
    /// Whether the numbers come from per-process samples (`true`) or were inferred from
    /// device-level counters because the pod was the device's only user (`false`).
    pub per_process: bool,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn crd_is_cluster_scoped_in_gpufair_io() {
        let crd = GpuNodeReport::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("gpunodereports.gpufair.io")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
    }

    #[test]
    fn spec_round_trips_in_camel_case() {
        let spec = GpuNodeReportSpec {
            node_name: "node-1".into(),
            timestamp: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            interval_seconds: 10.0,
            device_count: 1,
            pod_count: 1,
            devices: vec![ReportedDevice {
                uuid: "MIG-1".into(),
                model: "NVIDIA H200".into(),
                memory_bytes: 18 << 30,
                mig_profile: Some("1g.18gb".into()),
                parent_uuid: Some("GPU-1".into()),
                resource_name: "nvidia.com/mig-1g.18gb".into(),
                replicas: 1,
                health: "Healthy".into(),
                utilization: None,
                memory_used_bytes: Some(1 << 30),
            }],
            pods: vec![PodGpuUsage {
                namespace: "team-a".into(),
                name: "train".into(),
                uid: String::new(),
                device_ids: vec!["MIG-1".into()],
                devices: vec!["MIG-1".into()],
                sm_utilization: 0.5,
                memory_bytes: 1 << 30,
                peak_memory_bytes: 3 << 30,
                per_process: true,
            }],
        };
        let json =
            serde_json::to_value(GpuNodeReport::new("node-1", spec.clone())).expect("serialises");
        assert_eq!(json["spec"]["devices"][0]["migProfile"], "1g.18gb");
        assert_eq!(json["spec"]["pods"][0]["smUtilization"], 0.5);
        assert_eq!(json["spec"]["pods"][0]["peakMemoryBytes"], 3u64 << 30);
        assert!(
            json["spec"]["pods"][0].get("uid").is_none(),
            "empty uid is omitted"
        );
        let back: GpuNodeReport = serde_json::from_value(json).expect("deserialises");
        assert_eq!(back.spec, spec);
    }
}
