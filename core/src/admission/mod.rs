//! One admission cycle: which gated workloads to release, what capacity to hold, whom to preempt.

pub mod decision;
pub mod options;

pub use decision::*;
pub use options::DecideOptions;
