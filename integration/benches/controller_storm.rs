//! The controller kill-and-restart storm, at full length: the Lease holder SIGKILLed and
//! restarted `--restarts` times with a short Lease (1 s / 700 ms / 200 ms), then
//! `--default-lease-kills` times with the default Lease (10 s / 7 s / 2 s), measuring
//! takeover. Runs for about half an hour; not part of `cargo test`:
//!
//! ```sh
//! cargo bench --profile dev -p gpufair-integration --bench controller_storm -- --restarts 1000
//! ```
//!
//! Prints a summary table and exits non-zero on any violation (a pod released twice, a node
//! promised past capacity, a takeover over 15 s, a ledger off by more than its bound).

use std::time::Duration;

use clap::Parser;
use gpufair_integration::storm::{self, PhaseOptions, StormOptions};

#[derive(Debug, Parser)]
#[command(about = "Kill and restart gpufair's controller leader, again and again")]
struct Cli {
    /// Kills with the short Lease.
    #[arg(long, default_value_t = 1000)]
    restarts: usize,
    /// Kills with the default Lease, measuring takeover.
    #[arg(long, default_value_t = 20)]
    default_lease_kills: usize,
    /// Seed of the kill points and the pods.
    #[arg(long, default_value_t = 14)]
    seed: u64,
    /// Share of kills made just after a release, mid-burst.
    #[arg(long, default_value_t = 0.25)]
    burst_share: f64,
    /// Seconds a finished pod stays before it is removed (as a Job's ttlSecondsAfterFinished).
    #[arg(long, default_value_t = 0.5)]
    finished_pod_ttl: f64,
    /// Seconds the workload keeps running with no kill after the kills (with no kills: the
    /// ledger without failovers).
    #[arg(long, default_value_t = 0.0)]
    steady_seconds: f64,
    /// Prints progress every this many kills.
    #[arg(long, default_value_t = 50)]
    progress_every: usize,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if !(0.0..=1.0).contains(&cli.burst_share) {
        anyhow::bail!(
            "--burst-share must be between 0 and 1 (got {})",
            cli.burst_share
        );
    }
    for (flag, seconds) in [
        ("--finished-pod-ttl", cli.finished_pod_ttl),
        ("--steady-seconds", cli.steady_seconds),
    ] {
        if !(seconds.is_finite() && seconds >= 0.0) {
            anyhow::bail!("{flag} must be a number of seconds, 0 or more (got {seconds})");
        }
    }
    // Build the binaries before the clock starts.
    gpufair_integration::binary("gpufair-webhook");
    gpufair_integration::binary("gpufair-device-plugin");
    let mut options = StormOptions::short(cli.restarts, cli.seed);
    options.phases = vec![
        PhaseOptions {
            burst_share: cli.burst_share,
            ..PhaseOptions::short_lease(cli.restarts)
        },
        PhaseOptions {
            burst_share: cli.burst_share,
            ..PhaseOptions::default_lease(cli.default_lease_kills)
        },
    ];
    options.phases.retain(|p| p.kills > 0);
    options.progress_every = cli.progress_every;
    options.workload.finished_pod_ttl = Duration::from_secs_f64(cli.finished_pod_ttl);
    options.steady = Duration::from_secs_f64(cli.steady_seconds);
    println!(
        "controller storm: {} kills with a 1s/700ms/200ms Lease, then {} with the default Lease, then {} s without kills; seed {}; finished pods removed after {} s",
        cli.restarts, cli.default_lease_kills, cli.steady_seconds, cli.seed, cli.finished_pod_ttl
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    let report = runtime.block_on(storm::run(options))?;
    runtime.shutdown_timeout(Duration::from_secs(2));
    println!("\n{}", report.table());
    if !report.violations.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
