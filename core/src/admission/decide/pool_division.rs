//! The division of each pool among its queues: fair shares, the room each queue has beside
//! the others' guarantees, and the time-aware share each queue has earned toward a hold.

use super::canonical::valid_queue;
use super::capacity::NodeCapacity;
use super::setup::Setup;
use crate::admission::decision::QueueOutcome;
use crate::division::{Claim, divide};
use crate::index::IndexVec;
use crate::params::FairShareParams;
use crate::snapshot::{PoolId, QueueId};
use crate::weight::effective_weight;

/// The fraction of the most a queue can ever be owed at which it may claim its whole pool. A
/// queue's claim is what it is owed spread over the catch-up period; with a share that is a
/// fraction of one GPU, the most it can be owed (its share over the decayed window) spread over
/// that period may never reach the size of its largest job, which would then never be held
/// for. The claim's period is shortened so that half of that most reaches the whole pool: any
/// job that fits its pool is earned in bounded time (half the decayed window's accrual), and
/// half leaves room for the ledger's bucketing and for entitlement that dips while others'
/// demand does.
pub const REACHABLE_FRACTION: f64 = 0.5;

/// Seconds of entitlement at a steady rate that the ledger remembers: the window weighed by
/// decay, `∫₀^window e^(−rate·t) dt`. A queue entitled to `s` GPU-equivalents and given nothing
/// is owed at most `s` times this.
fn decayed_window_s(params: &FairShareParams) -> f64 {
    let window = if params.window_s.is_finite() {
        params.window_s.max(0.0)
    } else {
        0.0
    };
    let rate = params.decay_rate_per_s();
    if rate > 0.0 {
        (1.0 - (-rate * window).exp()) / rate
    } else {
        window
    }
}

/// Seconds a queue entitled to a steady share and given nothing takes to be owed the
/// [`REACHABLE_FRACTION`] of the most it can ever be owed, at which its claim reaches its whole
/// pool: `−ln(1 − f·(1 − e^(−rate·window)))/rate`, or `f·window` without decay. Independent of
/// the share, so it bounds how long earning a hold for any job that fits the pool takes.
pub fn earning_bound_s(params: &FairShareParams) -> f64 {
    let rate = params.decay_rate_per_s();
    if rate > 0.0 {
        -(1.0 - REACHABLE_FRACTION * rate * decayed_window_s(params)).ln() / rate
    } else {
        REACHABLE_FRACTION * decayed_window_s(params)
    }
}

/// The period a queue's owed GPU-seconds are spread over in its claim: the pool's catch-up
/// period, shortened for a queue whose steady share could never be owed enough to claim the
/// whole pool (see [`REACHABLE_FRACTION`]).
fn claim_period_s(catch_up: f64, steady: f64, capacity: f64, params: &FairShareParams) -> f64 {
    if catch_up <= 0.0 || steady <= 0.0 || capacity <= steady {
        return catch_up;
    }
    let reachable = REACHABLE_FRACTION * steady * decayed_window_s(params);
    catch_up.min(reachable / (capacity - steady))
}

/// Each queue's demand, in GPU-equivalents: what it runs, what waits, and of what waits, the
/// workloads no larger than its guarantee.
pub(super) struct Demand<'a> {
    pub(super) allocated: &'a IndexVec<QueueId, f64>,
    pub(super) pending: &'a IndexVec<QueueId, f64>,
    pub(super) pending_within_guarantee: &'a IndexVec<QueueId, f64>,
}

/// The part of a queue's guarantee its work can take back: what it runs plus what waits that
/// could start through the guarantee, up to the guarantee. A queue below its guarantee
/// preempts only for a workload that fits under it, so a waiting workload larger than the
/// guarantee never claims it; protecting the guarantee from others' holds for such work would
/// keep capacity from them for nothing, and leave a job that fits its pool, but not beside that
/// hollow guarantee, never held for.
fn claimable_guarantee(guaranteed: f64, allocated: f64, pending_within: f64) -> f64 {
    guaranteed.min(allocated + pending_within).max(0.0)
}

/// The per-pool division: each queue's outcome, the most it may hold beside the others'
/// guarantees, and its steady share.
pub(super) struct PoolDivision {
    pub(super) outcomes: IndexVec<QueueId, QueueOutcome>,
    pub(super) headroom: IndexVec<QueueId, f64>,
    pub(super) steady: IndexVec<QueueId, f64>,
}

impl Setup<'_> {
    /// Division per pool: K = 0 entitlement, the steady share, and the history-corrected fair
    /// share.
    pub(super) fn divide_pools(
        &self,
        capacity: &NodeCapacity,
        queue_order: &[QueueId],
        demand: &Demand<'_>,
        usable: &IndexVec<PoolId, Option<f64>>,
    ) -> PoolDivision {
        let snapshot = self.snapshot;
        let (allocated, pending_total) = (demand.allocated, demand.pending);
        let queues = snapshot.queues.len();
        let pool_settings = &self.pool_settings;
        let (pool_nodes, allocatable) = (&capacity.pool_nodes, &capacity.allocatable);
        let size = |v: &[u32]| self.size(v);
        let guaranteed_of = |q: QueueId| self.guaranteed_of(q);
        let weight_of = |q: QueueId| self.weight_of(q);
        let shares_of = |q: QueueId| self.shares_of(q);
        let catch_up_of = |pool: PoolId| self.catch_up_of(pool);
        let mut outcomes: IndexVec<QueueId, QueueOutcome> = snapshot
            .queues
            .indices()
            .map(|q| QueueOutcome {
                queue: q,
                allocated: allocated[q],
                pending: pending_total[q],
                allocated_after: allocated[q],
                ..QueueOutcome::default()
            })
            .collect();
        let mut headroom = IndexVec::from_elem(0.0, queues);
        // The share a queue gets whatever the others' demand does from minute to minute: its
        // guarantee plus its weight's part of what the guarantees leave, among the queues that
        // have demand at all (never more than its entitlement). The catch-up claim is built on
        // it rather than on the instantaneous division, so a dip in someone else's demand does
        // not earn a hold, and it sets how much history δ needs before it moves a weight fully.
        let mut steady = IndexVec::from_elem(0.0, queues);
        for (pool, nodes) in pool_nodes.iter_enumerated() {
            let catch_up = catch_up_of(pool);
            let capacity: f64 = nodes.iter().map(|&n| size(&allocatable[n])).sum();
            let members: Vec<QueueId> = queue_order
                .iter()
                .copied()
                .filter(|&q| valid_queue(snapshot, q) && snapshot.queues[q].pool == pool)
                .collect();
            let claim = |q: QueueId, weight: f64| {
                let state = &snapshot.queues[q];
                Claim {
                    demand: allocated[q] + pending_total[q],
                    guaranteed: state.guaranteed,
                    limit: state.limit,
                    weight,
                }
            };
            let base: Vec<Claim> = members
                .iter()
                .map(|&q| claim(q, snapshot.queues[q].weight))
                .collect();
            // Entitlement counts only capacity the pool's demand can use: see
            // `usable_capacity`.
            let entitled = divide(usable[pool].unwrap_or(capacity), &base);

            let protected: Vec<f64> = members
                .iter()
                .zip(&base)
                .map(|(&q, c)| guaranteed_of(q).min(c.cap()))
                .collect();
            let protected_total: f64 = protected.iter().sum();
            // Others' holds leave room only for the part of a guarantee its queue can claim.
            let claimable: Vec<f64> = members
                .iter()
                .zip(&protected)
                .map(|(&q, &p)| {
                    claimable_guarantee(p, allocated[q], demand.pending_within_guarantee[q])
                })
                .collect();
            let claimable_total: f64 = claimable.iter().sum();
            let wanting_weight: f64 = members
                .iter()
                .zip(&base)
                .filter(|(_, c)| c.cap() > 0.0)
                .map(|(&q, _)| weight_of(q))
                .sum();
            let left = (capacity - protected_total).max(0.0);
            for (i, &q) in members.iter().enumerate() {
                headroom[q] = (capacity - (claimable_total - claimable[i])).max(0.0);
                if base[i].cap() > 0.0 {
                    let part = if wanting_weight > 0.0 {
                        left * weight_of(q) / wanting_weight
                    } else {
                        0.0
                    };
                    // The last ledger bucket's entitlement, when there is one, is the better
                    // estimate: it has seen others' real demand over an hour.
                    let recent = shares_of(q).recent_entitled;
                    let weighted = protected[i] + part;
                    let estimate = if recent.is_finite() && recent > 0.0 {
                        recent.max(weighted)
                    } else {
                        weighted
                    };
                    steady[q] = estimate.min(entitled[i]);
                }
            }

            let effective: Vec<f64> = members
                .iter()
                .map(|&q| {
                    effective_weight(
                        snapshot.queues[q].weight,
                        shares_of(q),
                        steady[q] * catch_up,
                        &pool_settings[pool].fairshare,
                    )
                })
                .collect();
            let corrected: Vec<Claim> = members
                .iter()
                .zip(&effective)
                .map(|(&q, &w)| claim(q, w))
                .collect();
            let fair = divide(capacity, &corrected);
            for (i, &q) in members.iter().enumerate() {
                outcomes[q].demand = base[i].cap();
                outcomes[q].entitled = entitled[i];
                outcomes[q].effective_weight = effective[i];
                outcomes[q].fair_share = fair[i];
            }
        }
        PoolDivision {
            outcomes,
            headroom,
            steady,
        }
    }

    /// Per queue: its time-aware share (fair share plus what it is owed spread over its claim
    /// period), and how fast that grows now.
    pub(super) fn earned_shares(
        &self,
        division: &PoolDivision,
        pool_capacity: &IndexVec<PoolId, f64>,
        allocated: &IndexVec<QueueId, f64>,
    ) -> (IndexVec<QueueId, f64>, IndexVec<QueueId, f64>) {
        let snapshot = self.snapshot;
        let steady = &division.steady;
        // Each valid queue's claim period, once: both the share and its pace are spread over it.
        let periods: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| {
                if !self.is_valid(q) {
                    return 0.0;
                }
                let pool = snapshot.queues[q].pool;
                claim_period_s(
                    self.catch_up_of(pool),
                    steady[q],
                    pool_capacity[pool],
                    &self.pool_settings[pool].fairshare,
                )
            })
            .collect();
        let earned: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| {
                let period = periods[q];
                let owed = if self.is_valid(q) && period > 0.0 {
                    self.shares_of(q).deficit_gpu_s().max(0.0) / period
                } else {
                    0.0
                };
                steady[q] + owed
            })
            .collect();
        let earning_per_s: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| match periods[q] {
                period if period > 0.0 => (division.outcomes[q].entitled - allocated[q]) / period,
                _ => 0.0,
            })
            .collect();
        (earned, earning_per_s)
    }
}

#[cfg(test)]
mod tests {
    use super::earning_bound_s;
    use crate::params::FairShareParams;

    #[test]
    fn the_earning_bound_follows_window_and_decay() {
        // 168h window, 0.9 kept per 24h: about 69 hours.
        let bound_h = earning_bound_s(&FairShareParams::default()) / 3600.0;
        assert!((68.0..70.0).contains(&bound_h), "{bound_h}");
        // Without decay, half the window.
        let flat = FairShareParams {
            decay: 1.0,
            ..FairShareParams::default()
        };
        assert!((earning_bound_s(&flat) - 84.0 * 3600.0).abs() < 1e-6);
        // No window, no history: nothing to wait for.
        let none = FairShareParams {
            window_s: 0.0,
            ..FairShareParams::default()
        };
        assert_eq!(earning_bound_s(&none), 0.0);
    }
}
