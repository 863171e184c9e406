//! Per-node placement. A 4-GPU pod needs one node with 4 free GPUs: free GPUs summed over the
//! pool say nothing. gpufair releases a workload only when every one of its pods has a node in
//! the plan, so what it releases kube-scheduler can place and a gang never half-starts.

use crate::snapshot::NodeId;

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
///
/// Best fit alone is not monotone: a gang it cannot place in some capacity may be placed by it
/// in less (a pod that took the tightest node leaves a later pod nowhere). When it finds no
/// placement, a bounded exhaustive search looks for one, trying best-fit nodes first, so that a
/// workload that fits is not refused because of the order pods were tried in (a queue below its
/// guarantee would otherwise wait while a smaller share of the same capacity is handed on).
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
    greedy(candidates, &available, pods, &order, weights)
        .or_else(|| exhaustive(candidates, &available, pods, &order, weights))
}

fn greedy<'a>(
    candidates: &[NodeId],
    available: &impl Fn(NodeId) -> &'a [u32],
    pods: &[&[u32]],
    order: &[usize],
    weights: &[f64],
) -> Option<Vec<NodeId>> {
    // What this workload's earlier pods already took, per node it touched.
    let mut taken: Vec<(NodeId, Vec<u32>)> = Vec::new();
    let mut placement = vec![NodeId::new(usize::MAX); pods.len()];
    let empty: Vec<u32> = Vec::new();
    for &pod in order {
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

/// How many node checks the exhaustive search may make before it gives up: enough to settle
/// any gang of a few pods on a few dozen nodes, and a bound on the cost of a cycle in which
/// many gangs do not fit.
const SEARCH_BUDGET: usize = 1 << 16;

/// Depth-first search over placements, pods largest first, nodes in best-fit order, nodes
/// left with the same free capacity tried once. `None` if there is no placement or the search
/// ran out of budget.
fn exhaustive<'a>(
    candidates: &[NodeId],
    available: &impl Fn(NodeId) -> &'a [u32],
    pods: &[&[u32]],
    order: &[usize],
    weights: &[f64],
) -> Option<Vec<NodeId>> {
    if pods.len() < 2 || identical(pods) {
        // A single pod: best fit already tried every node. Identical pods: each takes exactly
        // one of a node's slots for that request wherever it goes, so best fit places them
        // whenever the slots add up, and when it fails no placement exists.
        return None;
    }
    let width = pods.iter().map(|p| p.len()).max().unwrap_or(0);
    // Free capacity per candidate, dense, as the search mutates it.
    let free: Vec<Vec<u32>> = candidates
        .iter()
        .map(|&n| {
            let have = available(n);
            (0..width)
                .map(|r| have.get(r).copied().unwrap_or(0))
                .collect()
        })
        .collect();
    // Per resource: what the pods still to place need in total, and what is free in total.
    let mut need = vec![0u64; width];
    for pod in pods {
        for (r, c) in pod.iter().enumerate() {
            need[r] += u64::from(*c);
        }
    }
    let mut have = vec![0u64; width];
    for f in &free {
        for (r, c) in f.iter().enumerate() {
            have[r] += u64::from(*c);
        }
    }
    if need.iter().zip(&have).any(|(n, h)| n > h) {
        return None;
    }
    let mut search = Search {
        pods,
        order,
        weights,
        free,
        placement: vec![usize::MAX; pods.len()],
        budget: SEARCH_BUDGET,
    };
    if search.place(0) {
        Some(
            search
                .placement
                .iter()
                .map(|&slot| candidates[slot])
                .collect(),
        )
    } else {
        None
    }
}

/// Whether every pod asks for the same resources (a gang of equal pods, the usual case).
fn identical(pods: &[&[u32]]) -> bool {
    pods.windows(2).all(|pair| pair[0] == pair[1])
}

struct Search<'p> {
    pods: &'p [&'p [u32]],
    order: &'p [usize],
    weights: &'p [f64],
    /// Free capacity per candidate slot.
    free: Vec<Vec<u32>>,
    /// Candidate slot of each pod.
    placement: Vec<usize>,
    budget: usize,
}

impl Search<'_> {
    fn place(&mut self, depth: usize) -> bool {
        let Some(&pod) = self.order.get(depth) else {
            return true;
        };
        let request = self.pods[pod];
        let mut options: Vec<(f64, usize)> = Vec::new();
        for slot in 0..self.free.len() {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            if fits(&self.free[slot], &[], request) {
                let left = leftover(&self.free[slot], &[], request, self.weights);
                options.push((left, slot));
            }
        }
        options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut tried: Vec<Vec<u32>> = Vec::new();
        for (_, slot) in options {
            if tried.contains(&self.free[slot]) {
                continue;
            }
            tried.push(self.free[slot].clone());
            subtract(&mut self.free[slot], request);
            self.placement[pod] = slot;
            if self.place(depth + 1) {
                return true;
            }
            add(&mut self.free[slot], request);
            if self.budget == 0 {
                return false;
            }
        }
        false
    }
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

    /// `best_fit` over nodes numbered by their place in `free`.
    fn fit(
        free: &[Vec<u32>],
        candidates: &[usize],
        pods: &[&[u32]],
        weights: &[f64],
    ) -> Option<Vec<usize>> {
        let candidates: Vec<NodeId> = candidates.iter().map(|&n| NodeId::new(n)).collect();
        best_fit(&candidates, |n| &free[n.get()], pods, weights)
            .map(|placed| placed.into_iter().map(NodeId::get).collect())
    }

    #[test]
    fn needs_one_node_per_pod_not_pool_totals() {
        // Two nodes with 2 free GPUs each: 4 free in total, but a 4-GPU pod fits nowhere.
        let free = [vec![2], vec![2]];
        assert_eq!(fit(&free, &[0, 1], &[&[4]], &[1.0]), None);
        assert_eq!(fit(&free, &[0, 1], &[&[2], &[2]], &[1.0]), Some(vec![0, 1]));
    }

    #[test]
    fn best_fit_prefers_the_tightest_node() {
        let free = [vec![8], vec![3], vec![4]];
        assert_eq!(fit(&free, &[0, 1, 2], &[&[3]], &[1.0]), Some(vec![1]));
        // A gang of two 4-GPU pods shares the 8-GPU node rather than splitting.
        assert_eq!(
            fit(&free, &[0, 1, 2], &[&[4], &[4]], &[1.0]),
            Some(vec![2, 0])
        );
    }

    #[test]
    fn all_or_nothing_for_gangs() {
        let free = [vec![4], vec![4]];
        assert_eq!(fit(&free, &[0, 1], &[&[4], &[4], &[4]], &[1.0]), None);
    }

    #[test]
    fn a_gang_best_fit_misplaces_is_still_placed() {
        // Best fit puts the 6-GPU pod on the 6-GPU node with the only other MIG slices, and
        // the 4-GPU pod on the 5-GPU one: the [3, 1] pod is left nowhere. Placing the 6-GPU
        // pod on a 7-GPU node leaves room for all three.
        let free = [vec![6, 4], vec![5, 2], vec![7, 0], vec![7, 0]];
        let weights = [1.0, 1.0 / 7.0];
        let pods: [&[u32]; 3] = [&[6, 0], &[4, 0], &[3, 1]];
        let placed = fit(&free, &[0, 1, 2, 3], &pods, &weights).expect("a placement");
        let mut used = vec![vec![0u32; 2]; free.len()];
        for (pod, &node) in pods.iter().zip(&placed) {
            add(&mut used[node], pod);
        }
        for (have, want) in free.iter().zip(&used) {
            assert!(have.iter().zip(want).all(|(h, w)| w <= h));
        }
    }

    proptest::proptest! {
        /// For a gang of equal pods best fit alone is exact: the search finds a placement
        /// only where best fit does (what lets the search skip such gangs).
        #[test]
        fn best_fit_places_equal_pods_wherever_they_can_go(
            free in proptest::collection::vec(proptest::collection::vec(0u32..9, 2), 1..7),
            request in proptest::collection::vec(0u32..4, 2),
            count in 2usize..7,
        ) {
            let candidates: Vec<NodeId> = (0..free.len()).map(NodeId::new).collect();
            let available = |n: NodeId| free[n.get()].as_slice();
            let pods: Vec<&[u32]> = vec![request.as_slice(); count];
            let order: Vec<usize> = (0..count).collect();
            let weights = [1.0, 1.0 / 7.0];
            let greedy = greedy(&candidates, &available, &pods, &order, &weights).is_some();
            // The search itself, without the shortcut this property allows.
            let mut different = pods.clone();
            let padded: Vec<u32> = request.iter().copied().chain([0]).collect();
            different[0] = &padded;
            let searched = greedy
                || exhaustive(&candidates, &available, &different, &order, &weights).is_some();
            proptest::prop_assert_eq!(greedy, searched);
        }
    }

    #[test]
    fn multiple_resources_must_all_fit() {
        // Resource 0: whole GPUs, resource 1: MIG 1g slices.
        let free = [vec![1, 0], vec![0, 7]];
        let weights = [1.0, 1.0 / 7.0];
        assert_eq!(fit(&free, &[0, 1], &[&[0, 2]], &weights), Some(vec![1]));
        assert_eq!(fit(&free, &[0, 1], &[&[1, 1]], &weights), None);
    }
}
