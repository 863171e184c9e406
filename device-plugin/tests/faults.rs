//! NVML faults injected through the fake backend while the plugin serves a fake kubelet: the
//! devices they touch go Unhealthy, the process stays up, and they recover once the fault
//! clears.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use gpufair_device_plugin::backend::{FakeBackend, FakeError, Fault, GpuBackend};
use gpufair_device_plugin::config::Config;
use gpufair_device_plugin::proto::deviceplugin::ListAndWatchResponse;
use gpufair_device_plugin::testkit::{FakeKubelet, Registered, TestError};
use gpufair_device_plugin::{Args, RunError, run_with_backend};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const G0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const G1: &str = "GPU-11111111-0000-0000-0000-000000000000";
/// Short, so recoveries fit a test; probes still gate reset-class marks.
const RECOVERY: Duration = Duration::from_millis(300);

struct Plugin {
    _dir: tempfile::TempDir,
    _kubelet: FakeKubelet,
    fake: Arc<FakeBackend>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
    whole: Registered,
}

impl Plugin {
    async fn start() -> Result<Plugin, TestError> {
        let dir = tempfile::tempdir()?;
        let plugins = dir.path().join("device-plugins");
        std::fs::create_dir_all(&plugins)?;
        let mut kubelet = FakeKubelet::start(&plugins)?;
        let fake = Arc::new(FakeBackend::parse(&format!(
            "gpus:\n  - {{ uuid: {G0}, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920 }}\n  - {{ uuid: {G1}, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920 }}\n"
        ))?);
        let config = Config::parse("healthRecovery: 300ms\n")?;
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
        let backend: Arc<dyn GpuBackend> = fake.clone();
        let task = tokio::spawn(run_with_backend(args, config, backend, stop.clone()));
        let mut whole = kubelet
            .registrations(1, Duration::from_secs(5))
            .await?
            .remove(0);
        let first = whole
            .next_list(Duration::from_secs(2))
            .await
            .ok_or("first list")?;
        assert_eq!(healths(&first), ["Healthy", "Healthy"]);
        Ok(Plugin {
            _dir: dir,
            _kubelet: kubelet,
            fake,
            stop,
            task,
            whole,
        })
    }

    /// Waits for a list with exactly these healths, skipping intermediate ones.
    async fn expect(&mut self, wanted: [&str; 2], within: Duration) -> Result<(), TestError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut last = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.whole.next_list(left).await {
                Some(list) if healths(&list) == wanted => return Ok(()),
                Some(list) => last = Some(healths(&list).join(",")),
                None => {
                    return Err(format!(
                        "no list with {wanted:?} within {within:?} (last: {last:?})"
                    )
                    .into());
                }
            }
        }
    }

    /// No new list for `period`: health did not change.
    async fn steady(&mut self, period: Duration) -> Result<(), TestError> {
        match self.whole.next_list(period).await {
            None => Ok(()),
            Some(list) => Err(format!("health changed to {:?}", healths(&list)).into()),
        }
    }

    async fn stop(self) -> Result<(), TestError> {
        assert!(!self.task.is_finished(), "the plugin stayed up");
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task).await???;
        Ok(())
    }
}

fn healths(list: &ListAndWatchResponse) -> Vec<&str> {
    list.devices.iter().map(|d| d.health.as_str()).collect()
}

#[tokio::test]
async fn a_lost_gpu_is_unhealthy_until_it_answers_again_and_is_watched_again()
-> Result<(), TestError> {
    let mut plugin = Plugin::start().await?;
    plugin.fake.inject_fault(G1, Fault::Lost)?;
    // Noticed on the event wait (within one fault poll), reported as lost.
    plugin
        .expect(["Healthy", "Unhealthy"], Duration::from_secs(2))
        .await?;
    // Probes keep failing while it is off the bus: no recovery however long.
    plugin.steady(RECOVERY * 4).await?;
    plugin.fake.clear_faults(G1)?;
    plugin
        .expect(["Healthy", "Healthy"], Duration::from_secs(4))
        .await?;
    // It is back in the event set (the watcher looks again after each one-second wait): a new
    // XID on it is seen. Events on a GPU outside the set are never delivered, as with NVML.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    plugin.fake.inject_xid(G1, 79);
    plugin
        .expect(["Healthy", "Unhealthy"], Duration::from_secs(3))
        .await?;
    plugin
        .expect(["Healthy", "Healthy"], Duration::from_secs(3))
        .await?;
    plugin.stop().await
}

#[tokio::test]
async fn failing_driver_calls_hold_an_xid_mark_until_they_clear() -> Result<(), TestError> {
    let mut plugin = Plugin::start().await?;
    plugin
        .fake
        .inject_fault(G0, Fault::Calls(FakeError::Unknown))?;
    plugin.fake.inject_xid(G0, 79);
    plugin
        .expect(["Unhealthy", "Healthy"], Duration::from_secs(2))
        .await?;
    // The probe after the quiet period fails (NVML_ERROR_UNKNOWN): still Unhealthy.
    plugin.steady(RECOVERY * 4).await?;
    plugin.fake.clear_faults(G0)?;
    plugin
        .expect(["Healthy", "Healthy"], Duration::from_secs(3))
        .await?;
    plugin.stop().await
}

#[tokio::test]
async fn event_wait_errors_mark_every_gpu_until_waiting_works_again() -> Result<(), TestError> {
    let mut plugin = Plugin::start().await?;
    plugin
        .fake
        .inject_fault(G0, Fault::EventWait(FakeError::Unknown))?;
    plugin
        .expect(["Unhealthy", "Unhealthy"], Duration::from_secs(2))
        .await?;
    // The watcher backs off (1 s, then 2 s) for longer than the quiet period; the mark holds.
    plugin.steady(Duration::from_millis(1_500)).await?;
    plugin.fake.clear_faults(G0)?;
    // Next attempt after the back-off works; the quiet period then runs.
    plugin
        .expect(["Healthy", "Healthy"], Duration::from_secs(5))
        .await?;
    plugin.stop().await
}
