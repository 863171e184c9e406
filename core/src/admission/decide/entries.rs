//! The pending workloads as a pool's pass reads them, and their pods' requests.

use super::requests::pod_request;
use crate::admission::score::ReleaseScore;

/// A pending workload of a valid queue, as a pool's pass reads it. Entries are stored queue
/// after queue, each queue's in its release order: a pass serves each queue in that order, so
/// it reads them front to back instead of jumping around `Snapshot::pending` (which, at
/// 100,000s of workloads, missed the cache at every step). Decisions name workloads by
/// `workload`, their index in the snapshot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// Index into `Snapshot::pending`.
    pub(super) workload: usize,
    /// GPU-equivalents of all its pods.
    pub(super) size: f64,
    /// Its first pod's index in `pod_requests` (in pods).
    pub(super) first_pod: usize,
    /// How many pods it has.
    pub(super) pods: usize,
    pub(super) min_member: u32,
    /// Its release score this cycle.
    pub(super) score: ReleaseScore,
}

/// The request vectors of a workload's pods: a lone pod's borrowed in place, since most
/// workloads are one pod and are looked at once per cycle; a gang's collected.
pub(super) enum Requests<'r> {
    One([&'r [u32]; 1]),
    Many(Vec<&'r [u32]>),
}

impl<'r> std::ops::Deref for Requests<'r> {
    type Target = [&'r [u32]];

    fn deref(&self) -> &Self::Target {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }
}

/// The request vector of each pod of `entry`.
pub(super) fn requests_of<'r>(
    pod_requests: &'r [u32],
    width: usize,
    entry: &Entry,
) -> Requests<'r> {
    if entry.pods == 1 {
        return Requests::One([pod_request(pod_requests, width, entry.first_pod)]);
    }
    Requests::Many(
        (entry.first_pod..entry.first_pod + entry.pods)
            .map(|p| pod_request(pod_requests, width, p))
            .collect(),
    )
}
