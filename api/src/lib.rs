//! gpufair API types.
pub mod node_report;
pub use node_report::{GpuNodeReport, GpuNodeReportSpec, PodGpuUsage, ReportedDevice};
