//! `gpufair-sim right-size`: how much whole-GPU demand right-sizing frees, for families whose
//! memory needs are known.
//!
//! Jobs of each family arrive (Poisson) asking for one whole GPU; each has a true peak GPU
//! memory. At arrival the job goes through `gpufair-core`'s right-sizing decision, exactly as
//! the webhook calls it, with the family history the controller would have by then (every
//! earlier job of the family that has finished, smoothed by core); when it finishes its peak
//! is folded in. The report compares the GPU-equivalent-hours requested with and without
//! right-sizing, and counts jobs whose peak would not have fitted their slice.

mod replay;
mod scenario;

pub use replay::{FamilyOutcome, RightSizeReport, replay};
pub use scenario::{FamilySpec, RightSizeScenario, ScenarioError, SliceSpec, load};
