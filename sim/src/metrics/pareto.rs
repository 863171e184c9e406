//! Whether a rival dominates gpufair on a scenario: lower fairness deviation *and* no more
//! GPU-hours lost to preemption. gpufair's promise is that no rival model ever does.

use serde::Serialize;

use super::PolicyReport;

/// The rivals gpufair is measured against (not its own ablations).
pub const RIVALS: [&str; 4] = ["kai", "kueue-afs", "stateless", "fifo"];

/// One rival compared with gpufair.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Dominance {
    pub rival: String,
    pub rival_fairness_deviation: f64,
    pub rival_gpu_hours_lost: f64,
    pub gpufair_fairness_deviation: f64,
    pub gpufair_gpu_hours_lost: f64,
    /// Lower fairness deviation and no more GPU-hours lost than gpufair.
    pub dominates_gpufair: bool,
}

/// Differences below these are measurement noise, not an advantage.
const FD_TOLERANCE: f64 = 1e-4;
const LOST_TOLERANCE_GPU_HOURS: f64 = 0.05;

/// One entry per rival present in `reports`, if gpufair is among them.
pub fn dominance(reports: &[&PolicyReport]) -> Vec<Dominance> {
    let Some(gpufair) = reports.iter().find(|r| r.name == "gpufair") else {
        return Vec::new();
    };
    reports
        .iter()
        .filter(|r| RIVALS.contains(&r.name.as_str()))
        .map(|rival| Dominance {
            rival: rival.name.clone(),
            rival_fairness_deviation: rival.fairness_deviation,
            rival_gpu_hours_lost: rival.gpu_hours_lost,
            gpufair_fairness_deviation: gpufair.fairness_deviation,
            gpufair_gpu_hours_lost: gpufair.gpu_hours_lost,
            dominates_gpufair: rival.fairness_deviation + FD_TOLERANCE < gpufair.fairness_deviation
                && rival.gpu_hours_lost <= gpufair.gpu_hours_lost + LOST_TOLERANCE_GPU_HOURS,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, fd: f64, lost: f64) -> PolicyReport {
        PolicyReport::for_test(name, fd, lost)
    }

    #[test]
    fn a_rival_dominates_only_with_lower_deviation_and_no_more_loss() {
        let gpufair = report("gpufair", 0.10, 5.0);
        let better_and_cheaper = report("kai", 0.05, 2.0);
        let better_but_costlier = report("kueue-afs", 0.05, 9.0);
        let worse = report("stateless", 0.20, 0.0);
        let ablation = report("stateless-hold", 0.01, 0.0);
        let all = [
            &gpufair,
            &better_and_cheaper,
            &better_but_costlier,
            &worse,
            &ablation,
        ];
        let verdicts: Vec<(String, bool)> = dominance(&all)
            .into_iter()
            .map(|d| (d.rival, d.dominates_gpufair))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                ("kai".to_string(), true),
                ("kueue-afs".to_string(), false),
                ("stateless".to_string(), false),
            ]
        );
        assert!(dominance(&[&worse]).is_empty(), "no gpufair, no verdict");
    }
}
