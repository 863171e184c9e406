//! The nodes of each pool that may still take a pod asking for a GPU this cycle.

use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId};

/// Nodes of each pool (canonical order) that may still have some GPU usable. A node with none
/// can never take a pod asking for a GPU again this cycle, because usable capacity only
/// shrinks within a cycle; leaving such nodes out of the search changes no placement and
/// spares a scan of every full node for every pod.
pub(super) struct OpenNodes {
    lists: IndexVec<PoolId, Vec<NodeId>>,
    /// Per pool: how many nodes at the front of its list are known to be without usable GPU.
    /// Best fit fills nodes about in list order, so most nodes close at the front; skipping
    /// them there keeps each search from rescanning them until the next compaction.
    front: IndexVec<PoolId, usize>,
    /// Per pool: nodes in its list past `front` found without usable GPU since it was last
    /// compacted.
    stale: IndexVec<PoolId, usize>,
    /// Per node: no GPU usable any more.
    exhausted: IndexVec<NodeId, bool>,
}

impl OpenNodes {
    pub(super) fn new(
        pool_nodes: &IndexVec<PoolId, Vec<NodeId>>,
        exhausted: IndexVec<NodeId, bool>,
    ) -> Self {
        Self {
            lists: pool_nodes
                .iter()
                .map(|nodes| nodes.iter().copied().filter(|&n| !exhausted[n]).collect())
                .collect(),
            front: IndexVec::from_elem(0, pool_nodes.len()),
            stale: IndexVec::from_elem(0, pool_nodes.len()),
            exhausted,
        }
    }

    /// The nodes of `pool` that may still have a GPU usable, in canonical order.
    pub(super) fn of(&self, pool: PoolId) -> &[NodeId] {
        &self.lists[pool][self.front[pool]..]
    }

    /// Records that `node` of `pool` has no usable GPU left. The pool's list is compacted once
    /// an eighth of it is stale, so the cost stays proportional to the pool over a cycle.
    pub(super) fn close(&mut self, pool: PoolId, node: NodeId) {
        if self.exhausted[node] {
            return;
        }
        self.exhausted[node] = true;
        let list = &self.lists[pool];
        let mut front = self.front[pool];
        if list.get(front) == Some(&node) {
            // Nodes passed here that closed earlier stay counted as stale: that only brings
            // the next compaction forward.
            while front < list.len() && self.exhausted[list[front]] {
                front += 1;
            }
            self.front[pool] = front;
        } else {
            self.stale[pool] += 1;
        }
        let open = self.lists[pool].len() - self.front[pool];
        if self.stale[pool] * 8 >= open {
            let exhausted = &self.exhausted;
            let front = self.front[pool];
            self.lists[pool].drain(..front);
            self.lists[pool].retain(|&n| !exhausted[n]);
            self.front[pool] = 0;
            self.stale[pool] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_nodes_skip_closed_ones_wherever_they_close() {
        let pool = PoolId::new(0);
        let pools = vec![(0..20).map(NodeId::new).collect::<Vec<NodeId>>()].into();
        let mut exhausted = IndexVec::from_elem(false, 20);
        exhausted[NodeId::new(3)] = true;
        let mut open = OpenNodes::new(&pools, exhausted);
        let expect = |closed: &[NodeId]| -> Vec<NodeId> {
            (0..20)
                .map(NodeId::new)
                .filter(|n| n.get() != 3 && !closed.contains(n))
                .collect()
        };
        assert_eq!(open.of(pool), expect(&[]).as_slice());
        let mut closed = Vec::new();
        // Front first (as best fit fills), then the middle and the back.
        for node in [0, 1, 2, 4, 10, 19, 5, 6, 7, 11, 12].map(NodeId::new) {
            open.close(pool, node);
            open.close(pool, node);
            closed.push(node);
            let listed = open.of(pool);
            let left: Vec<NodeId> = listed
                .iter()
                .copied()
                .filter(|n| !open.exhausted[*n])
                .collect();
            assert_eq!(left, expect(&closed), "after closing {closed:?}");
            // The search starts at an open node: closed ones at the front are skipped.
            assert!(listed.first().is_none_or(|n| !open.exhausted[*n]));
        }
    }
}
