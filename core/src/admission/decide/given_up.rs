//! Holds given up, and what blocked them. A hold is given up when what stands on its held nodes
//! outlasts its idle budget and cannot be evicted within the guards. Made again on the same nodes
//! at once, the next hold would spend another whole budget waiting for the same pods, and a
//! workload could keep capacity idle without bound, one budget after another. So while any of
//! them runs, the next hold for the workload is planned around their capacity: on other nodes,
//! or not at all until they end.
//!
//! Blockers that end do not make the next drain succeed where new ones keep arriving (serving
//! work lent held capacity, work of a more important tier): a workload can then be held and
//! given up again and again, each time leaving up to a whole idle budget dark. So the budgets
//! its holds spend after the first give-up are counted, and while they come to more than
//! [`GIVEN_UP_IDLE_SHARE`] of the pool's GPU-time since that first give-up, it is not held
//! again: it still starts wherever it fits, and is held again once time has caught up.

use super::Cycle;
use super::running::RunningGroups;
use crate::admission::decision::GivenUp;
use crate::admission::placement::subtract;
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId};

/// The share of its pool's GPU-time since a workload's first hold was given up that the idle
/// budgets of its later given-up holds may spend, all together. A hold given up has left its
/// budget idle for nothing; where drains keep failing, holding again at once makes that a
/// steady loss (a 32-GPU whole-pool hold given up every ten hours beside a stream of serving
/// work: 13% of the pool dark). Measured on the generated scenarios, the traces and the bundled
/// ones (BENCHMARKS.md, "Holds given up again and again"): 5% leaves such a pool 3 points below
/// the best utilization, 3% within 2.1; neither changes a bundled scenario, and 3% leaves
/// Helios fewer jobs never started at 576 and 608 GPUs. Smaller shares keep queues whose holds
/// do pay off on a later try waiting longer between tries.
pub const GIVEN_UP_IDLE_SHARE: f64 = 0.03;

/// What a workload's holds given up after its first have spent of their idle budgets, against
/// what [`GIVEN_UP_IDLE_SHARE`] allows by now, and when that will have caught up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct GivenUpIdle {
    pub(super) spent_gpu_s: f64,
    pub(super) allowed_gpu_s: f64,
    pub(super) resumes_in_s: f64,
}

impl Cycle<'_> {
    /// What entry `e`'s holds given up after its first have spent of their idle budgets, if
    /// that is more than [`GIVEN_UP_IDLE_SHARE`] of `pool`'s GPU-time since its first hold was
    /// given up: no new hold for it until time catches up.
    pub(super) fn given_up_too_often(&self, pool: PoolId, e: usize) -> Option<GivenUpIdle> {
        let uid = &self.snapshot.pending[self.entries[e].workload].uid;
        let given_up = self
            .snapshot
            .given_up_holds
            .iter()
            .find(|g| &g.workload == uid)?;
        let spent = given_up.spent_gpu_s;
        let since = given_up.first_given_up_at;
        if !(spent.is_finite() && since.is_finite() && spent > 0.0) {
            return None;
        }
        let per_s = GIVEN_UP_IDLE_SHARE * self.pool_capacity[pool];
        let allowed = per_s * (self.snapshot.now - since).max(0.0);
        (spent > allowed && per_s > 0.0).then(|| GivenUpIdle {
            spent_gpu_s: spent,
            allowed_gpu_s: allowed,
            resumes_in_s: (spent - allowed) / per_s,
        })
    }

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
            let spent_gpu_s = self.idle_so_far(e);
            self.decisions.given_up.push(GivenUp {
                workload,
                blockers,
                spent_gpu_s,
            });
        }
    }
}
