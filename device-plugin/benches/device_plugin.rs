//! Device plugin benchmark (run in release: `cargo bench -p gpufair-device-plugin --bench device_plugin`).
//!
//! 1. Allocate latency over a real Unix-socket gRPC connection (p50/p99/max).
//! 2. Health change → ListAndWatch: from an injected XID to the Unhealthy list at the client.
//! 3. Resident memory of the real binary serving 8 GPUs × 7 MIG instances.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufair_device_plugin::allocate::AllocatePolicy;
use gpufair_device_plugin::backend::{FakeBackend, GpuBackend};
use gpufair_device_plugin::config::Config;
use gpufair_device_plugin::health::{HealthPolicy, HealthSnapshot};
use gpufair_device_plugin::plugin::PluginShared;
use gpufair_device_plugin::preferred::LinkMatrix;
use gpufair_device_plugin::proto::deviceplugin::device_plugin_client::DevicePluginClient;
use gpufair_device_plugin::proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, Empty,
};
use gpufair_device_plugin::testkit::{FakeKubelet, TestError};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const ALLOCATE_CALLS: usize = 20_000;
const HEALTH_ROUNDS: usize = 200;

fn gpus_yaml(mig: bool) -> String {
    let mut out = String::from("gpus:\n");
    for g in 0..8 {
        out.push_str(&format!(
            "  - uuid: GPU-{g:08x}-0000-0000-0000-000000000000\n    model: NVIDIA H200\n    memoryMiB: 143771\n"
        ));
        if mig {
            out.push_str("    mig:\n");
            for m in 0..7 {
                out.push_str(&format!("      - {{ uuid: MIG-{g:04x}{m:04x}-0000-0000-0000-000000000000, profile: 1g.18gb }}\n"));
            }
        }
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    println!(
        "{name}: n={} p50={:.1}µs p99={:.1}µs max={:.1}µs",
        samples.len(),
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples[samples.len() - 1].as_secs_f64() * 1e6,
    );
}

async fn in_process(dir: &Path) -> Result<(), TestError> {
    let fake = Arc::new(FakeBackend::parse(&gpus_yaml(false))?);
    let config = Config::parse("healthRecovery: 5ms\n")?;
    let inventory = gpufair_device_plugin::devices::build(fake.inventory()?.gpus, &config)?;
    let resource = Arc::clone(
        inventory
            .resource("nvidia.com/gpu")
            .ok_or("no whole-GPU resource")?,
    );
    let stop = CancellationToken::new();
    let (health_tx, health_rx) = watch::channel(HealthSnapshot::default());
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let policy = HealthPolicy {
        ignored_xids: config.ignored_xids.clone(),
        recovery: config.health_recovery,
    };
    tokio::spawn(gpufair_device_plugin::health::run(
        event_rx,
        policy,
        fake.clone(),
        health_tx,
        stop.clone(),
    ));
    fake.watch_health(event_tx, stop.clone())?;
    let shared = PluginShared {
        policy: Arc::new(AllocatePolicy {
            options: config.allocate.clone(),
            sharing: None,
            mig_caps: Default::default(),
        }),
        links: Arc::new(LinkMatrix::default()),
        health: health_rx,
    };
    let served =
        gpufair_device_plugin::registration::serve(dir, Arc::clone(&resource), shared, &stop)?;
    let mut client =
        DevicePluginClient::connect(format!("unix://{}", served.socket.display())).await?;

    let ids: Vec<String> = resource.devices.iter().map(|d| d.id.clone()).collect();
    let mut samples = Vec::with_capacity(ALLOCATE_CALLS);
    for i in 0..ALLOCATE_CALLS + 1000 {
        let pick = vec![ids[i % ids.len()].clone(), ids[(i + 3) % ids.len()].clone()];
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: pick }],
        };
        let start = Instant::now();
        let response = client.allocate(request).await?.into_inner();
        let took = start.elapsed();
        if response.container_responses.len() != 1 {
            return Err("Allocate answered the wrong number of containers".into());
        }
        // The first calls warm up the connection and allocator.
        if i >= 1000 {
            samples.push(took);
        }
    }
    summary("allocate (2 GPUs, UDS gRPC round trip)", samples);

    let mut stream = client.list_and_watch(Empty {}).await?.into_inner();
    stream.message().await?.ok_or("no first list")?;
    let mut samples = Vec::with_capacity(HEALTH_ROUNDS);
    for round in 0..HEALTH_ROUNDS {
        let gpu = &resource.devices[round % resource.devices.len()].gpu;
        let start = Instant::now();
        fake.inject_xid(gpu, 79);
        loop {
            let list = stream.message().await?.ok_or("stream ended")?;
            if list.devices.iter().any(|d| d.health == "Unhealthy") {
                samples.push(start.elapsed());
                break;
            }
        }
        // Wait for recovery so the next round starts from all Healthy.
        loop {
            let list = stream.message().await?.ok_or("stream ended")?;
            if list.devices.iter().all(|d| d.health == "Healthy") {
                break;
            }
        }
    }
    summary("health change -> ListAndWatch", samples);
    stop.cancel();
    served.stop().await;
    Ok(())
}

fn vm_rss_kib(pid: u32) -> Result<u64, TestError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    Ok(line.split_whitespace().nth(1).ok_or("bad VmRSS")?.parse()?)
}

async fn binary_rss(tmp: &Path) -> Result<(), TestError> {
    let plugins = tmp.join("rss-plugins");
    std::fs::create_dir_all(&plugins)?;
    let fake = tmp.join("gpus.yaml");
    std::fs::write(&fake, gpus_yaml(true))?;
    let mut kubelet = FakeKubelet::start(&plugins)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufair-device-plugin"))
        .arg("--kubelet-dir")
        .arg(&plugins)
        .arg("--fake-gpus")
        .arg(&fake)
        .arg("--pod-resources-socket")
        .arg(tmp.join("absent.sock"))
        .arg("--metrics-listen")
        .arg("127.0.0.1:0")
        .arg("--utilization-interval")
        .arg("1s")
        .arg("--report-file")
        .arg(tmp.join("report.json"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let result = async {
        let mut regs = kubelet.registrations(1, Duration::from_secs(10)).await?;
        let reg = &mut regs[0];
        let list = reg
            .next_list(Duration::from_secs(2))
            .await
            .ok_or("no list")?;
        for device in &list.devices {
            reg.client
                .allocate(AllocateRequest {
                    container_requests: vec![ContainerAllocateRequest {
                        devices_ids: vec![device.id.clone()],
                    }],
                })
                .await?;
        }
        // Let a few usage reports run before measuring.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rss = vm_rss_kib(pid)?;
        println!(
            "rss: {} devices advertised ({}), VmRSS={:.1} MiB",
            list.devices.len(),
            reg.request.resource_name,
            rss as f64 / 1024.0
        );
        Ok::<(), TestError>(())
    }
    .await;
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let _ = child.wait();
    result
}

fn main() -> Result<(), TestError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let tmp = tempfile::tempdir()?;
        in_process(tmp.path()).await?;
        binary_rss(tmp.path()).await
    })
}
