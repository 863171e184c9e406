//! `gpufair-sim spread`: one scenario replayed under several gate-release cycle lengths, each
//! figure reported as its mean and range across them.
//!
//! A controller's cycles never run on an exact grid (events, API latency and leader changes move
//! them), so a comparison that flips when the cycle moves from 30 s to 29 s says nothing about a
//! real cluster. Holds, drains and preemptions make long replays chaotic: one decision taken a
//! cycle earlier changes every later one, and on the public traces a single run's fairness
//! deviation moves by several points with the cycle alone. The spread shows how far a figure can
//! be trusted before a difference between policies, or a target, is read from it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::engine::EngineError;
use crate::metrics::pareto::dominance;
use crate::metrics::summary::PolicyReport;
use crate::report::format::{percent, table};
use crate::runner::compare;
use crate::scenario::{PolicyName, Scenario};

/// How many cycle lengths either side of the scenario's own the default spread tries, a second
/// apart.
const DEFAULT_STEPS_EACH_SIDE: u32 = 2;

/// A figure across the runs: its mean, lowest and highest.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Range {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Range {
    /// `None` for no values.
    fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return None;
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Self { mean, min, max })
    }
}

/// One policy's figures across the runs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PolicySpread {
    pub name: String,
    pub fairness_deviation: Range,
    pub utilization: Range,
    pub gpu_hours_lost: Range,
    pub jobs_never_started: Range,
    pub gpu_hours_never_started: Range,
    pub starved_jobs_unstarted_past_bound: Range,
}

/// gpufair against one other policy, run by run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Versus {
    pub policy: String,
    /// gpufair's fairness deviation minus the other policy's (negative: gpufair is fairer).
    pub fairness_deviation_difference: Range,
    /// gpufair's fairness deviation over the other policy's.
    pub fairness_deviation_ratio: Option<Range>,
    /// In how many runs the policy dominates gpufair (lower fairness deviation, no more GPU-hours
    /// lost); `None` for gpufair's own variants, which are not rivals.
    pub dominates_gpufair_runs: Option<usize>,
}

/// The whole spread of a scenario.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Spread {
    pub scenario: String,
    pub cycles_s: Vec<f64>,
    pub policies: Vec<PolicySpread>,
    /// Empty when gpufair was not among the policies.
    pub gpufair_versus: Vec<Versus>,
}

/// The scenario's own cycle and [`DEFAULT_STEPS_EACH_SIDE`] more either side, a second apart;
/// none shorter than a second.
pub fn default_cycles(cycle_s: f64) -> Vec<f64> {
    let steps = f64::from(DEFAULT_STEPS_EACH_SIDE);
    (0..=2 * DEFAULT_STEPS_EACH_SIDE)
        .map(|i| cycle_s - steps + f64::from(i))
        .filter(|c| *c >= 1.0)
        .collect()
}

/// Replays `scenario` under `policies` once per cycle length in `cycles_s`.
pub fn spread(
    scenario: &Scenario,
    policies: &[PolicyName],
    cycles_s: &[f64],
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Spread, EngineError> {
    let mut runs = Vec::with_capacity(cycles_s.len());
    for &cycle_s in cycles_s {
        let mut variant = scenario.clone();
        variant.cycle_s = cycle_s;
        let comparison = compare(&variant, policies, progress)?;
        runs.push(comparison.runs.into_iter().map(|r| r.report).collect());
    }
    Ok(summarize(&scenario.name, cycles_s, &runs))
}

/// The spread of `runs`, one list of reports per cycle length, each in the same policy order.
pub fn summarize(scenario: &str, cycles_s: &[f64], runs: &[Vec<PolicyReport>]) -> Spread {
    let names: Vec<&str> = runs
        .first()
        .map(|reports| reports.iter().map(|r| r.name.as_str()).collect())
        .unwrap_or_default();
    let of = |name: &str| -> Vec<&PolicyReport> {
        runs.iter()
            .filter_map(|reports| reports.iter().find(|r| r.name == name))
            .collect()
    };
    let policies = names
        .iter()
        .filter_map(|name| {
            let reports = of(name);
            Some(PolicySpread {
                name: (*name).to_string(),
                fairness_deviation: Range::of(reports.iter().map(|r| r.fairness_deviation))?,
                utilization: Range::of(reports.iter().map(|r| r.utilization))?,
                gpu_hours_lost: Range::of(reports.iter().map(|r| r.gpu_hours_lost))?,
                jobs_never_started: Range::of(reports.iter().map(|r| r.jobs_never_started as f64))?,
                gpu_hours_never_started: Range::of(
                    reports.iter().map(|r| r.gpu_hours_never_started),
                )?,
                starved_jobs_unstarted_past_bound: Range::of(
                    reports
                        .iter()
                        .map(|r| r.starved_jobs_unstarted_past_bound as f64),
                )?,
            })
        })
        .collect();
    let gpufair_versus = if names.contains(&"gpufair") {
        names
            .iter()
            .filter(|name| **name != "gpufair")
            .filter_map(|name| versus(runs, name))
            .collect()
    } else {
        Vec::new()
    };
    Spread {
        scenario: scenario.to_string(),
        cycles_s: cycles_s.to_vec(),
        policies,
        gpufair_versus,
    }
}

/// gpufair against `other` over the runs that have both.
fn versus(runs: &[Vec<PolicyReport>], other: &str) -> Option<Versus> {
    let pairs: Vec<(&PolicyReport, &PolicyReport)> = runs
        .iter()
        .filter_map(|reports| {
            let gpufair = reports.iter().find(|r| r.name == "gpufair")?;
            let rival = reports.iter().find(|r| r.name == other)?;
            Some((gpufair, rival))
        })
        .collect();
    let dominated = pairs
        .iter()
        .map(|(gpufair, rival)| {
            dominance(&[*gpufair, *rival])
                .first()
                .map(|d| d.dominates_gpufair)
        })
        .collect::<Option<Vec<bool>>>()
        .map(|verdicts| verdicts.into_iter().filter(|d| *d).count());
    let ratios: Vec<f64> = pairs
        .iter()
        .filter(|(_, rival)| rival.fairness_deviation > 0.0)
        .map(|(gpufair, rival)| gpufair.fairness_deviation / rival.fairness_deviation)
        .collect();
    Some(Versus {
        policy: other.to_string(),
        fairness_deviation_difference: Range::of(
            pairs
                .iter()
                .map(|(gpufair, rival)| gpufair.fairness_deviation - rival.fairness_deviation),
        )?,
        fairness_deviation_ratio: if ratios.len() == pairs.len() {
            Range::of(ratios)
        } else {
            None
        },
        dominates_gpufair_runs: dominated,
    })
}

/// The spread as text tables.
pub fn spread_table(spread: &Spread) -> String {
    let cycles: Vec<String> = spread
        .cycles_s
        .iter()
        .map(|c| gpufair_core::duration::format_duration(*c))
        .collect();
    let mut out = format!(
        "{}: {} runs, gate-release cycle {}\nEach figure: mean [lowest – highest] over the runs.\n\n",
        spread.scenario,
        spread.cycles_s.len(),
        cycles.join(", ")
    );
    let percents = |r: &Range| {
        format!(
            "{} [{} – {}]",
            percent(r.mean),
            percent(r.min),
            percent(r.max)
        )
    };
    let numbers = |r: &Range| format!("{:.1} [{:.1} – {:.1}]", r.mean, r.min, r.max);
    let header: Vec<String> = [
        "policy",
        "fairness deviation",
        "utilization",
        "GPU-hours lost",
        "jobs never started",
        "GPU-hours never started",
        "of them starved past the bound",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = spread
        .policies
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                percents(&p.fairness_deviation),
                percents(&p.utilization),
                numbers(&p.gpu_hours_lost),
                numbers(&p.jobs_never_started),
                numbers(&p.gpu_hours_never_started),
                numbers(&p.starved_jobs_unstarted_past_bound),
            ]
        })
        .collect();
    out.push_str(&table(&header, &rows));
    if !spread.gpufair_versus.is_empty() {
        let header: Vec<String> = [
            "gpufair against",
            "FD difference (points)",
            "FD ratio",
            "runs it dominates gpufair",
        ]
        .map(String::from)
        .to_vec();
        let rows: Vec<Vec<String>> = spread
            .gpufair_versus
            .iter()
            .map(|v| {
                let d = &v.fairness_deviation_difference;
                vec![
                    v.policy.clone(),
                    format!(
                        "{:+.2} [{:+.2} – {:+.2}]",
                        d.mean * 100.0,
                        d.min * 100.0,
                        d.max * 100.0
                    ),
                    v.fairness_deviation_ratio.map_or("–".into(), |r| {
                        format!("{:.3} [{:.3} – {:.3}]", r.mean, r.min, r.max)
                    }),
                    v.dominates_gpufair_runs.map_or("–".into(), |n| {
                        format!("{n} of {}", spread.cycles_s.len())
                    }),
                ]
            })
            .collect();
        let _ = writeln!(out);
        out.push_str(&table(&header, &rows));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_spread_is_two_seconds_either_side_and_never_below_one() {
        assert_eq!(default_cycles(30.0), vec![28.0, 29.0, 30.0, 31.0, 32.0]);
        assert_eq!(default_cycles(2.0), vec![1.0, 2.0, 3.0, 4.0]);
    }

    fn run(reports: &[(&str, f64, f64)]) -> Vec<PolicyReport> {
        reports
            .iter()
            .map(|(name, fd, lost)| PolicyReport::for_test(name, *fd, *lost))
            .collect()
    }

    #[test]
    fn each_figure_is_summarized_over_the_runs_and_dominance_counted_per_run() {
        let runs = vec![
            run(&[
                ("gpufair", 0.10, 5.0),
                ("kai", 0.05, 2.0),
                ("stateless-hold", 0.12, 0.0),
            ]),
            run(&[
                ("gpufair", 0.20, 5.0),
                ("kai", 0.25, 2.0),
                ("stateless-hold", 0.10, 0.0),
            ]),
        ];
        let spread = summarize("case", &[29.0, 30.0], &runs);
        let gpufair = &spread.policies[0];
        assert_eq!(gpufair.name, "gpufair");
        assert!((gpufair.fairness_deviation.mean - 0.15).abs() < 1e-12);
        assert_eq!(gpufair.fairness_deviation.min, 0.10);
        assert_eq!(gpufair.fairness_deviation.max, 0.20);
        let kai = &spread.gpufair_versus[0];
        assert_eq!(kai.policy, "kai");
        assert_eq!(kai.dominates_gpufair_runs, Some(1), "only the first run");
        let hold = &spread.gpufair_versus[1];
        assert_eq!(hold.dominates_gpufair_runs, None, "an ablation is no rival");
        assert!((hold.fairness_deviation_difference.min + 0.02).abs() < 1e-12);
        assert!((hold.fairness_deviation_difference.max - 0.10).abs() < 1e-12);
        let ratio = hold
            .fairness_deviation_ratio
            .expect("both deviations are positive");
        assert!((ratio.max - 2.0).abs() < 1e-12);
        let text = spread_table(&spread);
        assert!(text.contains("1 of 2"), "{text}");
    }

    #[test]
    fn without_gpufair_there_is_nothing_to_compare() {
        let runs = vec![run(&[("kai", 0.05, 2.0)])];
        let spread = summarize("case", &[30.0], &runs);
        assert!(spread.gpufair_versus.is_empty());
        assert_eq!(spread.policies.len(), 1);
    }
}
