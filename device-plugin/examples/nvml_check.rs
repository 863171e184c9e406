//! Checks gpufair's device plugin against a node's real NVML, read only, before rollout.
//!
//! Two parts, written as one JSON document:
//! - `nvml`: the NVML backend called directly: the inventory, and per GPU its device counters,
//!   processes (called twice: the second call returns only newer samples), probe and link
//!   scores, each with how long the driver took.
//! - `plugin`: the real `gpufair-device-plugin` binary started against a stand-in kubelet and
//!   PodResources server in a scratch directory: its registrations, the devices it advertises,
//!   an Allocate and a preferred allocation per resource, any health changes, its usage reports
//!   while one pod per resource holds that resource's first device, its metrics, and its exit
//!   on SIGTERM (sockets left behind are listed).
//!
//! Nothing here changes GPU settings; it reads what a node has. A process can be attributed to
//! the holder pods without a cluster with `--attribute-pid`: the plugin is then given a scratch
//! `/proc` in which those PIDs sit in the first holder pod's cgroup.
//!
//! ```sh
//! cargo build -p gpufair-device-plugin --bin gpufair-device-plugin --example nvml_check
//! target/debug/examples/nvml_check --plugin target/debug/gpufair-device-plugin --seconds 20
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use gpufair_device_plugin::backend::{BackendError, GpuBackend, NvmlBackend, ProcessUsage};
use gpufair_device_plugin::proto::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerAllocateRequest,
    ContainerPreferredAllocationRequest, Empty, ListAndWatchResponse, PreferredAllocationRequest,
};
use gpufair_device_plugin::proto::podresources::ListPodResourcesResponse;
use gpufair_device_plugin::testkit::{
    FakeKubelet, FakePodResources, Registered, http_get, pod_holding,
};
use serde_json::{Value, json};

/// The namespace of the holder pods the stand-in PodResources server reports.
const NAMESPACE: &str = "nvml-check";
/// The first holder pod's UID, which `--attribute-pid` processes are given.
const HOLDER_UID: &str = "0c0ffee0-0000-4000-8000-000000000001";

#[derive(Debug, Parser)]
#[command(about = "Check gpufair's device plugin against this node's NVML (read only)")]
struct Flags {
    /// The gpufair-device-plugin binary to start.
    #[arg(long)]
    plugin: PathBuf,
    /// Plugin configuration to start it with (sharing, health, allocation options).
    #[arg(long)]
    config: Option<PathBuf>,
    /// How long to watch advertised devices and usage reports once pods hold devices.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// How often the plugin measures and reports usage.
    #[arg(long, default_value = "1s")]
    utilization_interval: String,
    /// Treat this host PID as running in the first holder pod (repeatable).
    #[arg(long)]
    attribute_pid: Vec<u32>,
    /// Write the JSON here as well as to stdout; the plugin's log goes beside it.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn millis(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1e4).round() / 10.0
}

/// The NVML backend called directly, as the plugin calls it.
fn check_backend() -> anyhow::Result<Value> {
    let backend = NvmlBackend::load().context("loading NVML")?;
    let started = Instant::now();
    let enumeration = backend.inventory().context("NVML inventory")?;
    let inventory_ms = millis(started);
    let mut gpus = Vec::new();
    for gpu in &enumeration.gpus {
        let mut devices: Vec<String> = gpu.mig.iter().map(|m| m.uuid.clone()).collect();
        if !gpu.mig_enabled {
            devices.push(gpu.uuid.clone());
        }
        let mut per_device = Vec::new();
        for uuid in &devices {
            let started = Instant::now();
            let usage = backend.device_usage(uuid);
            let usage_ms = millis(started);
            let started = Instant::now();
            let first = backend.processes(uuid);
            let first_ms = millis(started);
            std::thread::sleep(Duration::from_secs(1));
            let second = backend.processes(uuid);
            per_device.push(json!({
                "uuid": uuid,
                "usage": match usage {
                    Ok(u) => json!({
                        "utilization": u.utilization,
                        "memoryUsedBytes": u.memory_used_bytes,
                        "chargeAllocation": u.charge_allocation,
                    }),
                    Err(err) => json!({ "error": err.to_string() }),
                },
                "usageMs": usage_ms,
                "processes": processes_json(first),
                "processesMs": first_ms,
                "processesOneSecondLater": processes_json(second),
            }));
        }
        let started = Instant::now();
        let probe = backend.probe(&gpu.uuid);
        let probe_ms = millis(started);
        let links: BTreeMap<String, Value> = enumeration
            .gpus
            .iter()
            .filter(|other| other.uuid != gpu.uuid && !other.mig_enabled && !gpu.mig_enabled)
            .map(|other| {
                let score = match backend.link_score(&gpu.uuid, &other.uuid) {
                    Ok(score) => json!(score),
                    Err(err) => json!({ "error": err.to_string() }),
                };
                (other.uuid.clone(), score)
            })
            .collect();
        gpus.push(json!({
            "uuid": gpu.uuid,
            "index": gpu.index,
            "minor": gpu.minor,
            "model": gpu.model,
            "memoryBytes": gpu.memory_bytes,
            "numaNode": gpu.numa_node,
            "migEnabled": gpu.mig_enabled,
            "mig": gpu.mig.iter().map(|m| json!({
                "uuid": m.uuid, "profile": m.profile, "memoryBytes": m.memory_bytes,
                "gpuInstance": m.gpu_instance, "computeInstance": m.compute_instance,
            })).collect::<Vec<_>>(),
            "devices": per_device,
            "probe": match probe { Ok(()) => json!("passed"), Err(err) => json!(err.to_string()) },
            "probeMs": probe_ms,
            "linkScores": links,
        }));
    }
    let sampling = utilization_sampling(
        &enumeration
            .gpus
            .iter()
            .filter(|g| !g.mig_enabled)
            .map(|g| g.uuid.clone())
            .collect::<Vec<_>>(),
    );
    let skipped: Vec<Value> = enumeration
        .skipped
        .iter()
        .map(|s| json!({ "index": s.index, "uuid": s.uuid, "reason": s.reason }))
        .collect();
    Ok(json!({
        "inventoryMs": inventory_ms,
        "gpus": gpus,
        "skipped": skipped,
        "utilizationSampling": sampling,
    }))
}

/// How the driver samples device-wide utilization: its sample buffer (count, time span, mean)
/// beside ten single readings 100 ms apart, which is what a one-shot query returns.
fn utilization_sampling(uuids: &[String]) -> Value {
    use gpufair_device_plugin::backend::sampling::sample_value;
    use nvml_wrapper::Nvml;
    use nvml_wrapper::enum_wrappers::device::Sampling;
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(err) => return json!({ "error": err.to_string() }),
    };
    uuids
        .iter()
        .map(|uuid| {
            let Ok(device) = nvml.device_by_uuid(uuid.as_str()) else {
                return json!({ "uuid": uuid, "error": "not found" });
            };
            let buffer = match device.samples(Sampling::GpuUtilization, None) {
                Ok(samples) => {
                    let values: Vec<f64> = samples.iter().map(|s| sample_value(&s.value)).collect();
                    let first = samples.iter().map(|s| s.timestamp).min().unwrap_or(0);
                    let last = samples.iter().map(|s| s.timestamp).max().unwrap_or(0);
                    json!({
                        "count": samples.len(),
                        "spanSeconds": (last - first) as f64 / 1e6,
                        "meanPercent": values.iter().sum::<f64>() / values.len().max(1) as f64,
                        "lastTen": values.iter().rev().take(10).collect::<Vec<_>>(),
                    })
                }
                Err(err) => json!({ "error": err.to_string() }),
            };
            let readings: Vec<Value> = (0..10)
                .map(|_| {
                    std::thread::sleep(Duration::from_millis(100));
                    match device.utilization_rates() {
                        Ok(rates) => json!(rates.gpu),
                        Err(err) => json!(err.to_string()),
                    }
                })
                .collect();
            let process_buffer = match device.process_utilization_stats(None) {
                Ok(samples) => {
                    let first = samples.iter().map(|s| s.timestamp).min().unwrap_or(0);
                    let last = samples.iter().map(|s| s.timestamp).max().unwrap_or(0);
                    json!({ "count": samples.len(), "spanSeconds": (last - first) as f64 / 1e6 })
                }
                Err(err) => json!({ "error": err.to_string() }),
            };
            json!({
                "uuid": uuid,
                "gpmSmUtilizationOverOneSecond": gpm_sm_utilization(&nvml, &device),
                "sampleBuffer": buffer,
                "processSampleBuffer": process_buffer,
                "readings100msApart": readings,
            })
        })
        .collect()
}

/// SM utilization from two GPM samples a second apart: the metric the plugin reads for MIG
/// instances (per GPU instance there), read here for the whole GPU to check its scale.
fn gpm_sm_utilization(nvml: &nvml_wrapper::Nvml, device: &nvml_wrapper::Device<'_>) -> Value {
    use nvml_wrapper::enums::gpm::GpmMetricId;
    match device.gpm_support() {
        Ok(true) => {}
        Ok(false) => return json!("GPM not supported"),
        Err(err) => return json!(err.to_string()),
    }
    let sampled = (|| {
        let first = device.gpm_sample()?;
        std::thread::sleep(Duration::from_secs(1));
        let second = device.gpm_sample()?;
        nvml_wrapper::gpm::gpm_metrics_get(nvml, &first, &second, &[GpmMetricId::SmUtil])
    })();
    match sampled {
        Ok(results) => match results.into_iter().next() {
            Some(Ok(result)) => json!({ "percent": result.value }),
            Some(Err(err)) => json!(err.to_string()),
            None => json!("no result"),
        },
        Err(err) => json!(err.to_string()),
    }
}

fn processes_json(processes: Result<Vec<ProcessUsage>, BackendError>) -> Value {
    match processes {
        Ok(list) => list
            .iter()
            .map(|p| {
                json!({
                    "pid": p.pid,
                    "memoryBytes": p.memory_bytes,
                    "smUtilization": p.sm_utilization,
                })
            })
            .collect(),
        Err(err) => json!({ "error": err.to_string() }),
    }
}

fn list_json(list: &ListAndWatchResponse) -> Value {
    list.devices
        .iter()
        .map(|d| {
            json!({
                "id": d.id,
                "health": d.health,
                "numaNodes": d.topology.as_ref().map(|t| t.nodes.iter().map(|n| n.id).collect::<Vec<_>>()),
            })
        })
        .collect()
}

fn allocate_json(response: &AllocateResponse) -> Value {
    response
        .container_responses
        .iter()
        .map(|c| {
            json!({
                "envs": c.envs.iter().collect::<BTreeMap<_, _>>(),
                "mounts": c.mounts.iter().map(|m| json!({
                    "containerPath": m.container_path, "hostPath": m.host_path, "readOnly": m.read_only,
                })).collect::<Vec<_>>(),
                "devices": c.devices.iter().map(|d| json!({
                    "containerPath": d.container_path, "hostPath": d.host_path, "permissions": d.permissions,
                })).collect::<Vec<_>>(),
                "annotations": c.annotations.iter().collect::<BTreeMap<_, _>>(),
                "cdiDevices": c.cdi_devices.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// What kubelet would see of one registration: the devices, an Allocate of the first one and,
/// where offered, a preferred allocation of one device among all of them.
async fn exercise(registered: &mut Registered) -> anyhow::Result<(Value, ListAndWatchResponse)> {
    let resource = registered.request.resource_name.clone();
    let list = registered
        .next_list(Duration::from_secs(10))
        .await
        .with_context(|| format!("{resource}: no device list within 10 s"))?;
    let ids: Vec<String> = list.devices.iter().map(|d| d.id.clone()).collect();
    let options = registered
        .client
        .get_device_plugin_options(Empty {})
        .await?
        .into_inner();
    let allocate = match ids.first() {
        Some(first) => {
            let started = Instant::now();
            let answer = registered
                .client
                .allocate(AllocateRequest {
                    container_requests: vec![ContainerAllocateRequest {
                        devices_ids: vec![first.clone()],
                    }],
                })
                .await;
            match answer {
                Ok(response) => json!({
                    "deviceIds": [first],
                    "ms": millis(started),
                    "response": allocate_json(&response.into_inner()),
                }),
                Err(status) => json!({ "deviceIds": [first], "error": status.to_string() }),
            }
        }
        None => Value::Null,
    };
    let preferred = if options.get_preferred_allocation_available && !ids.is_empty() {
        let answer = registered
            .client
            .get_preferred_allocation(PreferredAllocationRequest {
                container_requests: vec![ContainerPreferredAllocationRequest {
                    available_device_i_ds: ids.clone(),
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: 1,
                }],
            })
            .await;
        match answer {
            Ok(response) => json!(
                response
                    .into_inner()
                    .container_responses
                    .iter()
                    .map(|c| c.device_i_ds.clone())
                    .collect::<Vec<_>>()
            ),
            Err(status) => json!({ "error": status.to_string() }),
        }
    } else {
        Value::Null
    };
    let summary = json!({
        "resource": resource,
        "endpoint": registered.request.endpoint,
        "version": registered.request.version,
        "options": {
            "preStartRequired": options.pre_start_required,
            "getPreferredAllocationAvailable": options.get_preferred_allocation_available,
        },
        "devices": list_json(&list),
        "allocate": allocate,
        "preferredAllocationOfOne": preferred,
    });
    Ok((summary, list))
}

/// A scratch `/proc` in which `pids` belong to the first holder pod (cgroup v2, systemd driver).
fn scratch_proc(root: &Path, pids: &[u32]) -> anyhow::Result<()> {
    let slice = HOLDER_UID.replace('-', "_");
    for pid in pids {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("cgroup"),
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice}.slice/cri-containerd-0123.scope\n"
            ),
        )?;
    }
    Ok(())
}

/// The pods' usage in one report, keyed by pod name.
fn pod_usage(report: &Value) -> BTreeMap<String, Value> {
    report["spec"]["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p.clone(),
            )
        })
        .collect()
}

async fn check_plugin(flags: &Flags, log: &Path) -> anyhow::Result<Value> {
    let scratch = tempfile::tempdir()?;
    let plugins = scratch.path().join("device-plugins");
    std::fs::create_dir_all(&plugins)?;
    let pod_resources_socket = scratch.path().join("pod-resources.sock");
    let report_file = scratch.path().join("report.json");
    let mut kubelet = FakeKubelet::start(&plugins).map_err(|e| anyhow::anyhow!(e))?;
    let pod_resources =
        FakePodResources::start(&pod_resources_socket, ListPodResourcesResponse::default())
            .map_err(|e| anyhow::anyhow!(e))?;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut command = Command::new(&flags.plugin);
    command
        .arg("--kubelet-dir")
        .arg(&plugins)
        .arg("--pod-resources-socket")
        .arg(&pod_resources_socket)
        .arg("--report-file")
        .arg(&report_file)
        .arg("--utilization-interval")
        .arg(&flags.utilization_interval)
        .args(["--node-name", "nvml-check"])
        .arg("--metrics-listen")
        .arg(format!("127.0.0.1:{metrics_port}"));
    if let Some(config) = &flags.config {
        command.arg("--config").arg(config);
    }
    if !flags.attribute_pid.is_empty() {
        let proc_root = scratch.path().join("proc");
        scratch_proc(&proc_root, &flags.attribute_pid)?;
        command.arg("--proc-root").arg(proc_root);
    }
    let started = Instant::now();
    let mut child = command
        .env_remove("KUBERNETES_SERVICE_HOST")
        // The point is the real driver: a fake GPU file in the environment must not replace it.
        .env_remove("GPUFAIR_FAKE_GPUS")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(log)?))
        .stderr(Stdio::from(std::fs::File::create(
            log.with_extension("err"),
        )?))
        .spawn()
        .with_context(|| format!("starting {}", flags.plugin.display()))?;

    let first = kubelet.next_registration(Duration::from_secs(30)).await;
    let Some(first) = first else {
        let _ = child.kill();
        bail!(
            "the plugin did not register within 30 s; see {}",
            log.display()
        );
    };
    let registered_ms = millis(started);
    let mut registrations = vec![first];
    while let Some(more) = kubelet.next_registration(Duration::from_secs(3)).await {
        registrations.push(more);
    }
    registrations.sort_by(|a, b| a.request.resource_name.cmp(&b.request.resource_name));

    let mut summaries = Vec::new();
    let mut holders = Vec::new();
    for registered in &mut registrations {
        let (summary, list) = exercise(registered).await?;
        if let Some(device) = list.devices.first() {
            holders.push(pod_holding(
                NAMESPACE,
                &format!("holder-{}", holders.len()),
                &registered.request.resource_name,
                &device.id,
            ));
        }
        summaries.push(summary);
    }
    *pod_resources.response.lock().await = ListPodResourcesResponse {
        pod_resources: holders,
    };

    // Watch: every device list change and every new report, for the time asked.
    let mut health_changes = Vec::new();
    let mut reports = 0usize;
    let mut peak_by_pod: BTreeMap<String, f64> = BTreeMap::new();
    let mut last_report = Value::Null;
    let mut series = Vec::new();
    let mut last_text = String::new();
    let watch_until = Instant::now() + Duration::from_secs(flags.seconds);
    while Instant::now() < watch_until {
        for registered in &mut registrations {
            while let Ok(list) = registered.lists.try_recv() {
                health_changes.push(json!({
                    "resource": registered.request.resource_name,
                    "atSeconds": started.elapsed().as_secs(),
                    "devices": list_json(&list),
                }));
            }
        }
        if let Ok(text) = std::fs::read_to_string(&report_file)
            && text != last_text
            && let Ok(report) = serde_json::from_str::<Value>(&text)
        {
            reports += 1;
            series.push(json!({
                "atSeconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                "deviceUtilization": report["spec"]["devices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|d| d["utilization"].clone())
                    .collect::<Vec<_>>(),
                "podSmUtilization": pod_usage(&report)
                    .into_iter()
                    .map(|(name, usage)| (name, usage["smUtilization"].clone()))
                    .collect::<BTreeMap<_, _>>(),
            }));
            for (name, usage) in pod_usage(&report) {
                let sm = usage["smUtilization"].as_f64().unwrap_or(0.0);
                let peak = peak_by_pod.entry(name).or_insert(0.0);
                *peak = peak.max(sm);
            }
            last_report = report;
            last_text = text;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let metrics = http_get(metrics_port, "/metrics", Duration::from_secs(5))
        .await
        .unwrap_or_default();
    let metric_lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("gpufair_"))
        .collect();

    let term_sent = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let exit = loop {
        if let Some(status) = child.try_wait()? {
            break json!({ "code": status.code(), "seconds": term_sent.elapsed().as_secs_f64() });
        }
        if term_sent.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            break json!({ "code": null, "killedAfterSeconds": 15 });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let left_behind: Vec<String> = std::fs::read_dir(&plugins)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "kubelet.sock")
        .collect();

    Ok(json!({
        "registeredAfterMs": registered_ms,
        "registrations": summaries,
        "listUpdatesWhileWatching": health_changes,
        "reportsSeen": reports,
        "peakSmUtilizationByPod": peak_by_pod,
        "reportSeries": series,
        "lastReport": last_report,
        "metrics": metric_lines,
        "exitOnSigterm": exit,
        "socketsLeftBehind": left_behind,
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let log = match &flags.out {
        Some(out) => out.with_extension("plugin.log"),
        None => std::env::temp_dir().join("nvml-check-plugin.log"),
    };
    let backend = tokio::task::spawn_blocking(check_backend).await?;
    let plugin = check_plugin(&flags, &log).await;
    let document = json!({
        "nvml": backend.unwrap_or_else(|err| json!({ "error": format!("{err:#}") })),
        "plugin": plugin.unwrap_or_else(|err| json!({ "error": format!("{err:#}") })),
        "pluginLog": log,
    });
    let text = serde_json::to_string_pretty(&document)?;
    if let Some(out) = &flags.out {
        std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    }
    println!("{text}");
    Ok(())
}
