//! Per-pod GPU use: driver samples joined to pods.
//!
//! Per-process samples (host PIDs) are mapped to pod UIDs through `/proc/<pid>/cgroup`, and pods
//! to their devices through the PodResources API. PodResources carries no UID, so a UID is joined
//! to a pod either through the API server's pod list (in a cluster) or, failing that, because the
//! pod is the only holder of the device the process runs on. When the driver has no per-process
//! utilization (MIG), a device's utilization is charged to its only holder. Where a MIG
//! instance's utilization cannot be measured at all (no GPM before Hopper), its holder is
//! charged its whole allocation (an SM utilization of 1 for that instance) rather than nothing,
//! so MIG tenants are not under-charged; the device then reports no utilization.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gpufair_api::node_report::{GpuNodeReportSpec, PodGpuUsage, ReportedDevice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::backend::{DeviceUsage, GpuBackend, ProcessUsage};
use crate::devices::{Inventory, MigIds, physical_of};
use crate::health::HealthSnapshot;
use crate::podresources::PodDevices;
use crate::proto::deviceplugin::{HEALTHY, UNHEALTHY};

/// What the driver said about one physical device (GPU or MIG instance) this interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceSample {
    pub usage: DeviceUsage,
    pub processes: Vec<ProcessUsage>,
}

/// One pod's use of one device, for metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct PodDeviceUse {
    pub namespace: String,
    pub pod: String,
    pub device: String,
    pub sm_utilization: f64,
    pub memory_bytes: u64,
}

/// Everything one report is built from; see [`build_report`].
pub struct ReportInputs<'a> {
    pub node_name: &'a str,
    pub inventory: &'a Inventory,
    pub health: &'a HealthSnapshot,
    /// Keyed by physical UUID; devices missing here are reported without counters.
    pub samples: &'a HashMap<String, DeviceSample>,
    pub pods: &'a [PodDevices],
    /// Host PID → pod UID (from cgroups).
    pub pid_pod_uid: &'a HashMap<u32, String>,
    /// Pod UID → (namespace, name), from the API server when available.
    pub pod_names: &'a HashMap<String, (String, String)>,
    pub interval: Duration,
    pub timestamp: jiff::Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub spec: GpuNodeReportSpec,
    pub per_device: Vec<PodDeviceUse>,
    /// Processes on our GPUs that could not be tied to any pod.
    pub unattributed_processes: usize,
}

struct PodEntry {
    usage: PodGpuUsage,
    /// Device → (sm, memory) attributed to this pod.
    per_device: BTreeMap<String, (f64, u64)>,
}

pub fn build_report(inputs: &ReportInputs<'_>) -> Report {
    let inventory = inputs.inventory;
    let mut devices = Vec::new();
    for gpu in &inventory.gpus {
        type Physical = (String, u64, Option<String>, Option<String>, Option<MigIds>);
        let physicals: Vec<Physical> = if gpu.mig_enabled {
            gpu.mig
                .iter()
                .map(|m| {
                    (
                        m.uuid.clone(),
                        m.memory_bytes,
                        Some(m.profile.clone()),
                        Some(gpu.uuid.clone()),
                        Some(MigIds {
                            gpu_instance: m.gpu_instance,
                            compute_instance: m.compute_instance,
                        }),
                    )
                })
                .collect()
        } else {
            vec![(gpu.uuid.clone(), gpu.memory_bytes, None, None, None)]
        };
        for (uuid, memory_bytes, mig_profile, parent_uuid, mig) in physicals {
            let health = if inputs.health.is_instance_healthy(&gpu.uuid, mig) {
                HEALTHY
            } else {
                UNHEALTHY
            };
            let (resource_name, replicas) = inventory
                .resources
                .iter()
                .find_map(|r| {
                    let n = r.devices.iter().filter(|d| d.physical == uuid).count() as u32;
                    (n > 0).then(|| (r.name.clone(), n))
                })
                .unwrap_or_default();
            let sample = inputs.samples.get(&uuid);
            devices.push(ReportedDevice {
                model: gpu.model.clone(),
                memory_bytes,
                mig_profile,
                parent_uuid,
                resource_name,
                replicas,
                health: health.to_string(),
                utilization: sample.and_then(|s| s.usage.utilization),
                memory_used_bytes: sample.and_then(|s| s.usage.memory_used_bytes),
                uuid,
            });
        }
    }

    let mut pods: Vec<PodEntry> = inputs
        .pods
        .iter()
        .map(|p| {
            let device_ids: Vec<String> = p.devices.iter().map(|(_, id)| id.clone()).collect();
            let physical: BTreeSet<String> = device_ids
                .iter()
                .map(|id| physical_of(id).to_string())
                .collect();
            PodEntry {
                usage: PodGpuUsage {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: String::new(),
                    device_ids,
                    devices: physical.into_iter().collect(),
                    sm_utilization: 0.0,
                    memory_bytes: 0,
                    peak_memory_bytes: 0,
                    per_process: false,
                },
                per_device: BTreeMap::new(),
            }
        })
        .collect();
    let mut holders: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, pod) in pods.iter().enumerate() {
        for device in &pod.usage.devices {
            holders.entry(device.clone()).or_default().push(i);
        }
    }

    let mut unattributed = 0;
    let mut sampled_devices: BTreeSet<String> = BTreeSet::new();
    let mut device_order: Vec<&String> = inputs.samples.keys().collect();
    device_order.sort();
    for device in device_order {
        let sample = &inputs.samples[device];
        for process in &sample.processes {
            let Some(uid) = inputs.pid_pod_uid.get(&process.pid) else {
                unattributed += 1;
                continue;
            };
            let Some(i) = find_pod(&mut pods, &holders, device, uid, inputs.pod_names) else {
                unattributed += 1;
                continue;
            };
            let entry = &mut pods[i];
            entry.usage.memory_bytes += process.memory_bytes;
            let slot = entry.per_device.entry(device.clone()).or_default();
            slot.1 += process.memory_bytes;
            if let Some(sm) = process.sm_utilization {
                entry.usage.sm_utilization += sm;
                entry.usage.per_process = true;
                slot.0 += sm;
                sampled_devices.insert(device.clone());
            }
        }
    }
    // Devices without per-process utilization: charge device counters to a sole holder.
    for (device, sample) in inputs.samples {
        if sampled_devices.contains(device) {
            continue;
        }
        let Some([only]) = holders.get(device).map(Vec::as_slice) else {
            continue;
        };
        let entry = &mut pods[*only];
        let slot = entry.per_device.entry(device.clone()).or_default();
        let charged = match sample.usage.utilization {
            Some(util) => Some(util),
            None if sample.usage.charge_allocation => Some(1.0),
            None => None,
        };
        if let Some(util) = charged {
            entry.usage.sm_utilization += util;
            slot.0 += util;
        }
        if slot.1 == 0
            && let Some(used) = sample.usage.memory_used_bytes
        {
            entry.usage.memory_bytes += used;
            slot.1 += used;
        }
    }

    let mut per_device = Vec::new();
    let mut usages = Vec::new();
    for entry in pods {
        for (device, (sm, mem)) in &entry.per_device {
            per_device.push(PodDeviceUse {
                namespace: entry.usage.namespace.clone(),
                pod: entry.usage.name.clone(),
                device: device.clone(),
                sm_utilization: *sm,
                memory_bytes: *mem,
            });
        }
        usages.push(entry.usage);
    }
    usages.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Report {
        spec: GpuNodeReportSpec {
            node_name: inputs.node_name.to_string(),
            timestamp: Time(inputs.timestamp),
            interval_seconds: inputs.interval.as_secs_f64(),
            device_count: devices.len() as u32,
            pod_count: usages.len() as u32,
            devices,
            pods: usages,
        },
        per_device,
        unattributed_processes: unattributed,
    }
}

/// The pod a process with `uid`, running on `device`, belongs to; records the UID it learns.
fn find_pod(
    pods: &mut Vec<PodEntry>,
    holders: &HashMap<String, Vec<usize>>,
    device: &str,
    uid: &str,
    names: &HashMap<String, (String, String)>,
) -> Option<usize> {
    if let Some(i) = pods.iter().position(|p| p.usage.uid == uid) {
        return Some(i);
    }
    if let Some((namespace, name)) = names.get(uid) {
        if let Some(i) = pods
            .iter()
            .position(|p| &p.usage.namespace == namespace && &p.usage.name == name)
        {
            pods[i].usage.uid = uid.to_string();
            return Some(i);
        }
        // A pod using a GPU kubelet never gave it: report it, with no device IDs.
        pods.push(PodEntry {
            usage: PodGpuUsage {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.to_string(),
                device_ids: Vec::new(),
                devices: vec![device.to_string()],
                sm_utilization: 0.0,
                memory_bytes: 0,
                peak_memory_bytes: 0,
                per_process: false,
            },
            per_device: BTreeMap::new(),
        });
        return Some(pods.len() - 1);
    }
    match holders.get(device).map(Vec::as_slice) {
        Some([only]) if pods[*only].usage.uid.is_empty() => {
            pods[*only].usage.uid = uid.to_string();
            Some(*only)
        }
        _ => None,
    }
}

/// Reads the driver for every physical device of the inventory. Runs on a blocking thread:
/// NVML calls can take milliseconds.
pub async fn sample_devices(
    backend: Arc<dyn GpuBackend>,
    inventory: Arc<Inventory>,
) -> HashMap<String, DeviceSample> {
    let work = move || {
        let mut samples = HashMap::new();
        for gpu in &inventory.gpus {
            let physicals: Vec<&String> = if gpu.mig_enabled {
                gpu.mig.iter().map(|m| &m.uuid).collect()
            } else {
                vec![&gpu.uuid]
            };
            for uuid in physicals {
                let usage = backend.device_usage(uuid).unwrap_or_else(|err| {
                    tracing::debug!(%uuid, %err, "no device counters");
                    DeviceUsage::default()
                });
                let processes = backend.processes(uuid).unwrap_or_else(|err| {
                    tracing::debug!(%uuid, %err, "no process list");
                    Vec::new()
                });
                samples.insert(uuid.clone(), DeviceSample { usage, processes });
            }
        }
        samples
    };
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| {
            tracing::error!(%err, "device sampling task failed");
            HashMap::new()
        })
}

/// Maps every sampled PID to its pod UID through `<proc_root>/<pid>/cgroup`.
pub fn pid_pod_uids(
    proc_root: &Path,
    samples: &HashMap<String, DeviceSample>,
) -> HashMap<u32, String> {
    samples
        .values()
        .flat_map(|s| s.processes.iter().map(|p| p.pid))
        .filter_map(|pid| crate::procfs::pod_uid_of_pid(proc_root, pid).map(|uid| (pid, uid)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, GpuSelector, Sharing};
    use crate::devices::{build, tests::gpu};

    fn process(pid: u32, mib: u64, sm: Option<f64>) -> ProcessUsage {
        ProcessUsage {
            pid,
            memory_bytes: mib << 20,
            sm_utilization: sm,
        }
    }

    fn pod(ns: &str, name: &str, resource: &str, ids: &[String]) -> PodDevices {
        PodDevices {
            namespace: ns.into(),
            name: name.into(),
            devices: ids
                .iter()
                .map(|id| (resource.to_string(), id.clone()))
                .collect(),
        }
    }

    #[test]
    fn processes_on_shared_slices_are_split_by_pod() {
        let config = Config {
            sharing: Some(Sharing {
                replicas: 2,
                gpus: vec![GpuSelector::Index(1)],
                fail_requests_greater_than_one: false,
                mps: None,
            }),
            ..Config::default()
        };
        let inv = build(
            vec![gpu(0, &[]), gpu(1, &[]), gpu(2, &["1g.18gb"])],
            &config,
        )
        .expect("build");
        let (g0, g1, mig) = (
            inv.gpus[0].uuid.clone(),
            inv.gpus[1].uuid.clone(),
            inv.gpus[2].mig[0].uuid.clone(),
        );
        let pods = vec![
            pod(
                "team-a",
                "train",
                "nvidia.com/gpu",
                std::slice::from_ref(&g0),
            ),
            pod(
                "team-b",
                "notebook",
                "nvidia.com/gpu.shared",
                &[format!("{g1}::0")],
            ),
            pod(
                "team-c",
                "infer",
                "nvidia.com/gpu.shared",
                &[format!("{g1}::1")],
            ),
            pod(
                "team-d",
                "mig",
                "nvidia.com/mig-1g.18gb",
                std::slice::from_ref(&mig),
            ),
        ];
        let mut samples = HashMap::new();
        samples.insert(
            g0.clone(),
            DeviceSample {
                usage: DeviceUsage {
                    utilization: Some(0.9),
                    memory_used_bytes: Some(5 << 30),
                    charge_allocation: false,
                },
                processes: vec![],
            },
        );
        samples.insert(
            g1.clone(),
            DeviceSample {
                usage: DeviceUsage {
                    utilization: Some(0.7),
                    memory_used_bytes: Some(3 << 30),
                    charge_allocation: false,
                },
                processes: vec![
                    process(100, 1024, Some(0.5)),
                    process(200, 2048, Some(0.2)),
                    process(300, 10, Some(0.1)),
                ],
            },
        );
        samples.insert(
            mig.clone(),
            DeviceSample {
                usage: DeviceUsage {
                    utilization: None,
                    memory_used_bytes: Some(1 << 30),
                    charge_allocation: false,
                },
                processes: vec![process(400, 512, None)],
            },
        );
        let uids: HashMap<u32, String> = [(100, "uid-b"), (200, "uid-c"), (400, "uid-d")]
            .into_iter()
            .map(|(p, u)| (p, u.to_string()))
            .collect();
        let names: HashMap<String, (String, String)> = [
            ("uid-b", "team-b", "notebook"),
            ("uid-c", "team-c", "infer"),
        ]
        .into_iter()
        .map(|(u, n, p)| (u.into(), (n.into(), p.into())))
        .collect();
        let health = HealthSnapshot::default();
        let report = build_report(&ReportInputs {
            node_name: "node-1",
            inventory: &inv,
            health: &health,
            samples: &samples,
            pods: &pods,
            pid_pod_uid: &uids,
            pod_names: &names,
            interval: Duration::from_secs(10),
            timestamp: jiff::Timestamp::UNIX_EPOCH,
        });
        let spec = &report.spec;
        assert_eq!(spec.device_count, 3);
        assert_eq!(spec.devices[1].resource_name, "nvidia.com/gpu.shared");
        assert_eq!(spec.devices[1].replicas, 2);
        assert_eq!(spec.devices[2].mig_profile.as_deref(), Some("1g.18gb"));
        let by_name: HashMap<&str, &PodGpuUsage> =
            spec.pods.iter().map(|p| (p.name.as_str(), p)).collect();
        // Whole GPU, no per-process samples: the sole holder gets the device counters.
        assert_eq!(by_name["train"].sm_utilization, 0.9);
        assert_eq!(by_name["train"].memory_bytes, 5 << 30);
        assert!(!by_name["train"].per_process);
        // Time-sliced GPU: split by process.
        assert_eq!(by_name["notebook"].sm_utilization, 0.5);
        assert_eq!(by_name["notebook"].uid, "uid-b");
        assert!(by_name["notebook"].per_process);
        assert_eq!(by_name["infer"].memory_bytes, 2048 << 20);
        // MIG: UID inferred from being the only holder; memory from the process.
        assert_eq!(by_name["mig"].uid, "uid-d");
        assert_eq!(by_name["mig"].memory_bytes, 512 << 20);
        // PID 300 belongs to no pod.
        assert_eq!(report.unattributed_processes, 1);
        assert!(
            report
                .per_device
                .iter()
                .any(|u| u.pod == "notebook" && u.device == g1 && u.sm_utilization == 0.5)
        );
    }
}
