//! What a hold has cost so far, carried from cycle to cycle. A hold is charged for the capacity
//! it keeps idle and for what of it is lent, both counted against its idle budget, and apart
//! from that for the idle capacity no waiting workload could have used. Each cycle records the
//! GPU-seconds counted up to its own time and the GPU-equivalents standing idle or lent when it
//! ended; the next cycle adds those equivalents for the time between the two. One struct carries
//! the figures through every form a hold takes ([`Hold`](super::Hold),
//! [`PreviousHold`](crate::snapshot::PreviousHold), [`KeptHold`](super::KeptHold) and the
//! stored status), so a new figure is added in one place.

use crate::units::non_negative;

/// A hold's cost: GPU-seconds up to when it was taken, and GPU-equivalents standing then.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HoldCost {
    /// GPU-seconds counted against the hold's idle budget: its capacity standing idle (held,
    /// and used by nobody) or lent.
    pub idle_gpu_s: f64,
    /// GPU-equivalents of the held capacity that nothing used.
    pub idle_gpu_equivalents: f64,
    /// GPU-equivalents of the held capacity lent: to work of a queue further below its
    /// time-aware share than the hold's, and, with `holdBackfill`, to backfill. Lent capacity
    /// is not idle, but the held workload waits for it all the same, so it counts against the
    /// idle budget: a drain that others' work keeps from ending is ended on the same terms as
    /// an idle one.
    pub lent_gpu_equivalents: f64,
    /// Of `idle_gpu_s`, the GPU-seconds no waiting workload could have used. A hold whose drain
    /// cannot be ended is given up only once the rest makes up its budget.
    pub unwanted_idle_gpu_s: f64,
    /// Of `idle_gpu_equivalents`, those no waiting workload could use: all of them where none
    /// fits what the held nodes have free, else none.
    pub unwanted_idle_gpu_equivalents: f64,
}

impl HoldCost {
    /// GPU-seconds counted against the idle budget `elapsed_s` after these figures were taken:
    /// those counted by then, plus what stood idle or lent then, for the time since.
    pub fn idle_gpu_s_after(&self, elapsed_s: f64) -> f64 {
        non_negative(self.idle_gpu_s)
            + (non_negative(self.idle_gpu_equivalents) + non_negative(self.lent_gpu_equivalents))
                * non_negative(elapsed_s)
    }

    /// Of [`idle_gpu_s_after`](Self::idle_gpu_s_after), the GPU-seconds no waiting workload
    /// could have used.
    pub fn unwanted_idle_gpu_s_after(&self, elapsed_s: f64) -> f64 {
        non_negative(self.unwanted_idle_gpu_s)
            + non_negative(self.unwanted_idle_gpu_equivalents) * non_negative(elapsed_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_lent_capacity_accrue_for_the_time_since() {
        let cost = HoldCost {
            idle_gpu_s: 100.0,
            idle_gpu_equivalents: 2.0,
            lent_gpu_equivalents: 1.0,
            unwanted_idle_gpu_s: 40.0,
            unwanted_idle_gpu_equivalents: 0.5,
        };
        assert_eq!(cost.idle_gpu_s_after(10.0), 130.0);
        assert_eq!(cost.unwanted_idle_gpu_s_after(10.0), 45.0);
        assert_eq!(cost.idle_gpu_s_after(0.0), 100.0);
    }

    #[test]
    fn negative_figures_and_a_clock_gone_back_add_nothing() {
        let cost = HoldCost {
            idle_gpu_s: -5.0,
            idle_gpu_equivalents: -1.0,
            lent_gpu_equivalents: 2.0,
            unwanted_idle_gpu_s: -1.0,
            unwanted_idle_gpu_equivalents: -3.0,
        };
        assert_eq!(cost.idle_gpu_s_after(10.0), 20.0);
        assert_eq!(cost.idle_gpu_s_after(-10.0), 0.0);
        assert_eq!(cost.unwanted_idle_gpu_s_after(10.0), 0.0);
    }
}
