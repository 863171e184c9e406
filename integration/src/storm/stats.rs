//! Summary statistics of a list of measurements.

/// Count, mean, median, 95th percentile and maximum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

impl Stats {
    /// `None` for no values. Percentiles are nearest-rank.
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank =
            |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Some(Stats {
            count: sorted.len(),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: rank(0.5),
            p95: rank(0.95),
            max: sorted[sorted.len() - 1],
        })
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mean {:.2}  p50 {:.2}  p95 {:.2}  max {:.2}",
            self.mean, self.p50, self.p95, self.max
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        let stats = Stats::of(&values).unwrap();
        assert_eq!(stats.count, 20);
        assert_eq!(stats.mean, 10.5);
        assert_eq!(stats.p50, 10.0);
        assert_eq!(stats.p95, 19.0);
        assert_eq!(stats.max, 20.0);
        assert_eq!(Stats::of(&[]), None);
        assert_eq!(Stats::of(&[3.0]).unwrap().p95, 3.0);
    }
}
