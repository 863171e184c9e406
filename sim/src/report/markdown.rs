//! `--out DIR`: a Markdown report with the tables, the parameters and the SVG plots.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::format::markdown_table;
use super::json::METRIC_VARIANTS;
use super::{plots, tables};
use crate::metrics::PolicyReport;
use crate::runner::Comparison;
use crate::scenario::Scenario;

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn write(path: PathBuf, contents: &str) -> Result<(), WriteError> {
    std::fs::write(&path, contents).map_err(|source| WriteError { path, source })
}

/// Writes `report.md` and its SVG files into `dir` (created if missing).
pub fn write_report(
    dir: &Path,
    scenario: &Scenario,
    comparison: &Comparison,
) -> Result<PathBuf, WriteError> {
    std::fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_path_buf(),
        source,
    })?;
    let reports: Vec<&PolicyReport> = comparison.runs.iter().map(|r| &r.report).collect();
    let mut md = String::new();
    let _ = writeln!(md, "# Simulation: {}\n", scenario.name);
    if let Some(description) = &scenario.description {
        let _ = writeln!(md, "{}\n", description.trim());
    }
    let fs = &scenario.fairshare;
    let _ = writeln!(
        md,
        "{} GPUs in {} pool(s), {} queues, {} jobs, {:.1} simulated days (metrics after a {:.1}-day warm-up), seed {}.\n\
         Fair share: window {}, decay {} per {}, K {}, minimum weight {}. Cycle {}, resync {}.\n",
        scenario.total_gpus(),
        scenario.pools.len(),
        scenario.queues.len(),
        scenario.jobs.len(),
        scenario.duration_s / 86_400.0,
        scenario.warmup_s / 86_400.0,
        scenario.seed,
        gpufair_core::duration::format_duration(fs.window_s),
        fs.decay,
        gpufair_core::duration::format_duration(fs.decay_period_s),
        fs.k,
        fs.min_weight,
        gpufair_core::duration::format_duration(scenario.cycle_s),
        gpufair_core::duration::format_duration(scenario.resync_s),
    );
    for table in tables::all(scenario, &reports) {
        let _ = writeln!(
            md,
            "## {}\n\n{}",
            table.title,
            markdown_table(&table.header, &table.rows)
        );
    }
    let _ = writeln!(
        md,
        "## How the metrics are computed\n\n{METRIC_VARIANTS}.\n"
    );
    let _ = writeln!(md, "## Plots\n\n![wait CDF](wait-cdf.svg)\n");
    let waits_of = |pick: fn(&crate::metrics::Curves) -> &[f64]| -> Vec<(&str, &[f64])> {
        comparison
            .runs
            .iter()
            .map(|r| (r.report.name.as_str(), pick(&r.curves)))
            .collect()
    };
    write(
        dir.join("wait-cdf.svg"),
        &plots::wait_cdf(
            "Job wait (first start − submission), CDF",
            &waits_of(|c| &c.waits),
        ),
    )?;
    let key_tasks = waits_of(|c| &c.key_task_waits);
    if key_tasks.iter().any(|(_, waits)| !waits.is_empty()) {
        write(
            dir.join("key-task-wait-cdf.svg"),
            &plots::wait_cdf("Key-task wait (high urgency or realtime), CDF", &key_tasks),
        )?;
        let _ = writeln!(md, "![key-task wait CDF](key-task-wait-cdf.svg)\n");
    }
    for run in &comparison.runs {
        let name = &run.report.name;
        let file = format!("allocation-{name}.svg");
        write(
            dir.join(&file),
            &plots::allocation(scenario, name, &run.curves),
        )?;
        let _ = writeln!(md, "### {name}\n\n![{name} allocation]({file})\n");
        if let Some(svg) = plots::weights(scenario, name, &run.curves) {
            let file = format!("weights-{name}.svg");
            write(dir.join(&file), &svg)?;
            let _ = writeln!(md, "![{name} weights]({file})\n");
        }
    }
    let path = dir.join("report.md");
    write(path.clone(), &md)?;
    Ok(path)
}
