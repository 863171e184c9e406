//! gpufair's Kubernetes API: the `Queue` and `GpuNodeReport` custom resources and the config file
//! schema, with conversions into `gpufair-core`'s plain types.

pub mod access;
pub mod carried_status;
pub mod config;
mod convert;
pub mod crds;
pub mod family;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub mod ledger_status;
pub mod node_report;
pub mod queue;

pub use carried_status::{CarriedStatus, CarriedStatusError, HoldStatus};
pub use config::{Config, ConfigError};
pub use family::{WorkloadFamily, WorkloadFamilySpec, WorkloadFamilyStatus};
pub use ledger_status::{LedgerBucketStatus, LedgerStatus};
pub use node_report::{GpuNodeReport, GpuNodeReportSpec, PodGpuUsage, ReportedDevice};
pub use queue::{
    Queue, QueueSpec, QueueSpecError, QueueStatus, ReleaseScoreParts, WAITING_HEAD_LIMIT,
    WaitingWorkload,
};
