//! The plugin against a fake kubelet over real Unix-socket gRPC, in process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use gpufair_device_plugin::backend::{FakeBackend, GpuBackend};
use gpufair_device_plugin::config::Config;
use gpufair_device_plugin::proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest,
    ListAndWatchResponse, PreferredAllocationRequest,
};
use gpufair_device_plugin::proto::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};
use gpufair_device_plugin::testkit::{
    FakeKubelet, FakePodResources, Registered, TestError, http_get,
};
use gpufair_device_plugin::{Args, run_with_backend};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const G0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const G1: &str = "GPU-11111111-0000-0000-0000-000000000000";
const G2: &str = "GPU-22222222-0000-0000-0000-000000000000";
const G3: &str = "GPU-33333333-0000-0000-0000-000000000000";
const G4: &str = "GPU-44444444-0000-0000-0000-000000000000";
const MIG_A: &str = "MIG-aaaaaaaa-0000-0000-0000-000000000000";
const MIG_B: &str = "MIG-bbbbbbbb-0000-0000-0000-000000000000";
const POD_UID: &str = "0c6bbd8a-3c45-4d7e-9a53-1f2e3d4c5b6a";

/// GPUs 0–2 whole (1 and 2 NVLinked), GPU 3 with two MIG instances, GPU 4 shared.
fn fake_gpus() -> String {
    format!(
        "gpus:
  - {{ uuid: {G0}, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, utilization: 0.25 }}
  - {{ uuid: {G1}, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, nvlinkPeers: [2] }}
  - {{ uuid: {G2}, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920 }}
  - uuid: {G3}
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    mig:
      - {{ uuid: {MIG_A}, profile: 3g.40gb }}
      - {{ uuid: {MIG_B}, profile: 1g.10gb }}
  - uuid: {G4}
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    processes: [ {{ pid: 4242, memoryMiB: 2048, smUtilization: 0.4 }} ]
"
    )
}

const CONFIG: &str = "healthRecovery: 600ms\nsharing: { replicas: 3, gpus: [4] }\n";

struct Harness {
    dir: tempfile::TempDir,
    kubelet: FakeKubelet,
    fake: Arc<FakeBackend>,
    stop: CancellationToken,
    plugin: JoinHandle<Result<(), gpufair_device_plugin::RunError>>,
}

impl Harness {
    async fn start(extra: &[&str]) -> Result<Harness, TestError> {
        let dir = tempfile::tempdir()?;
        let plugins = dir.path().join("device-plugins");
        std::fs::create_dir_all(&plugins)?;
        let kubelet = FakeKubelet::start(&plugins)?;
        let fake = Arc::new(FakeBackend::parse(&fake_gpus())?);
        let config = Config::parse(CONFIG)?;
        let mut argv: Vec<String> = vec![
            "gpufair-device-plugin".into(),
            "--kubelet-dir".into(),
            plugins.display().to_string(),
            "--pod-resources-socket".into(),
            dir.path().join("pod-resources.sock").display().to_string(),
            "--node-name".into(),
            "node-a".into(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        let args = Args::try_parse_from(argv)?;
        let stop = CancellationToken::new();
        let backend: Arc<dyn GpuBackend> = fake.clone();
        let plugin = tokio::spawn(run_with_backend(args, config, backend, stop.clone()));
        Ok(Harness {
            dir,
            kubelet,
            fake,
            stop,
            plugin,
        })
    }

    fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("device-plugins")
    }

    /// Stops the plugin and hands back the temporary directory so callers can inspect it.
    async fn shutdown(self) -> Result<tempfile::TempDir, TestError> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.plugin).await???;
        Ok(self.dir)
    }
}

const RESOURCES: [&str; 4] = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
];

fn ids(list: &ListAndWatchResponse) -> Vec<&str> {
    list.devices.iter().map(|d| d.id.as_str()).collect()
}

fn healths(list: &ListAndWatchResponse) -> Vec<&str> {
    list.devices.iter().map(|d| d.health.as_str()).collect()
}

fn find<'a>(regs: &'a mut [Registered], name: &str) -> &'a mut Registered {
    regs.iter_mut()
        .find(|r| r.request.resource_name == name)
        .expect("registered resource")
}

#[tokio::test]
async fn registers_every_resource_and_answers_kubelet() -> Result<(), TestError> {
    let mut h = Harness::start(&[]).await?;
    let mut regs = h.kubelet.registrations(4, Duration::from_secs(5)).await?;
    let names: Vec<_> = regs
        .iter()
        .map(|r| r.request.resource_name.as_str())
        .collect();
    assert_eq!(names, RESOURCES);
    for reg in &regs {
        assert_eq!(reg.request.version, "v1beta1");
        assert!(reg.request.endpoint.ends_with(".sock") && !reg.request.endpoint.contains('/'));
        assert!(reg.options.get_preferred_allocation_available && !reg.options.pre_start_required);
    }

    let whole = find(&mut regs, "nvidia.com/gpu");
    let list = whole
        .next_list(Duration::from_secs(1))
        .await
        .ok_or("first whole list")?;
    assert_eq!(ids(&list), [G0, G1, G2]);
    assert!(healths(&list).iter().all(|h| *h == "Healthy"));

    // NVLink-aware preference, and must_include honoured.
    let prefer = |must: Vec<String>| PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: vec![G0.into(), G1.into(), G2.into()],
            must_include_device_i_ds: must,
            allocation_size: 2,
        }],
    };
    let answer = whole
        .client
        .get_preferred_allocation(prefer(vec![]))
        .await?
        .into_inner();
    assert_eq!(answer.container_responses.len(), 1);
    assert_eq!(answer.container_responses[0].device_i_ds, [G1, G2]);
    let answer = whole
        .client
        .get_preferred_allocation(prefer(vec![G0.into()]))
        .await?
        .into_inner();
    assert!(
        answer.container_responses[0]
            .device_i_ds
            .contains(&G0.to_string())
    );

    // Allocate: one response per container, env with UUIDs, idempotent.
    let request = || AllocateRequest {
        container_requests: vec![ContainerAllocateRequest {
            devices_ids: vec![G2.into(), G0.into()],
        }],
    };
    let first = whole.client.allocate(request()).await?.into_inner();
    assert_eq!(first.container_responses.len(), 1);
    assert_eq!(
        first.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        format!("{G0},{G2}")
    );
    let again = whole.client.allocate(request()).await?.into_inner();
    assert_eq!(first, again);
    let err = whole
        .client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["GPU-nope".into()],
            }],
        })
        .await
        .expect_err("unknown device");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("GPU-nope"), "{}", err.message());

    // Shared slices: replicas collapse to one UUID; packing keeps a request on one GPU.
    let shared = find(&mut regs, "nvidia.com/gpu.shared");
    let list = shared
        .next_list(Duration::from_secs(1))
        .await
        .ok_or("first shared list")?;
    assert_eq!(
        ids(&list),
        [format!("{G4}::0"), format!("{G4}::1"), format!("{G4}::2")]
    );
    let response = shared
        .client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec![format!("{G4}::2"), format!("{G4}::0")],
            }],
        })
        .await?
        .into_inner();
    assert_eq!(
        response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        G4
    );

    let mig = find(&mut regs, "nvidia.com/mig-3g.40gb");
    let list = mig
        .next_list(Duration::from_secs(1))
        .await
        .ok_or("first MIG list")?;
    assert_eq!(ids(&list), [MIG_A]);
    let response = mig
        .client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec![MIG_A.into()],
            }],
        })
        .await?
        .into_inner();
    assert_eq!(
        response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        MIG_A
    );
    h.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn xid_marks_a_gpus_devices_unhealthy_then_they_recover() -> Result<(), TestError> {
    let mut h = Harness::start(&[]).await?;
    let mut regs = h.kubelet.registrations(4, Duration::from_secs(5)).await?;
    for reg in regs.iter_mut() {
        reg.next_list(Duration::from_secs(1))
            .await
            .ok_or("first list")?;
    }
    // An application XID changes nothing.
    h.fake.inject_xid(G3, 13);
    let mig_a = find(&mut regs, "nvidia.com/mig-3g.40gb");
    assert!(
        mig_a.next_list(Duration::from_millis(200)).await.is_none(),
        "ignored XID must not resend"
    );

    // A critical XID on the MIG parent marks both of its instances, and nothing else.
    let injected = Instant::now();
    h.fake.inject_xid(G3, 79);
    for name in ["nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"] {
        let reg = find(&mut regs, name);
        let list = reg
            .next_list(Duration::from_secs(1))
            .await
            .ok_or("unhealthy list within 1 s")?;
        assert_eq!(healths(&list), ["Unhealthy"]);
    }
    assert!(injected.elapsed() < Duration::from_secs(1));
    assert!(
        find(&mut regs, "nvidia.com/gpu")
            .next_list(Duration::from_millis(100))
            .await
            .is_none()
    );

    // After the quiet period (600 ms) the devices are Healthy again.
    let mig_b = find(&mut regs, "nvidia.com/mig-1g.10gb");
    let recovered = mig_b
        .next_list(Duration::from_secs(3))
        .await
        .ok_or("recovery")?;
    assert_eq!(healths(&recovered), ["Healthy"]);
    assert!(injected.elapsed() >= Duration::from_millis(600));

    // A shared GPU's XID marks every slice.
    h.fake.inject_xid(G4, 48);
    let shared = find(&mut regs, "nvidia.com/gpu.shared");
    let list = shared
        .next_list(Duration::from_secs(1))
        .await
        .ok_or("shared unhealthy")?;
    assert_eq!(healths(&list), ["Unhealthy"; 3]);
    h.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn reregisters_after_a_kubelet_restart() -> Result<(), TestError> {
    let mut h = Harness::start(&[]).await?;
    h.kubelet.registrations(4, Duration::from_secs(5)).await?;
    let dir = h.plugin_dir();
    // Kubelet restart: the old server dies, every socket is deleted, kubelet.sock comes back.
    h.kubelet.restart().await?;
    let restarted = Instant::now();
    let mut regs = h.kubelet.registrations(4, Duration::from_secs(2)).await?;
    assert!(
        restarted.elapsed() < Duration::from_secs(2),
        "re-registered in {:?}",
        restarted.elapsed()
    );
    let names: Vec<_> = regs
        .iter()
        .map(|r| r.request.resource_name.clone())
        .collect();
    assert_eq!(names, RESOURCES);
    for reg in regs.iter_mut() {
        assert!(dir.join(&reg.request.endpoint).exists());
        reg.next_list(Duration::from_secs(1))
            .await
            .ok_or("list after re-registration")?;
    }
    let _dir = h.shutdown().await?;
    let left: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from("kubelet.sock")],
        "plugin sockets removed on shutdown"
    );
    Ok(())
}

fn write_proc(root: &Path, pid: u32, uid: &str) -> Result<(), TestError> {
    std::fs::create_dir_all(root.join(pid.to_string()))?;
    std::fs::write(
        root.join(format!("{pid}/cgroup")),
        format!("0::/kubepods/burstable/pod{uid}/0123abcd\n"),
    )?;
    Ok(())
}

#[tokio::test]
async fn usage_is_mapped_to_pods_and_reported() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let proc_root = tmp.path().join("proc");
    write_proc(&proc_root, 4242, POD_UID)?;
    let report = tmp.path().join("report.json");
    let metrics_port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?.port()
    };
    let h = Harness::start(&[
        "--proc-root",
        &proc_root.display().to_string(),
        "--report-file",
        &report.display().to_string(),
        "--utilization-interval",
        "200ms",
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
    ])
    .await?;
    let container = |resource: &str, ids: Vec<String>| ContainerResources {
        name: "main".into(),
        devices: vec![ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids,
            topology: None,
        }],
        ..ContainerResources::default()
    };
    let pods = ListPodResourcesResponse {
        pod_resources: vec![
            PodResources {
                name: "notebook".into(),
                namespace: "team-a".into(),
                containers: vec![container("nvidia.com/gpu.shared", vec![format!("{G4}::1")])],
                ..PodResources::default()
            },
            PodResources {
                name: "trainer".into(),
                namespace: "team-b".into(),
                containers: vec![container("nvidia.com/gpu", vec![G0.into()])],
                ..PodResources::default()
            },
            PodResources {
                name: "web".into(),
                namespace: "team-c".into(),
                containers: vec![container("example.com/other", vec!["x".into()])],
                ..PodResources::default()
            },
        ],
    };
    let _pod_resources = FakePodResources::start(&h.dir.path().join("pod-resources.sock"), pods)?;

    let deadline = Instant::now() + Duration::from_secs(5);
    let value = loop {
        if let Ok(text) = std::fs::read_to_string(&report) {
            let value: serde_json::Value = serde_json::from_str(&text)?;
            if value["spec"]["podCount"] == 2 {
                break value;
            }
        }
        if Instant::now() > deadline {
            return Err("no report with both pods within 5 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(value["kind"], "GpuNodeReport");
    assert_eq!(value["metadata"]["name"], "node-a");
    let spec = &value["spec"];
    assert_eq!(spec["deviceCount"], 6);
    let pods = spec["pods"].as_array().ok_or("pods")?;
    assert_eq!(pods[0]["name"], "notebook");
    assert_eq!(pods[0]["uid"], POD_UID);
    assert_eq!(pods[0]["smUtilization"], 0.4);
    assert_eq!(pods[0]["memoryBytes"], 2048u64 << 20);
    assert_eq!(pods[0]["perProcess"], true);
    assert_eq!(pods[1]["name"], "trainer");
    assert_eq!(pods[1]["smUtilization"], 0.25);
    assert_eq!(pods[1]["perProcess"], false);

    let body = http_get(metrics_port, "/metrics", Duration::from_secs(10)).await?;
    assert!(body.contains(&format!(r#"gpufair_gpu_utilization_ratio{{device="{G4}",resource="nvidia.com/gpu.shared",namespace="team-a",pod="notebook"}} 0.4"#)), "{body}");
    assert!(
        body.contains(&format!(
            r#"gpufair_device_healthy{{device="{G0}",resource="nvidia.com/gpu"}} 1"#
        )),
        "{body}"
    );
    assert!(body.contains("gpufair_gpu_memory_used_bytes"), "{body}");
    h.shutdown().await?;
    Ok(())
}

/// One HTTP/2 request as bytes: the client preface, empty SETTINGS, and HEADERS (stream 1, end
/// of stream) with every field a literal without indexing, so no HPACK library is needed.
fn raw_h2_request(authority: &str, path: &str) -> Vec<u8> {
    fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
        assert!(name.len() < 127 && value.len() < 127);
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    let mut block = Vec::new();
    literal(&mut block, ":method", "POST");
    literal(&mut block, ":scheme", "http");
    literal(&mut block, ":path", path);
    literal(&mut block, ":authority", authority);
    literal(&mut block, "content-type", "application/grpc");
    literal(&mut block, "te", "trailers");
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    let len = block.len() as u32;
    bytes.extend_from_slice(&len.to_be_bytes()[1..]);
    // HEADERS, END_STREAM | END_HEADERS, stream 1.
    bytes.extend_from_slice(&[0x1, 0x5, 0, 0, 0, 1]);
    bytes.extend_from_slice(&block);
    bytes
}

/// How the server answered stream 1: `Ok(())` for response headers, `Err(code)` for a reset.
async fn raw_h2_outcome(socket: &Path, authority: &str) -> Result<Result<(), u32>, TestError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await?;
    stream
        .write_all(&raw_h2_request(
            authority,
            "/v1beta1.DevicePlugin/GetDevicePluginOptions",
        ))
        .await?;
    let read = async {
        loop {
            let mut head = [0u8; 9];
            stream.read_exact(&mut head).await?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            stream.read_exact(&mut payload).await?;
            match (kind, id) {
                // SETTINGS from the server: acknowledge, as a client must.
                (0x4, 0) if flags & 0x1 == 0 => {
                    stream.write_all(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]).await?;
                }
                (0x1, 1) => return Ok::<_, std::io::Error>(Ok(())),
                (0x3, 1) => {
                    let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    return Ok(Err(code));
                }
                _ => {}
            }
        }
    };
    Ok(tokio::time::timeout(Duration::from_secs(5), read).await??)
}

/// kubelet 1.25 and older (and grpcurl) send the socket path as `:authority`. The h2 server
/// under tonic rejects that before the plugin sees the call, so the README and the plugin's
/// log name kubelet 1.26 as the minimum; this pins the behaviour either way.
#[tokio::test]
async fn a_socket_path_authority_is_refused_by_http2_and_localhost_is_served()
-> Result<(), TestError> {
    let mut h = Harness::start(&[]).await?;
    let regs = h.kubelet.registrations(4, Duration::from_secs(5)).await?;
    let socket = h.plugin_dir().join(&regs[0].request.endpoint);
    assert_eq!(raw_h2_outcome(&socket, "localhost").await?, Ok(()));
    let path = socket.display().to_string();
    const PROTOCOL_ERROR: u32 = 0x1;
    assert_eq!(raw_h2_outcome(&socket, &path).await?, Err(PROTOCOL_ERROR));
    assert!(
        gpufair_device_plugin::registration::no_dial_back_message(
            "nvidia.com/gpu",
            Duration::from_secs(10)
        )
        .contains(gpufair_device_plugin::registration::MIN_KUBELET_VERSION)
    );
    h.shutdown().await?;
    Ok(())
}
