//! The report's charts: allocation curves, effective weights and wait-time CDFs (all jobs, and
//! key tasks where the scenario labels them).

use super::svg::{Chart, Series, downsample, render};
use crate::metrics::Curves;
use crate::scenario::Scenario;

const MAX_POINTS: usize = 600;

fn hours(scenario: &Scenario, bucket: usize) -> f64 {
    (scenario.warmup_s + bucket as f64 * 3600.0) / 3600.0
}

/// Each queue's share of the cluster over time under one policy.
pub fn allocation(scenario: &Scenario, policy: &str, curves: &Curves) -> String {
    let series: Vec<Series> = scenario
        .queues
        .iter()
        .enumerate()
        .map(|(q, spec)| {
            let points: Vec<(f64, f64)> = curves
                .share
                .iter()
                .enumerate()
                .map(|(b, row)| (hours(scenario, b), row[q] * 100.0))
                .collect();
            Series {
                name: spec.name.clone(),
                points: downsample(&points, MAX_POINTS),
            }
        })
        .collect();
    let title = format!("{policy}: each queue's share of the cluster (hourly)");
    render(
        &Chart {
            title: &title,
            x_label: "hours",
            y_label: "% of GPUs",
            log_x: false,
            step: true,
        },
        &series,
    )
}

/// Effective weights per queue over time, for policies that have them.
pub fn weights(scenario: &Scenario, policy: &str, curves: &Curves) -> Option<String> {
    curves.weights.iter().any(Option::is_some).then(|| {
        let series: Vec<Series> = scenario
            .queues
            .iter()
            .enumerate()
            .map(|(q, spec)| {
                let points: Vec<(f64, f64)> = curves
                    .weights
                    .iter()
                    .enumerate()
                    .filter_map(|(b, w)| w.as_ref().map(|w| (hours(scenario, b), w[q])))
                    .collect();
                Series {
                    name: spec.name.clone(),
                    points: downsample(&points, MAX_POINTS),
                }
            })
            .collect();
        let title = format!("{policy}: effective weight per queue");
        render(
            &Chart {
                title: &title,
                x_label: "hours",
                y_label: "weight",
                log_x: false,
                step: true,
            },
            &series,
        )
    })
}

/// A CDF of job waits, one line per policy (`runs` gives each policy's sorted waits), on a log
/// time axis (waits under 1s count as 1s).
pub fn wait_cdf(title: &str, runs: &[(&str, &[f64])]) -> String {
    let series: Vec<Series> = runs
        .iter()
        .map(|(name, waits)| {
            let n = waits.len() as f64;
            let step = (waits.len() / MAX_POINTS).max(1);
            let mut points: Vec<(f64, f64)> = waits
                .iter()
                .enumerate()
                .filter(|(i, _)| i % step == 0 || *i + 1 == waits.len())
                .map(|(i, w)| (w.max(1.0), (i + 1) as f64 / n * 100.0))
                .collect();
            points.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
            Series {
                name: (*name).to_string(),
                points,
            }
        })
        .collect();
    render(
        &Chart {
            title,
            x_label: "wait (log scale)",
            y_label: "% of jobs",
            log_x: true,
            step: true,
        },
        &series,
    )
}
