//! Fairness over cumulative received (A) and entitled (E) GPU-seconds, per fairshare.md §7.

/// Queues whose entitlement is at least this fraction of the total count as active.
pub const ACTIVE_EPSILON: f64 = 0.01;

/// The queues that count: those entitled to at least `ACTIVE_EPSILON` of the total.
pub(crate) fn active(entitled: &[f64]) -> Vec<usize> {
    let total: f64 = entitled.iter().sum();
    (0..entitled.len())
        .filter(|&i| total > 0.0 && entitled[i] >= ACTIVE_EPSILON * total && entitled[i] > 0.0)
        .collect()
}

/// M1: mean over active queues of |A − E| / E (0 when no queue is active).
pub fn fairness_deviation(received: &[f64], entitled: &[f64]) -> f64 {
    let queues = active(entitled);
    if queues.is_empty() {
        return 0.0;
    }
    queues
        .iter()
        .map(|&i| (received[i] - entitled[i]).abs() / entitled[i])
        .sum::<f64>()
        / queues.len() as f64
}

/// ½·Σ |A_i/ΣA − E_i/ΣE| over all queues, in [0, 1].
pub fn total_variation(received: &[f64], entitled: &[f64]) -> f64 {
    let a: f64 = received.iter().sum();
    let e: f64 = entitled.iter().sum();
    if a <= 0.0 || e <= 0.0 {
        return 0.0;
    }
    0.5 * received
        .iter()
        .zip(entitled)
        .map(|(ai, ei)| (ai / a - ei / e).abs())
        .sum::<f64>()
}

/// M2: Jain's index over x_i = A_i / E_i of the active queues (1 when none is active).
pub fn jain_index(received: &[f64], entitled: &[f64]) -> f64 {
    let x: Vec<f64> = active(entitled)
        .iter()
        .map(|&i| received[i] / entitled[i])
        .collect();
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || squares <= 0.0 {
        1.0
    } else {
        sum * sum / (x.len() as f64 * squares)
    }
}

/// M1 over every 24-bucket window sliding by one bucket (the whole run if it is shorter).
///
/// Each window is summed afresh rather than by adding the bucket that enters and subtracting
/// the one that leaves: subtraction leaves rounding residue, and in a window where nothing ran
/// and nobody waited that residue made every queue look entitled to a few nano-GPU-seconds and
/// given none, scoring the idle window 100%. Summed afresh, an empty window sums to exactly 0
/// and counts as fair.
pub fn windowed_deviation(received: &[Vec<f64>], entitled: &[Vec<f64>], window: usize) -> Vec<f64> {
    let buckets = received.len();
    if buckets == 0 {
        return Vec::new();
    }
    let queues = received[0].len();
    let window = window.min(buckets).max(1);
    (window..=buckets)
        .map(|end| {
            let mut a = vec![0.0; queues];
            let mut e = vec![0.0; queues];
            for b in end - window..end {
                for q in 0..queues {
                    a[q] += received[b][q];
                    e[q] += entitled[b][q];
                }
            }
            fairness_deviation(&a, &e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_share_is_perfectly_fair() {
        let a = [10.0, 20.0, 0.0];
        assert_eq!(fairness_deviation(&a, &a), 0.0);
        assert_eq!(total_variation(&a, &a), 0.0);
        assert!((jain_index(&a, &a) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn deviation_and_jain_for_a_starved_queue() {
        let received = [30.0, 0.0];
        let entitled = [15.0, 15.0];
        assert!((fairness_deviation(&received, &entitled) - 1.0).abs() < 1e-12);
        assert!((jain_index(&received, &entitled) - 0.5).abs() < 1e-12);
        assert!((total_variation(&received, &entitled) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn tiny_entitlements_are_not_active() {
        let received = [50.0, 5.0];
        let entitled = [100.0, 0.5];
        assert!((fairness_deviation(&received, &entitled) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn windows_slide_by_one_bucket() {
        let received = vec![vec![1.0], vec![2.0], vec![1.0]];
        let entitled = vec![vec![1.0], vec![1.0], vec![1.0]];
        let windows = windowed_deviation(&received, &entitled, 2);
        assert_eq!(windows.len(), 2);
        assert!((windows[0] - 0.5).abs() < 1e-12);
        assert!((windows[1] - 0.5).abs() < 1e-12);
        assert_eq!(windowed_deviation(&received, &entitled, 24).len(), 1);
    }

    #[test]
    fn a_window_in_which_nothing_ran_or_waited_is_fair() {
        // Values whose running sums do not cancel exactly in floating point.
        let busy = |x: f64| vec![0.1 * x, 0.7 * x, 0.3 * x];
        let mut received: Vec<Vec<f64>> = (1..=7).map(|i| busy(f64::from(i) * 1.1)).collect();
        let mut entitled: Vec<Vec<f64>> = (1..=7).map(|i| busy(f64::from(i) * 0.9)).collect();
        received.extend(vec![vec![0.0; 3]; 3]);
        entitled.extend(vec![vec![0.0; 3]; 3]);
        let windows = windowed_deviation(&received, &entitled, 3);
        assert_eq!(windows.len(), 8);
        assert_eq!(windows.last().copied(), Some(0.0), "{windows:?}");
        assert!(windows[0] > 0.0);
    }
}
