//! What a real NVIDIA node does to the plugin, scripted in the fake backend and checked where
//! kubelet sees it: the real `gpufair-device-plugin` binary against a fake kubelet (advertised
//! devices, health, Allocate responses) and its usage report.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use gpufair_device_plugin::backend::{
    BackendError, DeviceUsage, Enumeration, FakeBackend, GpuBackend, HealthEvent, ProcessUsage,
};
use gpufair_device_plugin::config::Config;
use gpufair_device_plugin::proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, ListAndWatchResponse,
};
use gpufair_device_plugin::proto::podresources::{ListPodResourcesResponse, PodResources};
use gpufair_device_plugin::testkit::{
    FakeKubelet, FakePodResources, Registered, TestError, http_get, pod_holding,
};
use gpufair_device_plugin::{Args, run_with_backend};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

const A: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000000";
const B: &str = "GPU-bbbbbbbb-0000-0000-0000-000000000000";
const C: &str = "GPU-cccccccc-0000-0000-0000-000000000000";
const MIG_1: &str = "MIG-11111111-0000-0000-0000-000000000000";
const MIG_2: &str = "MIG-22222222-0000-0000-0000-000000000000";
const WAIT: Duration = Duration::from_secs(10);

/// Kills the plugin if a test fails before stopping it.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Plugin {
    tmp: tempfile::TempDir,
    kubelet: FakeKubelet,
    _child: Reaper,
}

impl Plugin {
    /// Starts the binary on `gpus` (the fake GPU file) and `config`, with `extra` flags.
    async fn start(gpus: &str, config: &str, extra: &[String]) -> Result<Plugin, TestError> {
        let tmp = tempfile::tempdir()?;
        Plugin::start_in(tmp, gpus, config, extra).await
    }

    async fn start_in(
        tmp: tempfile::TempDir,
        gpus: &str,
        config: &str,
        extra: &[String],
    ) -> Result<Plugin, TestError> {
        let plugins = tmp.path().join("device-plugins");
        std::fs::create_dir_all(&plugins)?;
        std::fs::write(tmp.path().join("gpus.yaml"), gpus)?;
        std::fs::write(tmp.path().join("config.yaml"), config)?;
        let kubelet = FakeKubelet::start(&plugins)?;
        let child = Command::new(env!("CARGO_BIN_EXE_gpufair-device-plugin"))
            .arg("--kubelet-dir")
            .arg(&plugins)
            .arg("--fake-gpus")
            .arg(tmp.path().join("gpus.yaml"))
            .arg("--config")
            .arg(tmp.path().join("config.yaml"))
            .arg("--pod-resources-socket")
            .arg(tmp.path().join("pod-resources.sock"))
            .arg("--node-name")
            .arg("gpu-node")
            .args(extra)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .spawn()?;
        Ok(Plugin {
            tmp,
            kubelet,
            _child: Reaper(child),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
}

fn find<'a>(regs: &'a mut [Registered], name: &str) -> &'a mut Registered {
    regs.iter_mut()
        .find(|r| r.request.resource_name == name)
        .unwrap_or_else(|| panic!("{name} not registered"))
}

fn names(regs: &[Registered]) -> Vec<String> {
    regs.iter()
        .map(|r| r.request.resource_name.clone())
        .collect()
}

fn ids(list: &ListAndWatchResponse) -> Vec<&str> {
    list.devices.iter().map(|d| d.id.as_str()).collect()
}

fn healths(list: &ListAndWatchResponse) -> Vec<&str> {
    list.devices.iter().map(|d| d.health.as_str()).collect()
}

/// Reads lists until one has exactly `expected` healths; fails after `timeout`.
async fn wait_for_health(
    reg: &mut Registered,
    expected: &[&str],
    timeout: Duration,
) -> Result<(), TestError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let list = reg
            .next_list(left)
            .await
            .ok_or_else(|| format!("no list with healths {expected:?} within {timeout:?}"))?;
        if healths(&list) == expected {
            return Ok(());
        }
    }
}

fn free_port() -> Result<u16, TestError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits for a usage report (written every 200 ms) that satisfies `done`.
async fn report_where(
    path: &Path,
    done: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value, TestError> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
            && done(&value)
        {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(format!("no matching report in {}", path.display()).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pod(name: &str, resource: &str, id: &str) -> PodResources {
    pod_holding("team", name, resource, id)
}

fn pod_named<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["spec"]["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("pod {name} not in {report}"))
}

/// Defect 1: a GPU with MIG on and no instances (a reconfiguration) is not offered whole.
#[tokio::test]
async fn a_mig_gpu_without_instances_is_not_offered_as_a_whole_gpu() -> Result<(), TestError> {
    let gpus = format!(
        "gpus:
  - {{ uuid: {A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559 }}
  - {{ uuid: {B}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559, migEnabled: true }}
"
    );
    let mut plugin = Plugin::start(&gpus, "", &[]).await?;
    let mut regs = plugin.kubelet.registrations(1, WAIT).await?;
    assert_eq!(names(&regs), ["nvidia.com/gpu"]);
    let list = regs[0].next_list(WAIT).await.ok_or("no list")?;
    assert_eq!(ids(&list), [A], "the MIG-enabled GPU is not a whole GPU");
    assert!(
        plugin
            .kubelet
            .next_registration(Duration::from_millis(300))
            .await
            .is_none()
    );
    Ok(())
}

/// Defect 2: without MIG monitoring rights the MIG GPU's memory size is NoPermission; the node
/// still advertises everything else.
#[tokio::test]
async fn a_mig_gpu_whose_memory_cannot_be_read_still_offers_its_instances() -> Result<(), TestError>
{
    let gpus = format!(
        "gpus:
  - {{ uuid: {A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559 }}
  - uuid: {B}
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81559
    failures: {{ memoryInfo: NoPermission }}
    mig: [ {{ uuid: {MIG_1}, profile: 3g.40gb }} ]
"
    );
    let mut plugin = Plugin::start(&gpus, "", &[]).await?;
    let mut regs = plugin.kubelet.registrations(2, WAIT).await?;
    assert_eq!(names(&regs), ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]);
    let mig = find(&mut regs, "nvidia.com/mig-3g.40gb");
    let list = mig.next_list(WAIT).await.ok_or("no MIG list")?;
    assert_eq!(ids(&list), [MIG_1]);
    assert_eq!(healths(&list), ["Healthy"]);
    Ok(())
}

/// Defect 3: with deviceSpecs, a MIG container gets its GPU instance's and compute instance's
/// `/dev/nvidia-caps` nodes besides `/dev/nvidia<minor>`.
#[tokio::test]
async fn mig_allocate_passes_the_nvidia_caps_nodes() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let proc = tmp.path().join("proc");
    let caps = proc.join("driver/nvidia/capabilities/gpu1/mig");
    for (dir, minor) in [("gi3", 39), ("gi3/ci0", 40)] {
        std::fs::create_dir_all(caps.join(dir))?;
        std::fs::write(
            caps.join(dir).join("access"),
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
        )?;
    }
    let dev = tmp.path().join("host");
    std::fs::create_dir_all(dev.join("dev"))?;
    std::fs::write(dev.join("dev/nvidiactl"), b"")?;
    let gpus = format!(
        "gpus:
  - {{ uuid: {A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559 }}
  - uuid: {B}
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81559
    mig: [ {{ uuid: {MIG_1}, profile: 1g.10gb, gpuInstance: 3, computeInstance: 0 }} ]
"
    );
    let config = format!(
        "allocate: {{ deviceSpecs: true, devRoot: {} }}\n",
        dev.display()
    );
    let extra = vec!["--proc-root".to_string(), proc.display().to_string()];
    let mut plugin = Plugin::start_in(tmp, &gpus, &config, &extra).await?;
    let mut regs = plugin.kubelet.registrations(2, WAIT).await?;
    let mig = find(&mut regs, "nvidia.com/mig-1g.10gb");
    let response = mig
        .client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec![MIG_1.into()],
            }],
        })
        .await?
        .into_inner();
    let specs = &response.container_responses[0].devices;
    let paths: Vec<_> = specs.iter().map(|d| d.container_path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/dev/nvidia-caps/nvidia-cap39",
            "/dev/nvidia-caps/nvidia-cap40",
            "/dev/nvidia1",
            "/dev/nvidiactl"
        ]
    );
    assert!(
        specs[0]
            .host_path
            .ends_with("host/dev/nvidia-caps/nvidia-cap39")
    );
    Ok(())
}

/// Defect 4: an XID the driver attributes to one MIG instance marks only that instance.
#[tokio::test]
async fn an_xid_on_one_mig_instance_marks_only_that_instance() -> Result<(), TestError> {
    let gpus = format!(
        "gpus:
  - uuid: {A}
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81559
    mig:
      - {{ uuid: {MIG_1}, profile: 1g.10gb, gpuInstance: 9, computeInstance: 0 }}
      - {{ uuid: {MIG_2}, profile: 3g.40gb, gpuInstance: 2, computeInstance: 0 }}
    xids: [ {{ at: 400ms, xid: 48, gpuInstance: 2, computeInstance: 0 }} ]
"
    );
    let mut plugin = Plugin::start(&gpus, "healthRecovery: 10m\n", &[]).await?;
    let mut regs = plugin.kubelet.registrations(2, WAIT).await?;
    for reg in regs.iter_mut() {
        let first = reg.next_list(WAIT).await.ok_or("first list")?;
        assert_eq!(healths(&first), ["Healthy"]);
    }
    let hit = find(&mut regs, "nvidia.com/mig-3g.40gb");
    wait_for_health(hit, &["Unhealthy"], WAIT).await?;
    let sibling = find(&mut regs, "nvidia.com/mig-1g.10gb");
    assert!(
        sibling
            .next_list(Duration::from_millis(500))
            .await
            .is_none(),
        "the other instance of the GPU stays Healthy"
    );
    Ok(())
}

/// Defect 5: a GPU that fell off the bus (XID 79) does not come back after the quiet period;
/// a transient XID (94) on another GPU does.
#[tokio::test]
async fn a_gpu_that_fell_off_the_bus_does_not_recover_by_itself() -> Result<(), TestError> {
    let gpus = format!(
        "gpus:
  - {{ uuid: {A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559,
      xids: [ {{ at: 300ms, xid: 79 }} ], lostAt: 350ms }}
  - {{ uuid: {B}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559,
      xids: [ {{ at: 300ms, xid: 94 }} ] }}
"
    );
    let mut plugin = Plugin::start(&gpus, "healthRecovery: 300ms\n", &[]).await?;
    let mut regs = plugin.kubelet.registrations(1, WAIT).await?;
    let whole = &mut regs[0];
    wait_for_health(whole, &["Healthy", "Healthy"], WAIT).await?;
    wait_for_health(whole, &["Unhealthy", "Unhealthy"], WAIT).await?;
    // B recovers after its quiet period; A, lost, fails its probe and stays Unhealthy.
    wait_for_health(whole, &["Unhealthy", "Healthy"], WAIT).await?;
    let settled = Instant::now();
    while settled.elapsed() < Duration::from_millis(1500) {
        if let Some(list) = whole.next_list(Duration::from_millis(200)).await {
            assert_eq!(healths(&list)[0], "Unhealthy", "a lost GPU came back");
        }
    }
    Ok(())
}

/// Defect 6: one lost GPU, and one that cannot be registered for events, leave the other GPUs
/// healthy and watched; a GPU that cannot be read at startup is skipped, not fatal.
#[tokio::test]
async fn one_bad_gpu_does_not_take_the_node_down() -> Result<(), TestError> {
    let gpus = format!(
        "gpus:
  - {{ uuid: {A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559, xids: [ {{ at: 900ms, xid: 48 }} ] }}
  - {{ uuid: {B}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559, lostAt: 400ms }}
  - {{ uuid: {C}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559, failures: {{ eventRegistration: Unknown }} }}
  - {{ uuid: GPU-dddddddd-0000-0000-0000-000000000000, model: NVIDIA H100 80GB HBM3,
      memoryMiB: 81559, failures: {{ memoryInfo: Unknown }} }}
"
    );
    let port = free_port()?;
    let extra = vec!["--metrics-listen".to_string(), format!("127.0.0.1:{port}")];
    let mut plugin = Plugin::start(&gpus, "healthRecovery: 10m\n", &extra).await?;
    let mut regs = plugin.kubelet.registrations(1, WAIT).await?;
    let whole = &mut regs[0];
    let first = whole.next_list(WAIT).await.ok_or("first list")?;
    assert_eq!(ids(&first), [A, B, C], "the unreadable GPU is skipped");
    // C could not be registered; B falls off the bus; A stays healthy and watched.
    wait_for_health(whole, &["Healthy", "Unhealthy", "Unhealthy"], WAIT).await?;
    wait_for_health(whole, &["Unhealthy", "Unhealthy", "Unhealthy"], WAIT).await?;
    let metrics = http_get(port, "/metrics", WAIT).await?;
    assert!(metrics.contains("gpufair_gpus_skipped 1"), "{metrics}");
    Ok(())
}

/// Defect 7: MIG pods accrue utilization: from GPM where the GPU has it (Hopper), else their
/// whole allocation, and the metrics say which.
#[tokio::test]
async fn mig_pods_are_charged_gpm_utilization_or_their_allocation() -> Result<(), TestError> {
    let gpus = format!(
        "gpus:
  - uuid: {A}
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81559
    mig:
      - {{ uuid: {MIG_1}, profile: 1g.10gb, utilization: 0.3 }}
      - {{ uuid: {MIG_2}, profile: 3g.40gb }}
"
    );
    let port = free_port()?;
    let tmp = tempfile::tempdir()?;
    let report = tmp.path().join("report.json");
    let extra = vec![
        "--report-file".to_string(),
        report.display().to_string(),
        "--utilization-interval".to_string(),
        "200ms".to_string(),
        "--metrics-listen".to_string(),
        format!("127.0.0.1:{port}"),
    ];
    let plugin = Plugin::start_in(tmp, &gpus, "", &extra).await?;
    let pods = ListPodResourcesResponse {
        pod_resources: vec![
            pod("hopper", "nvidia.com/mig-1g.10gb", MIG_1),
            pod("ampere", "nvidia.com/mig-3g.40gb", MIG_2),
        ],
    };
    let _pod_resources = FakePodResources::start(&plugin.path("pod-resources.sock"), pods)?;
    let value = report_where(&report, |v| v["spec"]["podCount"] == 2).await?;
    assert_eq!(pod_named(&value, "hopper")["smUtilization"], 0.3);
    assert_eq!(pod_named(&value, "ampere")["smUtilization"], 1.0);
    let metrics = http_get(port, "/metrics", WAIT).await?;
    assert!(
        metrics.contains(&format!(
            r#"gpufair_utilization_charged_by_allocation{{device="{MIG_2}"}} 1"#
        )),
        "{metrics}"
    );
    assert!(!metrics.contains(&format!(r#"charged_by_allocation{{device="{MIG_1}"}}"#)));
    Ok(())
}

/// Defect 8: compute, graphics and MPS processes merge by PID; a failed utilization sample or
/// utilization rate loses neither the processes nor the memory.
#[tokio::test]
async fn process_lists_survive_sample_errors() -> Result<(), TestError> {
    let uid = "0c6bbd8a-3c45-4d7e-9a53-1f2e3d4c5b6a";
    let tmp = tempfile::tempdir()?;
    let proc = tmp.path().join("proc");
    for pid in [4242, 4343] {
        std::fs::create_dir_all(proc.join(pid.to_string()))?;
        std::fs::write(
            proc.join(format!("{pid}/cgroup")),
            format!("0::/kubepods/burstable/pod{uid}/0123abcd\n"),
        )?;
    }
    let gpus = format!(
        "gpus:
  - uuid: {A}
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81559
    utilization: 0.9
    failures: {{ processUtilization: InsufficientSize, utilizationRates: Unknown }}
    processes:
      - {{ pid: 4242, memoryMiB: 2048, smUtilization: 0.4 }}
      - {{ pid: 4242, memoryMiB: 2048, kind: graphics }}
      - {{ pid: 4343, memoryMiB: 512, kind: mps }}
"
    );
    let report = tmp.path().join("report.json");
    let extra = vec![
        "--report-file".to_string(),
        report.display().to_string(),
        "--utilization-interval".to_string(),
        "200ms".to_string(),
        "--proc-root".to_string(),
        proc.display().to_string(),
    ];
    let plugin = Plugin::start_in(tmp, &gpus, "", &extra).await?;
    let pods = ListPodResourcesResponse {
        pod_resources: vec![pod("trainer", "nvidia.com/gpu", A)],
    };
    let _pod_resources = FakePodResources::start(&plugin.path("pod-resources.sock"), pods)?;
    let value = report_where(&report, |v| v["spec"]["podCount"] == 1).await?;
    let trainer = pod_named(&value, "trainer");
    assert_eq!(trainer["uid"], uid);
    // 2 GiB once for the process listed twice, plus the MPS client.
    assert_eq!(trainer["memoryBytes"], (2048u64 + 512) << 20);
    let device = &value["spec"]["devices"][0];
    assert!(device["utilization"].is_null(), "{device}");
    assert!(device["memoryUsedBytes"].as_u64().is_some(), "{device}");
    Ok(())
}

/// Defect 9: Blackwell's `-me` profiles are offered under their own resource.
#[tokio::test]
async fn me_profiles_are_offered() -> Result<(), TestError> {
    let gpus = format!(
        "gpus:
  - uuid: {A}
    model: NVIDIA B200
    memoryMiB: 183359
    mig:
      - {{ uuid: {MIG_1}, profile: 1g.23gb-me, gpuInstance: 3, computeInstance: 0 }}
      - {{ uuid: {MIG_2}, profile: 1g.23gb+me, gpuInstance: 4, computeInstance: 0 }}
"
    );
    let mut plugin = Plugin::start(&gpus, "", &[]).await?;
    let mut regs = plugin.kubelet.registrations(2, WAIT).await?;
    assert_eq!(
        names(&regs),
        ["nvidia.com/mig-1g.23gb-me", "nvidia.com/mig-1g.23gb.me"]
    );
    let list = find(&mut regs, "nvidia.com/mig-1g.23gb-me")
        .next_list(WAIT)
        .await
        .ok_or("no list")?;
    assert_eq!(ids(&list), [MIG_1]);
    Ok(())
}

/// A backend whose enumeration and link scoring block until another task on the runtime has
/// run, as a slow driver would hold a thread: on the async thread they would never finish.
struct NeedsTheRuntimeFree {
    inner: FakeBackend,
    released: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl NeedsTheRuntimeFree {
    fn wait_for_release(&self) -> Result<(), BackendError> {
        let released = self
            .released
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        released
            .recv_timeout(Duration::from_secs(3))
            .map_err(|_| BackendError::Driver {
                op: "inventory",
                message: "ran on the async runtime: the runtime's other tasks were blocked".into(),
            })
    }
}

impl GpuBackend for NeedsTheRuntimeFree {
    fn name(&self) -> &'static str {
        "blocking"
    }
    fn inventory(&self) -> Result<Enumeration, BackendError> {
        self.wait_for_release()?;
        self.inner.inventory()
    }
    fn device_usage(&self, uuid: &str) -> Result<DeviceUsage, BackendError> {
        self.inner.device_usage(uuid)
    }
    fn processes(&self, uuid: &str) -> Result<Vec<ProcessUsage>, BackendError> {
        self.inner.processes(uuid)
    }
    fn link_score(&self, a: &str, b: &str) -> Result<u32, BackendError> {
        self.wait_for_release()?;
        self.inner.link_score(a, b)
    }
    fn probe(&self, gpu_uuid: &str) -> Result<(), BackendError> {
        self.inner.probe(gpu_uuid)
    }
    fn watch_health(
        &self,
        tx: UnboundedSender<HealthEvent>,
        stop: CancellationToken,
    ) -> Result<(), BackendError> {
        self.inner.watch_health(tx, stop)
    }
}

/// Defect 10: startup's blocking driver calls run off the async runtime.
#[tokio::test(flavor = "current_thread")]
async fn startup_driver_calls_do_not_block_the_runtime() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let plugins = tmp.path().join("device-plugins");
    std::fs::create_dir_all(&plugins)?;
    let mut kubelet = FakeKubelet::start(&plugins)?;
    let (release, released) = std::sync::mpsc::channel();
    let backend = Arc::new(NeedsTheRuntimeFree {
        inner: FakeBackend::parse(&format!(
            "gpus:
  - {{ uuid: {A}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559 }}
  - {{ uuid: {B}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81559 }}
"
        ))?,
        released: std::sync::Mutex::new(released),
    });
    // Another task on the same (single-threaded) runtime releases each blocking call.
    tokio::spawn(async move {
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if release.send(()).is_err() {
                return;
            }
        }
    });
    let args = Args::try_parse_from([
        "gpufair-device-plugin",
        "--kubelet-dir",
        &plugins.display().to_string(),
        "--pod-resources-socket",
        &tmp.path().join("absent.sock").display().to_string(),
    ])?;
    let stop = CancellationToken::new();
    let plugin = tokio::spawn(run_with_backend(
        args,
        Config::default(),
        backend,
        stop.clone(),
    ));
    let regs = kubelet.registrations(1, WAIT).await?;
    assert_eq!(names(&regs), ["nvidia.com/gpu"]);
    stop.cancel();
    tokio::time::timeout(WAIT, plugin).await???;
    Ok(())
}

/// Defect 2, deployment side: the MIG overlay gives the plugin MIG monitoring rights.
#[test]
fn the_mig_overlay_grants_mig_monitoring() -> Result<(), TestError> {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/overlays/mig");
    let kustomization = std::fs::read_to_string(dir.join("kustomization.yaml"))?;
    assert!(kustomization.contains("../../base"), "{kustomization}");
    assert!(
        kustomization.contains("device-plugin-mig.yaml"),
        "{kustomization}"
    );
    let patch: DaemonSet = serde_yaml::from_str(&std::fs::read_to_string(
        dir.join("device-plugin-mig.yaml"),
    )?)?;
    assert_eq!(
        patch.metadata.name.as_deref(),
        Some("gpufair-device-plugin")
    );
    let container = &patch
        .spec
        .ok_or("spec")?
        .template
        .spec
        .ok_or("pod spec")?
        .containers[0];
    assert_eq!(container.name, "device-plugin");
    let env = container.env.as_ref().ok_or("env")?;
    assert!(
        env.iter()
            .any(|e| e.name == "NVIDIA_MIG_MONITOR_DEVICES" && e.value.as_deref() == Some("all"))
    );
    let capabilities = container
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .ok_or("capabilities")?;
    assert_eq!(
        capabilities.add.as_deref(),
        Some(&["SYS_ADMIN".to_string()][..])
    );
    assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
    Ok(())
}
