//! The real `gpufair-device-plugin` binary against a fake kubelet: registration, allocation,
//! SIGTERM cleanup, and the error a node without NVML gets.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpufair_device_plugin::proto::deviceplugin::{AllocateRequest, ContainerAllocateRequest};
use gpufair_device_plugin::testkit::{FakeKubelet, TestError};

const GPU_A: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000000";
const GPU_B: &str = "GPU-bbbbbbbb-0000-0000-0000-000000000000";
const MIG: &str = "MIG-cccccccc-0000-0000-0000-000000000000";

fn write_fake_gpus(path: &Path) -> std::io::Result<()> {
    std::fs::write(
        path,
        format!(
            "gpus:
  - {{ uuid: {GPU_A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81920, nvlinkPeers: [1] }}
  - {{ uuid: {GPU_B}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81920 }}
  - uuid: GPU-dddddddd-0000-0000-0000-000000000000
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81920
    mig: [ {{ uuid: {MIG}, profile: 1g.10gb }} ]
"
        ),
    )
}

/// Kills the child if the test fails before it is reaped.
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[tokio::test]
async fn binary_registers_allocates_and_cleans_up_on_sigterm() -> Result<(), TestError> {
    let binary = gpufair_integration::binary("gpufair-device-plugin");
    let tmp = tempfile::tempdir()?;
    let plugins = tmp.path().join("device-plugins");
    std::fs::create_dir_all(&plugins)?;
    let fake = tmp.path().join("gpus.yaml");
    write_fake_gpus(&fake)?;
    let mut kubelet = FakeKubelet::start(&plugins)?;

    let child = Command::new(&binary)
        .arg("--kubelet-dir")
        .arg(&plugins)
        .arg("--fake-gpus")
        .arg(&fake)
        .arg("--pod-resources-socket")
        .arg(tmp.path().join("absent.sock"))
        .arg("--node-name")
        .arg("e2e-node")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .spawn()?;
    let mut reaper = Reaper(Some(child));

    let mut regs = kubelet.registrations(2, Duration::from_secs(10)).await?;
    let names: Vec<_> = regs
        .iter()
        .map(|r| r.request.resource_name.clone())
        .collect();
    assert_eq!(names, ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]);
    let whole = &mut regs[0];
    let list = whole
        .next_list(Duration::from_secs(2))
        .await
        .ok_or("no device list")?;
    let ids: Vec<_> = list.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, [GPU_A, GPU_B]);
    let response = whole
        .client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec![GPU_B.into(), GPU_A.into()],
            }],
        })
        .await?
        .into_inner();
    assert_eq!(
        response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        format!("{GPU_A},{GPU_B}")
    );
    for reg in &regs {
        assert!(plugins.join(&reg.request.endpoint).exists());
    }

    let child = reaper.0.as_mut().ok_or("child gone")?;
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()?;
    assert!(status.success());
    let exit =
        wait_with_timeout(child, Duration::from_secs(5)).ok_or("no exit within 5 s of SIGTERM")?;
    reaper.0 = None;
    assert!(exit.success(), "exit status {exit}");
    let left: Vec<_> = std::fs::read_dir(&plugins)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from("kubelet.sock")],
        "only kubelet's socket remains"
    );
    Ok(())
}

#[test]
fn bad_config_is_named_and_missing_nvml_says_how_to_use_the_fake() -> Result<(), TestError> {
    let binary = gpufair_integration::binary("gpufair-device-plugin");
    let tmp = tempfile::tempdir()?;
    let fake = tmp.path().join("gpus.yaml");
    write_fake_gpus(&fake)?;
    let config = tmp.path().join("config.yaml");
    std::fs::write(&config, "sharing: { replicas: 1, gpus: [0] }\n")?;
    let output = Command::new(&binary)
        .arg("--kubelet-dir")
        .arg(tmp.path())
        .arg("--fake-gpus")
        .arg(&fake)
        .arg("--config")
        .arg(&config)
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("sharing.replicas") && stderr.contains("at least 2"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Only meaningful where the driver is absent, as on CI; a GPU machine would start serving.
    if gpufair_device_plugin::backend::NvmlBackend::load().is_ok() {
        return Ok(());
    }
    let output = Command::new(&binary)
        .arg("--kubelet-dir")
        .arg(tmp.path())
        .env_remove("GPUFAIR_FAKE_GPUS")
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("NVML could not be loaded"), "{stderr}");
    assert!(stderr.contains("--fake-gpus"), "{stderr}");
    Ok(())
}
