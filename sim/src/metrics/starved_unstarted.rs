//! Jobs left waiting that a starvation-free policy owes a start: never started, in a queue that
//! ended the horizon starved (it received less than half its entitlement, the shortfall at which
//! core counts a queue starved, `REACHABLE_FRACTION`), and waiting longer than its pool's
//! earning bound, the time a queue given nothing takes to be owed enough to claim its whole
//! pool (core's `earning_bound_s`). A job that fits its pool starts within that bound plus its
//! drain under the ledger (README, "Starvation freedom"), so any job counted here waited past
//! where the ledger would have held for it. A queue short of its entitlement by less is not
//! counted: on an overloaded pool every queue with a backlog is a little short, and its oldest
//! jobs wait on behind its own earlier ones, which is the backlog, not starvation.

use gpufair_core::admission::REACHABLE_FRACTION;

/// A never-started job: its queue and its submission time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unstarted {
    pub queue: usize,
    pub submit_s: f64,
}

/// How many of `never_started` had waited past their queue's `bound_s` by `horizon_s`, in a
/// queue `starved` says received less than half its entitlement.
pub fn starved_unstarted_past_bound(
    never_started: impl IntoIterator<Item = Unstarted>,
    starved: &[bool],
    bound_s: &[f64],
    horizon_s: f64,
) -> usize {
    never_started
        .into_iter()
        .filter(|job| starved[job.queue] && horizon_s - job.submit_s > bound_s[job.queue])
        .count()
}

/// Whether a queue that received `received` of an entitlement of `entitled` is starved: short
/// of it by at least `REACHABLE_FRACTION` of it.
pub fn starved(received: f64, entitled: f64) -> bool {
    entitled > 0.0 && entitled - received >= REACHABLE_FRACTION * entitled
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: f64 = 3600.0;

    fn job(queue: usize, submit_h: f64) -> Unstarted {
        Unstarted {
            queue,
            submit_s: submit_h * HOUR,
        }
    }

    #[test]
    fn counts_only_jobs_of_starved_queues_that_waited_past_the_bound() {
        let jobs = [job(0, 10.0), job(0, 90.0), job(1, 10.0)];
        let counted = starved_unstarted_past_bound(
            jobs,
            &[true, false],
            &[69.0 * HOUR, 69.0 * HOUR],
            100.0 * HOUR,
        );
        // Queue 0's job of hour 10 waited 90h; its job of hour 90 only 10h; queue 1 is not
        // starved.
        assert_eq!(counted, 1);
    }

    #[test]
    fn each_queue_is_judged_by_its_own_pools_bound() {
        let jobs = [job(0, 50.0), job(1, 50.0)];
        let counted = starved_unstarted_past_bound(
            jobs,
            &[true, true],
            &[24.0 * HOUR, 69.0 * HOUR],
            100.0 * HOUR,
        );
        assert_eq!(counted, 1);
    }

    #[test]
    fn a_queue_is_starved_from_half_its_entitlement_short() {
        assert!(starved(4.0, 10.0));
        assert!(starved(5.0, 10.0));
        assert!(!starved(5.5, 10.0));
        assert!(!starved(0.0, 0.0));
    }
}
