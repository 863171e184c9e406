//! One admission cycle: which gated workloads to release, what capacity to hold, whom to preempt.

mod decide;
pub mod decision;
pub mod hold;
pub mod options;
pub mod order;
pub mod placement;
pub mod preempt;
pub mod score;
pub mod victims;

pub use decide::decide;
pub use decision::*;
pub use options::DecideOptions;
pub use score::ReleaseScore;
