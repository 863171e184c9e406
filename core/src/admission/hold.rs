//! Holding capacity for a workload that does not fit yet.
//!
//! Stateless fair share fails a big job because every GPU that frees up is taken at once by
//! whatever small job fits. gpufair instead picks, for the most deserving workload that does not
//! fit, the nodes where it *will* fit once they drain, and keeps their free capacity for it; other
//! workloads may use only the rest. Nodes are chosen most-free first, so from cycle to cycle the
//! same nodes keep being chosen as they drain further, and the workload starts as soon as enough
//! of their pods end (or are preempted). Among equally free nodes (in a full pool, all of them)
//! the one whose running work has run the least comes first, a gang counted whole on each of its
//! nodes: run times are heavy-tailed, so young work is the likeliest to end soon, and if the
//! drain stalls, evicting it loses least.
//! A pod smaller than a node takes free room wherever the pool has it before it waits for a node
//! to drain: a workload of many such pods then needs drained only what free room cannot seat.

use std::cmp::Ordering;

use crate::admission::placement::add;
use crate::index::IndexVec;
use crate::snapshot::NodeId;

/// The nodes chosen for a held workload and what it needs on each.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldPlan {
    /// Per node (in the order chosen): the resources the workload's pods need there.
    pub needs: Vec<(NodeId, Vec<u32>)>,
}

/// What ranks equally free nodes for a hold, first to last.
#[derive(Debug, Clone, Copy)]
pub struct TieBreaks<'a> {
    /// Marks a node running a workload whose eviction was refused, which only its own end can
    /// drain (missing entries count as false): such nodes come after the others.
    pub refused: &'a IndexVec<NodeId, bool>,
    /// The nodes held for the workload last cycle, in their order: they come next.
    pub preferred: &'a [NodeId],
    /// GPU-seconds that evicting each node's running work would lose, a gang's whole run on
    /// each of its nodes (missing entries count as none): the least comes next.
    pub work: &'a IndexVec<NodeId, f64>,
}

/// Chooses nodes for `pods` assuming the chosen nodes could be emptied: candidates are ranked by
/// free GPU-equivalents (most first), equally free ones by `ties`, then in canonical order;
/// each pod, largest first, goes first-fit where it fits in what is `free`, and only if it fits
/// nowhere so, where it fits in what is `allocatable` with the most free room beyond what the
/// plan already takes there (the least to drain). `None` if the pods cannot fit even on empty
/// nodes.
pub fn plan_hold(
    candidates: &[NodeId],
    ties: TieBreaks<'_>,
    free: &IndexVec<NodeId, Vec<u32>>,
    allocatable: &IndexVec<NodeId, Vec<u32>>,
    pods: &[&[u32]],
    weights: &[f64],
) -> Option<HoldPlan> {
    let TieBreaks {
        refused,
        preferred,
        work,
    } = ties;
    let size = |v: &[u32]| -> f64 { v.iter().zip(weights).map(|(c, w)| f64::from(*c) * w).sum() };
    let preference = |node: NodeId| {
        preferred
            .iter()
            .position(|p| *p == node)
            .unwrap_or(usize::MAX)
    };
    // (free room, refused, place among last cycle's nodes, work run): the most free first.
    let ranked = rank_nodes(
        candidates,
        |node| {
            (
                size(&free[node]),
                refused.get(node).copied().unwrap_or(false),
                preference(node),
                work.get(node).copied().unwrap_or(0.0),
            )
        },
        |a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.total_cmp(&b.3))
        },
    );
    let mut needs: Vec<(NodeId, Vec<u32>)> = Vec::new();
    for pod in largest_first(pods, size) {
        let request = pods[pod];
        let fits_within = |have: &[u32], used: &[u32]| fits(request, have, used);
        // A pod goes first where it fits in what is free now, so it needs nothing drained:
        // a hold of pods smaller than a node then assembles on whatever room the pool has
        // instead of waiting for whole nodes to empty. Otherwise it goes where the least is
        // left to drain for it.
        let placed = place_pod(&mut needs, &ranked, request, |node, used| {
            fits_within(&free[node], used)
        }) || drain_for_pod(&mut needs, &ranked, request, |node, used| {
            fits_within(&allocatable[node], used).then(|| {
                let beyond: Vec<u32> = free[node]
                    .iter()
                    .enumerate()
                    .map(|(r, have)| have.saturating_sub(used.get(r).copied().unwrap_or(0)))
                    .collect();
                size(&beyond)
            })
        });
        if !placed {
            return None;
        }
    }
    Some(HoldPlan { needs })
}

/// Chooses nodes for `pods` where clearing them by eviction loses the least work: each pod,
/// largest first, goes where free room seats it (see [`plan_hold`]); otherwise onto a node
/// already being cleared for another of the pods where it fits, whose work is lost anyway;
/// otherwise onto the node where it fits once cleared whose running work (`work`, a gang
/// counted whole on each of its nodes) has run least, the freest first among equals, then in
/// `candidates` order. A node marked `spared` (missing entries count as false) runs work the
/// eviction may not take, so it lends only its free room and is never chosen to be cleared.
/// A hold planned by free room alone clears the nodes that have drained furthest, whatever runs
/// on the rest of them; where it ends its drain by eviction at once, that can throw away hours of
/// work where minutes' worth would have done. `None` if the pods cannot fit even on empty nodes,
/// or on the nodes not spared.
pub fn plan_hold_losing_least(
    candidates: &[NodeId],
    work: &IndexVec<NodeId, f64>,
    spared: &IndexVec<NodeId, bool>,
    free: &IndexVec<NodeId, Vec<u32>>,
    allocatable: &IndexVec<NodeId, Vec<u32>>,
    pods: &[&[u32]],
    weights: &[f64],
) -> Option<HoldPlan> {
    let size = |v: &[u32]| -> f64 { v.iter().zip(weights).map(|(c, w)| f64::from(*c) * w).sum() };
    let work_on = |node: NodeId| work.get(node).copied().unwrap_or(0.0);
    // (work run, free room): the least work first, the most free among equals.
    let ranked = rank_nodes(
        candidates,
        |node| (work_on(node), size(&free[node])),
        |a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)),
    );
    let mut needs: Vec<(NodeId, Vec<u32>)> = Vec::new();
    let mut cleared: Vec<NodeId> = Vec::new();
    for pod in largest_first(pods, size) {
        let request = pods[pod];
        let fits_within = |have: &[u32], used: &[u32]| fits(request, have, used);
        if place_pod(&mut needs, &ranked, request, |node, used| {
            fits_within(&free[node], used)
        }) {
            continue;
        }
        // A node already being cleared costs nothing more; any other, its whole run so far,
        // even where free room already seats another of the pods.
        let cost = |node: NodeId| {
            if cleared.contains(&node) {
                0.0
            } else {
                work_on(node)
            }
        };
        let used_on = |node: NodeId| {
            needs
                .iter()
                .find(|(n, _)| *n == node)
                .map_or(&[][..], |(_, used)| used.as_slice())
        };
        let node = ranked
            .iter()
            .map(|(_, node)| *node)
            .filter(|&node| !spared.get(node).copied().unwrap_or(false))
            .filter(|&node| fits_within(&allocatable[node], used_on(node)))
            .min_by(|a, b| cost(*a).total_cmp(&cost(*b)))?;
        take_on(&mut needs, node, request);
        if !cleared.contains(&node) {
            cleared.push(node);
        }
    }
    Some(HoldPlan { needs })
}

/// `candidates` ranked by `order` over each node's `key`, then in their own order, each with its
/// place among them. Keys are computed once per node: a hold is planned every cycle it waits,
/// over every node of its pool, and keys computed inside each comparison (free room summed, the
/// previous hold's nodes searched) made this sort a tenth of a trace replay.
fn rank_nodes<K>(
    candidates: &[NodeId],
    key: impl Fn(NodeId) -> K,
    order: impl Fn(&K, &K) -> Ordering,
) -> Vec<(usize, NodeId)> {
    let mut keyed: Vec<(K, usize, NodeId)> = candidates
        .iter()
        .enumerate()
        .map(|(position, &node)| (key(node), position, node))
        .collect();
    keyed.sort_by(|a, b| order(&a.0, &b.0).then(a.1.cmp(&b.1)));
    keyed
        .into_iter()
        .map(|(_, position, node)| (position, node))
        .collect()
}

/// Pod indices, the largest first (GPU-equivalents by `size`), then in their own order.
fn largest_first(pods: &[&[u32]], size: impl Fn(&[u32]) -> f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|a, b| size(pods[*b]).total_cmp(&size(pods[*a])).then(a.cmp(b)));
    order
}

/// Whether `request` fits in `have` beside what the plan already `used` of it.
fn fits(request: &[u32], have: &[u32], used: &[u32]) -> bool {
    request.iter().enumerate().all(|(r, want)| {
        let cap = have.get(r).copied().unwrap_or(0);
        cap.saturating_sub(used.get(r).copied().unwrap_or(0)) >= *want
    })
}

/// Adds `request`, which no free room seats, to the node where it fits once drained with the
/// least left to drain: `room` gives, where the pod fits there at all (given what the chosen
/// pods use), the free GPU-equivalents the node has beyond them. Among equals a node already
/// chosen comes first, so the hold spans as few nodes as it can, then the first in `ranked`.
/// Whether it found one.
fn drain_for_pod(
    needs: &mut Vec<(NodeId, Vec<u32>)>,
    ranked: &[(usize, NodeId)],
    request: &[u32],
    room: impl Fn(NodeId, &[u32]) -> Option<f64>,
) -> bool {
    let mut best: Option<(f64, bool, NodeId)> = None;
    for &(_, node) in ranked {
        let chosen = needs.iter().find(|(n, _)| *n == node);
        let used = chosen.map_or(&[][..], |(_, used)| used.as_slice());
        let Some(left) = room(node, used) else {
            continue;
        };
        // Strictly better only: `ranked` order decides among equals.
        let better = best.as_ref().is_none_or(|&(best_left, best_chosen, _)| {
            left > best_left || (left == best_left && chosen.is_some() && !best_chosen)
        });
        if better {
            best = Some((left, chosen.is_some(), node));
        }
    }
    let Some((_, _, node)) = best else {
        return false;
    };
    take_on(needs, node, request);
    true
}

/// Adds `request` to a node already chosen where `fits` (given what the chosen pods use there)
/// lets it, so the hold spans as few nodes as it can; else to the first node of `ranked` not yet
/// chosen where it fits. Whether it found one.
fn place_pod(
    needs: &mut Vec<(NodeId, Vec<u32>)>,
    ranked: &[(usize, NodeId)],
    request: &[u32],
    fits: impl Fn(NodeId, &[u32]) -> bool,
) -> bool {
    let chosen = needs
        .iter()
        .find(|(node, used)| fits(*node, used))
        .map(|(node, _)| *node);
    let Some(node) = chosen.or_else(|| {
        ranked
            .iter()
            .map(|(_, node)| *node)
            .find(|node| !needs.iter().any(|(n, _)| n == node) && fits(*node, &[]))
    }) else {
        return false;
    };
    take_on(needs, node, request);
    true
}

/// Adds `request` to what the plan needs on `node`, choosing the node if it is not yet.
fn take_on(needs: &mut Vec<(NodeId, Vec<u32>)>, node: NodeId, request: &[u32]) {
    match needs.iter_mut().find(|(n, _)| *n == node) {
        Some((_, used)) => add(used, request),
        None => needs.push((node, request.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(nodes: &[usize]) -> Vec<NodeId> {
        nodes.iter().map(|&n| NodeId::new(n)).collect()
    }

    fn ties<'a>(
        preferred: &'a [NodeId],
        refused: &'a IndexVec<NodeId, bool>,
        work: &'a IndexVec<NodeId, f64>,
    ) -> TieBreaks<'a> {
        TieBreaks {
            refused,
            preferred,
            work,
        }
    }

    fn needs(plan: &HoldPlan) -> Vec<(usize, Vec<u32>)> {
        plan.needs
            .iter()
            .map(|(n, v)| (n.get(), v.clone()))
            .collect()
    }

    #[test]
    fn planned_for_eviction_the_nodes_whose_work_has_run_least_are_cleared() {
        let allocatable = IndexVec::from_elem(vec![8], 4);
        // Node 0 has half free beside work that has run 100 s; the others are full, their work
        // has run 10, 50 and 5 s.
        let free = vec![vec![4], vec![0], vec![0], vec![0]].into();
        let work = vec![100.0, 10.0, 50.0, 5.0].into();
        let none = IndexVec::new();
        let all = ids(&[0, 1, 2, 3]);
        let pods: Vec<&[u32]> = vec![&[4], &[4], &[4], &[4]];
        let least_loss =
            plan_hold_losing_least(&all, &work, &none, &free, &allocatable, &pods, &[1.0]).unwrap();
        assert_eq!(
            needs(&least_loss),
            vec![(0, vec![4]), (3, vec![8]), (1, vec![4])],
            "free room first; then node 3 is cleared for two pods, then node 1; node 0 only \
             lends its free half, its older work is not evicted"
        );
        let by_free_room = plan_hold(
            &all,
            ties(&[], &none, &work),
            &free,
            &allocatable,
            &pods,
            &[1.0],
        )
        .unwrap();
        assert_eq!(
            needs(&by_free_room),
            vec![(0, vec![8]), (3, vec![8])],
            "planned to drain, node 0 is the freest and is drained whole"
        );
        assert_eq!(
            plan_hold_losing_least(&all, &work, &none, &free, &allocatable, &[&[16]], &[1.0]),
            None
        );
    }

    #[test]
    fn planned_for_eviction_a_spared_node_lends_its_free_room_and_is_never_cleared() {
        let allocatable = IndexVec::from_elem(vec![8], 3);
        // Node 0 runs 2 GPUs of work that has run least, and that the eviction may not take.
        let free = vec![vec![6], vec![0], vec![0]].into();
        let work = vec![10.0, 50.0, 100.0].into();
        let all = ids(&[0, 1, 2]);
        let plan = |spared: &IndexVec<NodeId, bool>, pods: &[&[u32]]| {
            plan_hold_losing_least(&all, &work, spared, &free, &allocatable, pods, &[1.0])
                .map(|plan| needs(&plan))
        };
        let none = IndexVec::new();
        assert_eq!(plan(&none, &[&[8]]), Some(vec![(0, vec![8])]));
        let spared = vec![true, false, false].into();
        assert_eq!(
            plan(&spared, &[&[8]]),
            Some(vec![(1, vec![8])]),
            "the next least worked node is cleared instead"
        );
        assert_eq!(
            plan(&spared, &[&[8], &[4]]),
            Some(vec![(1, vec![8]), (0, vec![4])]),
            "its free room still seats a pod"
        );
        assert_eq!(plan(&spared, &[&[8], &[8], &[8]]), None);
    }

    #[test]
    fn picks_the_most_drained_nodes_and_packs_them() {
        let allocatable = IndexVec::from_elem(vec![8], 4);
        let free = vec![vec![0], vec![6], vec![2], vec![8]].into();
        let pods: Vec<&[u32]> = vec![&[4], &[4], &[4]];
        let none = IndexVec::new();
        let no_work = IndexVec::new();
        let all = ids(&[0, 1, 2, 3]);
        let plan = plan_hold(
            &all,
            ties(&[], &none, &no_work),
            &free,
            &allocatable,
            &pods,
            &[1.0],
        )
        .unwrap();
        assert_eq!(needs(&plan), vec![(3, vec![8]), (1, vec![4])]);
    }

    #[test]
    fn seats_pods_in_free_room_before_draining_a_node() {
        let allocatable = IndexVec::from_elem(vec![8], 4);
        // Half of nodes 0 and 1 is free, nodes 2 and 3 are full.
        let free = vec![vec![4], vec![4], vec![0], vec![0]].into();
        let none = IndexVec::new();
        let no_work = IndexVec::new();
        let all = ids(&[0, 1, 2, 3]);
        let plan = |pods: &[&[u32]]| {
            let ties = ties(&[], &none, &no_work);
            needs(&plan_hold(&all, ties, &free, &allocatable, pods, &[1.0]).unwrap())
        };
        assert_eq!(
            plan(&[&[4], &[4]]),
            vec![(0, vec![4]), (1, vec![4])],
            "two half-node pods take the free halves, nothing to drain"
        );
        assert_eq!(
            plan(&[&[4], &[4], &[4]]),
            vec![(0, vec![8]), (1, vec![4])],
            "a third drains a chosen node before a new one"
        );
        assert_eq!(
            plan(&[&[8]]),
            vec![(0, vec![8])],
            "a whole-node pod fits no free room and drains the freest node"
        );
    }

    #[test]
    fn a_pod_no_free_room_seats_drains_where_least_is_left_to_drain() {
        let allocatable = IndexVec::from_elem(vec![8], 3);
        // Node 1 has 3 GPUs free: a 4-GPU pod there waits for one GPU only.
        let free = vec![vec![4], vec![3], vec![0]].into();
        let none = IndexVec::new();
        let no_work = IndexVec::new();
        let all = ids(&[0, 1, 2]);
        let ties = ties(&[], &none, &no_work);
        let plan = plan_hold(&all, ties, &free, &allocatable, &[&[4], &[4]], &[1.0]).unwrap();
        assert_eq!(
            needs(&plan),
            vec![(0, vec![4]), (1, vec![4])],
            "not beside the first pod on node 0, where all 4 GPUs would have to drain"
        );
    }

    #[test]
    fn keeps_last_cycles_nodes_first() {
        let allocatable = IndexVec::from_elem(vec![8], 4);
        let free = vec![vec![0], vec![6], vec![6], vec![2]].into();
        // One pod of a whole node: no free room seats it, so a node must drain.
        let pods: Vec<&[u32]> = vec![&[8]];
        let none = IndexVec::new();
        let no_work = IndexVec::new();
        let all = ids(&[0, 1, 2, 3]);
        let first_node = |preferred: &[NodeId]| {
            let ties = ties(preferred, &none, &no_work);
            let plan = plan_hold(&all, ties, &free, &allocatable, &pods, &[1.0]).unwrap();
            needs(&plan)
        };
        assert_eq!(
            first_node(&ids(&[2])),
            vec![(2, vec![8])],
            "ties go to last cycle's node"
        );
        assert_eq!(
            first_node(&ids(&[3])),
            vec![(1, vec![8])],
            "a freer node wins over last cycle's"
        );
    }

    #[test]
    fn a_node_whose_victim_was_refused_comes_after_equally_free_ones() {
        let allocatable = IndexVec::from_elem(vec![8], 3);
        let free = vec![vec![0], vec![0], vec![4]].into();
        let pods: Vec<&[u32]> = vec![&[8]];
        // Node 0 was held last cycle, but its running workload refused eviction.
        let refused = vec![true, false, false].into();
        let no_work = IndexVec::new();
        let first = |free: &IndexVec<NodeId, Vec<u32>>| {
            let plan = plan_hold(
                &ids(&[0, 1, 2]),
                ties(&ids(&[0]), &refused, &no_work),
                free,
                &allocatable,
                &pods,
                &[1.0],
            );
            plan.unwrap().needs[0].0.get()
        };
        assert_eq!(first(&free), 2, "the freest node still comes first");
        let free = IndexVec::from_elem(vec![0], 3);
        assert_eq!(first(&free), 1, "then one that can be drained");
    }

    #[test]
    fn refuses_what_cannot_fit_even_when_empty() {
        let allocatable = IndexVec::from_elem(vec![8], 2);
        let free = IndexVec::from_elem(vec![8], 2);
        let none = IndexVec::new();
        let no_work = IndexVec::new();
        let both = ids(&[0, 1]);
        let fits = |pods: &[&[u32]]| {
            let ties = ties(&[], &none, &no_work);
            plan_hold(&both, ties, &free, &allocatable, pods, &[1.0]).is_some()
        };
        assert!(!fits(&[&[16]]), "a pod larger than any node");
        assert!(!fits(&[&[8], &[8], &[8]]), "more pods than nodes can take");
    }

    #[test]
    fn among_equally_free_nodes_the_least_worked_comes_first() {
        let allocatable = IndexVec::from_elem(vec![8], 3);
        let full = IndexVec::from_elem(vec![0], 3);
        let pods: Vec<&[u32]> = vec![&[8]];
        let none = IndexVec::new();
        let all = ids(&[0, 1, 2]);
        // GPU-seconds run so far on each node.
        let work = vec![9.0e5, 2.0e4, 3.0e5].into();
        let first = |preferred: &[NodeId], free: &IndexVec<NodeId, Vec<u32>>| {
            let plan = plan_hold(
                &all,
                ties(preferred, &none, &work),
                free,
                &allocatable,
                &pods,
                &[1.0],
            );
            plan.unwrap().needs[0].0.get()
        };
        assert_eq!(first(&[], &full), 1, "the youngest work drains first");
        assert_eq!(
            first(&ids(&[2]), &full),
            2,
            "last cycle's node still wins a tie"
        );
        let free = vec![vec![1], vec![0], vec![0]].into();
        assert_eq!(first(&[], &free), 0, "and a freer node wins over both");
    }
}
