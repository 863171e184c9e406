//! Work a queue started while its held workload waited. A held workload waits for its nodes to
//! drain; meanwhile its queue's later, smaller work may start in capacity the hold does not
//! need, since no GPU idles while work that fits it waits. Counted against the hold, that work
//! would end it as not earned the moment it started: the hold would be made again from nothing,
//! on other nodes, its drain and idle budget lost, for work that only used what would otherwise
//! have stood idle. Such work pays through the queue's deficit δ like any other, so a kept
//! hold is judged without it: both in what its queue has earned and in what the other queues'
//! guarantees leave it, which a gang the size of its pool exceeds with any work of its queue.

use super::Cycle;
use crate::snapshot::QueueId;

impl Cycle<'_> {
    /// GPU-equivalents of queue `q`'s work that started after entry `e` was submitted, in
    /// earlier cycles or released in this one, if `e` was held last cycle (0 otherwise): a new
    /// hold counts all of its queue's work, a kept one not what its queue started while it
    /// waited.
    pub(super) fn started_while_held_waited(&self, q: QueueId, e: usize) -> f64 {
        if self.previous_hold(e).is_none() {
            return 0.0;
        }
        let snapshot = self.snapshot;
        let pool = snapshot.queues[q].pool;
        let submitted = snapshot.pending[self.entries[e].workload].created_at;
        let running: f64 = self
            .running_in_pool(pool, |pod| pod.queue == q && pod.started_at > submitted)
            .map(|(_, request)| self.size(&request))
            .sum();
        let outcome = &self.decisions.queues[q];
        running + (outcome.allocated_after - outcome.allocated).max(0.0)
    }
}
