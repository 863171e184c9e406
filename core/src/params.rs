//! The policy's tunables as plain numbers (seconds, ratios). The config file's text form and its
//! validation live in `gpufair-api`; by the time values reach here they are known to be sane.

/// The shortest ledger bucket accepted anywhere (config, stored ledgers, scenarios): the ledger
/// walks its buckets every cycle, so a bucket of a millisecond would make a week's window
/// hundreds of millions of buckets and stall the controller.
pub const MIN_BUCKET_S: f64 = 60.0;
/// The most buckets one window may span, for the same reason.
pub const MAX_WINDOW_BUCKETS: f64 = 100_000.0;

/// What a queue is charged for in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChargeBasis {
    /// GPU-equivalents allocated to its pods, busy or not (the default, as KAI does).
    #[default]
    Allocated,
    /// Measured utilization, but never less than `utilization_floor` of the allocation, so a
    /// team that holds GPUs idle still pays for keeping others off them.
    Utilized,
}

/// How the effective weight's deficit δ is normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeficitNormalisation {
    /// `(E − A) / max(E, A)` over the queue's own decayed entitled (E) and charged (A)
    /// GPU-seconds: −1 for a queue that was charged and entitled to nothing, +1 for one entitled
    /// and given nothing, whatever the number of queues, the window or the cluster's size.
    #[default]
    Relative,
    /// `(E − A) / decayed capacity`: the founding document's `fairShare − actualUsage`, as Run:ai
    /// computes it. With many queues or a long window it barely moves a weight.
    Capacity,
}

/// Time-aware fair-share parameters. Defaults are the founding document's.
#[derive(Debug, Clone, PartialEq)]
pub struct FairShareParams {
    /// History kept, seconds (168h).
    pub window_s: f64,
    /// Factor old usage keeps per `decay_period_s` (0.9).
    pub decay: f64,
    /// Period of `decay`, seconds (24h).
    pub decay_period_s: f64,
    /// Correction strength K (1.0).
    pub k: f64,
    /// Floor of the effective weight as a fraction of the base weight (0.1).
    pub min_weight: f64,
    /// Ledger bucket length, seconds (1h).
    pub bucket_s: f64,
    pub charge_basis: ChargeBasis,
    /// With `ChargeBasis::Utilized`, the least fraction of the allocation charged (0.25).
    pub utilization_floor: f64,
    /// How δ in the effective weight is normalised.
    pub deficit: DeficitNormalisation,
    /// Catch-up period, seconds (8h): a queue owed D decayed GPU-seconds may claim `D / catch_up`
    /// GPU-equivalents above its fair share when capacity is held for a workload, so a large
    /// workload is held for once its queue has waited long enough to pay for it. 0 switches the
    /// catch-up off (holds then need the fair share alone to cover the workload).
    pub catch_up_s: f64,
    /// How long a hold may leave its capacity idle, as a time at the held workload's size,
    /// seconds (2h): a hold for an S-GPU workload ends its drain by eviction, or is given up,
    /// once its held capacity has stood idle or been lent (to a more deserving queue's work, or
    /// with `hold_backfill` to backfill) for S × this many GPU-seconds in all. 0 does so as soon
    /// as it has left anything idle.
    pub hold_idle_limit_s: f64,
    /// How far ahead of being earned a hold may begin, seconds (30m; 0: not before): a
    /// workload whose queue's time-aware share will cover it within this long, at the pace the
    /// share grows now, is held for already. Its nodes take time to drain, and beginning the
    /// drain only once the share covers the workload makes it wait out the two one after the
    /// other. Where the nodes drain sooner, the workload starts before its queue has quite
    /// earned it, ahead by at most what the share grows in this long, and pays that back
    /// through δ. Until it is earned, a hold only drains: it evicts nothing. Measured at 30m
    /// it starts the seed scenario's 60-GPU job within an hour on 28 of 30 seeds instead of 14,
    /// at a cost in fairness on some runs (BENCHMARKS.md, "Holds that begin before they are
    /// earned").
    pub hold_lead_s: f64,
    /// Whether held capacity a cycle leaves idle goes to waiting work of any tier as
    /// preemptible backfill (false). Work of the backfill tier in a queue without `minRunTime`
    /// takes it either way. On, other work too, if it keeps its queue within both its
    /// entitlement now and its time-aware share, runs until the held nodes have drained
    /// otherwise and is then evicted, its work so far lost; backfill counts against the hold's
    /// idle budget as lent capacity, so the drain ends by eviction, or the hold is given up,
    /// about as soon as without it. Off, held capacity otherwise waits for its workload, or goes
    /// to a queue standing further below its share than the holder's (BENCHMARKS.md, "Backfill
    /// into held capacity" and "Gap-filling work in held capacity").
    pub hold_backfill: bool,
    /// Time-aware sharing on (true). Off, a pool is divided as stateless fair share: base
    /// weights (K = 0), no catch-up and no capacity held (so no preemption either). The ledger
    /// still records, so switching it back on starts from real history.
    pub time_aware: bool,
}

impl Default for FairShareParams {
    fn default() -> Self {
        Self {
            window_s: 168.0 * 3600.0,
            decay: 0.9,
            decay_period_s: 24.0 * 3600.0,
            k: 1.0,
            min_weight: 0.1,
            bucket_s: 3600.0,
            charge_basis: ChargeBasis::Allocated,
            utilization_floor: 0.25,
            deficit: DeficitNormalisation::Relative,
            catch_up_s: 8.0 * 3600.0,
            hold_idle_limit_s: 2.0 * 3600.0,
            hold_lead_s: 30.0 * 60.0,
            hold_backfill: false,
            time_aware: true,
        }
    }
}

impl FairShareParams {
    /// Continuous decay rate per second: usage `t` seconds old weighs `exp(-rate·t)`, which is
    /// `decay` after one `decay_period_s`. A decay of 1 (or a zero period) means no decay.
    pub fn decay_rate_per_s(&self) -> f64 {
        if self.decay >= 1.0 || self.decay <= 0.0 || self.decay_period_s <= 0.0 {
            0.0
        } else {
            -self.decay.ln() / self.decay_period_s
        }
    }

    /// The same parameters with history switched off: classic, stateless fair share.
    pub fn stateless(&self) -> Self {
        Self {
            k: 0.0,
            catch_up_s: 0.0,
            ..self.clone()
        }
    }
}

/// Largest release-score weight accepted: far beyond any useful ratio, small enough that sums
/// stay exact.
pub const MAX_RELEASE_SCORE_WEIGHT: f64 = 1_000.0;
/// How a release-score weight is written, for error messages.
pub const RELEASE_SCORE_WEIGHT_FORMS: &str =
    "a weight in [0, 1000], e.g. 1.0 (0 switches the part off)";

/// Weights of the release score that orders workloads inside a queue after their tier. Each
/// part of the score is a number in [0, 1] times its weight; a weight of 0 switches that part
/// off. Ties fall to creation time, then UID.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseScoreParams {
    /// Weight of `urgency-level` (high 1, medium 0.5, low 0).
    pub urgency: f64,
    /// Weight of the `user-tier` annotation (premium 1, standard 0.5, basic 0).
    pub user_tier: f64,
    /// Weight of deadline slack: `scale / (scale + slack)`, 1 at or past the deadline, 0.5 when
    /// `deadline_scale_s` is left, 0 without a deadline.
    pub deadline: f64,
    /// Weight of time waited: `waited / (waited + scale)`, 0 on arrival, 0.5 after
    /// `wait_scale_s`.
    pub waited: f64,
    /// Slack at which the deadline part is one half, seconds (24h).
    pub deadline_scale_s: f64,
    /// Time waited at which the waited part is one half, seconds (1h).
    pub wait_scale_s: f64,
}

impl Default for ReleaseScoreParams {
    fn default() -> Self {
        Self {
            urgency: 2.0,
            user_tier: 1.0,
            deadline: 4.0,
            waited: 1.0,
            deadline_scale_s: 24.0 * 3600.0,
            wait_scale_s: 3600.0,
        }
    }
}

/// Preemption guards. Preemption is the last resort; each of these keeps it rare and safe.
#[derive(Debug, Clone, PartialEq)]
pub struct PreemptionParams {
    pub enabled: bool,
    /// A queue may trigger preemption at most once per cooldown (10 minutes).
    pub cooldown_s: f64,
    /// Cluster-wide cap on victims per rolling hour.
    pub max_victims_per_hour: u32,
    /// A queue counts as "far below fair share" when allocated / fair share is below this.
    pub fair_share_threshold: f64,
    /// Victims may only come from queues above (1 + hysteresis) × their fair share when the
    /// preemptor is not below its guarantee, and keep at least their share; for a preemptor
    /// whose queue received less than half its entitlement, a queue whose ledger shows it
    /// received its own keeps `fair_share_threshold` × it. The gap keeps two queues from trading
    /// pods back and forth.
    pub hysteresis: f64,
}

impl Default for PreemptionParams {
    fn default() -> Self {
        Self {
            enabled: true,
            cooldown_s: 600.0,
            max_victims_per_hour: 60,
            fair_share_threshold: 0.5,
            hysteresis: 0.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_rate_reproduces_decay_per_period() {
        let params = FairShareParams::default();
        let kept = (-params.decay_rate_per_s() * params.decay_period_s).exp();
        assert!((kept - 0.9).abs() < 1e-12);
        let no_decay = FairShareParams {
            decay: 1.0,
            ..params
        };
        assert_eq!(no_decay.decay_rate_per_s(), 0.0);
    }
}
