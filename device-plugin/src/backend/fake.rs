//! A scripted backend read from YAML, for tests, laptops and kind clusters. It answers through
//! the same functions as the NVML backend ([`super::inventory`], [`super::sampling`],
//! [`super::watch`]), so each NVML behaviour it scripts meets the code a real node runs.
//!
//! ```yaml
//! gpus:
//!   - uuid: GPU-11111111-0000-0000-0000-000000000000
//!     model: NVIDIA A100-SXM4-80GB
//!     memoryMiB: 81920
//!     nvlinkPeers: [1]                 # optional, indices of other GPUs
//!     numaNode: 0                      # optional
//!     migEnabled: true                 # optional; default: true when `mig` lists instances
//!     mig:                             # optional: the MIG instances
//!       - { uuid: MIG-2222…, profile: 3g.40gb, gpuInstance: 1, computeInstance: 0,
//!           utilization: 0.3 }         # utilization: what GPM reports (Hopper); absent: none
//!     xids:                            # optional: inject an XID this long after start,
//!       - { at: 5s, xid: 79 }          # on the whole GPU …
//!       - { at: 6s, xid: 94, gpuInstance: 1, computeInstance: 0 }   # … or on one instance
//!     lostAt: 10s                      # optional: the GPU falls off the bus (GPU_IS_LOST)
//!     failures:                        # optional: NVML calls that fail, with the error
//!       memoryInfo: NoPermission       # also processUtilization, utilizationRates,
//!                                      # eventRegistration; errors: NoPermission,
//!                                      # InsufficientSize, NotSupported, GpuIsLost, Unknown
//!     faults:                          # optional: faults that start and clear (see fake_faults)
//!       - { from: 5s, until: 9s, lost: true }
//!       - { from: 2s, until: 4s, calls: Unknown }
//!       - { from: 1s, until: 3s, eventWait: Unknown }
//!     utilization: 0.6                 # optional: reported SM utilization
//!     processes:                       # optional: processes on this GPU (or one of its MIGs)
//!       - { pid: 4242, memoryMiB: 1024, smUtilization: 0.5, device: MIG-2222…, kind: compute }
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use gpufair_core::mig_profile::MigProfile;
use nvml_wrapper::error::NvmlError;
use serde::Deserialize;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::fake_faults::{FakeError, Fault, FaultEntry, Faults};
use super::inventory::{GpuReadings, assemble};
use super::sampling::{
    ListedProcess, ProcessList, UtilizationReading, UtilizationSample, device_usage,
    merge_processes,
};
use super::watch::{EventSource, NO_INSTANCE, RawEvent, WatchedGpu, watch_events};
use super::{
    BackendError, DeviceUsage, Enumeration, GpuBackend, HealthEvent, MigInfo, ProcessUsage,
    link_score,
};
use crate::duration::HumanDuration;

const MIB: u64 = 1024 * 1024;
/// How often a waiting event set looks at the faults again.
const FAULT_POLL: Duration = Duration::from_millis(50);

/// Whether GPU `index` is off the bus now: past its `lostAt`, or in a lost fault.
fn gpu_lost(script: &Scripted, faults: &Faults, start: Instant, index: usize) -> bool {
    script.gpus[index]
        .lost_at
        .is_some_and(|at| start.elapsed() >= at)
        || faults.is_lost(index)
}
const GIB: u64 = 1024 * MIB;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeFile {
    gpus: Vec<FakeGpu>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeGpu {
    uuid: String,
    model: String,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    #[serde(default)]
    nvlink_peers: Vec<u32>,
    #[serde(default)]
    numa_node: Option<i64>,
    #[serde(default)]
    mig_enabled: Option<bool>,
    #[serde(default)]
    mig: Vec<FakeMig>,
    #[serde(default)]
    xids: Vec<FakeXid>,
    #[serde(default)]
    lost_at: Option<HumanDuration>,
    #[serde(default)]
    failures: Failures,
    #[serde(default)]
    faults: Vec<FaultEntry>,
    #[serde(default)]
    utilization: Option<f64>,
    #[serde(default)]
    processes: Vec<FakeProcess>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeMig {
    uuid: String,
    profile: String,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: Option<u64>,
    #[serde(default)]
    gpu_instance: Option<u32>,
    #[serde(default)]
    compute_instance: Option<u32>,
    #[serde(default)]
    utilization: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeXid {
    at: HumanDuration,
    xid: u64,
    #[serde(default)]
    gpu_instance: Option<u32>,
    #[serde(default)]
    compute_instance: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
enum ProcessKind {
    #[default]
    Compute,
    Graphics,
    Mps,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeProcess {
    pid: u32,
    #[serde(rename = "memoryMiB", default)]
    memory_mib: u64,
    #[serde(default)]
    sm_utilization: Option<f64>,
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    kind: ProcessKind,
}

/// NVML calls that can be scripted to fail, each with its error.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Failures {
    /// `nvmlDeviceGetMemoryInfo` (the GPU's total, and memory in use).
    memory_info: Option<FakeError>,
    /// `nvmlDeviceGetProcessUtilization`.
    process_utilization: Option<FakeError>,
    /// `nvmlDeviceGetUtilizationRates`.
    utilization_rates: Option<FakeError>,
    /// `nvmlDeviceRegisterEvents`.
    event_registration: Option<FakeError>,
}

fn fail<T>(failure: Option<FakeError>, ok: impl FnOnce() -> T) -> Result<T, NvmlError> {
    match failure {
        Some(err) => Err(err.nvml()),
        None => Ok(ok()),
    }
}

#[derive(Debug, Clone)]
struct ScriptedProcess {
    usage: ProcessUsage,
    kind: ProcessKind,
}

/// One scripted GPU.
#[derive(Debug, Clone)]
struct ScriptedGpu {
    uuid: String,
    model: String,
    memory_bytes: u64,
    numa_node: Option<i64>,
    mig_enabled: bool,
    mig: Vec<MigInfo>,
    /// MIG UUID → the utilization GPM reports for it.
    mig_utilization: HashMap<String, f64>,
    utilization: Option<f64>,
    lost_at: Option<Duration>,
    failures: Failures,
}

#[derive(Debug, Clone)]
struct ScriptedXid {
    at: Duration,
    gpu: usize,
    xid: u64,
    gpu_instance: u32,
    compute_instance: u32,
}

#[derive(Debug)]
struct Scripted {
    gpus: Vec<ScriptedGpu>,
    nvlinks: HashSet<(u32, u32)>,
    /// Keyed by device (GPU or MIG) UUID.
    processes: HashMap<String, Vec<ScriptedProcess>>,
    xids: Vec<ScriptedXid>,
}

/// Events injected by tests, waiting for one fake event set.
#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<RawEvent>>,
    ready: Condvar,
}

pub struct FakeBackend {
    script: Arc<Scripted>,
    faults: Arc<Faults>,
    /// Scripted times (`at`, `lostAt`) count from here.
    start: Instant,
    /// Every watcher's mailbox, so tests and benchmarks can inject events at a moment they choose.
    mailboxes: Mutex<Vec<Weak<Mailbox>>>,
}

fn unit_interval(value: f64, key: &str) -> Result<(), String> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(format!("{key}: {value} is not between 0 and 1"))
    }
}

impl FakeBackend {
    pub fn load(path: &Path) -> Result<FakeBackend, BackendError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            BackendError::FakeConfig(format!("cannot read {}: {err}", path.display()))
        })?;
        FakeBackend::parse(&text)
            .map_err(|err| BackendError::FakeConfig(format!("{}: {err}", path.display())))
    }

    /// Parses and validates a fake GPU document; the error names the offending key.
    pub fn parse(text: &str) -> Result<FakeBackend, String> {
        let file: FakeFile = crate::duration::from_yaml(text)?;
        let count = file.gpus.len() as u32;
        let start = Instant::now();
        let mut faults = Faults::new(start);
        let mut seen = HashSet::new();
        let mut script = Scripted {
            gpus: Vec::new(),
            nvlinks: HashSet::new(),
            processes: HashMap::new(),
            xids: Vec::new(),
        };
        for (i, gpu) in file.gpus.into_iter().enumerate() {
            let key = format!("gpus[{i}]");
            if !gpu.uuid.starts_with("GPU-") || gpu.uuid.len() > 60 {
                return Err(format!(
                    "{key}.uuid: {:?} must be a GPU UUID (GPU-…, at most 60 characters)",
                    gpu.uuid
                ));
            }
            if !seen.insert(gpu.uuid.clone()) {
                return Err(format!("{key}.uuid: {} appears twice", gpu.uuid));
            }
            if gpu.memory_mib == 0 {
                return Err(format!("{key}.memoryMiB: must be positive"));
            }
            for peer in &gpu.nvlink_peers {
                if *peer >= count || *peer == i as u32 {
                    return Err(format!(
                        "{key}.nvlinkPeers: {peer} is not the index of another GPU (0..{count})"
                    ));
                }
                script.nvlinks.insert((i as u32, *peer));
                script.nvlinks.insert((*peer, i as u32));
            }
            if let Some(util) = gpu.utilization {
                unit_interval(util, &format!("{key}.utilization"))?;
            }
            faults.script(i, gpu.faults, &format!("{key}.faults"))?;
            let mig_enabled = gpu.mig_enabled.unwrap_or(!gpu.mig.is_empty());
            if !mig_enabled && !gpu.mig.is_empty() {
                return Err(format!(
                    "{key}.migEnabled: false, but mig lists instances (a GPU with MIG off has none)"
                ));
            }
            let mut mig = Vec::new();
            let mut mig_utilization = HashMap::new();
            for (j, m) in gpu.mig.into_iter().enumerate() {
                let mkey = format!("{key}.mig[{j}]");
                if !m.uuid.starts_with("MIG-") || m.uuid.len() > 60 {
                    return Err(format!(
                        "{mkey}.uuid: {:?} must be a MIG UUID (MIG-…, at most 60 characters)",
                        m.uuid
                    ));
                }
                if !seen.insert(m.uuid.clone()) {
                    return Err(format!("{mkey}.uuid: {} appears twice", m.uuid));
                }
                let parsed = MigProfile::parse(&m.profile)
                    .map_err(|why| format!("{mkey}.profile: {why}"))?;
                let gpu_instance = m.gpu_instance.unwrap_or(j as u32 + 1);
                let compute_instance = m.compute_instance.unwrap_or(0);
                if gpu_instance == NO_INSTANCE || compute_instance == NO_INSTANCE {
                    return Err(format!(
                        "{mkey}: {NO_INSTANCE} means \"no instance\" to NVML"
                    ));
                }
                if mig.iter().any(|other: &MigInfo| {
                    (other.gpu_instance, other.compute_instance) == (gpu_instance, compute_instance)
                }) {
                    return Err(format!(
                        "{mkey}: gpuInstance {gpu_instance} / computeInstance {compute_instance} is used twice"
                    ));
                }
                if let Some(util) = m.utilization {
                    unit_interval(util, &format!("{mkey}.utilization"))?;
                    mig_utilization.insert(m.uuid.clone(), util);
                }
                mig.push(MigInfo {
                    uuid: m.uuid,
                    profile: m.profile,
                    memory_bytes: m.memory_mib.map_or(parsed.memory_gb * GIB, |mib| mib * MIB),
                    gpu_instance,
                    compute_instance,
                });
            }
            for (j, x) in gpu.xids.into_iter().enumerate() {
                let xkey = format!("{key}.xids[{j}]");
                let (gpu_instance, compute_instance) = match (x.gpu_instance, x.compute_instance) {
                    (None, None) => (NO_INSTANCE, NO_INSTANCE),
                    (None, Some(_)) => {
                        return Err(format!("{xkey}.computeInstance: needs gpuInstance too"));
                    }
                    (Some(gi), ci) => {
                        let ci = ci.unwrap_or(NO_INSTANCE);
                        let exists = mig.iter().any(|m| {
                            m.gpu_instance == gi && (ci == NO_INSTANCE || m.compute_instance == ci)
                        });
                        if !exists {
                            let known: Vec<String> = mig
                                .iter()
                                .map(|m| format!("{}/{}", m.gpu_instance, m.compute_instance))
                                .collect();
                            return Err(format!(
                                "{xkey}: no MIG instance of this GPU has gpuInstance {gi}{} (instances: [{}])",
                                if ci == NO_INSTANCE {
                                    String::new()
                                } else {
                                    format!(" and computeInstance {ci}")
                                },
                                known.join(", ")
                            ));
                        }
                        (gi, ci)
                    }
                };
                script.xids.push(ScriptedXid {
                    at: x.at.0,
                    gpu: i,
                    xid: x.xid,
                    gpu_instance,
                    compute_instance,
                });
            }
            for (j, p) in gpu.processes.into_iter().enumerate() {
                let device = p.device.unwrap_or_else(|| gpu.uuid.clone());
                if device != gpu.uuid && !mig.iter().any(|m| m.uuid == device) {
                    return Err(format!(
                        "{key}.processes[{j}].device: {device} is neither this GPU nor one of its MIG instances"
                    ));
                }
                if let Some(util) = p.sm_utilization {
                    unit_interval(util, &format!("{key}.processes[{j}].smUtilization"))?;
                }
                script
                    .processes
                    .entry(device)
                    .or_default()
                    .push(ScriptedProcess {
                        usage: ProcessUsage {
                            pid: p.pid,
                            memory_bytes: p.memory_mib * MIB,
                            sm_utilization: p.sm_utilization,
                        },
                        kind: p.kind,
                    });
            }
            script.gpus.push(ScriptedGpu {
                uuid: gpu.uuid,
                model: gpu.model,
                memory_bytes: gpu.memory_mib * MIB,
                numa_node: gpu.numa_node,
                mig_enabled,
                mig,
                mig_utilization,
                utilization: gpu.utilization,
                lost_at: gpu.lost_at.map(|d| d.0),
                failures: gpu.failures,
            });
        }
        script.xids.sort_by_key(|x| x.at);
        Ok(FakeBackend {
            script: Arc::new(script),
            faults: Arc::new(faults),
            start,
            mailboxes: Mutex::new(Vec::new()),
        })
    }

    /// Sends an XID for the whole of `gpu_uuid` to every health watcher now.
    pub fn inject_xid(&self, gpu_uuid: &str, xid: u64) {
        let event = RawEvent {
            gpu_uuid: Some(gpu_uuid.to_string()),
            critical_xid: Some(Some(xid)),
            gpu_instance: NO_INSTANCE,
            compute_instance: NO_INSTANCE,
        };
        let mut mailboxes = self
            .mailboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        mailboxes.retain(|weak| match weak.upgrade() {
            Some(mailbox) => {
                mailbox
                    .queue
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push_back(event.clone());
                mailbox.ready.notify_all();
                true
            }
            None => false,
        });
    }

    /// Switches `fault` on for the GPU `gpu_uuid` until [`FakeBackend::clear_faults`].
    pub fn inject_fault(&self, gpu_uuid: &str, fault: Fault) -> Result<(), BackendError> {
        let gpu = self.index_of(gpu_uuid)? as usize;
        self.faults.inject(gpu, fault);
        Ok(())
    }

    /// Clears the faults switched on for `gpu_uuid` with [`FakeBackend::inject_fault`].
    pub fn clear_faults(&self, gpu_uuid: &str) -> Result<(), BackendError> {
        let gpu = self.index_of(gpu_uuid)? as usize;
        self.faults.clear(gpu);
        Ok(())
    }

    fn index_of(&self, uuid: &str) -> Result<u32, BackendError> {
        self.script
            .gpus
            .iter()
            .position(|g| g.uuid == uuid)
            .map(|i| i as u32)
            .ok_or_else(|| BackendError::UnknownDevice(uuid.to_string()))
    }

    /// The GPU a GPU or MIG UUID belongs to (with its index), and whether it is a MIG
    /// instance.
    fn owner(&self, uuid: &str) -> Result<(usize, &ScriptedGpu, bool), BackendError> {
        self.script
            .gpus
            .iter()
            .enumerate()
            .find_map(|(i, g)| {
                if g.uuid == uuid {
                    Some((i, g, false))
                } else {
                    g.mig.iter().any(|m| m.uuid == uuid).then_some((i, g, true))
                }
            })
            .ok_or_else(|| BackendError::UnknownDevice(uuid.to_string()))
    }

    fn is_lost(&self, index: usize) -> bool {
        gpu_lost(&self.script, &self.faults, self.start, index)
    }

    /// The live GPU behind a UUID: GPU_IS_LOST while it is off the bus, and the scripted error
    /// while its calls fail.
    fn reachable(&self, uuid: &str) -> Result<(&ScriptedGpu, bool), BackendError> {
        let (index, gpu, is_mig) = self.owner(uuid)?;
        let failure = if self.is_lost(index) {
            Some(NvmlError::GpuLost)
        } else {
            self.faults.call_failure(index).map(FakeError::nvml)
        };
        if let Some(err) = failure {
            return Err(BackendError::Driver {
                op: "query",
                message: err.to_string(),
            });
        }
        Ok((gpu, is_mig))
    }
}

impl GpuBackend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn inventory(&self) -> Result<Enumeration, BackendError> {
        let mut enumeration = Enumeration::default();
        for (i, gpu) in self.script.gpus.iter().enumerate() {
            let readings = if self.is_lost(i) {
                GpuReadings {
                    index: i as u32,
                    uuid: Err(NvmlError::GpuLost),
                    minor: Err(NvmlError::GpuLost),
                    model: Err(NvmlError::GpuLost),
                    memory_total: Err(NvmlError::GpuLost),
                    mig_enabled: Err(NvmlError::GpuLost),
                    numa_node: None,
                    mig: Vec::new(),
                }
            } else {
                GpuReadings {
                    index: i as u32,
                    uuid: Ok(gpu.uuid.clone()),
                    minor: Ok(i as u32),
                    model: Ok(gpu.model.clone()),
                    memory_total: fail(gpu.failures.memory_info, || gpu.memory_bytes),
                    mig_enabled: Ok(gpu.mig_enabled),
                    numa_node: gpu.numa_node,
                    mig: gpu.mig.clone(),
                }
            };
            match assemble(readings) {
                Ok(info) => enumeration.gpus.push(info),
                Err(skipped) => enumeration.skipped.push(skipped),
            }
        }
        Ok(enumeration)
    }

    fn device_usage(&self, uuid: &str) -> Result<DeviceUsage, BackendError> {
        let (gpu, is_mig) = self.reachable(uuid)?;
        let failures = gpu.failures;
        let rates = match (failures.utilization_rates, is_mig, gpu.utilization) {
            (Some(err), _, _) => Err(err.nvml()),
            // NVML: "On MIG-enabled GPUs, querying device utilization rates is not supported".
            (None, true, _) | (None, false, None) => Err(NvmlError::NotSupported),
            (None, false, Some(util)) => Ok(UtilizationReading::Measured(util)),
        };
        let mig_gpm = is_mig.then(|| match gpu.mig_utilization.get(uuid) {
            Some(util) => Ok(UtilizationReading::Measured(*util)),
            // No GPU performance monitoring (before Hopper).
            None => Err(NvmlError::NotSupported),
        });
        let memory_used = fail(failures.memory_info, || {
            self.script
                .processes
                .get(uuid)
                .map_or(0, |ps| ps.iter().map(|p| p.usage.memory_bytes).sum())
        });
        Ok(device_usage(uuid, rates, mig_gpm, memory_used))
    }

    fn processes(&self, uuid: &str) -> Result<Vec<ProcessUsage>, BackendError> {
        let (gpu, _) = self.reachable(uuid)?;
        let scripted = self
            .script
            .processes
            .get(uuid)
            .map_or(&[][..], Vec::as_slice);
        let list = |kind: ProcessKind| {
            Ok(scripted
                .iter()
                .filter(|p| p.kind == kind)
                .map(|p| ListedProcess {
                    pid: p.usage.pid,
                    memory_bytes: Some(p.usage.memory_bytes),
                })
                .collect())
        };
        let lists = vec![
            (ProcessList::Compute, list(ProcessKind::Compute)),
            (ProcessList::Graphics, list(ProcessKind::Graphics)),
            (ProcessList::Mps, list(ProcessKind::Mps)),
        ];
        let samples = fail(gpu.failures.process_utilization, || {
            scripted
                .iter()
                .filter_map(|p| {
                    Some(UtilizationSample {
                        pid: p.usage.pid,
                        timestamp: 1,
                        sm_percent: (p.usage.sm_utilization? * 100.0).round() as u32,
                    })
                })
                .collect()
        });
        Ok(merge_processes(uuid, lists, samples, None).0)
    }

    fn link_score(&self, a: &str, b: &str) -> Result<u32, BackendError> {
        let (a, b) = (self.index_of(a)?, self.index_of(b)?);
        let nvlink = if self.script.nvlinks.contains(&(a, b)) {
            link_score::PER_NVLINK
        } else {
            0
        };
        // Without a topology in the file, every pair sits behind one host bridge.
        Ok(link_score::HOST_BRIDGE + nvlink)
    }

    fn probe(&self, gpu_uuid: &str) -> Result<(), BackendError> {
        self.reachable(gpu_uuid).map(|_| ())
    }

    fn watch_health(
        &self,
        tx: UnboundedSender<HealthEvent>,
        stop: CancellationToken,
    ) -> Result<(), BackendError> {
        let mailbox = Arc::new(Mailbox::default());
        self.mailboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Arc::downgrade(&mailbox));
        let gpus = self
            .script
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| WatchedGpu {
                uuid: g.uuid.clone(),
                device: i,
            })
            .collect();
        let source = FakeEvents {
            script: Arc::clone(&self.script),
            faults: Arc::clone(&self.faults),
            start: self.start,
            mailbox,
            registered: Vec::new(),
            next_scripted: 0,
        };
        std::thread::Builder::new()
            .name("fake-events".into())
            .spawn(move || watch_events(source, gpus, tx, stop))
            .map_err(|err| BackendError::Driver {
                op: "spawn event thread",
                message: err.to_string(),
            })?;
        Ok(())
    }
}

/// An event set over the script, with NVML's behaviours: a failed registration frees the set,
/// only registered GPUs deliver events, and waiting answers GPU_IS_LOST while a registered GPU
/// has fallen off the bus.
struct FakeEvents {
    script: Arc<Scripted>,
    faults: Arc<Faults>,
    start: Instant,
    mailbox: Arc<Mailbox>,
    /// Indices of the GPUs in the current set.
    registered: Vec<usize>,
    /// The first scripted XID not yet delivered.
    next_scripted: usize,
}

impl FakeEvents {
    fn lost(&self, gpu: usize) -> bool {
        gpu_lost(&self.script, &self.faults, self.start, gpu)
    }

    fn is_registered(&self, uuid: Option<&str>) -> bool {
        self.registered
            .iter()
            .any(|&i| Some(self.script.gpus[i].uuid.as_str()) == uuid)
    }

    /// The next scripted XID that is due, if its GPU is in the set (others are never seen).
    fn due_scripted(&mut self) -> Option<RawEvent> {
        while let Some(x) = self.script.xids.get(self.next_scripted) {
            if self.start.elapsed() < x.at {
                return None;
            }
            self.next_scripted += 1;
            if self.registered.contains(&x.gpu) {
                tracing::info!(gpu = %self.script.gpus[x.gpu].uuid, xid = x.xid, "fake backend: scripted XID");
                return Some(RawEvent {
                    gpu_uuid: Some(self.script.gpus[x.gpu].uuid.clone()),
                    critical_xid: Some(Some(x.xid)),
                    gpu_instance: x.gpu_instance,
                    compute_instance: x.compute_instance,
                });
            }
        }
        None
    }

    /// When something scripted next happens (an XID or a GPU getting lost).
    fn next_scripted_at(&self) -> Option<Duration> {
        let xid = self.script.xids.get(self.next_scripted).map(|x| x.at);
        let lost = self
            .registered
            .iter()
            .filter_map(|&i| self.script.gpus[i].lost_at)
            .min();
        xid.into_iter().chain(lost).min()
    }
}

impl EventSource for FakeEvents {
    type Device = usize;

    fn register(&mut self, gpu: &usize) -> Result<bool, NvmlError> {
        if let Some(err) = self.script.gpus[*gpu].failures.event_registration {
            // NVML frees the set when a registration fails.
            self.registered.clear();
            return Err(err.nvml());
        }
        self.registered.push(*gpu);
        Ok(true)
    }

    fn reset(&mut self) -> Result<(), NvmlError> {
        self.registered.clear();
        Ok(())
    }

    fn wait(&mut self, timeout_ms: u32) -> Result<RawEvent, NvmlError> {
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let mailbox = Arc::clone(&self.mailbox);
        let mut queue = mailbox
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            if let Some(err) = self.faults.event_wait_failure() {
                return Err(err.nvml());
            }
            if self.registered.iter().any(|&i| self.lost(i)) {
                return Err(NvmlError::GpuLost);
            }
            if let Some(event) = self.due_scripted() {
                return Ok(event);
            }
            while let Some(event) = queue.pop_front() {
                if self.is_registered(event.gpu_uuid.as_deref()) {
                    return Ok(event);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NvmlError::Timeout);
            }
            let wake = self
                .next_scripted_at()
                .map_or(deadline, |at| deadline.min(self.start + at));
            // Faults switched on or off while waiting are noticed within FAULT_POLL.
            let nap = wake
                .saturating_duration_since(now)
                .clamp(Duration::from_millis(1), FAULT_POLL);
            queue = mailbox
                .ready
                .wait_timeout(queue, nap)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    fn is_lost(&self, gpu: &usize) -> bool {
        self.lost(*gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::HealthEventKind;

    const ISSUE_EXAMPLE: &str = "
gpus:
  - uuid: GPU-11111111-0000-0000-0000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    nvlinkPeers: [1]
    mig:
      - { uuid: MIG-22222222-0000-0000-0000-000000000000, profile: 3g.40gb }
    xids: [ { at: 5s, xid: 79 } ]
    utilization: 0.6
  - uuid: GPU-33333333-0000-0000-0000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
";

    #[test]
    fn reads_the_documented_format() {
        let fake = FakeBackend::parse(ISSUE_EXAMPLE).expect("example parses");
        let gpus = fake.inventory().expect("inventory").gpus;
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].memory_bytes, 81920 * MIB);
        assert_eq!(gpus[0].mig[0].profile, "3g.40gb");
        assert_eq!(gpus[0].mig[0].memory_bytes, 40 * 1024 * MIB);
        assert!(gpus[0].mig_enabled && !gpus[1].mig_enabled);
        assert_eq!(
            (gpus[0].mig[0].gpu_instance, gpus[0].mig[0].compute_instance),
            (1, 0)
        );
        let xid = &fake.script.xids[0];
        assert_eq!((xid.at, xid.gpu, xid.xid), (Duration::from_secs(5), 0, 79));
        let usage = fake.device_usage(&gpus[0].uuid).expect("usage");
        assert_eq!(usage.utilization, Some(0.6));
        let linked = fake
            .link_score(&gpus[0].uuid, &gpus[1].uuid)
            .expect("score");
        assert_eq!(linked, link_score::HOST_BRIDGE + link_score::PER_NVLINK);
        assert!(fake.device_usage("GPU-nope").is_err());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("gpus: [{uuid: X, model: m, memoryMiB: 1}]", "gpus[0].uuid"),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, nvlinkPeers: [0]}]",
                "nvlinkPeers",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, utilization: 2}]",
                "utilization",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, mig: [{uuid: MIG-b, profile: big}]}]",
                "mig[0].profile",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, xids: [{at: later, xid: 1}]}]",
                "at",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1}, {uuid: GPU-a, model: m, memoryMiB: 1}]",
                "twice",
            ),
            ("gpus: [{uuid: GPU-a, model: m}]", "memoryMiB"),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, migEnabled: false, mig: [{uuid: MIG-b, profile: 1g.5gb}]}]",
                "gpus[0].migEnabled",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, failures: {memoryInfo: Broken}}]",
                "NoPermission",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, failures: {temperature: Unknown}}]",
                "eventRegistration",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, mig: [{uuid: MIG-b, profile: 1g.5gb}], xids: [{at: 1s, xid: 48, gpuInstance: 9}]}]",
                "gpus[0].xids[0]: no MIG instance of this GPU has gpuInstance 9",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, xids: [{at: 1s, xid: 48, computeInstance: 0}]}]",
                "computeInstance: needs gpuInstance",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, mig: [{uuid: MIG-b, profile: 1g.5gb, gpuInstance: 1}, {uuid: MIG-c, profile: 1g.5gb, gpuInstance: 1}]}]",
                "used twice",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, lostAt: soon}]",
                "lostAt",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, colour: red}]",
                "colour",
            ),
        ];
        for (text, needle) in cases {
            let err = FakeBackend::parse(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err:?}");
        }
    }

    #[tokio::test]
    async fn scripted_and_injected_xids_reach_the_watcher() {
        let fake = FakeBackend::parse(
            "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, xids: [{at: 10ms, xid: 48}]}]",
        )
        .expect("parses");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        fake.watch_health(tx, CancellationToken::new())
            .expect("watch");
        let first = rx.recv().await.expect("scripted event");
        assert_eq!(first.kind, HealthEventKind::Xid(Some(48)));
        fake.inject_xid("GPU-a", 94);
        let second = rx.recv().await.expect("injected event");
        assert_eq!(second.kind, HealthEventKind::Xid(Some(94)));
    }

    #[test]
    fn me_profiles_parse_with_their_instance_ids() {
        let fake = FakeBackend::parse(
            "gpus: [{uuid: GPU-a, model: NVIDIA B200, memoryMiB: 183359, mig: [
               {uuid: MIG-b, profile: 1g.23gb-me, gpuInstance: 7, computeInstance: 0},
               {uuid: MIG-c, profile: 1g.23gb+me.all, gpuInstance: 8, computeInstance: 0}]}]",
        )
        .expect("parses");
        let gpu = &fake.inventory().expect("inventory").gpus[0];
        assert_eq!(gpu.mig[0].profile, "1g.23gb-me");
        assert_eq!(gpu.mig[0].memory_bytes, 23 * GIB);
        assert_eq!(
            (gpu.mig[1].gpu_instance, gpu.mig[1].compute_instance),
            (8, 0)
        );
    }

    #[test]
    fn scripted_failures_reach_the_shared_sampling() {
        let fake = FakeBackend::parse(
            "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1024, utilization: 0.5,
               failures: {processUtilization: InsufficientSize, utilizationRates: Unknown},
               processes: [{pid: 7, memoryMiB: 10, smUtilization: 0.5},
                           {pid: 7, memoryMiB: 10, kind: graphics},
                           {pid: 8, memoryMiB: 3, kind: mps}]}]",
        )
        .expect("parses");
        let processes = fake
            .processes("GPU-a")
            .expect("processes despite the sample error");
        let pids: Vec<_> = processes
            .iter()
            .map(|p| (p.pid, p.sm_utilization))
            .collect();
        assert_eq!(pids, [(7, None), (8, None)]);
        let usage = fake.device_usage("GPU-a").expect("usage");
        assert_eq!(usage.utilization, None);
        assert_eq!(usage.memory_used_bytes, Some(23 * MIB));
    }
}
