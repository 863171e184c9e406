//! What the simulator measures (fairshare.md §7): fairness deviation, Jain's index,
//! utilization, waits, starvation and preemption cost.

pub mod classes;
pub mod common_set;
pub mod entitlement;
pub mod fairness;
pub mod pareto;
pub mod recorder;
pub mod starved_unstarted;
pub mod stats;
pub mod summary;

pub use classes::{ClassReport, ClassWaits, REALTIME_OBJECTIVE_S};
pub use common_set::common_set_deviation;
pub use pareto::{Dominance, dominance};
pub use recorder::Recorder;
pub use summary::{Curves, NamedJobReport, PolicyReport, QueueReport, summarize};
