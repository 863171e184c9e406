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
        let pools = capacity.pool_nodes.len();
        let mut demand: IndexVec<PoolId, Vec<f64>> = IndexVec::from_elem(vec![0.0; width], pools);
        let mut add = |pool: PoolId, requests: &[u32]| {
            if let Some(by_kind) = demand.get_mut(pool) {
                for ((d, &count), w) in by_kind.iter_mut().zip(requests).zip(&self.weights) {
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
            let pool = snapshot.queues[q].pool;
            for entry in &pending.entries[start..end] {
                for p in entry.first_pod..entry.first_pod + entry.pods {
                    add(pool, pod_request(&pending.pod_requests, width, p));
                }
            }
        }
        capacity
            .pool_nodes
            .iter_enumerated()
            .map(|(pool, nodes)| {
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
                usable_capacity(&offered, &demand[pool])
            })
            .collect()
    }
}
