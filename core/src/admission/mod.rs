//! One admission cycle: which gated workloads to release, what capacity to hold, whom to preempt.

// The stages of a cycle. Only what callers use is public: the decision types, the options, the
// order (for the release-score tests) and placement's best fit (which the simulator's rivals
// share), and the memory one cycle hands the next; holds, preemption and victims are the cycle's
// own business.
mod decide;
pub mod decision;
mod hold;
mod memory;
mod options;
pub mod order;
pub mod placement;
mod preempt;
mod score;
pub mod standing;
mod victims;

pub use decide::decide;
pub use decision::*;
pub use memory::{CycleMemory, KeptHold, PREEMPTION_WINDOW_S};
pub use options::DecideOptions;
pub use score::ReleaseScore;
