//! Held capacity lent: what a release took from one hold, and where.

use crate::snapshot::NodeId;

/// Held capacity a release took from one hold.
pub(super) struct Loan {
    /// Index into `Decisions::holds`.
    pub(super) hold: usize,
    /// GPU-equivalents taken from it.
    pub(super) gpu_equivalents: f64,
    /// The held nodes it was taken on.
    pub(super) nodes: Vec<NodeId>,
}
