//! KAI's usage signal: per queue, allocated GPU-seconds over a sliding window, optionally
//! weighted by a half-life, divided by the same sum of cluster capacity (fairshare.md §1.1):
//! `U' = Σ a(t)·2^(−(now−t)/h) / Σ C(t)·2^(−(now−t)/h)` over `[now − window, now]`.
//! Kept in fixed buckets (KAI's query resolution), updated incrementally.

use std::collections::VecDeque;

pub struct SlidingUsage {
    bucket_s: f64,
    window_buckets: usize,
    /// Weight of one bucket of age relative to the next younger one.
    factor: f64,
    /// `factor` to the power `window_buckets`: the weight a bucket has when it leaves.
    edge: f64,
    /// Completed buckets, oldest first; each holds one value per series (queues, then capacity).
    history: VecDeque<Vec<f64>>,
    /// Decayed sums over `history`.
    sums: Vec<f64>,
    current: Vec<f64>,
    current_end: f64,
    last: f64,
    completed: u64,
}

impl SlidingUsage {
    /// `series` usage series plus one capacity series.
    pub fn new(series: usize, window_s: f64, bucket_s: f64, half_life_s: Option<f64>) -> Self {
        let window_buckets = ((window_s / bucket_s).round() as usize).max(1);
        let factor = half_life_s.map_or(1.0, |h| 0.5_f64.powf(bucket_s / h));
        Self {
            bucket_s,
            window_buckets,
            factor,
            edge: factor.powi(window_buckets as i32),
            history: VecDeque::with_capacity(window_buckets + 1),
            sums: vec![0.0; series + 1],
            current: vec![0.0; series + 1],
            current_end: bucket_s,
            last: 0.0,
            completed: 0,
        }
    }

    /// Integrates constant rates (`usage` per series, then `capacity`) from the last call to `until`.
    pub fn add(&mut self, until: f64, usage: impl Fn(usize) -> f64, capacity: f64) {
        let series = self.current.len() - 1;
        while self.last < until {
            let step_end = until.min(self.current_end);
            let dt = step_end - self.last;
            for i in 0..series {
                self.current[i] += usage(i) * dt;
            }
            self.current[series] += capacity * dt;
            self.last = step_end;
            if self.last >= self.current_end {
                self.complete_bucket();
            }
        }
    }

    fn complete_bucket(&mut self) {
        let done = std::mem::replace(&mut self.current, vec![0.0; self.sums.len()]);
        for (sum, value) in self.sums.iter_mut().zip(&done) {
            *sum = *sum * self.factor + value;
        }
        self.history.push_back(done);
        if self.history.len() > self.window_buckets
            && let Some(oldest) = self.history.pop_front()
        {
            for (sum, value) in self.sums.iter_mut().zip(&oldest) {
                *sum -= value * self.edge;
            }
        }
        self.current_end += self.bucket_s;
        self.completed += 1;
        // Re-add from scratch now and then, so subtraction errors cannot accumulate.
        if self.completed.is_multiple_of(self.window_buckets as u64) {
            self.resum();
        }
    }

    fn resum(&mut self) {
        self.sums.iter_mut().for_each(|s| *s = 0.0);
        for bucket in &self.history {
            for (sum, value) in self.sums.iter_mut().zip(bucket) {
                *sum = *sum * self.factor + value;
            }
        }
    }

    /// Capacity-normalised usage of series `i` over the completed buckets (0 without history).
    pub fn share(&self, i: usize) -> f64 {
        let capacity = self.sums[self.sums.len() - 1];
        if capacity > 0.0 {
            (self.sums[i] / capacity).max(0.0)
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_without_decay_is_plain_share() {
        let mut usage = SlidingUsage::new(2, 3600.0, 60.0, None);
        usage.add(1800.0, |i| if i == 0 { 30.0 } else { 0.0 }, 100.0);
        usage.add(3600.0, |i| if i == 0 { 0.0 } else { 50.0 }, 100.0);
        assert!((usage.share(0) - 0.15).abs() < 1e-9);
        assert!((usage.share(1) - 0.25).abs() < 1e-9);
        // An hour later the first half-hour has left the window.
        usage.add(5400.0, |_| 0.0, 100.0);
        assert!(usage.share(0).abs() < 1e-9);
        assert!((usage.share(1) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn half_life_weighs_recent_usage_more() {
        let mut usage = SlidingUsage::new(2, 7200.0, 60.0, Some(600.0));
        usage.add(3600.0, |i| if i == 0 { 10.0 } else { 0.0 }, 10.0);
        usage.add(7200.0, |i| if i == 0 { 0.0 } else { 10.0 }, 10.0);
        assert!(usage.share(1) > 0.9 && usage.share(0) < 0.1);
    }
}
