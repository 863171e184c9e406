//! `gpufair-sim run SCENARIO.yaml`: replays a scenario through gpufair and rival policies.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpufair_core::params::{MAX_RELEASE_SCORE_WEIGHT, RELEASE_SCORE_WEIGHT_FORMS};
use gpufair_sim::metrics::PolicyReport;
use gpufair_sim::report::{json, markdown, text_tables};
use gpufair_sim::runner::compare;
use gpufair_sim::scenario::{self, policy_name::parse_policy_list};
use gpufair_sim::scenario::{PolicyName, Scenario};
use gpufair_sim::sweep::{SweepGrid, sweep, sweep_table};
use indicatif::{ProgressBar, ProgressStyle};

/// A replay runs one decision cycle per event, and each cycle builds and drops many small
/// vectors; glibc's allocator took over half of a Philly replay's CPU time, mimalloc far less
/// (BENCHMARKS.md, simulator speed).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A comma-separated list of release-score weights, each within the config file's bounds.
fn weights(text: &str) -> Result<Vec<f64>> {
    text.split(',')
        .map(|part| {
            let value: f64 = part.trim().parse().map_err(|_| {
                anyhow::anyhow!("invalid weight {part:?}: expected {RELEASE_SCORE_WEIGHT_FORMS}")
            })?;
            if value.is_finite() && (0.0..=MAX_RELEASE_SCORE_WEIGHT).contains(&value) {
                Ok(value)
            } else {
                anyhow::bail!("invalid weight {value}: expected {RELEASE_SCORE_WEIGHT_FORMS}")
            }
        })
        .collect()
}

#[derive(Parser)]
#[command(
    name = "gpufair-sim",
    version,
    about = "Replay GPU workloads through gpufair's fair-share policy and its rivals"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario under each policy and compare them side by side.
    Run {
        /// Scenario file (YAML).
        scenario: PathBuf,
        /// Write a Markdown report and SVG plots into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Write the metrics as JSON to this file (`-` for standard output, instead of the table).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Comma-separated policies, overriding the scenario's list (`all` for every one).
        #[arg(long)]
        policies: Option<String>,
    },
    /// Replay a scenario under several gate-release cycle lengths and show each figure's mean and
    /// range: how far a comparison holds when the cycle moves by a second or two.
    Spread {
        /// Scenario file (YAML).
        scenario: PathBuf,
        /// Cycle lengths to try, comma-separated durations (e.g. 28s,30s,32s); by default the
        /// scenario's own cycle and two more either side, a second apart.
        #[arg(long)]
        cycles: Option<String>,
        /// Comma-separated policies, overriding the scenario's list (`all` for every one).
        #[arg(long)]
        policies: Option<String>,
        /// Write the spread as JSON to this file (`-` for standard output, instead of the table).
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Run gpufair over a grid of releaseScore weights and show how key-task wait and fairness
    /// trade off.
    Sweep {
        /// Scenario file (YAML), e.g. scenarios/lab-8-a100.yaml.
        scenario: PathBuf,
        /// Weights of urgency to try, comma-separated.
        #[arg(long, default_value = "0,2,8")]
        urgency: String,
        /// Weights of user tier to try.
        #[arg(long, default_value = "0,1")]
        user_tier: String,
        /// Weights of deadline slack to try.
        #[arg(long, default_value = "0,4,16")]
        deadline: String,
        /// Weights of time waited to try.
        #[arg(long, default_value = "0,1,4")]
        waited: String,
        /// Write the points as JSON to this file (`-` for standard output, instead of the table).
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Write random scenarios of shapes nobody tuned the policy on, one YAML file per seed
    /// (`generated-SEED.yaml`), to compare the policies where they were not tuned: one or two
    /// pools, 2–16 queues each, jobs of one GPU to the whole pool, load 0.6–1.8 times capacity.
    Generate {
        /// Folder to write the scenarios into (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// The first seed.
        #[arg(long, default_value_t = 1)]
        first_seed: u64,
        /// How many scenarios, one per seed from the first.
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Guarantee some queues part of their pool.
        #[arg(long)]
        guarantees: bool,
        /// Give streams task types (tiers), high urgency and deadlines.
        #[arg(long)]
        tiers: bool,
        /// Run jobs of a node or more as pods of half or a quarter of a node.
        #[arg(long)]
        small_pods: bool,
    },
    /// Replay families of whole-GPU jobs through right-sizing and report the demand it frees.
    RightSize {
        /// Right-sizing scenario file (YAML), e.g. scenarios/right-size-families.yaml.
        scenario: PathBuf,
    },
}

fn main() -> ExitCode {
    match execute(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stops early (`| head`) closes the pipe: what it did not read is not a
        // failure of the run.
        Err(err) if closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// `err` and its causes on one line, `: ` between them. Errors that name their cause already
/// end with its message (`FILE: cannot read scenario: No such file or directory`): that cause
/// is not repeated.
fn one_line(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Whether `err` comes from writing to an output whose reader has gone.
fn closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes `text` to standard output, returning the error `print!` would panic on.
fn emit(text: &str) -> std::io::Result<()> {
    std::io::stdout().lock().write_all(text.as_bytes())
}

fn execute(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run {
            scenario,
            out,
            json,
            policies,
        } => run(scenario, out, json, policies),
        Command::Spread {
            scenario,
            cycles,
            policies,
            json,
        } => run_spread(scenario, cycles, policies, json),
        Command::Sweep {
            scenario,
            urgency,
            user_tier,
            deadline,
            waited,
            json,
        } => {
            let loaded = scenario::load(&scenario)?;
            let grid = SweepGrid {
                urgency: weights(&urgency).context("--urgency")?,
                user_tier: weights(&user_tier).context("--user-tier")?,
                deadline: weights(&deadline).context("--deadline")?,
                waited: weights(&waited).context("--waited")?,
            };
            let points = sweep(&loaded, PolicyName::Gpufair, &grid)?;
            match json {
                Some(path) => write_json(&points, &path),
                None => {
                    emit(&sweep_table(&points))?;
                    Ok(())
                }
            }
        }
        Command::Generate {
            out,
            first_seed,
            count,
            guarantees,
            tiers,
            small_pods,
        } => {
            let features = gpufair_sim::generate::Features {
                guarantees,
                tiers,
                small_pods,
            };
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let last = first_seed
                .checked_add(count)
                .context("--first-seed plus --count overflows")?;
            for seed in first_seed..last {
                let path = out.join(format!("generated-{seed}.yaml"));
                std::fs::write(&path, gpufair_sim::generate::scenario(seed, features))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            emit(&format!("wrote {count} scenarios to {}\n", out.display()))?;
            Ok(())
        }
        Command::RightSize { scenario } => {
            let loaded = gpufair_sim::rightsize::load(&scenario)?;
            let report = gpufair_sim::rightsize::replay(&loaded)?;
            let total = report.total();
            emit(&format!(
                "{}: {} jobs over {:.1} days, each asking for one whole GPU\n\n{}",
                loaded.name,
                total.jobs,
                loaded.duration.get() / 86_400.0,
                report.table()
            ))?;
            Ok(())
        }
    }
}

/// The policies `--policies` names, or the scenario's own list.
fn chosen_policies(list: Option<&str>, scenario: &Scenario) -> Result<Vec<PolicyName>> {
    match list {
        Some(list) => parse_policy_list(list).context("--policies"),
        None => Ok(scenario.policies.clone()),
    }
}

/// Cycle lengths from `--cycles`: comma-separated positive durations.
fn cycle_lengths(text: &str) -> Result<Vec<f64>> {
    text.split(',')
        .map(|part| {
            let seconds = gpufair_core::duration::parse_duration(part)?;
            anyhow::ensure!(
                seconds > 0.0,
                "invalid cycle length {:?}: expected a duration longer than zero, e.g. 30s",
                part.trim()
            );
            Ok(seconds)
        })
        .collect()
}

fn run_spread(
    path: PathBuf,
    cycles: Option<String>,
    policies: Option<String>,
    json_path: Option<PathBuf>,
) -> Result<()> {
    let scenario = scenario::load(&path)?;
    let policies = chosen_policies(policies.as_deref(), &scenario)?;
    let cycles = match cycles {
        Some(list) => cycle_lengths(&list).context("--cycles")?,
        None => gpufair_sim::spread::default_cycles(scenario.cycle_s),
    };
    let spread = gpufair_sim::spread::spread(&scenario, &policies, &cycles, &|_| {})?;
    match json_path {
        Some(path) => write_json(&spread, &path),
        None => {
            emit(&gpufair_sim::spread::spread_table(&spread))?;
            Ok(())
        }
    }
}

/// Writes `value` as pretty JSON to `path`, or to standard output for `-`.
fn write_json(value: &impl serde::Serialize, path: &std::path::Path) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    if path.as_os_str() == "-" {
        emit(&(text + "\n"))?;
        Ok(())
    } else {
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

fn run(
    path: PathBuf,
    out: Option<PathBuf>,
    json_path: Option<PathBuf>,
    policies: Option<String>,
) -> Result<()> {
    let scenario = scenario::load(&path)?;
    let policies = chosen_policies(policies.as_deref(), &scenario)?;
    let json_to_stdout = json_path.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let bar = if std::io::stdout().is_terminal() && !json_to_stdout {
        let bar = ProgressBar::new((scenario.duration_s * policies.len() as f64).ceil() as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:40}] {percent}% ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(format!("{} × {} policies", scenario.name, policies.len()));
        Some(bar)
    } else {
        None
    };
    let progress = |advanced: f64| {
        if let Some(bar) = &bar {
            bar.inc(advanced.max(0.0) as u64);
        }
    };
    let comparison = compare(&scenario, &policies, &progress)?;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let reports: Vec<&PolicyReport> = comparison.runs.iter().map(|r| &r.report).collect();
    let mut stdout = std::io::stdout().lock();
    if let Some(json_path) = &json_path {
        let text = json::to_json(&scenario, &reports);
        if json_to_stdout {
            writeln!(stdout, "{text}")?;
        } else {
            std::fs::write(json_path, text + "\n")
                .with_context(|| format!("cannot write {}", json_path.display()))?;
        }
    }
    if !json_to_stdout {
        let gpus = if scenario.has_slices() {
            format!(
                "{} whole GPUs + slices = {:.1} GPU-equivalents",
                scenario.total_gpus(),
                scenario.capacity()
            )
        } else {
            format!("{} GPUs", scenario.total_gpus())
        };
        writeln!(
            stdout,
            "{}: {gpus}, {} queues, {} jobs, {:.1} days simulated\n",
            scenario.name,
            scenario.queues.len(),
            scenario.jobs.len(),
            scenario.duration_s / 86_400.0
        )?;
        write!(stdout, "{}", text_tables(&scenario, &reports))?;
        let timing: Vec<String> = reports
            .iter()
            .zip(&comparison.elapsed_s)
            .map(|(r, s)| format!("{} {s:.2}s", r.name))
            .collect();
        writeln!(stdout, "simulation time: {}", timing.join(", "))?;
    }
    if let Some(dir) = &out {
        let report = markdown::write_report(dir, &scenario, &comparison)?;
        if !json_to_stdout {
            writeln!(stdout, "report: {}", report.display())?;
        }
    }
    Ok(())
}
