//! Per-node placement. A 4-GPU pod needs one node with 4 free GPUs: free GPUs summed over the
//! pool say nothing. gpufair releases a workload only when every one of its pods has a node in
//! the plan, so what it releases kube-scheduler can place and a gang never half-starts.

use crate::snapshot::NodeId;

/// Per-node counts of one resource vector each, indexed by `NodeId`.
pub type Capacity = [Vec<u32>];

fn fits(available: &[u32], used: &[u32], request: &[u32]) -> bool {
    request.iter().enumerate().all(|(r, want)| {
        let have = available.get(r).copied().unwrap_or(0);
        let taken = used.get(r).copied().unwrap_or(0);
        have.saturating_sub(taken) >= *want
    })
}

fn leftover(available: &[u32], used: &[u32], request: &[u32], weights: &[f64]) -> f64 {
    available
        .iter()
        .enumerate()
        .map(|(r, have)| {
            let after = have
                .saturating_sub(used.get(r).copied().unwrap_or(0))
                .saturating_sub(request.get(r).copied().unwrap_or(0));
            f64::from(after) * weights.get(r).copied().unwrap_or(0.0)
        })
        .sum()
}

/// Places every pod on `candidates` (in canonical order) by best fit: each pod goes to the node
/// it leaves with the least free GPU-equivalents, ties to the earlier candidate. Pods are placed
/// largest first. Returns the node of each pod in input order, or `None` if any pod has no node.
/// `available(node)` gives what the workload may use on that node; it is not modified.
pub fn best_fit<'a>(
    candidates: &[NodeId],
    available: impl Fn(NodeId) -> &'a [u32],
    pods: &[&[u32]],
    weights: &[f64],
) -> Option<Vec<NodeId>> {
    let size = |request: &[u32]| -> f64 {
        request
            .iter()
            .zip(weights)
            .map(|(c, w)| f64::from(*c) * w)
            .sum()
    };
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|a, b| size(pods[*b]).total_cmp(&size(pods[*a])).then(a.cmp(b)));
    // What this workload's earlier pods already took, per node it touched.
    let mut taken: Vec<(NodeId, Vec<u32>)> = Vec::new();
    let mut placement = vec![usize::MAX; pods.len()];
    let empty: Vec<u32> = Vec::new();
    for pod in order {
        let request = pods[pod];
        let mut best: Option<(f64, NodeId)> = None;
        for &node in candidates {
            let used = taken
                .iter()
                .find(|(n, _)| *n == node)
                .map_or(&empty, |(_, u)| u);
            let have = available(node);
            if !fits(have, used, request) {
                continue;
            }
            let left = leftover(have, used, request, weights);
            if best.is_none_or(|(best_left, _)| left < best_left) {
                best = Some((left, node));
                // Nothing beats a node left with no free GPU, and ties go to the earlier
                // candidate: the search can stop. In a busy cluster most pods find such a
                // node early, which spares a scan of every node per pod.
                if left <= 0.0 {
                    break;
                }
            }
        }
        let (_, node) = best?;
        placement[pod] = node;
        match taken.iter_mut().find(|(n, _)| *n == node) {
            Some((_, used)) => add(used, request),
            None => taken.push((node, request.to_vec())),
        }
    }
    Some(placement)
}

/// `into += request`, growing `into` if needed.
pub fn add(into: &mut Vec<u32>, request: &[u32]) {
    if into.len() < request.len() {
        into.resize(request.len(), 0);
    }
    for (slot, count) in into.iter_mut().zip(request) {
        *slot = slot.saturating_add(*count);
    }
}

/// `from -= request`, never below zero.
pub fn subtract(from: &mut [u32], request: &[u32]) {
    for (slot, count) in from.iter_mut().zip(request) {
        *slot = slot.saturating_sub(*count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_one_node_per_pod_not_pool_totals() {
        // Two nodes with 2 free GPUs each: 4 free in total, but a 4-GPU pod fits nowhere.
        let free = [vec![2], vec![2]];
        assert_eq!(best_fit(&[0, 1], |n| &free[n], &[&[4]], &[1.0]), None);
        assert_eq!(
            best_fit(&[0, 1], |n| &free[n], &[&[2], &[2]], &[1.0]),
            Some(vec![0, 1])
        );
    }

    #[test]
    fn best_fit_prefers_the_tightest_node() {
        let free = [vec![8], vec![3], vec![4]];
        assert_eq!(
            best_fit(&[0, 1, 2], |n| &free[n], &[&[3]], &[1.0]),
            Some(vec![1])
        );
        // A gang of two 4-GPU pods shares the 8-GPU node rather than splitting.
        assert_eq!(
            best_fit(&[0, 1, 2], |n| &free[n], &[&[4], &[4]], &[1.0]),
            Some(vec![2, 0])
        );
    }

    #[test]
    fn all_or_nothing_for_gangs() {
        let free = [vec![4], vec![4]];
        assert_eq!(
            best_fit(&[0, 1], |n| &free[n], &[&[4], &[4], &[4]], &[1.0]),
            None
        );
    }

    #[test]
    fn multiple_resources_must_all_fit() {
        // Resource 0: whole GPUs, resource 1: MIG 1g slices.
        let free = [vec![1, 0], vec![0, 7]];
        let weights = [1.0, 1.0 / 7.0];
        assert_eq!(
            best_fit(&[0, 1], |n| &free[n], &[&[0, 2]], &weights),
            Some(vec![1])
        );
        assert_eq!(best_fit(&[0, 1], |n| &free[n], &[&[1, 1]], &weights), None);
    }
}
