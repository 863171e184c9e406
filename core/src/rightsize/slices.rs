//! What a node pool offers instead of a whole GPU, and which offer a prediction needs.

use std::collections::BTreeMap;

use crate::mutation::{OP_IN, QueueFacts};

/// Headroom over the prediction, as the founding document asks (+20%).
pub const DEFAULT_HEADROOM_PERCENT: u32 = 20;

/// One resource a pool offers in place of a whole GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceOffer {
    /// e.g. `nvidia.com/mig-3g.40gb` or `nvidia.com/gpu.shared`.
    pub resource: String,
    /// GPU memory one unit of it gives a pod, in bytes.
    pub memory_bytes: u64,
}

/// The slices offered by the nodes of one pool, named by node labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolSlices {
    /// Node labels that select the pool, as a Queue's `nodePool` writes them. Empty: queues with
    /// no node pool (the whole cluster).
    pub node_selector: BTreeMap<String, String>,
    pub slices: Vec<SliceOffer>,
}

impl PoolSlices {
    /// Whether this entry describes `queue`'s pool: every label of the entry is one of the
    /// queue's `In [value]` requirements; an entry without labels only describes queues without
    /// a pool, so a pool never gets a slice that only other nodes have.
    pub fn describes(&self, queue: &QueueFacts) -> bool {
        if self.node_selector.is_empty() {
            return queue.node_pool.is_empty();
        }
        self.node_selector.iter().all(|(key, value)| {
            queue
                .node_pool
                .iter()
                .any(|r| &r.key == key && r.operator == OP_IN && r.values == [value.clone()])
        })
    }
}

/// The right-sizing settings the webhook applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RightSizePolicy {
    /// Pods a family must have reported before its prediction is used.
    pub min_samples: u32,
    /// Headroom over the prediction, in percent.
    pub headroom_percent: u32,
    /// The resource a "whole GPU" request names.
    pub whole_gpu_resource: String,
    /// Per pool, in config order; the first entry that describes a queue's pool applies.
    pub pools: Vec<PoolSlices>,
}

impl Default for RightSizePolicy {
    fn default() -> Self {
        Self {
            min_samples: 5,
            headroom_percent: DEFAULT_HEADROOM_PERCENT,
            whole_gpu_resource: crate::units::WHOLE_GPU_RESOURCE.to_string(),
            pools: Vec::new(),
        }
    }
}

/// The slices offered to `queue`'s pool (`None` when no entry describes it).
pub fn pool_slices<'a>(policy: &'a RightSizePolicy, queue: &QueueFacts) -> Option<&'a PoolSlices> {
    policy.pools.iter().find(|p| p.describes(queue))
}

/// Memory a pod needs: the prediction with headroom, rounded up to a whole byte.
pub fn needed_bytes(prediction_bytes: f64, headroom_percent: u32) -> u64 {
    let needed = prediction_bytes.max(0.0) * (1.0 + f64::from(headroom_percent) / 100.0);
    if needed >= u64::MAX as f64 {
        u64::MAX
    } else {
        needed.ceil() as u64
    }
}

/// The smallest offer holding `needed` bytes; ties go to the resource name that sorts first, so
/// the choice never depends on the order the offers were written in.
pub fn choose_slice(needed: u64, offers: &[SliceOffer]) -> Option<&SliceOffer> {
    offers
        .iter()
        .filter(|o| o.memory_bytes >= needed)
        .min_by(|a, b| {
            a.memory_bytes
                .cmp(&b.memory_bytes)
                .then_with(|| a.resource.cmp(&b.resource))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutation::NodeSelectorRequirement;

    const GIB: u64 = 1 << 30;

    fn offer(resource: &str, gib: u64) -> SliceOffer {
        SliceOffer {
            resource: resource.into(),
            memory_bytes: gib * GIB,
        }
    }

    #[test]
    fn picks_the_smallest_that_fits() {
        let offers = [
            offer("nvidia.com/mig-3g.40gb", 40),
            offer("nvidia.com/mig-1g.10gb", 10),
            offer("nvidia.com/mig-2g.20gb", 20),
        ];
        assert_eq!(
            choose_slice(needed_bytes(9.0 * GIB as f64, 20), &offers).map(|o| &o.resource[..]),
            Some("nvidia.com/mig-2g.20gb"),
            "9 GiB x 1.2 = 10.8 GiB does not fit 10 GiB"
        );
        assert_eq!(
            choose_slice(needed_bytes(8.0 * GIB as f64, 20), &offers).map(|o| &o.resource[..]),
            Some("nvidia.com/mig-1g.10gb")
        );
        assert_eq!(choose_slice(41 * GIB, &offers), None);
    }

    #[test]
    fn pools_are_matched_by_their_labels() {
        let pool = PoolSlices {
            node_selector: BTreeMap::from([("gpu".to_string(), "h100".to_string())]),
            slices: vec![],
        };
        let mut queue = QueueFacts::default();
        assert!(!pool.describes(&queue));
        assert!(PoolSlices::default().describes(&queue));
        queue.node_pool = vec![NodeSelectorRequirement::new("gpu", OP_IN, &["h100"])];
        assert!(pool.describes(&queue));
        assert!(!PoolSlices::default().describes(&queue));
        queue.node_pool = vec![NodeSelectorRequirement::new(
            "gpu",
            OP_IN,
            &["h100", "a100"],
        )];
        assert!(
            !pool.describes(&queue),
            "a pool spanning two models is not the h100 pool"
        );
    }
}
