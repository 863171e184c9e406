//! Job completions, ordered by time (then job id, so runs are deterministic).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::world::JobId;

#[derive(Debug, Clone, Copy)]
struct End {
    at: f64,
    job: JobId,
    epoch: u32,
}

impl PartialEq for End {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for End {}

impl PartialOrd for End {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for End {
    // Reversed: the earliest end is the greatest, so it is popped first from a max-heap.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .total_cmp(&self.at)
            .then(other.job.cmp(&self.job))
            .then(other.epoch.cmp(&self.epoch))
    }
}

#[derive(Default)]
pub struct EndQueue {
    heap: BinaryHeap<End>,
}

impl EndQueue {
    pub fn push(&mut self, at: f64, job: JobId, epoch: u32) {
        self.heap.push(End { at, job, epoch });
    }

    pub fn next_time(&self) -> Option<f64> {
        self.heap.peek().map(|e| e.at)
    }

    /// The next end at or before `t`: (job, epoch of the run it ends).
    pub fn pop_due(&mut self, t: f64) -> Option<(JobId, u32)> {
        if self.heap.peek().is_some_and(|e| e.at <= t) {
            self.heap.pop().map(|e| (e.job, e.epoch))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_job_id() {
        let mut q = EndQueue::default();
        q.push(5.0, 2, 1);
        q.push(3.0, 9, 1);
        q.push(5.0, 1, 1);
        assert_eq!(q.next_time(), Some(3.0));
        assert_eq!(q.pop_due(4.0), Some((9, 1)));
        assert_eq!(q.pop_due(4.0), None);
        assert_eq!(q.pop_due(5.0), Some((1, 1)));
        assert_eq!(q.pop_due(5.0), Some((2, 1)));
    }
}
