//! The header of a one-pool snapshot, for rule tests and properties that build their cluster
//! node by node: whole GPUs only, at 10,000 s (past every cooldown and window start).

use gpufair_core::snapshot::*;

/// A snapshot at 10,000 s of one pool named `pool` of whole-GPU `nodes`, and nothing else.
pub fn one_gpu_pool(pool: &str, nodes: Vec<Node>) -> Snapshot {
    Snapshot {
        now: 10_000.0,
        resources: vec![ResourceKind {
            name: "nvidia.com/gpu".into(),
            gpu_equivalents: 1.0,
        }],
        pools: vec![Pool { name: pool.into() }].into(),
        nodes: nodes.into(),
        ..Snapshot::default()
    }
}
