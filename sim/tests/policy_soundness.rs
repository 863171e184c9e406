//! The policy-soundness scenarios: a gang too big for what the guarantees leave, a gang that
//! fits once earned, a team that arrives late to a full cluster (with two and with eight
//! teams), and holds beside gap-filling work. On each, no rival model dominates gpufair (lower
//! fairness deviation and no more GPU-hours lost), and the case's own promise holds.

mod common;

use common::{bundled, gpufair_undominated, repo_path, run};
use gpufair_sim::metrics::PolicyReport;
use gpufair_sim::scenario::{self, PolicyName};

#[test]
fn a_gang_beyond_what_the_guarantees_leave_waits_instead_of_thrashing() {
    let scenario = bundled("gang-beside-guarantees.yaml");
    let (gpufair, _) = gpufair_undominated(&scenario);
    let gang = &gpufair.named_jobs["c-gang-48"];
    assert!(gang.preemptions <= 1, "the gang is evicted at most once");
    assert!(
        gpufair.gpu_hours_lost <= 8.0 * 48.0,
        "at most one run of the gang is lost"
    );
    for team in ["team-a", "team-b"] {
        let queue = &gpufair.queues[team];
        assert!(
            queue.received_over_entitled.unwrap_or(0.0) > 0.9,
            "{team} gets its share: {:?}",
            queue.received_over_entitled
        );
    }
}

#[test]
fn a_gang_that_fits_starts_once_earned_and_finishes() {
    let scenario = bundled("gang-that-fits.yaml");
    let (gpufair, _) = gpufair_undominated(&scenario);
    let gang = &gpufair.named_jobs["c-gang-40"];
    let start = gang.start_s.expect("the gang starts");
    assert!(
        start - gang.submit_s >= 2.0 * 3600.0,
        "it waits to earn capacity beyond its share"
    );
    assert!(gang.end_s.is_some(), "and finishes");
    assert!(gang.preemptions <= 1);
}

fn late_arrival(file: &str) {
    let scenario = bundled(file);
    let (gpufair, rivals) = gpufair_undominated(&scenario);
    let stateless = rivals
        .iter()
        .find(|r| r.name == "stateless")
        .expect("stateless ran");
    assert!(
        gpufair.fairness_deviation <= 0.6 * stateless.fairness_deviation,
        "{file}: gpufair {:.1}% vs stateless {:.1}%",
        gpufair.fairness_deviation * 100.0,
        stateless.fairness_deviation * 100.0
    );
    assert_eq!(gpufair.gpu_hours_lost, 0.0, "minRunTime protects every job");
    // The ablation: capacity holding without the ledger does not close the gap.
    let hold_only = run(&scenario, PolicyName::StatelessHold).report;
    assert!(gpufair.fairness_deviation < 0.6 * hold_only.fairness_deviation);
}

#[test]
fn a_late_team_catches_up_with_two_teams() {
    late_arrival("late-arrival-2.yaml");
}

#[test]
fn late_teams_catch_up_with_eight_teams() {
    late_arrival("late-arrival-8.yaml");
}

#[test]
fn gap_filling_work_runs_in_what_holds_leave_idle() {
    let path = repo_path("scenarios/holds-beside-processing.yaml");
    let text = std::fs::read_to_string(&path).expect("bundled scenario reads");
    let scenario = scenario::parse(&path, &text).expect("bundled scenario parses");
    let (gpufair, _) = gpufair_undominated(&scenario);
    // The same jobs as training, which held capacity waits out instead of taking.
    let as_training = text.replace("taskType: processing", "taskType: train");
    let held_back = run(
        &scenario::parse(&path, &as_training).expect("variant parses"),
        PolicyName::Gpufair,
    )
    .report;
    let held_idle = |report: &PolicyReport| report.held_idle_gpu_hours.expect("gpufair holds");
    assert!(
        held_idle(&gpufair) < 0.75 * held_idle(&held_back),
        "processing takes what holds leave idle: {:.0} GPU-h held idle vs {:.0} as training",
        held_idle(&gpufair),
        held_idle(&held_back)
    );
    assert!(gpufair.utilization > held_back.utilization);
    // What the processing jobs lost to eviction is reported apart, as what their owners allowed.
    assert!(
        gpufair.gpu_hours_lost_backfill_tier > 0.0
            && gpufair.gpu_hours_lost_backfill_tier <= gpufair.gpu_hours_lost,
        "{:.1} of {:.1} GPU-h lost",
        gpufair.gpu_hours_lost_backfill_tier,
        gpufair.gpu_hours_lost
    );
    assert_eq!(held_back.gpu_hours_lost_backfill_tier, 0.0);
    let platform = &gpufair.queues["platform"];
    assert!(
        platform.received_over_entitled.unwrap_or(0.0) > 0.85,
        "the gangs still get their share: {:?}",
        platform.received_over_entitled
    );
}

#[test]
fn work_lost_is_split_by_the_rule_each_eviction_followed() {
    // Holds beside gap-filling work: gpufair evicts backfill for its holds, for fair shares and
    // to end drains early; KAI reclaims. Every GPU-hour lost is told to one of its own rules.
    let scenario = bundled("holds-beside-processing.yaml");
    let gpufair_rules = [
        "backfill",
        "drain_ended_early",
        "fair_share",
        "guarantee",
        "stalled_drain",
    ];
    for (policy, rules) in [
        (PolicyName::Gpufair, &gpufair_rules[..]),
        (PolicyName::Kai, &["priority", "reclaim"][..]),
        (PolicyName::Stateless, &[][..]),
    ] {
        let report = run(&scenario, policy).report;
        let split: f64 = report.gpu_hours_lost_by_cause.values().sum();
        assert!(
            (split - report.gpu_hours_lost).abs() < 1e-6,
            "{policy:?}: {split} of {} GPU-h lost told to a rule",
            report.gpu_hours_lost
        );
        for (rule, lost) in &report.gpu_hours_lost_by_cause {
            assert!(
                rules.contains(rule) && *lost > 0.0,
                "{policy:?}: {rule} {lost}"
            );
        }
        if !rules.is_empty() {
            assert!(report.gpu_hours_lost > 0.0, "{policy:?} evicts here");
        }
    }
    let gpufair = run(&scenario, PolicyName::Gpufair).report;
    for rule in ["backfill", "fair_share", "drain_ended_early"] {
        assert!(
            gpufair.gpu_hours_lost_by_cause.contains_key(rule),
            "{rule}: {:?}",
            gpufair.gpu_hours_lost_by_cause
        );
    }
}
