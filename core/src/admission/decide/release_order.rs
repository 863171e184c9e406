//! The valid pending workloads put in release order, queue after queue, with their pods'
//! requests laid out in the same order.

use std::cmp::Ordering;

use super::entries::Entry;
use super::requests::pod_request;
use super::setup::Setup;
use crate::admission::order::{covered_by_guarantee, total_order};
use crate::admission::score::ReleaseScore;
use crate::index::IndexVec;
use crate::labels::Tier;
use crate::snapshot::{QueueId, Snapshot};

/// What [`compare_workloads`](super::order::compare_workloads) orders a queue's workloads by,
/// read once per workload instead of at every comparison of a sort. Kept small, as a cycle
/// scatters and sorts one per pending workload; the entry it orders stays where it was found.
#[derive(Clone, Copy)]
struct ReleaseKey {
    /// The tier, then the score total, highest first, as `f64::total_cmp` orders it.
    tier_score: u128,
    /// The creation time as `f64::total_cmp` orders it, then [`uid_prefix`] of the UID past
    /// the prefix all UIDs of the queue share.
    created_uid: u128,
    /// Its entry's place among the entries found in snapshot order.
    at: usize,
}

impl ReleaseKey {
    /// Fills a list before every place in it is written.
    const PLACEHOLDER: Self = Self {
        tier_score: 0,
        created_uid: 0,
        at: 0,
    };

    fn new(tier: Tier, total: f64, created_at: f64, uid_next: u64, at: usize) -> Self {
        Self {
            // A derived order of variants is that of their discriminants. Highest score first:
            // the total's bits, inverted.
            tier_score: u128::from(tier as u8) << 64 | u128::from(!total_order(total)),
            created_uid: u128::from(total_order(created_at)) << 64 | u128::from(uid_next),
            at,
        }
    }

    /// [`compare_workloads`](super::order::compare_workloads), then the snapshot index: the
    /// release order inside a queue.
    fn cmp(&self, other: &Self, entries: &[Entry], snapshot: &Snapshot) -> Ordering {
        let workload = |key: &Self| entries[key.at].workload;
        self.tier_score
            .cmp(&other.tier_score)
            // Both UIDs start with the queue's shared prefix: the bytes after it decide, and
            // where their first 8 bytes differ, those do.
            .then(self.created_uid.cmp(&other.created_uid))
            .then_with(|| {
                let (a, b) = (workload(self), workload(other));
                snapshot.pending[a].uid.cmp(&snapshot.pending[b].uid)
            })
            .then_with(|| workload(self).cmp(&workload(other)))
    }
}

/// The first 8 bytes of `bytes` (zero-padded) as a big-endian integer. Where two of them differ,
/// they order as the byte strings do: the first differing byte is either a real byte of both,
/// or the end of the shorter string, which is a prefix of the other and so comes first.
fn uid_prefix(bytes: &[u8]) -> u64 {
    if let Some(first) = bytes.first_chunk::<8>() {
        return u64::from_be_bytes(*first);
    }
    // Byte by byte rather than through a copy of unknown length: this runs once per pending
    // workload.
    bytes
        .iter()
        .enumerate()
        .fold(0, |prefix, (i, &b)| prefix | u64::from(b) << (56 - 8 * i))
}

/// The valid pending workloads, queue after queue, each queue's in release order, with their
/// pods' requests laid out in the same order.
pub(super) struct ReleaseEntries {
    pub(super) entries: Vec<Entry>,
    pub(super) queue_entries: IndexVec<QueueId, (usize, usize)>,
    pub(super) pod_requests: Vec<u32>,
    /// Per queue: its pending GPU-equivalents, summed in snapshot order.
    pub(super) pending_total: IndexVec<QueueId, f64>,
    /// Per queue: the GPU-equivalents of its pending workloads no larger than its guarantee,
    /// the only ones that can take capacity back through it (see `claimable_guarantee`).
    pub(super) pending_within_guarantee: IndexVec<QueueId, f64>,
}

impl Setup<'_> {
    /// The valid pending workloads in release order.
    pub(super) fn release_entries(&self) -> ReleaseEntries {
        let snapshot = self.snapshot;
        let options = self.options;
        let queues = snapshot.queues.len();
        let width = self.width;
        let is_valid = |q: QueueId| self.is_valid(q);
        let size = |v: &[u32]| self.size(v);
        // Valid pending workloads grouped by queue (in snapshot order), then each queue's put in
        // release order.
        let mut queue_entries = IndexVec::from_elem((0, 0), queues);
        // Per queue: the UID prefix all its workloads share (as found so far). Within a queue
        // UIDs often share a long prefix (a namespace), so the sort compares the bytes that
        // follow it, read once per workload, and reaches the strings only on a tie there.
        let mut shared_uid: IndexVec<QueueId, &[u8]> = IndexVec::from_elem(&[], queues);
        for w in &snapshot.pending {
            if is_valid(w.queue) {
                let uid = w.uid.as_bytes();
                let shared = &mut shared_uid[w.queue];
                if queue_entries[w.queue].1 == 0 {
                    *shared = uid;
                } else {
                    let common = shared.iter().zip(uid).take_while(|(a, b)| a == b).count();
                    *shared = &shared[..common];
                }
                queue_entries[w.queue].1 += 1;
            }
        }
        let mut next = 0;
        for range in &mut queue_entries {
            let count = range.1;
            *range = (next, next);
            next += count;
        }
        // One pass in snapshot order reads each workload where it lies and records its entry in
        // `found`; only a small sort key goes to the next place of its queue. Each queue's keys
        // are then sorted and the entries gathered in that order. Walking the snapshot's
        // workloads in release order instead missed the cache for each of them, and moving
        // whole entries while sorting cost more than gathering them once.
        // Keys are filled queue by queue: `queue_entries[q].1` is where queue `q`'s next goes.
        let mut found: Vec<Entry> = Vec::with_capacity(next);
        let mut keys = vec![ReleaseKey::PLACEHOLDER; next];
        // In snapshot order first; copied in release order below.
        let mut found_requests: Vec<u32> = Vec::new();
        let mut pods_found = 0;
        // Summed in snapshot order, as the division has always seen it.
        let mut pending_total = IndexVec::from_elem(0.0, queues);
        let mut pending_within_guarantee = IndexVec::from_elem(0.0, queues);
        for (w, workload) in snapshot.pending.iter().enumerate() {
            if !is_valid(workload.queue) {
                continue;
            }
            let first_pod = pods_found;
            pods_found += workload.pods.len();
            for pod in &workload.pods {
                let start = found_requests.len();
                found_requests.extend(pod.requests.iter().take(width));
                found_requests.resize(start + width, 0);
            }
            let count = workload.pods.len();
            let size: f64 = (first_pod..first_pod + count)
                .map(|p| size(pod_request(&found_requests, width, p)))
                .sum();
            pending_total[workload.queue] += size;
            if covered_by_guarantee(self.guaranteed_of(workload.queue), 0.0, size) {
                pending_within_guarantee[workload.queue] += size;
            }
            let score = ReleaseScore::of(workload, snapshot.now, &options.score);
            let shared = shared_uid[workload.queue].len();
            let range = &mut queue_entries[workload.queue];
            let at = range.1;
            range.1 += 1;
            keys[at] = ReleaseKey::new(
                workload.tier,
                score.total(),
                workload.created_at,
                uid_prefix(&workload.uid.as_bytes()[shared..]),
                found.len(),
            );
            found.push(Entry {
                workload: w,
                size,
                first_pod,
                pods: count,
                min_member: workload.min_member,
                score,
            });
        }
        for &(start, end) in &queue_entries {
            keys[start..end].sort_unstable_by(|a, b| a.cmp(b, &found, snapshot));
        }
        let mut entries: Vec<Entry> = keys.iter().map(|key| found[key.at]).collect();
        drop(keys);
        drop(found);
        // The pass reads requests entry after entry, so they are laid out that way too.
        let mut pod_requests: Vec<u32> = Vec::with_capacity(found_requests.len());
        let mut pods_placed = 0;
        for entry in &mut entries {
            pod_requests.extend_from_slice(
                &found_requests[entry.first_pod * width..(entry.first_pod + entry.pods) * width],
            );
            entry.first_pod = pods_placed;
            pods_placed += entry.pods;
        }
        drop(found_requests);
        ReleaseEntries {
            entries,
            queue_entries,
            pod_requests,
            pending_total,
            pending_within_guarantee,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::decide::Cycle;
    use crate::admission::decide::entries::requests_of;
    use crate::admission::options::DecideOptions;
    use crate::snapshot::{PoolId, QueueState};

    #[test]
    fn uid_prefixes_that_differ_order_as_the_uids_do() {
        let uids: [&[u8]; 12] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
            b"b",
            b"\xff\xfe",
        ];
        for a in uids {
            for b in uids {
                let (pa, pb) = (uid_prefix(a), uid_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} against {b:?}");
                }
            }
        }
    }

    #[test]
    fn release_keys_order_as_compare_workloads() {
        use crate::admission::order::compare_workloads;
        use crate::labels::{Urgency, UserTier};
        use crate::snapshot::{PendingWorkload, Pool};
        let tiers = [Tier::Backfill, Tier::Realtime, Tier::Elastic];
        let urgencies = [Urgency::Low, Urgency::High, Urgency::Medium];
        let times = [5.0, -0.0, 0.0, f64::NAN, 5.0, -3.0, f64::INFINITY, 1e9];
        let uids = [
            "ns/a",
            "ns/b",
            "ns/abcdefghij-2",
            "ns/abcdefghij-1",
            "ns/",
            "ns/a",
        ];
        let pending: Vec<PendingWorkload> = (0..200)
            .map(|i| PendingWorkload {
                uid: uids[i % uids.len()].to_owned() + &"x".repeat(i % 7 / 5),
                queue: QueueId::new(0),
                tier: tiers[i % 3 / 2 + i % 5 / 4],
                deadline: [None, Some(10.0), Some(1e6)][i % 11 % 3],
                urgency: urgencies[i % 13 % 3],
                user_tier: UserTier::Standard,
                created_at: times[i % times.len()],
                min_member: 1,
                pods: Vec::new(),
            })
            .collect();
        let snapshot = Snapshot {
            now: 100.0,
            pools: vec![Pool {
                name: "default".into(),
            }]
            .into(),
            queues: vec![QueueState::neutral("q", 0)].into(),
            pending,
            ..Snapshot::default()
        };
        let options = DecideOptions::default();
        let cycle = Cycle::new(&snapshot, &options);
        let scores: Vec<ReleaseScore> = snapshot
            .pending
            .iter()
            .map(|w| ReleaseScore::of(w, snapshot.now, &options.score))
            .collect();
        let mut expected: Vec<usize> = (0..snapshot.pending.len()).collect();
        expected.sort_by(|&a, &b| {
            let (wa, wb) = (&snapshot.pending[a], &snapshot.pending[b]);
            compare_workloads(wa, &scores[a], wb, &scores[b]).then(a.cmp(&b))
        });
        let order: Vec<usize> = cycle.entries.iter().map(|e| e.workload).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn entries_follow_each_queue_release_order_and_name_snapshot_workloads() {
        use crate::labels::{Urgency, UserTier};
        use crate::snapshot::{Node, PendingWorkload, PodRequest, Pool, ResourceKind};
        let queue = QueueState::neutral;
        let job =
            |uid: &str, queue: usize, tier: Tier, created_at: f64, pods: &[u32]| PendingWorkload {
                uid: uid.into(),
                queue: QueueId::new(queue),
                tier,
                deadline: None,
                urgency: Urgency::Medium,
                user_tier: UserTier::Standard,
                created_at,
                min_member: 1,
                pods: pods
                    .iter()
                    .enumerate()
                    .map(|(i, g)| PodRequest {
                        requests: vec![*g, i as u32],
                    })
                    .collect(),
            };
        let snapshot = Snapshot {
            now: 100.0,
            resources: vec![
                ResourceKind {
                    name: "gpu".into(),
                    gpu_equivalents: 1.0,
                },
                ResourceKind {
                    name: "slice".into(),
                    gpu_equivalents: 0.5,
                },
            ],
            pools: vec![Pool {
                name: "default".into(),
            }]
            .into(),
            nodes: vec![Node {
                name: "n".into(),
                pool: PoolId::new(0),
                allocatable: vec![1, 0],
                free: vec![0, 0],
            }]
            .into(),
            // Queue 1 names a pool that does not exist: its workloads get no entry.
            queues: vec![queue("b", 0), queue("x", 7), queue("a", 0)].into(),
            running: Vec::new(),
            pending: vec![
                job("q0-late", 0, Tier::Elastic, 50.0, &[1]),
                job("q2-gang", 2, Tier::Elastic, 10.0, &[2, 3, 4]),
                job("q1", 1, Tier::Realtime, 0.0, &[1]),
                job("q0-realtime", 0, Tier::Realtime, 90.0, &[5]),
                job("q2-backfill", 2, Tier::Backfill, 0.0, &[6]),
                job("q0-early", 0, Tier::Elastic, 20.0, &[7, 8]),
                job("q0-early-too", 0, Tier::Elastic, 20.0, &[9]),
                // These two differ only past the first 8 bytes after the queue's shared "q0-".
                job("q0-early-too-b", 0, Tier::Elastic, 20.0, &[1]),
                job("q0-early-too-a", 0, Tier::Elastic, 20.0, &[1]),
            ],
            ..Snapshot::default()
        };
        let options = DecideOptions::default();
        let cycle = Cycle::new(&snapshot, &options);
        let names = |q: usize| -> Vec<&str> {
            let (start, end) = cycle.queue_entries[QueueId::new(q)];
            cycle.entries[start..end]
                .iter()
                .map(|e| snapshot.pending[e.workload].uid.as_str())
                .collect()
        };
        // Score waits on age: of the two created at 20 s, the UID decides.
        assert_eq!(
            names(0),
            [
                "q0-realtime",
                "q0-early",
                "q0-early-too",
                "q0-early-too-a",
                "q0-early-too-b",
                "q0-late"
            ]
        );
        assert!(names(1).is_empty());
        assert_eq!(names(2), ["q2-gang", "q2-backfill"]);
        assert_eq!(cycle.entries.len(), 8);
        for entry in &cycle.entries {
            let workload = &snapshot.pending[entry.workload];
            let requests = requests_of(&cycle.pod_requests, cycle.width, entry);
            let expected: Vec<Vec<u32>> =
                workload.pods.iter().map(|p| p.requests.clone()).collect();
            assert_eq!(
                requests.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
                expected
            );
            let size: f64 = expected
                .iter()
                .map(|r| f64::from(r[0]) + f64::from(r[1]) * 0.5)
                .sum();
            assert_eq!(entry.size, size, "{}", workload.uid);
            assert_eq!(
                entry.score,
                ReleaseScore::of(workload, snapshot.now, &options.score)
            );
        }
        // Nothing fits: every workload of a valid queue waits, named by its snapshot index,
        // with its place in its own queue.
        let decisions = cycle.run();
        let mut waiting: Vec<(usize, usize, usize)> = decisions
            .waiting
            .iter()
            .map(|w| (w.workload, w.position, w.queue_length))
            .collect();
        waiting.sort_unstable();
        assert_eq!(
            waiting,
            [
                (0, 6, 6),
                (1, 1, 2),
                (3, 1, 6),
                (4, 2, 2),
                (5, 2, 6),
                (6, 3, 6),
                (7, 5, 6),
                (8, 4, 6)
            ]
        );
    }
}
