//! A hold's plan set against what its nodes have now: what it takes there and what is still
//! missing, which drains or is evicted.

use super::Cycle;
use crate::admission::hold::HoldPlan;
use crate::snapshot::NodeId;

/// A hold's plan against what its nodes have: per node, what it takes now and what is still
/// missing there, and the missing GPU-equivalents in all.
pub(super) struct Split {
    pub(super) held_nodes: Vec<(NodeId, Vec<u32>)>,
    pub(super) missing: Vec<(NodeId, Vec<u32>)>,
    pub(super) missing_total: f64,
}

impl Cycle<'_> {
    /// Per node of `plan`: what it takes of the capacity still usable there, and what is
    /// missing.
    pub(super) fn split(&self, plan: &HoldPlan) -> Split {
        let mut held_nodes = Vec::with_capacity(plan.needs.len());
        let mut missing = Vec::with_capacity(plan.needs.len());
        for (node, need) in &plan.needs {
            let take: Vec<u32> = need
                .iter()
                .zip(&self.usable[*node])
                .map(|(want, have)| (*want).min(*have))
                .collect();
            let short: Vec<u32> = need
                .iter()
                .zip(&take)
                .map(|(want, got)| want - got)
                .collect();
            held_nodes.push((*node, take));
            missing.push((*node, short));
        }
        let missing_total = missing.iter().map(|(_, m)| self.size(m)).sum();
        Split {
            held_nodes,
            missing,
            missing_total,
        }
    }
}
