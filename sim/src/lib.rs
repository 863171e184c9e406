//! gpufair's simulator: replays scenarios and real traces through gpufair's policy (the same
//! `gpufair-core` functions the controller calls) and through rival policies, and measures how
//! fairly and how fully each one uses the cluster.

pub mod engine;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub mod generate;
pub mod metrics;
pub mod policy;
pub mod report;
pub mod rightsize;
pub mod runner;
pub mod scenario;
pub mod spread;
pub mod sweep;
pub mod trace;
