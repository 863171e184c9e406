//! The side-by-side tables, as header + rows, shared by the terminal and the Markdown report.

use super::format::{duration, opt_duration, percent};
use crate::metrics::{
    ClassReport, ClassWaits, NamedJobReport, PolicyReport, REALTIME_OBJECTIVE_S,
    common_set_deviation, dominance,
};
use crate::policy::EvictionCause;
use crate::scenario::Scenario;

pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

fn header(first: &str, reports: &[&PolicyReport]) -> Vec<String> {
    std::iter::once(first.to_string())
        .chain(reports.iter().map(|r| r.name.clone()))
        .collect()
}

fn row(
    label: &str,
    reports: &[&PolicyReport],
    cell: impl Fn(&PolicyReport) -> String,
) -> Vec<String> {
    std::iter::once(label.to_string())
        .chain(reports.iter().map(|r| cell(r)))
        .collect()
}

pub fn summary(reports: &[&PolicyReport]) -> Table {
    let mut rows = vec![row("fairness deviation (cumulative)", reports, |r| {
        percent(r.fairness_deviation)
    })];
    // Only where slices nobody asked for made a difference: elsewhere it repeats the row above.
    if reports
        .iter()
        .any(|r| r.fairness_deviation_whole_capacity != r.fairness_deviation)
    {
        rows.push(row(
            "fairness deviation, idle slices entitled",
            reports,
            |r| percent(r.fairness_deviation_whole_capacity),
        ));
    }
    // Only where some policy's active set leaves out a queue another policy's includes.
    let common = common_set_deviation(reports);
    let on_common = |r: &PolicyReport| common.get(&r.name).copied().unwrap_or(0.0);
    if reports
        .iter()
        .any(|r| (on_common(r) - r.fairness_deviation).abs() > 1e-12)
    {
        rows.push(row(
            "fairness deviation, queues active under any policy",
            reports,
            |r| percent(on_common(r)),
        ));
    }
    rows.extend([
        row("fairness deviation 24h mean", reports, |r| {
            percent(r.fairness_deviation_24h_mean)
        }),
        row("fairness deviation 24h p95", reports, |r| {
            percent(r.fairness_deviation_24h_p95)
        }),
        row("Jain's index (A/E)", reports, |r| {
            format!("{:.3}", r.jain_index)
        }),
        row("utilization", reports, |r| percent(r.utilization)),
        row("wait mean", reports, |r| opt_duration(r.wait_mean_s)),
        row("wait p99", reports, |r| opt_duration(r.wait_p99_s)),
        row("jobs never started", reports, |r| {
            r.jobs_never_started.to_string()
        }),
        row("GPU-hours never started", reports, |r| {
            format!("{:.1}", r.gpu_hours_never_started)
        }),
        row("  of them, starved past the earning bound", reports, |r| {
            r.starved_jobs_unstarted_past_bound.to_string()
        }),
        row("starvations > 1h (queue stretches)", reports, |r| {
            r.starvation_events.to_string()
        }),
        row("starvations > 24h", reports, |r| {
            r.starvations_over_24h.to_string()
        }),
        row("longest starved stretch", reports, |r| {
            duration(r.longest_starved_s)
        }),
        row("preemptions per hour", reports, |r| {
            format!("{:.2}", r.preemptions_per_hour)
        }),
        row("GPU-hours lost to preemption", reports, |r| {
            format!("{:.1}", r.gpu_hours_lost)
        }),
    ]);
    // Only the causes some policy's evictions lost work to.
    for cause in EvictionCause::ALL {
        let lost = |r: &PolicyReport| r.gpu_hours_lost_by_cause.get(cause.key()).copied();
        if reports.iter().any(|r| lost(r).is_some()) {
            rows.push(row(&format!("  of it, {}", cause.label()), reports, |r| {
                lost(r).map_or_else(|| "-".into(), |gpu_hours| format!("{gpu_hours:.1}"))
            }));
        }
    }
    if reports.iter().any(|r| r.gpu_hours_lost_backfill_tier > 0.0) {
        rows.push(row("  of it, backfill tier's jobs", reports, |r| {
            format!("{:.1}", r.gpu_hours_lost_backfill_tier)
        }));
    }
    rows.extend([
        row("work lost ÷ work delivered", reports, |r| {
            format!("{:.3}%", r.work_lost_over_delivered * 100.0)
        }),
        row("GPU-hours held idle (paid off)", reports, |r| {
            match (r.held_idle_gpu_hours, r.held_idle_paid_off_gpu_hours) {
                (Some(idle), Some(paid)) => format!("{idle:.1} ({paid:.1})"),
                _ => "-".into(),
            }
        }),
        row("  of it, nothing waiting could use", reports, |r| {
            r.held_idle_unwanted_gpu_hours
                .map_or_else(|| "-".into(), |unwanted| format!("{unwanted:.1}"))
        }),
        row("holds made / abandoned", reports, |r| {
            match (r.holds, r.holds_abandoned) {
                (Some(made), Some(abandoned)) => format!("{made} / {abandoned}"),
                _ => "-".into(),
            }
        }),
    ]);
    Table {
        title: "Policies side by side".into(),
        header: header("metric", reports),
        rows,
    }
}

pub fn received_vs_entitled(scenario: &Scenario, reports: &[&PolicyReport]) -> Table {
    let rows = scenario
        .queues
        .iter()
        .map(|q| {
            let entitled = reports
                .first()
                .and_then(|r| r.queues.get(&q.name))
                .map_or(0.0, |x| x.entitled_gpu_hours);
            let mut cells = vec![format!("{} (E≈{entitled:.0})", q.name)];
            cells.extend(reports.iter().map(|r| {
                r.queues.get(&q.name).map_or_else(
                    || "-".into(),
                    |x| match x.received_over_entitled {
                        Some(ratio) => format!("{:.0} ({:.2})", x.received_gpu_hours, ratio),
                        None => format!("{:.0}", x.received_gpu_hours),
                    },
                )
            }));
            cells
        })
        .collect();
    Table {
        title: "Received GPU-hours per queue (received ÷ entitled); E is the first policy's entitlement".into(),
        header: header("queue", reports),
        rows,
    }
}

pub fn waits(scenario: &Scenario, reports: &[&PolicyReport]) -> Table {
    let rows = scenario
        .queues
        .iter()
        .map(|q| {
            row(&q.name, reports, |r| {
                r.queues.get(&q.name).map_or_else(
                    || "-".into(),
                    |x| {
                        format!(
                            "{} / {} / {}",
                            opt_duration(x.wait_p50_s),
                            opt_duration(x.wait_p99_s),
                            opt_duration(x.wait_max_s)
                        )
                    },
                )
            })
        })
        .collect();
    Table {
        title: "Wait per queue: p50 / p99 / max".into(),
        header: header("queue", reports),
        rows,
    }
}

pub fn starvation(scenario: &Scenario, reports: &[&PolicyReport]) -> Table {
    let rows = scenario
        .queues
        .iter()
        .map(|q| {
            row(&q.name, reports, |r| {
                r.queues.get(&q.name).map_or_else(
                    || "-".into(),
                    |x| {
                        format!(
                            "{} ({})",
                            duration(x.longest_starved_s),
                            x.starvation_events
                        )
                    },
                )
            })
        })
        .collect();
    Table {
        title: "Longest starved stretch per queue (stretches > 1h)".into(),
        header: header("queue", reports),
        rows,
    }
}

pub fn named_jobs(reports: &[&PolicyReport]) -> Option<Table> {
    let names: Vec<&String> = reports.first()?.named_jobs.keys().collect();
    if names.is_empty() {
        return None;
    }
    let rows = names
        .iter()
        .map(|name| {
            row(name, reports, |r| match r.named_jobs.get(*name) {
                Some(job) => named_job_cell(job),
                None => "-".into(),
            })
        })
        .collect();
    Some(Table {
        title: "Named jobs: start and finish after submission, times evicted".into(),
        header: header("job", reports),
        rows,
    })
}

fn named_job_cell(job: &NamedJobReport) -> String {
    let Some(wait) = job.wait_s else {
        return "never started".into();
    };
    let finish = match job.end_s {
        Some(end) => format!("done +{}", duration(end - job.submit_s)),
        None => "unfinished".into(),
    };
    format!(
        "start +{}, {finish}, evicted {}×",
        duration(wait),
        job.preemptions
    )
}

/// For each rival, whether it dominates gpufair (lower fairness deviation and no more GPU-hours
/// lost); `None` when gpufair is not among the policies run.
pub fn pareto(reports: &[&PolicyReport]) -> Option<Table> {
    let verdicts = dominance(reports);
    if verdicts.is_empty() {
        return None;
    }
    let rows = verdicts
        .iter()
        .map(|d| {
            vec![
                d.rival.clone(),
                format!(
                    "{} vs {}",
                    percent(d.rival_fairness_deviation),
                    percent(d.gpufair_fairness_deviation)
                ),
                format!(
                    "{:.1} vs {:.1}",
                    d.rival_gpu_hours_lost, d.gpufair_gpu_hours_lost
                ),
                if d.dominates_gpufair {
                    "DOMINATES gpufair".into()
                } else {
                    "does not dominate".into()
                },
            ]
        })
        .collect();
    Some(Table {
        title: "Pareto check: does a rival have lower FD and no more GPU-hours lost than gpufair?"
            .into(),
        header: vec![
            "rival".into(),
            "FD (rival vs gpufair)".into(),
            "GPU-h lost (rival vs gpufair)".into(),
            "verdict".into(),
        ],
        rows,
    })
}

fn class_cell(waits: Option<&ClassWaits>) -> String {
    waits.map_or_else(
        || "-".into(),
        |w| {
            format!(
                "{} / {} / {}",
                opt_duration(w.wait_mean_s),
                opt_duration(w.wait_p50_s),
                opt_duration(w.wait_p99_s)
            )
        },
    )
}

/// Waits per tier and urgency, key tasks, deadlines and throughput; `None` for scenarios
/// without labels or slices.
pub fn classes(reports: &[&PolicyReport]) -> Option<Table> {
    let first = reports.first()?.classes.as_ref()?;
    fn class(r: &PolicyReport) -> Option<&ClassReport> {
        r.classes.as_ref()
    }
    let mut rows = Vec::new();
    for tier in first.by_tier.keys() {
        rows.push(row(&format!("wait {tier}"), reports, |r| {
            class_cell(class(r).and_then(|c| c.by_tier.get(tier)))
        }));
    }
    for urgency in first.by_urgency.keys() {
        rows.push(row(&format!("wait urgency {urgency}"), reports, |r| {
            class_cell(class(r).and_then(|c| c.by_urgency.get(urgency)))
        }));
    }
    rows.push(row(
        "wait key tasks (high urgency or realtime)",
        reports,
        |r| class_cell(class(r).map(|c| &c.key_tasks)),
    ));
    rows.push(row("wait other tasks", reports, |r| {
        class_cell(class(r).map(|c| &c.other_tasks))
    }));
    if first.by_tier.contains_key("realtime") {
        rows.push(row(
            &format!("realtime started within {}", duration(REALTIME_OBJECTIVE_S)),
            reports,
            |r| {
                class(r)
                    .and_then(|c| c.by_tier.get("realtime").and_then(|w| w.within_objective))
                    .map_or_else(|| "-".into(), percent)
            },
        ));
    }
    rows.push(row(
        &format!("deadlines met (of {})", first.jobs_with_deadline),
        reports,
        |r| {
            class(r)
                .and_then(|c| c.deadline_hit_rate)
                .map_or_else(|| "-".into(), percent)
        },
    ));
    rows.push(row("jobs completed per day", reports, |r| {
        class(r).map_or_else(
            || "-".into(),
            |c| format!("{:.1}", c.jobs_completed_per_day),
        )
    }));
    rows.push(row("GPU-hours delivered per day", reports, |r| {
        class(r).map_or_else(|| "-".into(), |c| format!("{:.1}", c.gpu_hours_per_day))
    }));
    Some(Table {
        title: "Tiers, urgency and deadlines: wait mean / p50 / p99; throughput (GPU-equivalents)"
            .into(),
        header: header("metric", reports),
        rows,
    })
}

/// Every table, in report order.
pub fn all(scenario: &Scenario, reports: &[&PolicyReport]) -> Vec<Table> {
    let mut tables = vec![summary(reports)];
    tables.extend(classes(reports));
    tables.extend(pareto(reports));
    tables.extend(named_jobs(reports));
    tables.push(received_vs_entitled(scenario, reports));
    tables.push(waits(scenario, reports));
    tables.push(starvation(scenario, reports));
    tables
}
