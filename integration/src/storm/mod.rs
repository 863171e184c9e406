//! The controller kill-and-restart storm: two `gpufair-webhook serve` replicas on a real control
//! plane (kwok running the pods),
//! a steady stream of GPU pods that run and finish, and the Lease holder SIGKILLed again and
//! again — at a uniformly random point of its cycle, or just after a release while the rest of
//! a burst goes out — and started again. After every kill: no pod released twice, no node
//! promised more GPUs than it has, the other replica took over within the limit. At the end:
//! every queue's ledger against the GPU-seconds its pods ran.
//!
//! The ledger bound. A new leader rebuilds each ledger from Queue status and charges the stretch
//! from the status's last sample to its own first cycle at the rates it sees then (the killed
//! leader's unwritten samples are lost with it). So each kill can move a queue's ledger by at
//! most the pool's GPUs × that stretch, which the storm measures per kill (the old leader's last
//! written sample to the new leader's first). That stretch is at most one status interval (what
//! the killed leader had not written yet) plus the handover; both parts are reported. One more
//! cycle at full pool is allowed for the run as a whole: between failovers the ledger integrates
//! each cycle's rates up to the next cycle, so the first and last changes of the run can each be
//! counted up to a cycle off.

pub mod ledger;
pub mod stats;
pub mod workload;

use std::time::{Duration, Instant};

use rand_core::SeedableRng;
use rand_pcg::Pcg64;
use serde_json::json;

use crate::cluster::{
    ApiError, Cluster, ClusterError, ClusterOptions, LeaseFlags, NodeOptions, Replica,
};
pub use ledger::LedgerComparison;
pub use stats::Stats;
use workload::{QUEUES, Workload, WorkloadOptions, unit};

#[derive(Debug, thiserror::Error)]
pub enum StormError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("kill {kill} ({phase}): {what}")]
    Violation {
        phase: String,
        kill: usize,
        what: String,
    },
    #[error("{0}")]
    Harness(String),
}

/// The gpufair config of the storm: deploy/base's fair-share settings without decay (so the
/// ledger's charged GPU-seconds compare one to one with what ran) and without preemption (so
/// every pod runs to its end).
pub const STORM_CONFIG: &str = "fairshare:
  window: 168h
  decay: 1.0
  decayPeriod: 24h
  k: 1.0
  minWeight: 0.1
  bucket: 1h
  chargeBasis: allocated
preemption:
  enabled: false
";

/// GPUs in the storm's pool: two nodes of four.
pub const POOL_GPUS: u32 = 8;

/// One run of kills at one Lease timing.
#[derive(Debug, Clone)]
pub struct PhaseOptions {
    pub name: String,
    pub kills: usize,
    /// Lease flags; the binary's defaults with `None`.
    pub lease: Option<LeaseFlags>,
    /// Share of kills made just after a release (mid-burst) instead of at a random point of
    /// the cycle.
    pub burst_share: f64,
    /// Longest allowed kill → takeover.
    pub handover_limit: Duration,
}

/// The storm as a whole.
#[derive(Debug, Clone)]
pub struct StormOptions {
    pub phases: Vec<PhaseOptions>,
    pub cycle_interval: Duration,
    pub status_interval: Duration,
    /// Pods released per second: low enough that a burst of releases takes a while.
    pub release_rate: f64,
    pub workload: WorkloadOptions,
    pub seed: u64,
    /// Prints a line every this many kills (0: never).
    pub progress_every: usize,
    /// After the phases, how long the workload keeps running with no kill. With no phases
    /// this measures the ledger without failovers.
    pub steady: Duration,
}

impl StormOptions {
    /// `kills` kills with a 1 s / 700 ms / 200 ms Lease, a 1 s cycle and status interval.
    pub fn short(kills: usize, seed: u64) -> Self {
        Self {
            phases: vec![PhaseOptions::short_lease(kills)],
            cycle_interval: Duration::from_secs(1),
            status_interval: Duration::from_secs(1),
            release_rate: 20.0,
            workload: WorkloadOptions {
                backlog: 8,
                run_seconds: (1.0, 4.0),
                two_gpu_share: 0.3,
                finished_pod_ttl: Duration::from_millis(500),
                seed,
            },
            seed,
            progress_every: 0,
            steady: Duration::ZERO,
        }
    }
}

impl PhaseOptions {
    pub fn short_lease(kills: usize) -> Self {
        Self {
            name: "lease 1s/700ms/200ms".into(),
            kills,
            lease: Some(LeaseFlags::new("1s", "700ms", "200ms")),
            burst_share: 0.25,
            handover_limit: Duration::from_secs(15),
        }
    }

    pub fn default_lease(kills: usize) -> Self {
        Self {
            name: "lease 10s/7s/2s (defaults)".into(),
            kills,
            lease: None,
            burst_share: 0.25,
            handover_limit: Duration::from_secs(15),
        }
    }
}

/// What one kill did.
#[derive(Debug, Clone)]
pub struct KillRecord {
    pub phase: usize,
    /// Made just after a release, mid-burst.
    pub mid_burst: bool,
    /// From the leader's controller running (or the release) to the kill.
    pub delay: Duration,
    /// Kill → another replica holds the Lease.
    pub handover: Duration,
    /// The ledger stretch the new leader re-estimated: the old leader's last written sample to
    /// the new leader's first (seconds).
    pub restimated_s: f64,
    /// The killed leader's last written sample to the kill (seconds): what it had not written.
    pub unwritten_s: f64,
    /// Releases (gate removals) seen while the killed leader led.
    pub releases_in_term: usize,
}

/// Everything the storm measured.
#[derive(Debug, Clone)]
pub struct StormReport {
    pub kills: Vec<KillRecord>,
    pub phases: Vec<PhaseOptions>,
    pub ledgers: Vec<LedgerComparison>,
    pub pods_submitted: u64,
    pub pods_run: usize,
    pub submit_failures: u64,
    /// Why the first failed create failed.
    pub first_submit_error: Option<String>,
    pub wall: Duration,
    /// Violations found; empty when the storm passed.
    pub violations: Vec<String>,
}

impl StormReport {
    pub fn phase_kills(&self, phase: usize) -> impl Iterator<Item = &KillRecord> {
        self.kills.iter().filter(move |k| k.phase == phase)
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let mut text = String::new();
        for (index, phase) in self.phases.iter().enumerate() {
            let kills: Vec<&KillRecord> = self.phase_kills(index).collect();
            let seconds = |f: fn(&KillRecord) -> f64| {
                Stats::of(&kills.iter().map(|k| f(k)).collect::<Vec<_>>())
                    .map_or("-".to_string(), |s| s.to_string())
            };
            text.push_str(&format!(
                "phase {}: {} kills ({} mid-burst), handover limit {:.0}s\n",
                phase.name,
                kills.len(),
                kills.iter().filter(|k| k.mid_burst).count(),
                phase.handover_limit.as_secs_f64()
            ));
            text.push_str(&format!(
                "  kill → takeover (s)          {}\n",
                seconds(|k| k.handover.as_secs_f64())
            ));
            text.push_str(&format!(
                "  unwritten at kill (s)        {}\n",
                seconds(|k| k.unwritten_s)
            ));
            text.push_str(&format!(
                "  re-estimated stretch (s)     {}\n",
                seconds(|k| k.restimated_s)
            ));
            text.push_str(&format!(
                "  releases per leader term     {}\n",
                seconds(|k| k.releases_in_term as f64)
            ));
        }
        text.push_str(&format!(
            "pods: {} submitted, {} ran to the end; {} creates failed (retried)\n",
            self.pods_submitted, self.pods_run, self.submit_failures
        ));
        if let Some(error) = &self.first_submit_error {
            text.push_str(&format!("  first failed create: {error}\n"));
        }
        text.push_str("ledger per queue (GPU-seconds): ran, charged, charged − ran, bound\n");
        for l in &self.ledgers {
            text.push_str(&format!(
                "  {:<8} {:>10.1} {:>10.1} {:>+9.1} {:>9.1} {}\n",
                l.queue,
                l.ran,
                l.charged,
                l.error(),
                l.bound,
                if l.within_bound() { "ok" } else { "EXCEEDED" }
            ));
        }
        text.push_str(&format!(
            "wall time {:.0}s; {}\n",
            self.wall.as_secs_f64(),
            if self.violations.is_empty() {
                "no violations".to_string()
            } else {
                format!("{} VIOLATIONS", self.violations.len())
            }
        ));
        for v in &self.violations {
            text.push_str(&format!("  {v}\n"));
        }
        text
    }
}

/// Runs the storm: starts the cluster and the workload, runs each phase, drains, compares the
/// ledgers. Violations end the storm at once and are in the report; setup failures are errors.
pub async fn run(options: StormOptions) -> Result<StormReport, StormError> {
    let started = Instant::now();
    let first_lease = options.phases.first().and_then(|p| p.lease.clone());
    let mut cluster = Cluster::start(ClusterOptions {
        nodes: vec![NodeOptions::new("gpu-1", 4), NodeOptions::new("gpu-2", 4)],
        replicas: 2,
        config_yaml: STORM_CONFIG.into(),
        cycle_interval: format!("{}ms", options.cycle_interval.as_millis()),
        debounce: "50ms".into(),
        status_interval: format!("{}ms", options.status_interval.as_millis()),
        release_rate: options.release_rate,
        log_filter: "info".into(),
        lease: first_lease,
        ..ClusterOptions::default()
    })
    .await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await?;
    wait_controller_running(&cluster.replicas[leader]).await?;
    for queue in QUEUES {
        cluster.queue(queue, queue, json!({"weight": 1})).await?;
    }
    let workload = Workload::start(
        cluster.api.clone(),
        cluster.monitor.clone(),
        options.workload.clone(),
    );
    let mut rng = Pcg64::seed_from_u64(options.seed);
    let mut report = StormReport {
        kills: Vec::new(),
        phases: options.phases.clone(),
        ledgers: Vec::new(),
        pods_submitted: 0,
        pods_run: 0,
        submit_failures: 0,
        first_submit_error: None,
        wall: Duration::ZERO,
        violations: Vec::new(),
    };
    let mut kill_number = 0;
    'phases: for (index, phase) in options.phases.iter().enumerate() {
        if cluster.settings.lease != phase.lease {
            relaunch_with(&mut cluster, phase.lease.clone()).await?;
        }
        for _ in 0..phase.kills {
            kill_number += 1;
            let outcome = kill_once(&mut cluster, &options, phase, &mut rng).await;
            match outcome {
                Ok(mut record) => {
                    record.phase = index;
                    let mut found = check(&cluster, &workload).await;
                    if record.handover > phase.handover_limit {
                        found.push(format!(
                            "takeover took {:.2}s (limit {:.0}s)",
                            record.handover.as_secs_f64(),
                            phase.handover_limit.as_secs_f64()
                        ));
                    }
                    report.kills.push(record);
                    if !found.is_empty() {
                        report.violations.extend(
                            found
                                .into_iter()
                                .map(|what| format!("kill {kill_number} ({}): {what}", phase.name)),
                        );
                        break 'phases;
                    }
                }
                Err(StormError::Violation { what, .. }) => {
                    report
                        .violations
                        .push(format!("kill {kill_number} ({}): {what}", phase.name));
                    break 'phases;
                }
                Err(other) => return Err(other),
            }
            if options.progress_every > 0 && kill_number % options.progress_every == 0 {
                let last = report
                    .kills
                    .last()
                    .map_or(0.0, |k| k.handover.as_secs_f64());
                println!(
                    "  {kill_number} kills, {:.0}s, last takeover {last:.2}s, {} pods submitted",
                    started.elapsed().as_secs_f64(),
                    workload.counts().submitted
                );
            }
        }
    }
    if report.violations.is_empty() && !options.steady.is_zero() {
        tokio::time::sleep(options.steady).await;
    }
    workload.stop_submitting();
    if report.violations.is_empty() {
        report.ledgers = drain_and_compare(&cluster, &report, &options).await?;
        for ledger in &report.ledgers {
            if !ledger.within_bound() {
                report.violations.push(format!(
                    "queue {}: ledger charged {:.1} GPU-s, pods ran {:.1} (off by {:+.1}, bound {:.1})",
                    ledger.queue,
                    ledger.charged,
                    ledger.ran,
                    ledger.error(),
                    ledger.bound
                ));
            }
        }
        report.violations.extend(check(&cluster, &workload).await);
    }
    let counts = workload.counts();
    report.pods_submitted = counts.submitted;
    report.submit_failures = counts.failed;
    report.first_submit_error = counts.first_error;
    report.pods_run = cluster.monitor.count(|p| p.finished.is_some());
    report.wall = started.elapsed();
    Ok(report)
}

/// The invariants, now: no pod released twice, no node ever over capacity, every GPU pod gated
/// at creation.
async fn check(cluster: &Cluster, workload: &Workload) -> Vec<String> {
    let mut found = Vec::new();
    match cluster.api.events(None).await {
        Ok(stored) => {
            let twice = workload.tally.released_more_than_once(&stored);
            if !twice.is_empty() {
                found.push(format!("pods released more than once: {twice:?}"));
            }
        }
        Err(error) => found.push(format!("could not list Events: {error}")),
    }
    let over = cluster.monitor.capacity_violations();
    if !over.is_empty() {
        found.push(format!("capacity exceeded: {over:?}"));
    }
    let ungated = workload.counts().ungated;
    if !ungated.is_empty() {
        found.push(format!("pods created without the gate: {ungated:?}"));
    }
    found
}

/// Restarts both replicas (gracefully, so the Lease is handed over at once) with new Lease
/// flags: the follower first, then the leader.
async fn relaunch_with(cluster: &mut Cluster, lease: Option<LeaseFlags>) -> Result<(), StormError> {
    cluster.settings.lease = lease;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await?;
    cluster.restart(1 - leader).await?;
    cluster.restart(leader).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await?;
    wait_controller_running(&cluster.replicas[leader]).await?;
    Ok(())
}

/// Waits until the replica logs that its controller runs (caches synced). Each process leads
/// at most once in the storm (the leader is the one killed), so the line means "leading now".
async fn wait_controller_running(replica: &Replica) -> Result<(), StormError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while replica.log_lines_with("controller running").is_empty() {
        if Instant::now() > deadline {
            return Err(StormError::Harness(format!(
                "{} never started its controller:\n{}",
                replica.identity,
                replica.log()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

fn released_count(cluster: &Cluster) -> usize {
    cluster.monitor.count(|p| p.released.is_some())
}

async fn last_sample(cluster: &Cluster) -> Option<f64> {
    ledger::stored(&cluster.api, QUEUES[0])
        .await
        .map(|(_, sample)| sample)
}

/// Polls `check` every 20 ms until it gives a value, for at most `timeout`.
async fn poll_until<T, F>(
    what: &str,
    timeout: Duration,
    check: impl Fn() -> F,
) -> Result<T, StormError>
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return Ok(found);
        }
        if Instant::now() > deadline {
            return Err(StormError::Harness(format!(
                "timed out after {timeout:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wall_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One kill: waits until a replica leads with its controller running, points admission at the
/// other, picks the moment, SIGKILLs the leader, starts it again while the other takes over,
/// and waits for the new leader's first ledger write.
async fn kill_once(
    cluster: &mut Cluster,
    options: &StormOptions,
    phase: &PhaseOptions,
    rng: &mut Pcg64,
) -> Result<KillRecord, StormError> {
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await?;
    let other = 1 - leader;
    wait_controller_running(&cluster.replicas[leader]).await?;
    let term_began = released_count(cluster);
    cluster.admit_through(other).await?;

    let mid_burst = unit(rng) < phase.burst_share;
    let delay = if mid_burst {
        // The next release, then within the next few releases' time at the rate limit.
        let before = released_count(cluster);
        poll_until("a release", Duration::from_secs(30), || async {
            (released_count(cluster) > before).then_some(())
        })
        .await?;
        Duration::from_secs_f64(unit(rng) * 3.0 / options.release_rate)
    } else {
        Duration::from_secs_f64(unit(rng) * options.cycle_interval.as_secs_f64())
    };
    tokio::time::sleep(delay).await;

    let killed_identity = cluster.replicas[leader].lease_identity();
    let sample_before = last_sample(cluster).await;
    cluster.replicas[leader].kill();
    let killed = Instant::now();
    let killed_wall = wall_now();
    let releases_in_term = released_count(cluster) - term_began;
    let identity = cluster.replicas[leader].identity.clone();
    let shared: &Cluster = cluster;
    let takeover = async {
        poll_until(
            "another replica holding the Lease",
            Duration::from_secs(60),
            || async {
                let holder = shared.leader_identity().await?;
                (holder != killed_identity).then(|| killed.elapsed())
            },
        )
        .await
    };
    let (restarted, handover) = tokio::join!(Replica::start(&shared.settings, &identity), takeover);
    cluster.replicas[leader] = restarted?;
    let handover = handover.map_err(|e| StormError::Violation {
        phase: phase.name.clone(),
        kill: 0,
        what: format!("{e}\n{}", cluster.logs()),
    })?;
    cluster.wait_ready(leader).await?;

    // The new leader's first ledger write.
    let new_leader = cluster.wait_for_leader(Duration::from_secs(30)).await?;
    wait_controller_running(&cluster.replicas[new_leader]).await?;
    let sample_after = poll_until(
        "the new leader's first ledger write",
        Duration::from_secs(30),
        || async {
            last_sample(cluster)
                .await
                .filter(|s| Some(*s) != sample_before && *s > killed_wall)
        },
    )
    .await?;
    let (restimated_s, unwritten_s) = match sample_before {
        Some(before) => (sample_after - before, killed_wall - before),
        None => (0.0, 0.0),
    };
    Ok(KillRecord {
        phase: 0,
        mid_burst,
        delay,
        handover,
        restimated_s,
        unwritten_s,
        releases_in_term,
    })
}

/// Waits until every pod has run, then for a ledger write after the last finish, and compares.
async fn drain_and_compare(
    cluster: &Cluster,
    report: &StormReport,
    options: &StormOptions,
) -> Result<Vec<LedgerComparison>, StormError> {
    poll_until(
        "every pod run to the end",
        Duration::from_secs(120),
        || async {
            (cluster
                .monitor
                .count(|p| p.gated_at_first_sight && p.finished.is_none())
                == 0)
                .then_some(())
        },
    )
    .await?;
    // The cycle after the last finish folds the last rates in; the status write after that
    // carries them.
    let settled = wall_now() + options.cycle_interval.as_secs_f64();
    poll_until(
        "a ledger written after the last pod finished",
        Duration::from_secs(60),
        || async {
            for queue in QUEUES {
                let (_, sample) = ledger::stored(&cluster.api, queue).await?;
                if sample <= settled + options.status_interval.as_secs_f64() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await?;
    let restimated: f64 = report.kills.iter().map(|k| k.restimated_s).sum();
    let pods = cluster.monitor.pods();
    let mut comparisons = Vec::new();
    for queue in QUEUES {
        let (charged, _) = ledger::stored(&cluster.api, queue)
            .await
            .ok_or_else(|| StormError::Harness(format!("queue {queue} has no ledger")))?;
        let ran = ledger::ran(&pods, queue).map_err(StormError::Harness)?;
        comparisons.push(LedgerComparison {
            queue: queue.to_string(),
            ran,
            charged,
            bound: f64::from(POOL_GPUS) * (restimated + options.cycle_interval.as_secs_f64()),
        });
    }
    Ok(comparisons)
}
