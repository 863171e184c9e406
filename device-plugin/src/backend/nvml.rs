//! The real backend, on NVML through nvml-wrapper.
//!
//! nvml-wrapper `dlopen`s `libnvidia-ml.so.1` at run time, so the binary builds and starts on
//! machines without the driver; only [`NvmlBackend::load`] fails there. NVML is initialised once
//! and leaked so device handles (which borrow it) can move into the event thread.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml, bitmasks::event::EventTypes};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::{
    BackendError, DeviceUsage, GpuBackend, GpuInfo, HealthEvent, HealthEventKind, MigInfo,
    ProcessUsage, link_score,
};

/// NVLink slots NVML may report per GPU (`NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;
/// How long one event wait blocks, which bounds how late a stop is noticed.
const EVENT_WAIT_MS: u32 = 1000;

pub struct NvmlBackend {
    nvml: &'static Nvml,
    /// Per device, the newest process-utilization sample already reported, so each call returns
    /// only new samples.
    last_seen_us: Mutex<HashMap<String, u64>>,
    sysfs_pci: PathBuf,
}

fn driver(op: &'static str) -> impl Fn(NvmlError) -> BackendError {
    move |err| BackendError::Driver {
        op,
        message: err.to_string(),
    }
}

/// Explains a failed `Nvml::init` in terms an operator can act on.
pub fn describe_init_error(err: &NvmlError) -> String {
    match err {
        NvmlError::LibloadingError(inner) => {
            format!(
                "{inner} (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?)"
            )
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_string(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_string(),
        other => other.to_string(),
    }
}

/// The MIG profile from a MIG device's name, e.g. `NVIDIA A100-SXM4-80GB MIG 3g.40gb` → `3g.40gb`.
pub fn profile_from_mig_name(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once(" MIG ")?;
    let profile = profile.trim();
    let well_formed = !profile.is_empty()
        && profile.contains('g')
        && profile
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+');
    well_formed.then(|| profile.to_string())
}

/// The sysfs name of a PCI device from NVML's bus id (`00000000:3B:00.0` → `0000:3b:00.0`).
pub fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let lower = nvml_bus_id.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

impl NvmlBackend {
    /// Loads and initialises NVML.
    pub fn load() -> Result<NvmlBackend, BackendError> {
        let nvml =
            Nvml::init().map_err(|err| BackendError::NotLoaded(describe_init_error(&err)))?;
        Ok(NvmlBackend {
            nvml: Box::leak(Box::new(nvml)),
            last_seen_us: Mutex::new(HashMap::new()),
            sysfs_pci: PathBuf::from("/sys/bus/pci/devices"),
        })
    }

    fn device(&self, uuid: &str) -> Result<Device<'static>, BackendError> {
        self.nvml.device_by_uuid(uuid).map_err(|err| match err {
            NvmlError::NotFound | NvmlError::InvalidArg => {
                BackendError::UnknownDevice(uuid.to_string())
            }
            other => driver("device_by_uuid")(other),
        })
    }

    fn numa_node(&self, device: &Device<'static>) -> Option<i64> {
        let bus_id = device.pci_info().ok()?.bus_id;
        let path = self.sysfs_pci.join(sysfs_bus_id(&bus_id)).join("numa_node");
        let node: i64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
        // The kernel writes -1 when the platform has no NUMA information.
        (node >= 0).then_some(node)
    }

    fn mig_instances(&self, parent: &Device<'static>) -> Result<Vec<MigInfo>, BackendError> {
        let enabled = match parent.mig_mode() {
            Ok(mode) => mode.current == 1,
            Err(NvmlError::NotSupported) => false,
            Err(err) => return Err(driver("mig_mode")(err)),
        };
        if !enabled {
            return Ok(Vec::new());
        }
        // mig_device_count is the maximum number of slots, not the number in use.
        let slots = parent
            .mig_device_count()
            .map_err(driver("mig_device_count"))?;
        let mut instances = Vec::new();
        for slot in 0..slots {
            let mig = match parent.mig_device_by_index(slot) {
                Ok(mig) => mig,
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
                Err(err) => return Err(driver("mig_device_by_index")(err)),
            };
            let uuid = mig.uuid().map_err(driver("uuid"))?;
            let name = mig.name().map_err(driver("name"))?;
            let Some(profile) = profile_from_mig_name(&name) else {
                tracing::warn!(%uuid, %name, "cannot read the MIG profile from the device name; skipping it");
                continue;
            };
            let memory_bytes = mig.memory_info().map(|m| m.total).unwrap_or_default();
            instances.push(MigInfo {
                uuid,
                profile,
                memory_bytes,
            });
        }
        Ok(instances)
    }

    fn nvlinks_between(&self, a: &Device<'static>, b: &Device<'static>) -> u32 {
        let Ok(b_bus) = b.pci_info().map(|p| p.bus_id) else {
            return 0;
        };
        (0..NVLINK_MAX_LINKS)
            .filter(|&link| {
                let wrapper = a.link_wrapper_for(link);
                wrapper.is_active().unwrap_or(false)
                    && wrapper
                        .remote_pci_info()
                        .is_ok_and(|remote| remote.bus_id.eq_ignore_ascii_case(&b_bus))
            })
            .count() as u32
    }
}

impl GpuBackend for NvmlBackend {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn inventory(&self) -> Result<Vec<GpuInfo>, BackendError> {
        let count = self.nvml.device_count().map_err(driver("device_count"))?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let device = self
                .nvml
                .device_by_index(index)
                .map_err(driver("device_by_index"))?;
            let uuid = device.uuid().map_err(driver("uuid"))?;
            gpus.push(GpuInfo {
                index,
                minor: device.minor_number().map_err(driver("minor_number"))?,
                model: device.name().map_err(driver("name"))?,
                memory_bytes: device.memory_info().map_err(driver("memory_info"))?.total,
                numa_node: self.numa_node(&device),
                mig: self.mig_instances(&device)?,
                uuid,
            });
        }
        Ok(gpus)
    }

    fn device_usage(&self, uuid: &str) -> Result<DeviceUsage, BackendError> {
        let device = self.device(uuid)?;
        let utilization = match device.utilization_rates() {
            Ok(rates) => Some(f64::from(rates.gpu) / 100.0),
            // Not reported for MIG instances.
            Err(NvmlError::NotSupported) => None,
            Err(err) => return Err(driver("utilization_rates")(err)),
        };
        let memory_used_bytes = device.memory_info().ok().map(|m| m.used);
        Ok(DeviceUsage {
            utilization,
            memory_used_bytes,
        })
    }

    fn processes(&self, uuid: &str) -> Result<Vec<ProcessUsage>, BackendError> {
        let device = self.device(uuid)?;
        let mut by_pid: HashMap<u32, ProcessUsage> = HashMap::new();
        for process in device
            .running_compute_processes()
            .map_err(driver("running_compute_processes"))?
        {
            let memory_bytes = match process.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => bytes,
                UsedGpuMemory::Unavailable => 0,
            };
            by_pid.insert(
                process.pid,
                ProcessUsage {
                    pid: process.pid,
                    memory_bytes,
                    sm_utilization: None,
                },
            );
        }
        let since = self
            .last_seen_us
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(uuid)
            .copied();
        let samples = match device.process_utilization_stats(since) {
            Ok(samples) => samples,
            // NVML says NotFound when there is simply no sample yet, and NotSupported on MIG.
            Err(NvmlError::NotFound) | Err(NvmlError::NotSupported) => Vec::new(),
            Err(err) => return Err(driver("process_utilization_stats")(err)),
        };
        let mut newest = since.unwrap_or(0);
        let mut sums: HashMap<u32, (u64, u64)> = HashMap::new();
        for sample in samples {
            newest = newest.max(sample.timestamp);
            let entry = sums.entry(sample.pid).or_default();
            entry.0 += u64::from(sample.sm_util);
            entry.1 += 1;
        }
        for (pid, (sum, n)) in sums {
            let util = (sum as f64 / n as f64 / 100.0).clamp(0.0, 1.0);
            by_pid
                .entry(pid)
                .or_insert(ProcessUsage {
                    pid,
                    memory_bytes: 0,
                    sm_utilization: None,
                })
                .sm_utilization = Some(util);
        }
        self.last_seen_us
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(uuid.to_string(), newest);
        let mut processes: Vec<_> = by_pid.into_values().collect();
        processes.sort_by_key(|p| p.pid);
        Ok(processes)
    }

    fn link_score(&self, a: &str, b: &str) -> Result<u32, BackendError> {
        let (da, db) = (self.device(a)?, self.device(b)?);
        let pcie = match self.nvml.topology_common_ancestor(&da, &db) {
            Ok(TopologyLevel::Internal) => link_score::SAME_BOARD,
            Ok(TopologyLevel::Single) => link_score::SINGLE_SWITCH,
            Ok(TopologyLevel::Multiple) => link_score::MULTI_SWITCH,
            Ok(TopologyLevel::HostBridge) => link_score::HOST_BRIDGE,
            Ok(TopologyLevel::Node) => link_score::SAME_CPU,
            Ok(TopologyLevel::System) => link_score::CROSS_CPU,
            Err(NvmlError::NotSupported) => link_score::CROSS_CPU,
            Err(err) => return Err(driver("topology_common_ancestor")(err)),
        };
        Ok(pcie + link_score::PER_NVLINK * self.nvlinks_between(&da, &db))
    }

    fn watch_health(
        &self,
        tx: UnboundedSender<HealthEvent>,
        stop: CancellationToken,
    ) -> Result<(), BackendError> {
        let nvml = self.nvml;
        let count = nvml.device_count().map_err(driver("device_count"))?;
        let mut devices = Vec::new();
        for index in 0..count {
            devices.push(
                nvml.device_by_index(index)
                    .map_err(driver("device_by_index"))?,
            );
        }
        std::thread::Builder::new()
            .name("nvml-events".into())
            .spawn(move || watch_events(nvml, devices, tx, stop))
            .map_err(|err| BackendError::Driver {
                op: "spawn event thread",
                message: err.to_string(),
            })?;
        Ok(())
    }
}

/// Registers every GPU for XID events and forwards them until `stop`. Registration errors other
/// than NotSupported make the GPU unhealthy, as does a failing wait for all GPUs.
fn watch_events(
    nvml: &'static Nvml,
    devices: Vec<Device<'static>>,
    tx: UnboundedSender<HealthEvent>,
    stop: CancellationToken,
) {
    let send = |gpu_uuid: Option<String>, kind: HealthEventKind| {
        tx.send(HealthEvent { gpu_uuid, kind }).is_ok()
    };
    let mut registered: Vec<(usize, EventTypes)> = Vec::new();
    let mut set: Option<EventSet<'static>> = None;
    for (i, device) in devices.iter().enumerate() {
        let uuid = device.uuid().ok();
        let supported = match device.supported_event_types() {
            Ok(types) => types,
            Err(err) => {
                tracing::warn!(?uuid, %err, "cannot read supported event types");
                send(uuid, HealthEventKind::WatchFailed(err.to_string()));
                continue;
            }
        };
        let wanted = EventTypes::CRITICAL_XID_ERROR & supported;
        if wanted.is_empty() {
            tracing::warn!(
                ?uuid,
                "GPU does not report XID events; its health cannot be watched"
            );
            continue;
        }
        let current = match set.take() {
            Some(set) => set,
            None => match nvml.create_event_set() {
                Ok(set) => set,
                Err(err) => {
                    send(None, HealthEventKind::WatchFailed(err.to_string()));
                    return;
                }
            },
        };
        match device.register_events(wanted, current) {
            Ok(updated) => {
                set = Some(updated);
                registered.push((i, wanted));
            }
            Err(err) => {
                // register_events frees the set on error: rebuild it with the devices that were
                // already registered.
                if !matches!(err.error, NvmlError::NotSupported) {
                    tracing::warn!(?uuid, error = %err.error, "XID event registration failed; marking the GPU unhealthy");
                    send(uuid, HealthEventKind::WatchFailed(err.error.to_string()));
                }
                let mut rebuilt = nvml.create_event_set().ok();
                for (j, types) in &registered {
                    rebuilt = rebuilt.and_then(|s| devices[*j].register_events(*types, s).ok());
                }
                set = rebuilt;
            }
        }
    }
    let Some(set) = set else {
        tracing::warn!("no GPU could be registered for XID events");
        return;
    };
    while !stop.is_cancelled() {
        match set.wait(EVENT_WAIT_MS) {
            Ok(event) => {
                if !event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                    continue;
                }
                let xid = match event.event_data {
                    Some(XidError::Value(xid)) => Some(xid),
                    _ => None,
                };
                // The wrapper drops the GPU/compute instance ids, so an event is charged to the
                // whole GPU (and so to all of its MIG instances).
                let uuid = event.device.uuid().ok();
                if !send(uuid, HealthEventKind::Xid(xid)) {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(err) => {
                tracing::error!(%err, "waiting for NVML events failed; marking all GPUs unhealthy");
                send(None, HealthEventKind::WatchFailed(err.to_string()));
                std::thread::sleep(std::time::Duration::from_millis(u64::from(EVENT_WAIT_MS)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profile_comes_from_the_device_name() {
        assert_eq!(
            profile_from_mig_name("NVIDIA A100-SXM4-80GB MIG 3g.40gb").as_deref(),
            Some("3g.40gb")
        );
        assert_eq!(
            profile_from_mig_name("NVIDIA H200 MIG 1g.18gb+me").as_deref(),
            Some("1g.18gb+me")
        );
        assert_eq!(profile_from_mig_name("NVIDIA H200"), None);
        assert_eq!(profile_from_mig_name("NVIDIA H200 MIG "), None);
    }

    #[test]
    fn sysfs_bus_id_matches_the_kernel_form() {
        assert_eq!(sysfs_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(sysfs_bus_id("0000:3b:00.0"), "0000:3b:00.0");
    }

    /// On machines without the driver, loading fails with an error that says so instead of
    /// panicking. Where a driver is present this checks that enumeration works read-only.
    #[test]
    fn load_reports_missing_nvml_or_enumerates() {
        match NvmlBackend::load() {
            Err(BackendError::NotLoaded(message)) => assert!(!message.is_empty()),
            Err(other) => panic!("unexpected error kind: {other}"),
            Ok(backend) => {
                let gpus = backend
                    .inventory()
                    .expect("inventory on a machine with NVML");
                for gpu in gpus {
                    assert!(gpu.uuid.starts_with("GPU-"), "{}", gpu.uuid);
                }
            }
        }
    }
}
