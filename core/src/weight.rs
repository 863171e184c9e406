//! The effective weight, the founding document's form with a floor:
//! `max(minWeight·baseWeight, baseWeight × (1 + K × δ))`, where δ is the queue's deficit.
//!
//! The founding document reads δ as `fairShare − actualUsage`, both shares of decayed cluster
//! capacity. Measured, that barely moves a weight: a day of starvation in a week of capacity is a
//! few percent, and with n queues each share is about 1/n, so the correction shrinks as the
//! cluster gains teams. gpufair's default normalises δ by the queue's own history instead:
//! `δ = (E − A) / max(E, A)` over its decayed entitled (E) and charged (A) GPU-seconds. It is
//! +1 for a queue that was owed everything and got nothing, −1 for one that was owed nothing and
//! took capacity, and it does not depend on the number of queues, the window or the pool's size.
//! A new queue's ledger starts with no entitlement and no charge, so it starts neutral (δ = 0):
//! it neither dilutes anyone's history nor swings on its first minutes. The capacity form stays
//! selectable (`deficit: capacity`) for Run:ai-compatible behaviour.

use crate::params::{DeficitNormalisation, FairShareParams};
use crate::snapshot::LedgerShares;
use crate::units::non_negative;

/// δ for `shares`, per `normalisation`; 0 for non-finite input or an empty history.
///
/// `history_floor_gpu_s` is the least denominator of the relative form, in GPU-seconds: a
/// queue's deficit moves its weight fully only once it is as large as that. The cycle passes
/// the queue's steady share times the catch-up period, so a queue that has waited minutes is not
/// treated like one that has waited hours.
pub fn deficit(
    shares: LedgerShares,
    normalisation: DeficitNormalisation,
    history_floor_gpu_s: f64,
) -> f64 {
    let entitled = non_negative(shares.fair_share);
    let charged = non_negative(shares.usage_share);
    match normalisation {
        DeficitNormalisation::Capacity => entitled - charged,
        DeficitNormalisation::Relative => {
            let capacity = non_negative(shares.decayed_capacity);
            let floor = non_negative(history_floor_gpu_s);
            // Both shares have the same denominator (decayed capacity), so their ratio is the
            // ratio of GPU-seconds.
            let larger = (entitled * capacity).max(charged * capacity).max(floor);
            if larger > 1e-12 && capacity > 0.0 {
                ((entitled - charged) * capacity / larger).clamp(-1.0, 1.0)
            } else {
                0.0
            }
        }
    }
}

/// The history-corrected weight. A base weight that is not a finite positive number yields 0
/// (the queue takes part only in leftover capacity), and non-finite shares count as 0, so no
/// input produces NaN.
pub fn effective_weight(
    base_weight: f64,
    shares: LedgerShares,
    history_floor_gpu_s: f64,
    params: &FairShareParams,
) -> f64 {
    if !(base_weight.is_finite() && base_weight > 0.0) {
        return 0.0;
    }
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    let k = finite(params.k).max(0.0);
    let delta = deficit(shares, params.deficit, history_floor_gpu_s);
    let corrected = base_weight * (1.0 + k * delta);
    let floor = finite(params.min_weight).clamp(0.0, 1.0) * base_weight;
    let weight = corrected.max(floor);
    if weight.is_finite() { weight } else { floor }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(fair_share: f64, usage_share: f64) -> LedgerShares {
        LedgerShares::of_unit_capacity(fair_share, usage_share)
    }

    fn capacity_form() -> FairShareParams {
        FairShareParams {
            deficit: DeficitNormalisation::Capacity,
            ..FairShareParams::default()
        }
    }

    #[test]
    fn capacity_form_matches_the_founding_formula() {
        let p = capacity_form();
        assert!((effective_weight(3.0, shares(0.6, 0.1), 0.0, &p) - 3.0 * 1.5).abs() < 1e-12);
        assert!((effective_weight(2.0, shares(0.2, 0.9), 0.0, &p) - 2.0 * 0.3).abs() < 1e-12);
    }

    #[test]
    fn relative_form_is_scale_free_and_bounded() {
        let p = FairShareParams::default();
        // Owed twice what it got: δ = 1/2, whatever the absolute size of the shares.
        for scale in [1e-4, 0.01, 0.5] {
            let w = effective_weight(1.0, shares(2.0 * scale, scale), 0.0, &p);
            assert!((w - 1.5).abs() < 1e-9, "scale {scale}: {w}");
        }
        let relative = |s| deficit(s, DeficitNormalisation::Relative, 0.0);
        assert_eq!(relative(shares(0.3, 0.0)), 1.0);
        assert_eq!(relative(shares(0.0, 0.3)), -1.0);
        assert_eq!(relative(shares(0.0, 0.0)), 0.0);
        assert_eq!(relative(LedgerShares::NEUTRAL), 0.0);
    }

    #[test]
    fn a_short_history_moves_the_weight_only_part_way() {
        // Owed 0.1 of capacity-seconds with nothing received; the floor is 0.4: δ = 1/4.
        let d = deficit(shares(0.1, 0.0), DeficitNormalisation::Relative, 0.4);
        assert!((d - 0.25).abs() < 1e-12);
        // Once the history exceeds the floor, the floor no longer matters.
        let d = deficit(shares(0.8, 0.0), DeficitNormalisation::Relative, 0.4);
        assert_eq!(d, 1.0);
    }

    #[test]
    fn floor_and_bad_input() {
        let p = FairShareParams {
            k: 10.0,
            ..FairShareParams::default()
        };
        assert_eq!(effective_weight(2.0, shares(0.0, 1.0), 0.0, &p), 0.2);
        assert_eq!(effective_weight(f64::NAN, shares(0.0, 1.0), 0.0, &p), 0.0);
        assert_eq!(effective_weight(-1.0, shares(0.0, 1.0), 0.0, &p), 0.0);
        assert_eq!(effective_weight(1.0, shares(f64::NAN, 0.0), 0.0, &p), 1.0);
        assert_eq!(
            effective_weight(1.0, shares(f64::INFINITY, 0.0), 0.0, &capacity_form()),
            1.0
        );
    }
}
