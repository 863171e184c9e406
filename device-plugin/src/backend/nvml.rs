//! The real backend, on NVML through nvml-wrapper.
//!
//! nvml-wrapper `dlopen`s `libnvidia-ml.so.1` at run time, so the binary builds and starts on
//! machines without the driver; only [`NvmlBackend::load`] fails there. NVML is initialised once
//! and leaked so device handles (which borrow it) can move into the event thread.
//!
//! What it reads is turned into GPUs, usage and health events by the same functions the fake
//! backend uses ([`super::inventory`], [`super::sampling`], [`super::watch`]); this file only
//! talks to the driver.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

use nvml_wrapper::enum_wrappers::device::{Sampling, TemperatureSensor, TopologyLevel};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, EventSet, GpmSample, Nvml, bitmasks::event::EventTypes};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::inventory::{GpuReadings, assemble};
use super::mig_profile::{ProfileFacts, from_device_name, profile_name};
use super::sampling::{
    BusySample, ListedProcess, ProcessList, UtilizationReading, UtilizationSample, device_usage,
    mean_busy_since, merge_processes, sample_value,
};
use super::watch::{EventSource, RawEvent, WatchedGpu, watch_events};
use super::{
    BackendError, DeviceUsage, Enumeration, GpuBackend, HealthEvent, MigInfo, ProcessUsage,
    link_score, nvml_raw,
};

/// NVLink slots NVML may report per GPU (`NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;

pub struct NvmlBackend {
    nvml: &'static Nvml,
    /// Per device, the newest process-utilization sample already reported, so each call returns
    /// only new samples.
    last_seen_us: Mutex<HashMap<String, u64>>,
    /// Per device, the newest device-wide utilization sample already averaged.
    busy_seen_us: Mutex<HashMap<String, u64>>,
    /// Devices already logged as keeping less utilization history than the reading interval.
    short_buffer_logged: Mutex<HashSet<String>>,
    /// Per MIG instance, the previous GPM sample: utilization is the difference of two.
    gpm_previous: Mutex<HashMap<String, GpmSample<'static>>>,
    /// MIG instances already logged as charged by allocation, so the line appears once.
    charged_logged: Mutex<HashSet<String>>,
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

/// A process list, read again once if processes started between NVML's count and data calls.
fn process_list(
    read: impl Fn() -> Result<Vec<ProcessInfo>, NvmlError>,
) -> Result<Vec<ListedProcess>, NvmlError> {
    let processes = match read() {
        Err(NvmlError::InsufficientSize(_)) => read(),
        other => other,
    }?;
    Ok(processes
        .into_iter()
        .map(|p| ListedProcess {
            pid: p.pid,
            memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            },
        })
        .collect())
}

/// The device answers GPU_IS_LOST to a query that has to reach it.
fn is_lost(device: &Device<'_>) -> bool {
    matches!(
        device.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::GpuLost)
    )
}

impl NvmlBackend {
    /// Loads and initialises NVML.
    pub fn load() -> Result<NvmlBackend, BackendError> {
        let nvml =
            Nvml::init().map_err(|err| BackendError::NotLoaded(describe_init_error(&err)))?;
        Ok(NvmlBackend {
            nvml: Box::leak(Box::new(nvml)),
            last_seen_us: Mutex::new(HashMap::new()),
            busy_seen_us: Mutex::new(HashMap::new()),
            short_buffer_logged: Mutex::new(HashSet::new()),
            gpm_previous: Mutex::new(HashMap::new()),
            charged_logged: Mutex::new(HashSet::new()),
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

    /// One MIG instance, or why it cannot be offered.
    fn mig_instance(
        &self,
        parent: &Device<'static>,
        parent_memory_bytes: u64,
        mig: &Device<'static>,
    ) -> Result<MigInfo, String> {
        let uuid = mig.uuid().map_err(|err| format!("UUID: {err}"))?;
        let gpu_instance = nvml_raw::gpu_instance_id(self.nvml, mig)
            .map_err(|err| format!("{uuid}: GPU instance ID: {err}"))?;
        let compute_instance = nvml_raw::compute_instance_id(self.nvml, mig)
            .map_err(|err| format!("{uuid}: compute instance ID: {err}"))?;
        let (_, compute_slices, memory_mib) = nvml_raw::mig_attributes(self.nvml, mig)
            .map_err(|err| format!("{uuid}: attributes: {err}"))?;
        let built = nvml_raw::gpu_instance_profile(self.nvml, parent, gpu_instance)
            .map_err(|err| format!("GPU instance profile: {err}"))
            .and_then(|gpu_instance_profile| {
                profile_name(&ProfileFacts {
                    gpu_instance_profile,
                    compute_slices,
                    memory_mib,
                    parent_memory_bytes,
                })
            });
        let profile = match built {
            Ok(profile) => profile,
            // Without the profile (e.g. the parent's memory needs monitoring rights), the name
            // the driver gives the device still carries it.
            Err(why) => {
                let name = mig.name().unwrap_or_default();
                let profile = from_device_name(&name).ok_or_else(|| {
                    format!("{uuid}: cannot build its profile ({why}) nor read it from the name {name:?}")
                })?;
                tracing::warn!(%uuid, %why, %profile, "MIG profile taken from the device name");
                profile
            }
        };
        Ok(MigInfo {
            uuid,
            profile,
            memory_bytes: memory_mib * 1024 * 1024,
            gpu_instance,
            compute_instance,
        })
    }

    /// The MIG instances that can be read; the others are logged and left out.
    fn mig_instances(&self, parent: &Device<'static>, parent_memory_bytes: u64) -> Vec<MigInfo> {
        // mig_device_count is the maximum number of slots, not the number in use.
        let slots = match parent.mig_device_count() {
            Ok(slots) => slots,
            Err(err) => {
                tracing::warn!(%err, "cannot count MIG slots; offering no instances of this GPU");
                return Vec::new();
            }
        };
        let mut instances = Vec::new();
        for slot in 0..slots {
            let mig = match parent.mig_device_by_index(slot) {
                Ok(mig) => mig,
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
                Err(err) => {
                    tracing::warn!(slot, %err, "cannot open a MIG slot; skipping it");
                    continue;
                }
            };
            match self.mig_instance(parent, parent_memory_bytes, &mig) {
                Ok(instance) => instances.push(instance),
                Err(why) => tracing::warn!(slot, %why, "cannot read a MIG instance; skipping it"),
            }
        }
        instances
    }

    fn readings(&self, index: u32) -> GpuReadings {
        let device = match self.nvml.device_by_index(index) {
            Ok(device) => device,
            Err(err) => {
                return GpuReadings {
                    index,
                    uuid: Err(err),
                    minor: Err(NvmlError::Unknown),
                    model: Err(NvmlError::Unknown),
                    memory_total: Err(NvmlError::Unknown),
                    mig_enabled: Err(NvmlError::Unknown),
                    numa_node: None,
                    mig: Vec::new(),
                };
            }
        };
        let memory_total = device.memory_info().map(|m| m.total);
        let mig_enabled = device.mig_mode().map(|mode| mode.current == 1);
        let mig = match mig_enabled {
            Ok(true) => self.mig_instances(&device, *memory_total.as_ref().unwrap_or(&0)),
            _ => Vec::new(),
        };
        GpuReadings {
            index,
            uuid: device.uuid(),
            minor: device.minor_number(),
            model: device.name(),
            memory_total,
            mig_enabled,
            numa_node: self.numa_node(&device),
            mig,
        }
    }

    /// Device-wide utilization since the previous call: the mean of the driver's samples taken
    /// since then, or its latest reading when it has no new sample (or keeps none).
    fn interval_utilization(
        &self,
        uuid: &str,
        device: &Device<'static>,
    ) -> Result<UtilizationReading, NvmlError> {
        let mut seen = self
            .busy_seen_us
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let since = seen.get(uuid).copied();
        match device.samples(Sampling::GpuUtilization, since) {
            Ok(samples) => {
                let samples: Vec<BusySample> = samples
                    .iter()
                    .map(|s| BusySample {
                        timestamp: s.timestamp,
                        percent: sample_value(&s.value),
                    })
                    .collect();
                if let Some(mean) = mean_busy_since(&samples, since) {
                    seen.insert(uuid.to_string(), mean.newest);
                    drop(seen);
                    if let Some(span) = since.and_then(|since| mean.buffer_span_short_of(since))
                        && self
                            .short_buffer_logged
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .insert(uuid.to_string())
                    {
                        tracing::warn!(%uuid, buffer = ?span, "NVML keeps less utilization history than the time between readings, so each reading averages only its last part; use a --utilization-interval no longer than the buffer");
                    }
                    return Ok(UtilizationReading::Measured(mean.fraction));
                }
            }
            // NotFound: nothing newer than `since`; NotSupported: MIG instances and some
            // virtual GPUs. Both fall back to the latest reading.
            Err(NvmlError::NotFound | NvmlError::NotSupported) => {}
            Err(err) => {
                tracing::debug!(%uuid, %err, "no utilization samples; using the latest reading")
            }
        }
        drop(seen);
        device
            .utilization_rates()
            .map(|rates| UtilizationReading::Measured(f64::from(rates.gpu) / 100.0))
    }

    /// SM utilization of a MIG instance from two GPM samples of its GPU instance (Hopper+).
    fn mig_gpm_utilization(
        &self,
        uuid: &str,
        mig: &Device<'static>,
    ) -> Result<UtilizationReading, NvmlError> {
        let parent = mig.mig_parent_device()?;
        let gpu_instance = nvml_raw::gpu_instance_id(self.nvml, mig)?;
        let current = parent.gpm_mig_sample(gpu_instance)?;
        let mut previous = self
            .gpm_previous
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let reading = match previous.get(uuid) {
            None => UtilizationReading::NotYet,
            Some(before) => {
                let results = nvml_wrapper::gpm::gpm_metrics_get(
                    self.nvml,
                    before,
                    &current,
                    &[GpmMetricId::SmUtil],
                )?;
                let value = results.into_iter().next().ok_or(NvmlError::Unknown)??.value;
                UtilizationReading::Measured(value / 100.0)
            }
        };
        previous.insert(uuid.to_string(), current);
        Ok(reading)
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

    fn inventory(&self) -> Result<Enumeration, BackendError> {
        let count = self.nvml.device_count().map_err(driver("device_count"))?;
        let mut enumeration = Enumeration::default();
        for index in 0..count {
            match assemble(self.readings(index)) {
                Ok(gpu) => enumeration.gpus.push(gpu),
                Err(skipped) => enumeration.skipped.push(skipped),
            }
        }
        Ok(enumeration)
    }

    fn device_usage(&self, uuid: &str) -> Result<DeviceUsage, BackendError> {
        let device = self.device(uuid)?;
        let rates = self.interval_utilization(uuid, &device);
        // Device-wide rates are not supported on MIG instances; GPM samples per GPU instance are.
        let mig_gpm = match (&rates, device.mig_is_mig_device_handle()) {
            (Err(_), Ok(true)) => Some(self.mig_gpm_utilization(uuid, &device)),
            _ => None,
        };
        let usage = device_usage(uuid, rates, mig_gpm, device.memory_info().map(|m| m.used));
        if usage.charge_allocation
            && self
                .charged_logged
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(uuid.to_string())
        {
            tracing::info!(%uuid, "MIG utilization cannot be measured on this GPU (no GPM before Hopper): its pod is charged its whole allocation");
        }
        Ok(usage)
    }

    fn processes(&self, uuid: &str) -> Result<Vec<ProcessUsage>, BackendError> {
        let device = self.device(uuid)?;
        let lists = vec![
            (
                ProcessList::Compute,
                process_list(|| device.running_compute_processes()),
            ),
            (
                ProcessList::Graphics,
                process_list(|| device.running_graphics_processes()),
            ),
            (
                ProcessList::Mps,
                process_list(|| device.mps_running_compute_processes()),
            ),
        ];
        let since = self
            .last_seen_us
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(uuid)
            .copied();
        let samples = device.process_utilization_stats(since).map(|samples| {
            samples
                .into_iter()
                .map(|s| UtilizationSample {
                    pid: s.pid,
                    timestamp: s.timestamp,
                    sm_percent: s.sm_util,
                })
                .collect()
        });
        let (processes, newest) = merge_processes(uuid, lists, samples, since);
        if let Some(newest) = newest {
            self.last_seen_us
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(uuid.to_string(), newest);
        }
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

    fn probe(&self, gpu_uuid: &str) -> Result<(), BackendError> {
        let device = self.device(gpu_uuid)?;
        let failed = |why: String| BackendError::Driver {
            op: "probe",
            message: why,
        };
        match device.temperature(TemperatureSensor::Gpu) {
            Ok(_) | Err(NvmlError::NotSupported) => {}
            Err(err) => return Err(failed(format!("the GPU does not answer: {err}"))),
        }
        match device.are_pages_pending_retired() {
            Ok(true) => return Err(failed("a page retirement waits for a GPU reset".into())),
            Ok(false) | Err(NvmlError::NotSupported) => {}
            Err(err) => return Err(failed(format!("cannot read page retirement: {err}"))),
        }
        match nvml_raw::remapped_rows_pending(self.nvml, &device) {
            Ok((true, _)) => Err(failed("a row remapping waits for a GPU reset".into())),
            Ok((_, true)) => Err(failed("a row remapping failed".into())),
            Ok(_) | Err(NvmlError::NotSupported) => Ok(()),
            Err(err) => Err(failed(format!("cannot read row remapping: {err}"))),
        }
    }

    fn watch_health(
        &self,
        tx: UnboundedSender<HealthEvent>,
        stop: CancellationToken,
    ) -> Result<(), BackendError> {
        let nvml = self.nvml;
        std::thread::Builder::new()
            .name("nvml-events".into())
            .spawn(move || {
                // Enumerating here, not on the caller's (async) thread: it is many driver calls.
                let gpus = match nvml.device_count() {
                    Ok(count) => (0..count)
                        .filter_map(|index| {
                            let device = nvml.device_by_index(index).ok()?;
                            let uuid = device.uuid().ok()?;
                            Some(WatchedGpu { uuid, device })
                        })
                        .collect(),
                    Err(err) => {
                        tracing::error!(%err, "cannot count GPUs for health watching");
                        Vec::new()
                    }
                };
                let source = NvmlEvents { nvml, set: None };
                watch_events(source, gpus, tx, stop);
            })
            .map_err(|err| BackendError::Driver {
                op: "spawn event thread",
                message: err.to_string(),
            })?;
        Ok(())
    }
}

/// NVML's event set, which `register_events` consumes and frees on failure.
struct NvmlEvents {
    nvml: &'static Nvml,
    set: Option<EventSet<'static>>,
}

impl EventSource for NvmlEvents {
    type Device = Device<'static>;

    fn register(&mut self, device: &Device<'static>) -> Result<bool, NvmlError> {
        let wanted = EventTypes::CRITICAL_XID_ERROR & device.supported_event_types()?;
        if wanted.is_empty() {
            return Ok(false);
        }
        let set = match self.set.take() {
            Some(set) => set,
            None => self.nvml.create_event_set()?,
        };
        match device.register_events(wanted, set) {
            Ok(set) => {
                self.set = Some(set);
                Ok(true)
            }
            Err(err) => Err(err.error),
        }
    }

    fn reset(&mut self) -> Result<(), NvmlError> {
        self.set = None;
        self.set = Some(self.nvml.create_event_set()?);
        Ok(())
    }

    fn wait(&mut self, timeout_ms: u32) -> Result<RawEvent, NvmlError> {
        match &self.set {
            Some(set) => nvml_raw::wait_event(self.nvml, set, timeout_ms),
            None => Err(NvmlError::Uninitialized),
        }
    }

    fn is_lost(&self, device: &Device<'static>) -> bool {
        is_lost(device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                let found = backend
                    .inventory()
                    .expect("inventory on a machine with NVML");
                for gpu in found.gpus {
                    assert!(gpu.uuid.starts_with("GPU-"), "{}", gpu.uuid);
                }
            }
        }
    }
}
