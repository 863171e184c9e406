//! What a cycle counts, and the canonical order it reads it in, whatever the order of the
//! snapshot's vectors.

use crate::snapshot::{QueueId, Snapshot};

/// Whether queue `q` exists and belongs to a pool that exists.
pub(super) fn valid_queue(snapshot: &Snapshot, q: QueueId) -> bool {
    snapshot
        .queues
        .get(q)
        .is_some_and(|queue| snapshot.pools.contains(queue.pool))
}

/// Whether running pod `i` counts: its queue and its node exist.
pub(super) fn valid_running(snapshot: &Snapshot, i: usize) -> bool {
    let pod = &snapshot.running[i];
    valid_queue(snapshot, pod.queue) && snapshot.nodes.contains(pod.node)
}

/// `indices` in canonical order: by `name`, then by index. An unstable sort is exact here,
/// since every comparison ends on the unique index.
pub(super) fn by_name<'s, I: Copy + Ord>(
    mut indices: Vec<I>,
    name: impl Fn(I) -> &'s str,
) -> Vec<I> {
    indices.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
    indices
}

/// The running pods that count, in canonical (UID) order.
pub(super) fn running_in_uid_order(snapshot: &Snapshot) -> Vec<usize> {
    by_name(
        (0..snapshot.running.len())
            .filter(|&i| valid_running(snapshot, i))
            .collect(),
        |i| &snapshot.running[i].uid,
    )
}
