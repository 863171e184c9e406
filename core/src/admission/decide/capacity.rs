//! Each node's capacity, and each pool's nodes in canonical order.

use super::canonical::by_name;
use super::requests::normalise;
use super::setup::Setup;
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId};

/// Each node's capacity, per pool in canonical (name) order.
pub(super) struct NodeCapacity {
    pub(super) pool_nodes: IndexVec<PoolId, Vec<NodeId>>,
    pub(super) allocatable: IndexVec<NodeId, Vec<u32>>,
    pub(super) free: IndexVec<NodeId, Vec<u32>>,
}

impl Setup<'_> {
    /// Each pool's nodes in canonical order, and every node's allocatable and free capacity
    /// padded to the snapshot's resources.
    pub(super) fn node_capacity(&self) -> NodeCapacity {
        let snapshot = self.snapshot;
        let node_order: Vec<NodeId> = by_name(
            snapshot
                .nodes
                .indices()
                .filter(|&n| snapshot.pools.contains(snapshot.nodes[n].pool))
                .collect(),
            |n| &snapshot.nodes[n].name,
        );
        let mut pool_nodes = IndexVec::from_elem(Vec::new(), snapshot.pools.len());
        for &n in &node_order {
            pool_nodes[snapshot.nodes[n].pool].push(n);
        }
        let padded = |v: &[u32]| normalise(v, self.width);
        NodeCapacity {
            pool_nodes,
            allocatable: snapshot
                .nodes
                .iter()
                .map(|n| padded(&n.allocatable))
                .collect(),
            free: snapshot.nodes.iter().map(|n| padded(&n.free)).collect(),
        }
    }
}
