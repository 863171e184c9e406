//! `gpufair-sim sweep`: gpufair over a grid of `releaseScore` weights, to show how the wait of
//! key tasks (high urgency or realtime) trades against fairness, so an admin can pick weights.

use std::fmt::Write as _;

use gpufair_core::params::ReleaseScoreParams;
use serde::Serialize;

use crate::engine::{EngineError, simulate};
use crate::report::format::{opt_duration, percent, table};
use crate::scenario::{PolicyName, Scenario};

/// The weights to try, part by part; every combination is run.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepGrid {
    pub urgency: Vec<f64>,
    pub user_tier: Vec<f64>,
    pub deadline: Vec<f64>,
    pub waited: Vec<f64>,
}

impl Default for SweepGrid {
    fn default() -> Self {
        Self {
            urgency: vec![0.0, 2.0, 8.0],
            user_tier: vec![0.0, 1.0],
            deadline: vec![0.0, 4.0, 16.0],
            waited: vec![0.0, 1.0, 4.0],
        }
    }
}

impl SweepGrid {
    fn points(&self, base: &ReleaseScoreParams) -> Vec<ReleaseScoreParams> {
        let mut points = Vec::new();
        for &urgency in &self.urgency {
            for &user_tier in &self.user_tier {
                for &deadline in &self.deadline {
                    for &waited in &self.waited {
                        points.push(ReleaseScoreParams {
                            urgency,
                            user_tier,
                            deadline,
                            waited,
                            ..base.clone()
                        });
                    }
                }
            }
        }
        points
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepPoint {
    pub urgency: f64,
    pub user_tier: f64,
    pub deadline: f64,
    pub waited: f64,
    pub key_wait_mean_s: Option<f64>,
    pub key_wait_p99_s: Option<f64>,
    pub other_wait_mean_s: Option<f64>,
    pub fairness_deviation: f64,
    pub deadline_hit_rate: Option<f64>,
    pub realtime_within_objective: Option<f64>,
    /// No other point has both a lower key-task mean wait and a lower fairness deviation.
    pub efficient: bool,
}

/// Runs `policy` once per grid point.
pub fn sweep(
    scenario: &Scenario,
    policy: PolicyName,
    grid: &SweepGrid,
) -> Result<Vec<SweepPoint>, EngineError> {
    let mut out = Vec::new();
    for params in grid.points(&scenario.release_score) {
        let mut variant = scenario.clone();
        variant.release_score = params.clone();
        let run = simulate(&variant, policy, &mut |_| {})?;
        let classes = run.report.classes.as_ref();
        out.push(SweepPoint {
            urgency: params.urgency,
            user_tier: params.user_tier,
            deadline: params.deadline,
            waited: params.waited,
            key_wait_mean_s: classes.and_then(|c| c.key_tasks.wait_mean_s),
            key_wait_p99_s: classes.and_then(|c| c.key_tasks.wait_p99_s),
            other_wait_mean_s: classes.and_then(|c| c.other_tasks.wait_mean_s),
            fairness_deviation: run.report.fairness_deviation,
            deadline_hit_rate: classes.and_then(|c| c.deadline_hit_rate),
            realtime_within_objective: classes
                .and_then(|c| c.by_tier.get("realtime"))
                .and_then(|w| w.within_objective),
            efficient: false,
        });
    }
    mark_efficient(&mut out);
    Ok(out)
}

fn mark_efficient(points: &mut [SweepPoint]) {
    let key = |p: &SweepPoint| p.key_wait_mean_s.unwrap_or(f64::INFINITY);
    for i in 0..points.len() {
        let dominated = points.iter().any(|other| {
            key(other) <= key(&points[i])
                && other.fairness_deviation <= points[i].fairness_deviation
                && (key(other) < key(&points[i])
                    || other.fairness_deviation < points[i].fairness_deviation)
        });
        points[i].efficient = !dominated;
    }
}

/// The sweep as a table, lowest key-task wait first.
pub fn sweep_table(points: &[SweepPoint]) -> String {
    let mut sorted: Vec<&SweepPoint> = points.iter().collect();
    sorted.sort_by(|a, b| {
        let key = |p: &SweepPoint| p.key_wait_mean_s.unwrap_or(f64::INFINITY);
        key(a)
            .total_cmp(&key(b))
            .then(a.fairness_deviation.total_cmp(&b.fairness_deviation))
    });
    let header: Vec<String> = [
        "urgency",
        "userTier",
        "deadline",
        "waited",
        "key wait mean",
        "key wait p99",
        "other wait mean",
        "fairness dev.",
        "deadlines met",
        "realtime ≤5m",
        "trade-off",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .map(|p| {
            vec![
                format!("{}", p.urgency),
                format!("{}", p.user_tier),
                format!("{}", p.deadline),
                format!("{}", p.waited),
                opt_duration(p.key_wait_mean_s),
                opt_duration(p.key_wait_p99_s),
                opt_duration(p.other_wait_mean_s),
                percent(p.fairness_deviation),
                p.deadline_hit_rate.map_or_else(|| "-".into(), percent),
                p.realtime_within_objective
                    .map_or_else(|| "-".into(), percent),
                if p.efficient { "efficient" } else { "" }.to_string(),
            ]
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "releaseScore sweep: {} points; \"efficient\": no other point has both a shorter key-task \
         wait and a lower fairness deviation\n",
        points.len()
    );
    out.push_str(&table(&header, &rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(key: f64, fd: f64) -> SweepPoint {
        SweepPoint {
            urgency: 0.0,
            user_tier: 0.0,
            deadline: 0.0,
            waited: 0.0,
            key_wait_mean_s: Some(key),
            key_wait_p99_s: None,
            other_wait_mean_s: None,
            fairness_deviation: fd,
            deadline_hit_rate: None,
            realtime_within_objective: None,
            efficient: false,
        }
    }

    #[test]
    fn only_undominated_points_are_efficient() {
        let mut points = vec![point(10.0, 0.2), point(20.0, 0.1), point(30.0, 0.3)];
        mark_efficient(&mut points);
        let efficient: Vec<bool> = points.iter().map(|p| p.efficient).collect();
        assert_eq!(efficient, vec![true, true, false]);
    }

    #[test]
    fn the_grid_is_every_combination() {
        let grid = SweepGrid {
            urgency: vec![0.0, 1.0],
            user_tier: vec![1.0],
            deadline: vec![0.0, 2.0, 4.0],
            waited: vec![1.0],
        };
        let points = grid.points(&ReleaseScoreParams::default());
        assert_eq!(points.len(), 6);
        assert_eq!(points[5].urgency, 1.0);
        assert_eq!(points[5].deadline, 4.0);
        assert_eq!(points[5].deadline_scale_s, 24.0 * 3600.0);
    }
}
