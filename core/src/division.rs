//! Fair division of one pool's capacity: guarantees first, the rest water-filled by weight.

/// One queue's claim on a pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claim {
    /// Running plus pending GPU-equivalents.
    pub demand: f64,
    pub guaranteed: f64,
    pub limit: Option<f64>,
    pub weight: f64,
}

fn nonneg(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

impl Claim {
    /// What the queue can use at most: its demand, capped by its limit.
    pub fn cap(&self) -> f64 {
        let demand = nonneg(self.demand);
        match self.limit {
            Some(limit) => demand.min(nonneg(limit)),
            None => demand,
        }
    }
}

/// Divides `capacity` among `claims`; returns each claim's share, in order.
///
/// 1. Each queue gets `min(guaranteed, cap)`; if those exceed capacity they are scaled down
///    pro rata (guarantees that do not fit are an admin error, but still get a defined answer).
/// 2. The remainder is water-filled: every queue that still wants more rises at a speed
///    proportional to its weight until it is satisfied or capacity runs out.
/// 3. Queues with zero weight share what is left after that, equally, so capacity is never left
///    undivided while someone has demand (the division is work-conserving).
pub fn divide(capacity: f64, claims: &[Claim]) -> Vec<f64> {
    let capacity = nonneg(capacity);
    let caps: Vec<f64> = claims.iter().map(Claim::cap).collect();
    let mut shares: Vec<f64> = claims
        .iter()
        .zip(&caps)
        .map(|(c, cap)| nonneg(c.guaranteed).min(*cap))
        .collect();
    let guaranteed: f64 = shares.iter().sum();
    if guaranteed > capacity {
        let scale = if guaranteed > 0.0 {
            capacity / guaranteed
        } else {
            0.0
        };
        shares.iter_mut().for_each(|s| *s *= scale);
        return shares;
    }
    let mut remaining = capacity - guaranteed;
    let weights: Vec<f64> = claims.iter().map(|c| nonneg(c.weight)).collect();
    remaining = water_fill(remaining, &caps, &weights, &mut shares);
    if remaining > 0.0 {
        let equal: Vec<f64> = weights
            .iter()
            .map(|w| if *w > 0.0 { 0.0 } else { 1.0 })
            .collect();
        water_fill(remaining, &caps, &equal, &mut shares);
    }
    shares
}

/// The capacity of a pool its queues' demand can use, given both per resource kind (whole GPUs,
/// each MIG profile, shared replicas), in GPU-equivalents: a kind counts only up to the demand
/// for it. Whole-GPU training cannot run on a MIG instance or a shared replica, so dividing
/// those among queues that only want whole GPUs would entitle every queue to capacity none of
/// its work can use: every queue would look owed at once, and owed for ever.
///
/// `None` when the pool's demand fits in what it can use: every queue then gets its demand
/// from the whole capacity, and a pool of one kind keeps its exact division. Otherwise the usable
/// part, to divide instead of the whole.
pub fn usable_capacity(capacity_by_kind: &[f64], demand_by_kind: &[f64]) -> Option<f64> {
    let capacity: f64 = capacity_by_kind.iter().copied().map(nonneg).sum();
    let demand: f64 = demand_by_kind.iter().copied().map(nonneg).sum();
    let usable: f64 = capacity_by_kind
        .iter()
        .zip(demand_by_kind.iter().chain(std::iter::repeat(&0.0)))
        .map(|(&c, &d)| nonneg(c).min(nonneg(d)))
        .sum();
    (demand > usable && usable < capacity).then_some(usable)
}

/// Raises `shares` toward `caps` in proportion to `weights` until `amount` is used up; returns
/// what could not be placed. Queues are visited in order of the water level at which they fill
/// (`(cap − share) / weight`), so the whole fill is one sort and one pass.
fn water_fill(amount: f64, caps: &[f64], weights: &[f64], shares: &mut [f64]) -> f64 {
    let mut wanting: Vec<(f64, usize)> = (0..caps.len())
        .filter(|&i| weights[i] > 0.0 && caps[i] > shares[i])
        .map(|i| ((caps[i] - shares[i]) / weights[i], i))
        .collect();
    wanting.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut weight_left: f64 = wanting.iter().map(|(_, i)| weights[*i]).sum();
    let mut left = amount;
    let mut level_reached = 0.0;
    for (position, &(fill_level, i)) in wanting.iter().enumerate() {
        let cost_to_fill = (fill_level - level_reached) * weight_left;
        if cost_to_fill <= left {
            left -= cost_to_fill;
            level_reached = fill_level;
            shares[i] = caps[i];
            weight_left -= weights[i];
        } else {
            let level = level_reached + left / weight_left;
            for &(_, j) in &wanting[position..] {
                shares[j] += level * weights[j];
            }
            return 0.0;
        }
    }
    left.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(demand: f64, guaranteed: f64, weight: f64) -> Claim {
        Claim {
            demand,
            guaranteed,
            limit: None,
            weight,
        }
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn the_founding_example() {
        // 100 GPUs; llm weight 3 guarantee 30, vision weight 2 guarantee 20; both want it all.
        let shares = divide(100.0, &[claim(1000.0, 30.0, 3.0), claim(1000.0, 20.0, 2.0)]);
        close(&shares, &[60.0, 40.0]);
    }

    #[test]
    fn satisfied_queues_give_back_to_the_others() {
        let shares = divide(
            100.0,
            &[
                claim(10.0, 0.0, 1.0),
                claim(1000.0, 0.0, 1.0),
                claim(1000.0, 0.0, 2.0),
            ],
        );
        close(&shares, &[10.0, 30.0, 60.0]);
    }

    #[test]
    fn limits_cap_and_guarantees_above_capacity_are_pro_rated() {
        let limited = Claim {
            limit: Some(5.0),
            ..claim(100.0, 0.0, 1.0)
        };
        close(
            &divide(20.0, &[limited, claim(100.0, 0.0, 1.0)]),
            &[5.0, 15.0],
        );
        close(
            &divide(10.0, &[claim(100.0, 30.0, 1.0), claim(100.0, 10.0, 1.0)]),
            &[7.5, 2.5],
        );
    }

    #[test]
    fn zero_weight_queues_take_only_leftovers() {
        close(
            &divide(10.0, &[claim(8.0, 0.0, 1.0), claim(100.0, 0.0, 0.0)]),
            &[8.0, 2.0],
        );
        close(
            &divide(10.0, &[claim(100.0, 0.0, f64::NAN), claim(100.0, 0.0, 0.0)]),
            &[5.0, 5.0],
        );
    }

    #[test]
    fn empty_and_zero_capacity() {
        assert!(divide(100.0, &[]).is_empty());
        close(&divide(0.0, &[claim(5.0, 2.0, 1.0)]), &[0.0]);
        close(&divide(f64::NAN, &[claim(5.0, 0.0, 1.0)]), &[0.0]);
    }

    #[test]
    fn a_kind_counts_only_up_to_the_demand_for_it() {
        // Six whole GPUs, one GPU of MIG instances, one of shared replicas. Whole-GPU work
        // wanting 10 and one shared replica's worth (0.25) can use 6 + 0.25 of the 8.
        let offered = [6.0, 1.0, 1.0];
        assert_eq!(usable_capacity(&offered, &[10.0, 0.0, 0.25]), Some(6.25));
        // Demand for slices beyond them counts only up to what is there.
        assert_eq!(usable_capacity(&offered, &[10.0, 3.0, 0.5]), Some(7.5));
    }

    #[test]
    fn the_whole_capacity_stands_where_the_demand_fits_or_every_kind_is_used() {
        let offered = [6.0, 1.0, 1.0];
        // Demand that fits what it can use gets all of it either way.
        assert_eq!(usable_capacity(&offered, &[4.0, 0.0, 0.5]), None);
        // Every kind wanted beyond what there is: nothing is unusable.
        assert_eq!(usable_capacity(&offered, &[9.0, 2.0, 2.0]), None);
        // One kind alone: its capacity is all usable.
        assert_eq!(usable_capacity(&[8.0], &[100.0]), None);
        // A shorter demand vector asks for nothing of the kinds it leaves out.
        assert_eq!(usable_capacity(&offered, &[10.0]), Some(6.0));
    }

    #[test]
    fn bad_amounts_count_as_nothing() {
        assert_eq!(
            usable_capacity(&[6.0, f64::NAN, -1.0], &[10.0, 5.0, 5.0]),
            None
        );
        assert_eq!(usable_capacity(&[6.0, 2.0], &[10.0, -3.0]), Some(6.0));
        assert_eq!(usable_capacity(&[6.0, 2.0], &[f64::INFINITY, 0.0]), None);
    }
}
