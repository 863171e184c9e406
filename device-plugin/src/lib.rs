//! gpufair's kubelet device plugin.
//!
//! It advertises a node's GPUs to kubelet (whole GPUs, MIG instances and time-shared slices, one
//! gRPC server and one registration per resource name), keeps their health from NVML XID events
//! with recovery, and measures what each pod really uses so the fair-share ledger can charge it.
//! NVML sits behind [`backend::GpuBackend`] so a fake backend serves tests and laptops.

pub mod allocate;
pub mod backend;
pub mod cli;
pub mod config;
pub mod devices;
pub mod duration;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub mod health;
pub mod kube_api;
pub mod kubelet_watch;
pub mod metrics;
pub mod mig_caps;
pub mod peaks;
pub mod plugin;
pub mod podresources;
pub mod preferred;
pub mod procfs;
pub mod proto;
pub mod registration;
pub mod report;
pub mod run;
pub mod shutdown;
#[cfg(any(test, feature = "test-support"))]
pub mod testkit;
pub mod usage;

pub use cli::Args;
pub use run::{RunError, run, run_with_backend};
