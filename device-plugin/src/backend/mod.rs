//! What the plugin needs from the GPU driver, behind a trait so that a fake backend can stand in
//! for NVML in tests, on laptops and in kind clusters.

pub mod fake;
pub mod fake_faults;
pub mod inventory;
pub mod mig_profile;
pub mod nvml;
mod nvml_raw;
pub mod sampling;
pub mod watch;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

pub use fake::FakeBackend;
pub use fake_faults::{FakeError, Fault};
pub use nvml::NvmlBackend;

/// One physical GPU. Owned data only, so it outlives any driver handle.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub uuid: String,
    pub index: u32,
    /// Minor number: the GPU's device node is `/dev/nvidia<minor>`.
    pub minor: u32,
    pub model: String,
    pub memory_bytes: u64,
    pub numa_node: Option<i64>,
    /// MIG mode is on. Such a GPU is offered only as its instances, so with no instances
    /// (during a reconfiguration, or an empty layout) it is offered as nothing: CUDA cannot use
    /// a MIG-enabled GPU as a whole.
    pub mig_enabled: bool,
    /// The MIG instances, when MIG is on.
    pub mig: Vec<MigInfo>,
}

/// The node's GPUs as far as the driver could read them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Enumeration {
    pub gpus: Vec<GpuInfo>,
    /// GPUs left out because something essential about them could not be read.
    pub skipped: Vec<SkippedGpu>,
}

/// A GPU that is not offered, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedGpu {
    pub index: u32,
    pub uuid: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MigInfo {
    pub uuid: String,
    /// Profile such as `3g.40gb`, `1g.18gb+me` or `1g.23gb-me`.
    pub profile: String,
    pub memory_bytes: u64,
    /// The GPU instance ID (the `gi<N>` under the parent's MIG capabilities).
    pub gpu_instance: u32,
    /// The compute instance ID inside that GPU instance.
    pub compute_instance: u32,
}

/// Device-level counters; `None` where the driver does not report them (e.g. MIG utilization).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DeviceUsage {
    /// Share of the time since the previous reading during which kernels ran (the mean of the
    /// driver's samples; its latest reading where it keeps none), 0..=1.
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    /// The driver cannot measure this device's utilization at all (a MIG instance on a GPU
    /// without GPU performance monitoring): its holder is charged its whole allocation.
    pub charge_allocation: bool,
}

/// One process using a device. PIDs are in the host PID namespace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessUsage {
    pub pid: u32,
    pub memory_bytes: u64,
    /// The process's SM utilization since the previous call, 0..=1, when sampled.
    pub sm_utilization: Option<f64>,
}

/// A health-relevant driver event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthEvent {
    /// The GPU it concerns; `None` when it cannot be attributed, which affects every GPU.
    pub gpu_uuid: Option<String>,
    /// The MIG GPU instance the driver attributed it to; `None` means the whole GPU.
    pub gpu_instance: Option<u32>,
    /// The compute instance inside `gpu_instance`; `None` means every one of them.
    pub compute_instance: Option<u32>,
    pub kind: HealthEventKind,
}

impl HealthEvent {
    /// An event about a whole GPU (or, with `None`, about every GPU).
    pub fn gpu(gpu_uuid: Option<String>, kind: HealthEventKind) -> HealthEvent {
        HealthEvent {
            gpu_uuid,
            gpu_instance: None,
            compute_instance: None,
            kind,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthEventKind {
    /// A critical XID error with its number (`None` when the driver did not say which).
    Xid(Option<u64>),
    /// The GPU answers GPU_IS_LOST: it fell off the bus.
    Lost,
    /// Health could not be watched (event registration or waiting failed).
    WatchFailed(String),
    /// Waiting for events works again after it failed (sent without a GPU).
    WatchRestored,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("NVML could not be loaded: {0}")]
    NotLoaded(String),
    #[error("NVML {op} failed: {message}")]
    Driver { op: &'static str, message: String },
    #[error("unknown device {0}")]
    UnknownDevice(String),
    #[error("invalid fake GPU file: {0}")]
    FakeConfig(String),
}

/// Link quality between two whole GPUs, scored the way NVIDIA's go-gpuallocator does: the PCIe
/// path (10 cross-CPU … 60 same board) plus 100 per NVLink between them.
pub mod link_score {
    pub const CROSS_CPU: u32 = 10;
    pub const SAME_CPU: u32 = 20;
    pub const HOST_BRIDGE: u32 = 30;
    pub const MULTI_SWITCH: u32 = 40;
    pub const SINGLE_SWITCH: u32 = 50;
    pub const SAME_BOARD: u32 = 60;
    pub const PER_NVLINK: u32 = 100;
}

pub trait GpuBackend: Send + Sync + 'static {
    /// Short name for logs (`nvml`, `fake`).
    fn name(&self) -> &'static str;
    /// Enumerates the GPUs and their MIG instances, keyed by UUID. A GPU that cannot be read is
    /// skipped (and listed as such) rather than failing the whole node. Blocking.
    fn inventory(&self) -> Result<Enumeration, BackendError>;
    /// Device-level counters for a GPU or MIG UUID.
    fn device_usage(&self, uuid: &str) -> Result<DeviceUsage, BackendError>;
    /// Processes on a GPU or MIG UUID, with per-process utilization since the previous call.
    fn processes(&self, uuid: &str) -> Result<Vec<ProcessUsage>, BackendError>;
    /// Link score between two whole GPUs (see [`link_score`]).
    fn link_score(&self, a: &str, b: &str) -> Result<u32, BackendError>;
    /// Whether a GPU that had a serious error is usable again: it answers a query (not
    /// GPU_IS_LOST) and has no page retirement or row remapping waiting for a reset. Blocking.
    fn probe(&self, gpu_uuid: &str) -> Result<(), BackendError>;
    /// Starts watching for health events on a background thread, sending them on `tx` until
    /// `stop`.
    fn watch_health(
        &self,
        tx: UnboundedSender<HealthEvent>,
        stop: CancellationToken,
    ) -> Result<(), BackendError>;
}
