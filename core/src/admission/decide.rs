//! The decision cycle.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::decision::*;
use super::hold::plan_hold;
use super::options::DecideOptions;
use super::order::{QueueTurn, compare_workloads, share_ratio};
use super::placement::{best_fit, subtract};
use super::preempt::{Preemptor, QueueView, choose_victims, preemption_reason};
use super::victims::{RunningWorkload, group_running};
use crate::division::{Claim, divide};
use crate::snapshot::{NodeId, PoolId, QueueId, Snapshot};
use crate::weight::effective_weight;

const EPSILON: f64 = 1e-9;

/// Request vectors padded or cut to the snapshot's resource count, so a short or long vector is
/// read the same way everywhere.
fn normalise(requests: &[u32], width: usize) -> Vec<u32> {
    let mut v = requests.to_vec();
    v.resize(width, 0);
    v
}

/// The request vector of each pod of workload `w`.
fn requests_of<'r>(
    pod_requests: &'r [u32],
    workload_pods: &[(usize, usize)],
    width: usize,
    w: usize,
) -> Vec<&'r [u32]> {
    let (first, count) = workload_pods[w];
    (first..first + count)
        .map(|p| &pod_requests[p * width..(p + 1) * width])
        .collect()
}

/// Whether the pods would fit if nothing were held. Only asked to label a wait reason, yet asked
/// for every waiting workload once a hold exists, so single-pod answers are remembered until the
/// next release changes capacity.
fn fits_ignoring_hold(
    cache: &mut Vec<(Vec<u32>, bool)>,
    candidates: &[NodeId],
    free: &[Vec<u32>],
    requests: &[&[u32]],
    weights: &[f64],
) -> bool {
    let single = (requests.len() == 1).then(|| requests[0]);
    if let Some(shape) = single
        && let Some((_, fits)) = cache.iter().find(|(known, _)| known.as_slice() == shape)
    {
        return *fits;
    }
    let fits = best_fit(candidates, |n| free[n].as_slice(), requests, weights).is_some();
    if let Some(shape) = single {
        cache.push((shape.to_vec(), fits));
    }
    fits
}

/// Decides one cycle. Pure and deterministic: the same snapshot, in any order of its vectors,
/// gives the same decisions (entries are processed in a canonical order of names and UIDs).
/// Entries that refer to a pool, node or queue that does not exist are ignored.
pub fn decide(snapshot: &Snapshot, options: &DecideOptions) -> Decisions {
    Cycle::new(snapshot, options).run()
}

struct Cycle<'a> {
    snapshot: &'a Snapshot,
    options: &'a DecideOptions,
    weights: Vec<f64>,
    /// Nodes of each pool in canonical (name) order.
    pool_nodes: Vec<Vec<NodeId>>,
    /// What is free on each node, less this cycle's placements.
    free: Vec<Vec<u32>>,
    /// What is held on each node for the pool's held workload.
    held: Vec<Vec<u32>>,
    allocatable: Vec<Vec<u32>>,
    /// Free minus held, per node: what an ordinary workload may use.
    usable: Vec<Vec<u32>>,
    running_by_node: Vec<Vec<usize>>,
    /// Running pods grouped into workloads, and each running pod's workload.
    running_workloads: Vec<RunningWorkload>,
    workload_of_pod: Vec<usize>,
    /// Valid pending workloads of each queue, in release order.
    queue_pending: Vec<Vec<usize>>,
    queue_rank: Vec<usize>,
    /// Every pending pod's request, `width` counts each, workload after workload: one
    /// allocation per cycle instead of one per pod.
    pod_requests: Vec<u32>,
    /// Per pending workload: its first pod's index in `pod_requests` (in pods) and pod count.
    workload_pods: Vec<(usize, usize)>,
    width: usize,
    /// Single-pod shapes already checked against capacity ignoring the hold, since the last
    /// release (capacity only changes on a release).
    held_fit_cache: Vec<(Vec<u32>, bool)>,
    pending_size: Vec<f64>,
    views: Vec<QueueView>,
    decisions: Decisions,
}

impl<'a> Cycle<'a> {
    fn new(snapshot: &'a Snapshot, options: &'a DecideOptions) -> Self {
        let width = snapshot.resources.len();
        let weights: Vec<f64> = snapshot
            .resources
            .iter()
            .map(|r| {
                if r.gpu_equivalents.is_finite() && r.gpu_equivalents > 0.0 {
                    r.gpu_equivalents
                } else {
                    0.0
                }
            })
            .collect();
        let size =
            |v: &[u32]| -> f64 { v.iter().zip(&weights).map(|(c, w)| f64::from(*c) * w).sum() };
        let pools = snapshot.pools.len();
        let queues = snapshot.queues.len();

        let mut node_order: Vec<NodeId> = (0..snapshot.nodes.len())
            .filter(|&n| snapshot.nodes[n].pool < pools)
            .collect();
        node_order.sort_by(|&a, &b| {
            snapshot.nodes[a]
                .name
                .cmp(&snapshot.nodes[b].name)
                .then(a.cmp(&b))
        });
        let mut pool_nodes = vec![Vec::new(); pools];
        for &n in &node_order {
            pool_nodes[snapshot.nodes[n].pool].push(n);
        }
        let allocatable: Vec<Vec<u32>> = snapshot
            .nodes
            .iter()
            .map(|n| normalise(&n.allocatable, width))
            .collect();
        let free: Vec<Vec<u32>> = snapshot
            .nodes
            .iter()
            .map(|n| normalise(&n.free, width))
            .collect();

        let mut queue_order: Vec<QueueId> = (0..queues).collect();
        queue_order.sort_by(|&a, &b| {
            snapshot.queues[a]
                .name
                .cmp(&snapshot.queues[b].name)
                .then(a.cmp(&b))
        });
        let mut queue_rank = vec![0; queues];
        for (rank, &q) in queue_order.iter().enumerate() {
            queue_rank[q] = rank;
        }

        let valid_queue = |q: QueueId| q < queues && snapshot.queues[q].pool < pools;
        let mut allocated = vec![0.0; queues];
        let mut running_by_node = vec![Vec::new(); snapshot.nodes.len()];
        let mut running_order: Vec<usize> = (0..snapshot.running.len()).collect();
        running_order.sort_by(|&a, &b| {
            snapshot.running[a]
                .uid
                .cmp(&snapshot.running[b].uid)
                .then(a.cmp(&b))
        });
        let mut valid_running = Vec::with_capacity(running_order.len());
        for i in running_order {
            let pod = &snapshot.running[i];
            if !valid_queue(pod.queue) || pod.node >= snapshot.nodes.len() {
                continue;
            }
            allocated[pod.queue] += size(&normalise(&pod.requests, width));
            running_by_node[pod.node].push(i);
            valid_running.push(i);
        }
        let (running_workloads, workload_of_pod) = group_running(snapshot, &valid_running, |i| {
            size(&normalise(&snapshot.running[i].requests, width))
        });

        let mut pod_requests: Vec<u32> = Vec::new();
        let mut workload_pods: Vec<(usize, usize)> = Vec::with_capacity(snapshot.pending.len());
        for w in &snapshot.pending {
            workload_pods.push((pod_requests.len() / width.max(1), w.pods.len()));
            for pod in &w.pods {
                let start = pod_requests.len();
                pod_requests.extend(pod.requests.iter().take(width));
                pod_requests.resize(start + width, 0);
            }
        }
        let pending_size: Vec<f64> = workload_pods
            .iter()
            .map(|&(first, count)| {
                (first..first + count)
                    .map(|p| size(&pod_requests[p * width..(p + 1) * width]))
                    .sum()
            })
            .collect();
        let mut queue_pending = vec![Vec::new(); queues];
        let mut pending_total = vec![0.0; queues];
        for (i, w) in snapshot.pending.iter().enumerate() {
            if valid_queue(w.queue) {
                queue_pending[w.queue].push(i);
                pending_total[w.queue] += pending_size[i];
            }
        }
        for list in &mut queue_pending {
            list.sort_by(|&a, &b| {
                compare_workloads(&snapshot.pending[a], &snapshot.pending[b]).then(a.cmp(&b))
            });
        }

        // Division per pool: K = 0 entitlement and the history-corrected fair share.
        let mut outcomes: Vec<QueueOutcome> = (0..queues)
            .map(|q| QueueOutcome {
                queue: q,
                allocated: allocated[q],
                pending: pending_total[q],
                allocated_after: allocated[q],
                ..QueueOutcome::default()
            })
            .collect();
        for (pool, nodes) in pool_nodes.iter().enumerate() {
            let capacity: f64 = nodes.iter().map(|&n| size(&allocatable[n])).sum();
            let members: Vec<QueueId> = queue_order
                .iter()
                .copied()
                .filter(|&q| valid_queue(q) && snapshot.queues[q].pool == pool)
                .collect();
            let claim = |q: QueueId, weight: f64| {
                let state = &snapshot.queues[q];
                Claim {
                    demand: allocated[q] + pending_total[q],
                    guaranteed: state.guaranteed,
                    limit: state.limit,
                    weight,
                }
            };
            let base: Vec<Claim> = members
                .iter()
                .map(|&q| claim(q, snapshot.queues[q].weight))
                .collect();
            let effective: Vec<f64> = members
                .iter()
                .map(|&q| {
                    effective_weight(
                        snapshot.queues[q].weight,
                        snapshot.queues[q].shares,
                        &options.fairshare,
                    )
                })
                .collect();
            let corrected: Vec<Claim> = members
                .iter()
                .zip(&effective)
                .map(|(&q, &w)| claim(q, w))
                .collect();
            let entitled = divide(capacity, &base);
            let fair = divide(capacity, &corrected);
            for (i, &q) in members.iter().enumerate() {
                outcomes[q].demand = base[i].cap();
                outcomes[q].entitled = entitled[i];
                outcomes[q].effective_weight = effective[i];
                outcomes[q].fair_share = fair[i];
            }
        }
        let views = (0..queues)
            .map(|q| QueueView {
                allocated: allocated[q],
                guaranteed: if snapshot.queues[q].guaranteed.is_finite() {
                    snapshot.queues[q].guaranteed.max(0.0)
                } else {
                    0.0
                },
                fair_share: outcomes[q].fair_share,
            })
            .collect();

        let held = vec![vec![0; width]; snapshot.nodes.len()];
        let usable = free.clone();
        Self {
            snapshot,
            options,
            weights,
            pool_nodes,
            free,
            held,
            allocatable,
            usable,
            running_by_node,
            running_workloads,
            workload_of_pod,
            queue_pending,
            queue_rank,
            pod_requests,
            workload_pods,
            width,
            held_fit_cache: Vec::new(),
            pending_size,
            views,
            decisions: Decisions {
                queues: outcomes,
                ..Decisions::default()
            },
        }
    }

    fn size(&self, v: &[u32]) -> f64 {
        v.iter()
            .zip(&self.weights)
            .map(|(c, w)| f64::from(*c) * w)
            .sum()
    }

    fn run(mut self) -> Decisions {
        for pool in 0..self.pool_nodes.len() {
            self.run_pool(pool);
        }
        self.decisions
    }

    fn run_pool(&mut self, pool: PoolId) {
        let snapshot = self.snapshot;
        self.held_fit_cache.clear();
        let mut usable_total: f64 = self.pool_nodes[pool]
            .iter()
            .map(|&n| self.size(&self.usable[n]))
            .sum();
        let mut heap = BinaryHeap::new();
        let mut cursor = vec![0usize; snapshot.queues.len()];
        for q in 0..snapshot.queues.len() {
            if snapshot.queues[q].pool == pool && !self.queue_pending[q].is_empty() {
                heap.push(Reverse((self.turn(q), q)));
            }
        }
        let mut hold: Option<usize> = None;
        // Single-pod shapes already known not to fit: anything at least as large fails too,
        // because capacity only shrinks within a cycle.
        let mut failed_shapes: Vec<Vec<u32>> = Vec::new();

        while let Some(Reverse((_, q))) = heap.pop() {
            let w = self.queue_pending[q][cursor[q]];
            cursor[q] += 1;
            let workload = &snapshot.pending[w];
            let size = self.pending_size[w];
            let outcome = self.decisions.queues[q];
            let present = u32::try_from(workload.pods.len()).unwrap_or(u32::MAX);

            let wait = if workload.pods.is_empty() || present < workload.min_member {
                Some(WaitReason::GangIncomplete {
                    present,
                    min_member: workload.min_member,
                })
            } else if let Some(limit) = snapshot.queues[q]
                .limit
                .filter(|l| outcome.allocated_after + size > l + EPSILON)
            {
                Some(WaitReason::QueueLimit { limit })
            } else {
                let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
                let dominated = requests.len() == 1
                    && failed_shapes
                        .iter()
                        .any(|f| f.iter().zip(requests[0]).all(|(a, b)| b >= a));
                let placement = if size > usable_total + EPSILON || dominated {
                    None
                } else {
                    let usable = &self.usable;
                    best_fit(
                        &self.pool_nodes[pool],
                        |n| usable[n].as_slice(),
                        &requests,
                        &self.weights,
                    )
                };
                match placement {
                    Some(nodes) => {
                        for (request, &node) in requests.iter().zip(&nodes) {
                            subtract(&mut self.free[node], request);
                            subtract(&mut self.usable[node], request);
                        }
                        usable_total -= size;
                        self.held_fit_cache.clear();
                        let after = outcome.allocated_after + size;
                        self.decisions.queues[q].allocated_after = after;
                        self.views[q].allocated = after;
                        let reason = if after <= outcome.fair_share + EPSILON {
                            ReleaseReason::WithinFairShare {
                                allocated_after: after,
                                fair_share: outcome.fair_share,
                            }
                        } else {
                            ReleaseReason::IdleCapacity {
                                allocated_after: after,
                                fair_share: outcome.fair_share,
                            }
                        };
                        self.decisions.releases.push(Release {
                            workload: w,
                            placements: nodes,
                            reason,
                        });
                        None
                    }
                    None => {
                        if requests.len() == 1 && !dominated && failed_shapes.len() < 16 {
                            failed_shapes.push(requests[0].to_vec());
                        }
                        let below_share = outcome.allocated_after + EPSILON < outcome.fair_share;
                        if self.options.hold_capacity && hold.is_none() && below_share {
                            match self.hold(pool, w, q) {
                                Some(held_total) => {
                                    usable_total -= held_total;
                                    hold = Some(w);
                                    Some(WaitReason::Holding)
                                }
                                None => Some(WaitReason::NeverFits),
                            }
                        } else if let Some(holder) = hold.filter(|_| {
                            fits_ignoring_hold(
                                &mut self.held_fit_cache,
                                &self.pool_nodes[pool],
                                &self.free,
                                &requests,
                                &self.weights,
                            )
                        }) {
                            Some(WaitReason::CapacityHeld {
                                for_workload: holder,
                            })
                        } else {
                            Some(WaitReason::NoFit)
                        }
                    }
                }
            };
            if let Some(reason) = wait {
                self.decisions.waiting.push(Waiting {
                    workload: w,
                    reason,
                });
            }
            if cursor[q] < self.queue_pending[q].len() {
                heap.push(Reverse((self.turn(q), q)));
            }
        }
    }

    fn turn(&self, q: QueueId) -> QueueTurn {
        let outcome = &self.decisions.queues[q];
        QueueTurn {
            ratio: share_ratio(outcome.allocated_after, outcome.fair_share),
            rank: self.queue_rank[q],
        }
    }

    /// Holds capacity for workload `w` of queue `q`; returns the GPU-equivalents taken out of
    /// ordinary use, or `None` if the workload cannot fit in the pool even when it is empty.
    fn hold(&mut self, pool: PoolId, w: usize, q: QueueId) -> Option<f64> {
        let requests = requests_of(&self.pod_requests, &self.workload_pods, self.width, w);
        let plan = plan_hold(
            &self.pool_nodes[pool],
            &self.free,
            &self.allocatable,
            &requests,
            &self.weights,
        )?;
        let mut held_total = 0.0;
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
            subtract(&mut self.usable[*node], &take);
            for (slot, t) in self.held[*node].iter_mut().zip(&take) {
                *slot += t;
            }
            held_total += self.size(&take);
            held_nodes.push((*node, take));
            missing.push((*node, short));
        }
        let missing_total: f64 = missing.iter().map(|(_, m)| self.size(m)).sum();
        self.decisions.holds.push(Hold {
            workload: w,
            pool,
            nodes: held_nodes,
            missing_gpu_equivalents: missing_total,
        });
        if missing_total > 0.0 {
            self.preempt_for(w, q, &missing);
        }
        Some(held_total)
    }

    fn preempt_for(&mut self, w: usize, q: QueueId, missing: &[(NodeId, Vec<u32>)]) {
        let snapshot = self.snapshot;
        let params = &self.options.preemption;
        let size = self.pending_size[w];
        let Some(reason) = preemption_reason(snapshot, params, q, size, &self.views[q]) else {
            return;
        };
        let preemptor = Preemptor {
            queue: q,
            size,
            tier: snapshot.pending[w].tier,
            missing,
        };
        if let Some(victims) = choose_victims(
            snapshot,
            params,
            &preemptor,
            reason,
            &self.running_workloads,
            &self.workload_of_pod,
            &self.running_by_node,
            &mut self.views,
        ) {
            for (victim, reason) in victims {
                let victim = &self.running_workloads[victim];
                self.decisions.preemptions.push(Preemption {
                    victim_workload: victim.id.clone(),
                    pods: victim.pods.clone(),
                    size: victim.size,
                    for_workload: w,
                    reason,
                });
            }
        }
    }
}
