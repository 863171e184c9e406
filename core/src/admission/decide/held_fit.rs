//! Whether a waiting workload would fit if nothing were held, remembered per single-pod shape.

use crate::admission::placement::best_fit;
use crate::index::IndexVec;
use crate::snapshot::NodeId;

/// Single-pod shapes already checked against capacity ignoring the hold, with the node that
/// showed each fits (`None`: fits nowhere). Free capacity only shrinks within a pool's pass,
/// so "fits nowhere" stays true, and "fits" needs only its witness node re-checked; a release
/// never empties the cache, which would make every later check rescan the pool.
#[derive(Default)]
pub(super) struct HeldFitCache {
    shapes: Vec<(Vec<u32>, Option<NodeId>)>,
}

impl HeldFitCache {
    pub(super) fn clear(&mut self) {
        self.shapes.clear();
    }
}

/// Whether one pod's `request` fits what a node has `free`.
pub(super) fn fits_on(free: &[u32], request: &[u32]) -> bool {
    request
        .iter()
        .enumerate()
        .all(|(r, want)| free.get(r).copied().unwrap_or(0) >= *want)
}

/// Whether the pods would fit if nothing were held. Only asked to label a wait reason, yet asked
/// for every waiting workload once a hold exists, so single-pod answers are remembered.
pub(super) fn fits_ignoring_hold(
    cache: &mut HeldFitCache,
    candidates: &[NodeId],
    free: &IndexVec<NodeId, Vec<u32>>,
    requests: &[&[u32]],
    weights: &[f64],
) -> bool {
    let [shape] = requests else {
        return best_fit(candidates, |n| free[n].as_slice(), requests, weights).is_some();
    };
    let known = cache
        .shapes
        .iter()
        // Compared count by count rather than through `==` on slices, which calls out to a
        // byte comparison for a few counts, once per waiting workload.
        .position(|(known, _)| {
            known.len() == shape.len() && known.iter().zip(*shape).all(|(a, b)| a == b)
        });
    if let Some(i) = known {
        match cache.shapes[i].1 {
            None => return false,
            Some(node) if fits_on(&free[node], shape) => return true,
            Some(_) => {}
        }
    }
    let witness = candidates
        .iter()
        .copied()
        .find(|&n| fits_on(&free[n], shape));
    match known {
        Some(i) => cache.shapes[i].1 = witness,
        None => cache.shapes.push((shape.to_vec(), witness)),
    }
    witness.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_fit_cache_rechecks_its_witness_and_remembers_misfits() {
        let mut cache = HeldFitCache::default();
        let (a, b) = (NodeId::new(0), NodeId::new(1));
        let mut free: IndexVec<NodeId, Vec<u32>> = vec![vec![1], vec![2]].into();
        let mut fits = |free: &IndexVec<NodeId, Vec<u32>>, gpus: u32| {
            fits_ignoring_hold(&mut cache, &[a, b], free, &[&[gpus]], &[1.0])
        };
        assert!(fits(&free, 2));
        // The witness (node 1) fills up: the answer is found again, not taken from the cache.
        free[b][0] = 1;
        assert!(!fits(&free, 2));
        assert!(fits(&free, 1));
        // Capacity only shrinks within a pass, so a misfit stays one without a search.
        free[a][0] = 0;
        free[b][0] = 0;
        assert!(!fits(&free, 1));
        assert!(!fits(&free, 2));
    }
}
