//! Kubelet restart storm: 50 restarts, each followed by re-registration of every resource, with
//! the plugin's file descriptors, threads and tasks counted before and after.
//!
//! Alone in its test binary so that no other test's sockets move the process-wide counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use gpufair_device_plugin::backend::{FakeBackend, GpuBackend};
use gpufair_device_plugin::config::Config;
use gpufair_device_plugin::testkit::{FakeKubelet, TestError};
use gpufair_device_plugin::{Args, run_with_backend};
use tokio_util::sync::CancellationToken;

const RESTARTS: usize = 50;
const RESOURCES: [&str; 2] = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"];

fn count_entries(path: &str) -> usize {
    std::fs::read_dir(path).map_or(0, |entries| entries.count())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    fds: usize,
    threads: usize,
    tasks: usize,
}

fn counts() -> Counts {
    Counts {
        fds: count_entries("/proc/self/fd"),
        threads: count_entries("/proc/self/task"),
        tasks: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
    }
}

/// Connections and tasks close asynchronously: wait until the counts settle back to at most
/// `baseline`, or report what is still above it.
async fn settled(baseline: Counts) -> Result<Counts, TestError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = counts();
        // Threads are reported, not compared: idle blocking-pool threads linger for a while
        // by design.
        if now.fds <= baseline.fds && now.tasks <= baseline.tasks {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(format!("leak: {now:?} after the storm, {baseline:?} before").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_kubelet_restarts_always_reregister_and_leak_nothing() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir_all(&plugins)?;
    let mut kubelet = FakeKubelet::start(&plugins)?;
    let fake = FakeBackend::parse(
        "gpus:
  - { uuid: GPU-00000000-0000-0000-0000-000000000000, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920 }
  - uuid: GPU-11111111-0000-0000-0000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    mig: [ { uuid: MIG-aaaaaaaa-0000-0000-0000-000000000000, profile: 1g.10gb } ]
",
    )?;
    let args = Args::try_parse_from([
        "gpufair-device-plugin",
        "--kubelet-dir",
        &plugins.display().to_string(),
        "--pod-resources-socket",
        &dir.path().join("pod-resources.sock").display().to_string(),
        "--node-name",
        "node-a",
    ])?;
    let stop = CancellationToken::new();
    let backend: Arc<dyn GpuBackend> = Arc::new(fake);
    let plugin = tokio::spawn(run_with_backend(
        args,
        Config::default(),
        backend,
        stop.clone(),
    ));

    // One registration round and one restart first, so every lazily created thread and
    // buffer exists before the baseline is taken.
    reregistered(&mut kubelet, Duration::from_secs(5)).await?;
    kubelet.restart().await?;
    reregistered(&mut kubelet, Duration::from_secs(5)).await?;
    let baseline = settled_baseline().await;

    let storm = Instant::now();
    let mut slowest = Duration::ZERO;
    for restart in 0..RESTARTS {
        kubelet.restart().await?;
        let restarted = Instant::now();
        reregistered(&mut kubelet, Duration::from_secs(5))
            .await
            .map_err(|err| format!("restart {restart}: {err}"))?;
        slowest = slowest.max(restarted.elapsed());
    }
    let took = storm.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "{RESTARTS} restarts took {took:?}"
    );
    let after = settled(baseline).await?;
    println!(
        "{RESTARTS} kubelet restarts in {took:?} (slowest re-registration {slowest:?}); before {baseline:?}, after {after:?}"
    );
    let sockets: Vec<String> = std::fs::read_dir(&plugins)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(sockets.len(), RESOURCES.len() + 1, "{sockets:?}");
    assert!(!plugin.is_finished(), "the plugin stayed up");
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), plugin).await???;
    Ok(())
}

/// Every resource registers again and delivers its device list; the kubelet side of the
/// connections is dropped afterwards, as a restarting kubelet's would be.
async fn reregistered(kubelet: &mut FakeKubelet, within: Duration) -> Result<(), TestError> {
    let mut regs = kubelet.registrations(RESOURCES.len(), within).await?;
    let names: Vec<&str> = regs
        .iter()
        .map(|r| r.request.resource_name.as_str())
        .collect();
    assert_eq!(names, RESOURCES);
    for reg in regs.iter_mut() {
        let list = reg
            .next_list(Duration::from_secs(2))
            .await
            .ok_or("no device list after registration")?;
        assert!(!list.devices.is_empty());
    }
    Ok(())
}

/// The counts once the first rounds' connections have closed.
async fn settled_baseline() -> Counts {
    tokio::time::sleep(Duration::from_millis(500)).await;
    counts()
}
