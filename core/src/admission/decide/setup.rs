//! What every stage of a cycle's set-up reads. The stages are in the files of what they build.

use super::canonical::valid_queue;
use crate::admission::options::{DecideOptions, PoolSettings};
use crate::index::IndexVec;
use crate::snapshot::{LedgerShares, PoolId, QueueId, Snapshot};

/// What every stage of a cycle's set-up reads: the snapshot, the resources' weights in
/// GPU-equivalents, which queues are valid, and each pool's settings.
pub(super) struct Setup<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) options: &'a DecideOptions,
    pub(super) width: usize,
    pub(super) weights: Vec<f64>,
    queue_valid: IndexVec<QueueId, bool>,
    pub(super) pool_settings: IndexVec<PoolId, PoolSettings>,
}

impl<'a> Setup<'a> {
    pub(super) fn new(snapshot: &'a Snapshot, options: &'a DecideOptions) -> Self {
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
        Self {
            snapshot,
            options,
            width: snapshot.resources.len(),
            weights,
            queue_valid: snapshot
                .queues
                .indices()
                .map(|q| valid_queue(snapshot, q))
                .collect(),
            pool_settings: snapshot
                .pools
                .iter()
                .map(|p| options.pool_settings(&p.name))
                .collect(),
        }
    }

    pub(super) fn size(&self, v: &[u32]) -> f64 {
        v.iter()
            .zip(&self.weights)
            .map(|(c, w)| f64::from(*c) * w)
            .sum()
    }

    pub(super) fn is_valid(&self, q: QueueId) -> bool {
        self.queue_valid.get(q).copied().unwrap_or(false)
    }

    pub(super) fn guaranteed_of(&self, q: QueueId) -> f64 {
        crate::units::non_negative(self.snapshot.queues[q].guaranteed)
    }

    pub(super) fn weight_of(&self, q: QueueId) -> f64 {
        let w = self.snapshot.queues[q].weight;
        if w.is_finite() && w > 0.0 { w } else { 0.0 }
    }

    /// A pool with time-aware sharing off ignores its queues' history altogether, so it
    /// divides exactly as stateless fair share would.
    pub(super) fn shares_of(&self, q: QueueId) -> LedgerShares {
        let snapshot = self.snapshot;
        if self.pool_settings[snapshot.queues[q].pool].time_aware {
            snapshot.queues[q].shares
        } else {
            LedgerShares::NEUTRAL
        }
    }

    pub(super) fn catch_up_of(&self, pool: PoolId) -> f64 {
        let catch_up = self.pool_settings[pool].fairshare.catch_up_s;
        if catch_up.is_finite() && catch_up > 0.0 {
            catch_up
        } else {
            0.0
        }
    }
}
