//! Held capacity lent: which hold a release took from, and on which nodes.

use crate::snapshot::NodeId;

/// Held capacity a release took from one hold (what it took is counted in `Cycle::lent`).
pub(super) struct Loan {
    /// Index into `Decisions::holds`.
    pub(super) hold: usize,
    /// The held nodes it was taken on.
    pub(super) nodes: Vec<NodeId>,
}
