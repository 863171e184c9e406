//! The effective weight, exactly the founding document's formula with a floor:
//! `max(minWeight·baseWeight, baseWeight × (1 + K × (fairShare − actualUsage)))`.

use crate::params::FairShareParams;
use crate::snapshot::LedgerShares;

/// The history-corrected weight. A base weight that is not a finite positive number yields 0
/// (the queue takes part only in leftover capacity), and non-finite shares count as 0, so no
/// input produces NaN.
pub fn effective_weight(base_weight: f64, shares: LedgerShares, params: &FairShareParams) -> f64 {
    if !(base_weight.is_finite() && base_weight > 0.0) {
        return 0.0;
    }
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    let k = finite(params.k).max(0.0);
    let deficit = finite(shares.fair_share) - finite(shares.usage_share);
    let corrected = base_weight * (1.0 + k * deficit);
    let floor = finite(params.min_weight).clamp(0.0, 1.0) * base_weight;
    let weight = corrected.max(floor);
    if weight.is_finite() { weight } else { floor }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_formula() {
        let p = FairShareParams::default();
        let shares = LedgerShares {
            fair_share: 0.6,
            usage_share: 0.1,
        };
        assert!((effective_weight(3.0, shares, &p) - 3.0 * 1.5).abs() < 1e-12);
        let over = LedgerShares {
            fair_share: 0.2,
            usage_share: 0.9,
        };
        assert!((effective_weight(2.0, over, &p) - 2.0 * 0.3).abs() < 1e-12);
    }

    #[test]
    fn floor_and_bad_input() {
        let p = FairShareParams {
            k: 10.0,
            ..FairShareParams::default()
        };
        let over = LedgerShares {
            fair_share: 0.0,
            usage_share: 1.0,
        };
        assert_eq!(effective_weight(2.0, over, &p), 0.2);
        assert_eq!(effective_weight(f64::NAN, over, &p), 0.0);
        assert_eq!(effective_weight(-1.0, over, &p), 0.0);
        let nan = LedgerShares {
            fair_share: f64::NAN,
            usage_share: 0.0,
        };
        assert_eq!(effective_weight(1.0, nan, &p), 1.0);
    }
}
