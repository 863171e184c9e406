//! Holds given up, and what blocked them. A hold is given up when what stands on its held nodes
//! outlasts its idle budget and cannot be evicted within the guards. Made again on the same nodes
//! at once, the next hold would spend another whole budget waiting for the same pods, and a
//! workload could keep capacity idle without bound, one budget after another. So while any of
//! them runs, the next hold for the workload is planned around their capacity: on other nodes,
//! or not at all until they end.

use super::Cycle;
use super::running::RunningGroups;
use crate::admission::decision::GivenUp;
use crate::admission::placement::subtract;
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId};

impl Cycle<'_> {
    /// What blocked entry `e`'s last hold, given up, if it was and anything did.
    fn blockers_of(&self, e: usize) -> Option<&[String]> {
        let uid = &self.snapshot.pending[self.entries[e].workload].uid;
        self.snapshot
            .given_up_holds
            .iter()
            .find(|g| &g.workload == uid)
            .map(|g| g.blockers.as_slice())
            .filter(|blockers| !blockers.is_empty())
    }

    /// Whether entry `e`'s last hold was given up with blockers on record.
    pub(super) fn has_blockers(&self, e: usize) -> bool {
        self.blockers_of(e).is_some()
    }

    /// How many running workloads blocked entry `e`'s last hold, given up.
    pub(super) fn blocker_count(&self, e: usize) -> u32 {
        self.blockers_of(e)
            .map_or(0, |b| u32::try_from(b.len()).unwrap_or(u32::MAX))
    }

    /// Takes what the blockers of entry `e`'s last hold use, where they still run in `pool`, out
    /// of `capacity` (per node).
    pub(super) fn subtract_blockers(
        &self,
        pool: PoolId,
        e: usize,
        capacity: &mut IndexVec<NodeId, Vec<u32>>,
    ) {
        let Some(blockers) = self.blockers_of(e) else {
            return;
        };
        for (node, request) in self.pods_in_pool(pool, |id| blockers.iter().any(|b| b == id)) {
            subtract(&mut capacity[node], &request);
        }
    }

    /// The running workloads on the nodes of `missing` where something is still missing, in
    /// canonical order: what a hold given up now was waiting for.
    pub(super) fn standing_on(&mut self, missing: &[(NodeId, Vec<u32>)]) -> Vec<String> {
        let (snapshot, weights) = (self.snapshot, &self.weights);
        let running = self
            .running
            .get_or_insert_with(|| RunningGroups::new(snapshot, weights));
        let mut blockers: Vec<String> = missing
            .iter()
            .filter(|(_, short)| short.iter().any(|&s| s > 0))
            .flat_map(|(node, _)| &running.by_node[*node])
            .map(|&pod| running.workloads[running.workload_of_pod[pod]].id.clone())
            .collect();
        blockers.sort_unstable();
        blockers.dedup();
        blockers
    }

    /// Records that entry `e`'s hold is given up, and what blocked it.
    pub(super) fn give_up(&mut self, e: usize, blockers: Vec<String>) {
        let workload = self.entries[e].workload;
        if !self
            .decisions
            .given_up
            .iter()
            .any(|g| g.workload == workload)
        {
            self.decisions.given_up.push(GivenUp { workload, blockers });
        }
    }
}
