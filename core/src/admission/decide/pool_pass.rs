//! One pool's pass: its queues take turns in serving order, each turn on the queue's next
//! waiting workload; the most deserving hold comes before the first turn of a queue past its
//! guarantee, and backfill and the holds' idle accounting after the last.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Cycle;
use crate::admission::decision::Waiting;
use crate::admission::order::{QueueTurn, covered_by_guarantee, share_ratio};
use crate::index::IndexVec;
use crate::snapshot::{PoolId, QueueId};

/// What one pool's pass through its waiting workloads keeps track of.
pub(super) struct PoolPass {
    /// GPU-equivalents ordinary workloads may still use in the pool.
    pub(super) usable_total: f64,
    /// The workload capacity is held for, if any: at most one for a queue below its guarantee
    /// and one earned by the most deserving other workload, per pool and cycle.
    pub(super) hold: Option<usize>,
    /// The hold made for a queue below its guarantee, if any.
    pub(super) guarantee_hold: Option<usize>,
    /// The hold earned by any other queue, if any.
    pub(super) earned_hold: Option<usize>,
    /// A workload held last cycle whose queue starts earlier workloads first this cycle: the
    /// pool's earned hold is kept for it until its turn (see [`Cycle::kept_hold_behind`]).
    pub(super) reserved_hold: Option<usize>,
    /// Workloads held for this cycle.
    pub(super) held_for: Vec<usize>,
    /// Per queue: whether one of its workloads has failed to fit this cycle.
    pub(super) misfit_seen: IndexVec<QueueId, bool>,
    /// Workloads released ahead of their turn because the capacity held for them drained.
    pub(super) released_early: Vec<usize>,
    /// Workloads refused a hold because only nodes where what blocked their last hold (given
    /// up) still runs could take them.
    pub(super) around_blockers: Vec<usize>,
    /// Workloads refused a hold because their holds given up after the first have spent more
    /// idle time than their pool allows by now.
    pub(super) given_up_too_often: Vec<usize>,
    /// Single-pod shapes already known not to fit: anything at least as large fails too,
    /// because capacity only shrinks within a cycle.
    pub(super) failed_shapes: Vec<Vec<u32>>,
    /// Entries left waiting by the pass, with their place in `Decisions::waiting`.
    pub(super) waited: Vec<(usize, usize)>,
    /// The first of this pool's holds in `Decisions::holds`.
    pub(super) first_hold: usize,
}

impl Cycle<'_> {
    /// Serves `pool`'s queues their turns until each of its waiting workloads has had one, then
    /// backfills what the pass left idle and records what each hold leaves idle.
    pub(super) fn run_pool(&mut self, pool: PoolId) {
        let snapshot = self.snapshot;
        self.held_fit_cache.clear();
        let mut pass = PoolPass {
            usable_total: self.pool_nodes[pool]
                .iter()
                .map(|&n| self.size(&self.usable[n]))
                .sum(),
            hold: None,
            guarantee_hold: None,
            earned_hold: None,
            reserved_hold: None,
            held_for: Vec::new(),
            misfit_seen: IndexVec::from_elem(false, snapshot.queues.len()),
            released_early: Vec::new(),
            around_blockers: Vec::new(),
            given_up_too_often: Vec::new(),
            failed_shapes: Vec::new(),
            waited: Vec::new(),
            first_hold: self.decisions.holds.len(),
        };
        // Turns as their integer keys (`QueueTurn::key`), compared at every step of the heap.
        // A queue's next turn replaces its last at the top rather than being popped and pushed
        // again: keys are unique (they end on the queue's rank), so the order served is the same.
        let mut heap = BinaryHeap::new();
        // Per queue: the entry it serves next.
        let mut cursor: IndexVec<QueueId, usize> =
            self.queue_entries.iter().map(|&(start, _)| start).collect();
        for q in snapshot.queues.indices() {
            let (start, end) = self.queue_entries[q];
            if snapshot.queues[q].pool == pool && start < end {
                heap.push(Reverse(self.turn(q, start).key()));
            }
        }
        let mut guarantees_served = false;

        while let Some(&Reverse(key)) = heap.peek() {
            let (below_guarantee, rank) = QueueTurn::key_parts(key);
            let q = self.queue_order[rank];
            if !below_guarantee && !guarantees_served {
                // Every queue below its guarantee has been served. Before anyone else is, keep
                // capacity for the most deserving workload that cannot start now, so that the
                // capacity it needs is not handed out to those who merely come first in order.
                // A hold made for a queue below its guarantee does not stop this one: otherwise
                // a single cycle without it would hand the capacity drained so far to others.
                guarantees_served = true;
                if self.holds_in(pool) {
                    self.hold_most_deserving(pool, &cursor, &mut pass);
                }
            }
            let e = cursor[q];
            cursor[q] += 1;
            let reason = self.consider(pool, q, e, below_guarantee, &mut pass);
            let (start, end) = self.queue_entries[q];
            if let Some(reason) = reason {
                let entry = &self.entries[e];
                pass.waited.push((e, self.decisions.waiting.len()));
                self.decisions.waiting.push(Waiting {
                    workload: entry.workload,
                    reason,
                    score: entry.score,
                    position: e - start + 1,
                    queue_length: end - start,
                });
            }
            if cursor[q] < end {
                let next = self.turn(q, cursor[q]).key();
                if let Some(mut top) = heap.peek_mut() {
                    *top = Reverse(next);
                }
            } else {
                heap.pop();
            }
        }
        self.backfill_pool(pool, &mut pass);
        self.account_idle(&pass);
    }

    /// Queue `q`'s place in the serving order when its entry `e` is next. The
    /// ratio counts that workload, as it would stand once released, against the queue's
    /// time-aware share (fair share plus what it is owed over the catch-up period): a queue whose
    /// next workload would take it past that share waits behind every queue whose next workload
    /// keeps it within its own, however little the first queue holds now. Without this a queue
    /// holding nothing would always be served first, and a large job would always win back the
    /// capacity it just freed, whatever the history says; with it, a large workload moves up as
    /// its queue earns it by waiting. Only a workload its queue's guarantee covers is served
    /// ahead of all others, on the guarantee's account.
    pub(super) fn turn(&self, q: QueueId, e: usize) -> QueueTurn {
        let outcome = &self.decisions.queues[q];
        let guaranteed = self.views[q].guaranteed;
        let next = self.entries[e].size;
        let after = outcome.allocated_after + next;
        // Served as guaranteed only if the guarantee covers the whole workload: one larger than
        // what is left of it can never be given through it (preemption for a guarantee asks the
        // same), and served first on the guarantee's account it would win back every time the
        // capacity its own last job of that size frees, whatever its queue's history says.
        let below_guarantee = covered_by_guarantee(guaranteed, outcome.allocated_after, next);
        QueueTurn {
            below_guarantee,
            ratio: if below_guarantee {
                after / guaranteed
            } else {
                share_ratio(after, self.claim(q))
            },
            rank: self.queue_rank[q],
        }
    }
}
