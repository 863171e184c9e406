//! "Same policy, two engines": a scenario in the simulator's format (`two-engines.yaml`) is
//! played in real time on the real control plane with the real binaries, and run through
//! `gpufair-sim`. Per-queue GPU-seconds received agree within 10%, and the named jobs start
//! in the same order (jobs the simulator starts in one cycle form one group; every job of a
//! group must start, in real time, before any job of a later group). A second scenario
//! (`two-engines-tiers.yaml`) carries task types, urgency, user tier and a deadline: each pod
//! gets the label or annotation the scenario key stands for.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpufair_core::labels::{
    DEADLINE_ANNOTATION, Deadline, DeadlineSource, TASK_TYPE_LABEL, URGENCY_LABEL,
    USER_TIER_ANNOTATION, Urgency, UserTier,
};
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use gpufair_integration::cluster::{ClusterOptions, NodeOptions};
use gpufair_sim::scenario::{self, JobSpec, Scenario};
use serde_json::{Value, json};

use crate::common::{start, submit};

fn scenario_path(file: &str) -> PathBuf {
    gpufair_integration::workspace_root()
        .join("integration/tests/end_to_end")
        .join(file)
}

/// The labels and annotations a pod of `job` carries: what the scenario's keys stand for. The
/// deadline is `began_unix + deadline_s`, the same slack the simulator measures.
fn label(pod: &mut Value, job: &JobSpec, began_unix: f64) {
    let metadata = &mut pod["metadata"];
    metadata["labels"][TASK_TYPE_LABEL] = json!(job.task_type.as_str());
    if job.urgency != Urgency::default() {
        metadata["labels"][URGENCY_LABEL] = json!(job.urgency.as_str());
    }
    if job.user_tier != UserTier::default() {
        metadata["annotations"][USER_TIER_ANNOTATION] = json!(job.user_tier.as_str());
    }
    if let Some(deadline) = job.deadline_s {
        let at = Deadline {
            at_unix_seconds: (began_unix + deadline).round() as i64,
            source: DeadlineSource::Annotation,
        };
        metadata["annotations"][DEADLINE_ANNOTATION] = json!(at.to_rfc3339());
    }
}

/// What one engine measured: GPU-seconds per queue, start time per named job.
#[derive(Debug, Default)]
struct Outcome {
    gpu_seconds: BTreeMap<String, f64>,
    starts: BTreeMap<String, f64>,
}

fn simulate(scenario: &Scenario) -> anyhow::Result<Outcome> {
    let binary = gpufair_integration::binary("gpufair-sim");
    let output = Command::new(binary)
        .arg("run")
        .arg(&scenario.path)
        .args(["--policies", "gpufair", "--json", "-"])
        .output()
        .context("running gpufair-sim")?;
    ensure!(
        output.status.success(),
        "gpufair-sim failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).context("gpufair-sim's JSON")?;
    let policy = &report["policies"][0];
    let mut outcome = Outcome::default();
    for (queue, q) in policy["queues"].as_object().context("queues")? {
        let hours = q["received_gpu_hours"]
            .as_f64()
            .context("received_gpu_hours")?;
        outcome.gpu_seconds.insert(queue.clone(), hours * 3600.0);
    }
    for (job, j) in policy["named_jobs"].as_object().context("named_jobs")? {
        if let Some(start) = j["start_s"].as_f64() {
            outcome.starts.insert(job.clone(), start);
        }
    }
    Ok(outcome)
}

async fn play(scenario: &Scenario) -> anyhow::Result<Outcome> {
    let pool = &scenario.pools[0];
    let options = ClusterOptions {
        nodes: pool
            .node_sizes()
            .iter()
            .enumerate()
            .map(|(i, gpus)| NodeOptions::new(&format!("gpu-{}", i + 1), *gpus))
            .collect(),
        // Gathers the jobs that arrive together into one cycle, as the simulator's cycle grid
        // does.
        debounce: format!("{}s", scenario.cycle_s),
        ..ClusterOptions::default()
    };
    let cluster = start(options).await?;
    for queue in &scenario.queues {
        cluster
            .queue(
                &queue.name,
                &queue.name,
                json!({"weight": queue.weight, "guaranteed": queue.guaranteed}),
            )
            .await?;
    }
    let began = Instant::now();
    let began_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let mut names = BTreeMap::new();
    for (index, job) in scenario.jobs.iter().enumerate() {
        tokio::time::sleep_until((began + Duration::from_secs_f64(job.submit_s)).into()).await;
        let queue = &scenario.queues[job.queue].name;
        let name = job.name.clone().unwrap_or_else(|| format!("job-{index}"));
        let members = u32::try_from(job.pods.len())?;
        for (i, gpus) in job.pods.iter().enumerate() {
            let mut pod = if members == 1 {
                gpu_pod(queue, &name, *gpus)
            } else {
                gang_pod(queue, &name, u32::try_from(i)?, members, *gpus)
            };
            label(&mut pod, job, began_unix);
            submit(&cluster, pod, Some(job.duration_s)).await?;
        }
        names.insert(name, queue.clone());
    }
    let horizon = began + Duration::from_secs_f64(scenario.duration_s);
    tokio::time::sleep_until(horizon.into()).await;

    let mut outcome = Outcome::default();
    for pod in cluster.monitor.pods() {
        let Some(running) = pod.running else { continue };
        let end = pod.finished.unwrap_or(horizon).min(horizon);
        let seconds = end.saturating_duration_since(running).as_secs_f64();
        *outcome
            .gpu_seconds
            .entry(pod.namespace.clone())
            .or_default() += f64::from(pod.gpus) * seconds;
        let job = pod.group.clone().unwrap_or_else(|| pod.name.clone());
        if names.contains_key(&job) && running < horizon {
            let at = running.duration_since(began).as_secs_f64();
            let entry = outcome.starts.entry(job).or_insert(at);
            *entry = entry.min(at);
        }
    }
    gpufair_integration::cluster::events::released_more_than_once(&cluster.pod_events().await)
        .is_empty()
        .then_some(())
        .context("a pod was released twice")?;
    Ok(outcome)
}

pub async fn same_scenario_through_the_binaries_and_the_simulator_agrees() -> anyhow::Result<()> {
    both_engines_agree("two-engines.yaml").await
}

pub async fn tiers_urgency_and_deadlines_order_starts_the_same_in_both_engines()
-> anyhow::Result<()> {
    both_engines_agree("two-engines-tiers.yaml").await
}

async fn both_engines_agree(file: &str) -> anyhow::Result<()> {
    let scenario = scenario::load(&scenario_path(file))?;
    let simulated = tokio::task::spawn_blocking({
        let scenario = scenario.clone();
        move || simulate(&scenario)
    })
    .await??;
    let real = play(&scenario).await?;
    println!("  simulated: {simulated:?}\n  real time: {real:?}");

    for queue in &scenario.queues {
        let sim = simulated
            .gpu_seconds
            .get(&queue.name)
            .copied()
            .unwrap_or(0.0);
        let live = real.gpu_seconds.get(&queue.name).copied().unwrap_or(0.0);
        ensure!(
            sim > 0.0 && (live - sim).abs() <= 0.1 * sim,
            "queue {}: {live:.1} GPU-seconds in real time, {sim:.1} simulated (more than 10% apart)",
            queue.name
        );
    }
    // Group the named jobs by the simulator's start time; real starts must keep group order.
    let mut groups: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (job, start) in &simulated.starts {
        groups
            .entry((start * 1000.0).round() as u64)
            .or_default()
            .push(job);
    }
    ensure!(
        real.starts.keys().eq(simulated.starts.keys()),
        "the same named jobs started: {:?} in real time, {:?} simulated",
        real.starts.keys().collect::<Vec<_>>(),
        simulated.starts.keys().collect::<Vec<_>>()
    );
    let groups: Vec<Vec<&str>> = groups.into_values().collect();
    for pair in groups.windows(2) {
        let latest = pair[0]
            .iter()
            .map(|j| real.starts[*j])
            .fold(f64::MIN, f64::max);
        let earliest = pair[1]
            .iter()
            .map(|j| real.starts[*j])
            .fold(f64::MAX, f64::min);
        ensure!(
            latest < earliest,
            "start order differs: simulated {:?} before {:?}, real starts {:?}",
            pair[0],
            pair[1],
            real.starts
        );
    }
    println!("  start order (simulator's groups): {groups:?}");
    Ok(())
}
