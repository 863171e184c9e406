//! What each pool offers and what its queues ask of it, resource kind by resource kind, so its
//! division entitles queues only to capacity their work can use.

use super::capacity::NodeCapacity;
use super::release_order::ReleaseEntries;
use super::requests::pod_request;
use super::setup::Setup;
use crate::division::usable_capacity;
use crate::index::IndexVec;
use crate::snapshot::PoolId;

impl Setup<'_> {
    /// Per pool: the capacity its queues' running and pending work can use, where that is less
    /// than the whole and their demand exceeds it (see [`usable_capacity`]). A queue's work
    /// counts toward its own pool, wherever it runs.
    pub(super) fn usable_pool_capacity(
        &self,
        capacity: &NodeCapacity,
        pending: &ReleaseEntries,
    ) -> IndexVec<PoolId, Option<f64>> {
        let snapshot = self.snapshot;
        let width = self.width;
        let offered: IndexVec<PoolId, Vec<f64>> = capacity
            .pool_nodes
            .iter()
            .map(|nodes| {
                let mut offered = vec![0.0; width];
                for &n in nodes {
                    for ((o, &count), w) in offered
                        .iter_mut()
                        .zip(&capacity.allocatable[n])
                        .zip(&self.weights)
                    {
                        *o += f64::from(count) * w;
                    }
                }
                offered
            })
            .collect();
        // Where the snapshot knows a single kind, every pod asks for it and every pool can use
        // all it offers, so pods are not walked at all (most clusters). Otherwise a pool's
        // demand is read even where it offers one kind: a pod can still ask for another (a MIG
        // pod left running on a node since reconfigured to whole GPUs), and that demand cannot
        // use what the pool offers.
        if width <= 1 {
            return IndexVec::from_elem(None, offered.len());
        }
        let mut demand: IndexVec<PoolId, Vec<f64>> =
            IndexVec::from_elem(vec![0.0; width], offered.len());
        let mut add = |pool: PoolId, requests: &[u32]| {
            if let Some(pool_demand) = demand.get_mut(pool) {
                for ((d, &count), w) in pool_demand.iter_mut().zip(requests).zip(&self.weights) {
                    *d += f64::from(count) * w;
                }
            }
        };
        for pod in &snapshot.running {
            if self.is_valid(pod.queue) && snapshot.nodes.contains(pod.node) {
                add(snapshot.queues[pod.queue].pool, &pod.requests);
            }
        }
        for (q, &(start, end)) in pending.queue_entries.iter_enumerated() {
            if start == end {
                continue;
            }
            let pool = snapshot.queues[q].pool;
            for entry in &pending.entries[start..end] {
                for p in entry.first_pod..entry.first_pod + entry.pods {
                    add(pool, pod_request(&pending.pod_requests, width, p));
                }
            }
        }
        offered
            .iter_enumerated()
            .map(|(pool, kinds)| usable_capacity(kinds, &demand[pool]))
            .collect()
    }
}
