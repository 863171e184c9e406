//! Fairness deviation over one set of queues for every policy of a run.
//!
//! M1 averages over each policy's own active set: the queues whose entitlement is at least 1%
//! of the total under that policy. Entitlement grows while a queue waits, so a small queue can
//! be active under one policy and not under another, and the two figures then average over
//! different queues, and a queue near the threshold can move the comparison by points that no
//! policy's fairness moved (BENCHMARKS.md, issue 27). This variant averages every policy over
//! the same queues, those active under any policy of the run, so the figures can be compared
//! with each other (but not with another run's, whose set of policies may differ).

use std::collections::{BTreeMap, BTreeSet};

use super::PolicyReport;
use super::fairness;

/// The queues active under `report`, as M1 counts them.
fn active(report: &PolicyReport) -> impl Iterator<Item = &str> {
    let names: Vec<&str> = report.queues.keys().map(String::as_str).collect();
    let entitled: Vec<f64> = report
        .queues
        .values()
        .map(|q| q.entitled_gpu_hours)
        .collect();
    fairness::active(&entitled)
        .into_iter()
        .map(move |i| names[i])
}

/// Per policy (by name): the mean over the queues active under any of `reports` of
/// |A − E| / E, each with that policy's own A and E; a queue entitled to nothing under a
/// policy is left out of that policy's mean. 0 where no queue is.
pub fn common_set_deviation(reports: &[&PolicyReport]) -> BTreeMap<String, f64> {
    let common: BTreeSet<&str> = reports.iter().flat_map(|r| active(r)).collect();
    reports
        .iter()
        .map(|report| {
            let deviations: Vec<f64> = common
                .iter()
                .filter_map(|name| report.queues.get(*name))
                .filter(|q| q.entitled_gpu_hours > 0.0)
                .map(|q| (q.received_gpu_hours - q.entitled_gpu_hours).abs() / q.entitled_gpu_hours)
                .collect();
            let mean = if deviations.is_empty() {
                0.0
            } else {
                deviations.iter().sum::<f64>() / deviations.len() as f64
            };
            (report.name.clone(), mean)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::QueueReport;

    fn queue(received: f64, entitled: f64) -> QueueReport {
        QueueReport {
            received_gpu_hours: received,
            entitled_gpu_hours: entitled,
            received_over_entitled: (entitled > 0.0).then(|| received / entitled),
            jobs: 1,
            wait_p50_s: None,
            wait_p99_s: None,
            wait_max_s: None,
            longest_starved_s: 0.0,
            starved_fraction: 0.0,
            starvation_events: 0,
            starvations_over_24h: 0,
            jobs_never_started: 0,
            gpu_hours_never_started: 0.0,
        }
    }

    fn with_queues(name: &str, queues: &[(&str, f64, f64)]) -> PolicyReport {
        let mut report = PolicyReport::for_test(name, 0.0, 0.0);
        for &(queue_name, received, entitled) in queues {
            report
                .queues
                .insert(queue_name.to_string(), queue(received, entitled));
        }
        report
    }

    #[test]
    fn a_queue_active_under_one_policy_counts_for_every_policy() {
        // "small" has 1.5% of the entitlement under a and 0.5% under b: M1 counts it for a
        // only; here both are averaged over big, other and small.
        let a = with_queues(
            "a",
            &[
                ("big", 500.0, 500.0),
                ("other", 483.0, 483.0),
                ("small", 7.5, 15.0),
            ],
        );
        let b = with_queues(
            "b",
            &[
                ("big", 600.0, 500.0),
                ("other", 495.0, 495.0),
                ("small", 2.5, 5.0),
            ],
        );
        let figures = common_set_deviation(&[&a, &b]);
        assert!((figures["a"] - 0.5 / 3.0).abs() < 1e-12, "{figures:?}");
        assert!((figures["b"] - 0.7 / 3.0).abs() < 1e-12, "{figures:?}");
    }

    #[test]
    fn queues_below_the_threshold_everywhere_or_entitled_to_nothing_are_left_out() {
        let a = with_queues(
            "a",
            &[
                ("big", 450.0, 500.0),
                ("tiny", 0.0, 1.0),
                ("idle", 0.0, 0.0),
            ],
        );
        let b = with_queues("b", &[("big", 500.0, 500.0), ("tiny", 3.0, 1.0)]);
        let figures = common_set_deviation(&[&a, &b]);
        assert!((figures["a"] - 0.1).abs() < 1e-12, "{figures:?}");
        assert!(figures["b"].abs() < 1e-12, "{figures:?}");
        assert!(common_set_deviation(&[&with_queues("c", &[])])["c"].abs() < 1e-12);
    }
}
