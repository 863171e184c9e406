//! Wiring: backend, devices, health, servers and registration, restarts, reports, metrics.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::allocate::AllocatePolicy;
use crate::backend::{BackendError, FakeBackend, GpuBackend, NvmlBackend};
use crate::cli::Args;
use crate::config::{Config, ConfigError};
use crate::devices::{DeviceError, Inventory, Resource};
use crate::health::{HealthPolicy, HealthSnapshot};
use crate::kubelet_watch::{DEBOUNCE, WatchError, needs_restart};
use crate::metrics::Metrics;
use crate::plugin::PluginShared;
use crate::preferred::LinkMatrix;
use crate::registration::{RegistrationError, ServedResource, serve_and_register, stop_all};
use crate::report::{KubeSink, Reporter, has_api_server};

/// How often our sockets are checked even without file events (belt and braces for inotify).
const SOCKET_CHECK: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "{0}. To run without NVIDIA GPUs or drivers, use the fake backend: --fake-gpus FILE \
         (or GPUFAIR_FAKE_GPUS=FILE), where FILE is a YAML list of fake GPUs (gpus: [{{uuid, model, memoryMiB}}])"
    )]
    NvmlUnavailable(BackendError),
    #[error(transparent)]
    Backend(BackendError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Devices(#[from] DeviceError),
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error("cannot create the device plugin directory {path}: {source}")]
    PluginDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serve metrics: {0}")]
    Metrics(std::io::Error),
    #[error("a blocking driver task failed: {0}")]
    Blocking(String),
}

/// Runs `work` on the backend on a blocking thread.
async fn blocking<T: Send + 'static>(
    backend: Arc<dyn GpuBackend>,
    work: impl FnOnce(Arc<dyn GpuBackend>) -> T + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(move || work(backend))
        .await
        .map_err(|err| RunError::Blocking(err.to_string()))
}

fn node_name(args: &Args) -> String {
    args.node_name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-node".into())
    })
}

fn load_backend(args: &Args) -> Result<Arc<dyn GpuBackend>, RunError> {
    match &args.fake_gpus {
        Some(path) => Ok(Arc::new(
            FakeBackend::load(path).map_err(RunError::Backend)?,
        )),
        None => match NvmlBackend::load() {
            Ok(backend) => Ok(Arc::new(backend)),
            Err(err @ BackendError::NotLoaded(_)) => Err(RunError::NvmlUnavailable(err)),
            Err(err) => Err(RunError::Backend(err)),
        },
    }
}

/// Runs the plugin until `stop` is cancelled, then stops serving and removes its sockets.
pub async fn run(args: Args, stop: CancellationToken) -> Result<(), RunError> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let backend = load_backend(&args)?;
    run_with_backend(args, config, backend, stop).await
}

/// [`run`] with the config and backend already chosen (tests inject events into a fake).
pub async fn run_with_backend(
    args: Args,
    config: Config,
    backend: Arc<dyn GpuBackend>,
    stop: CancellationToken,
) -> Result<(), RunError> {
    // Enumeration and link scoring are many blocking driver calls (about a thousand on an
    // 8-GPU node): they run on a blocking thread, not on the async runtime.
    let enumeration = blocking(Arc::clone(&backend), |b| b.inventory())
        .await?
        .map_err(RunError::Backend)?;
    for skipped in &enumeration.skipped {
        tracing::error!(index = skipped.index, uuid = ?skipped.uuid, reason = %skipped.reason, "GPU skipped: it is not offered");
    }
    let skipped = enumeration.skipped.len();
    let mig_caps = if config.allocate.device_specs {
        crate::mig_caps::resolve(&args.proc_root, &enumeration.gpus)
    } else {
        Default::default()
    };
    let inventory = Arc::new(crate::devices::build(enumeration.gpus, &config)?);
    for resource in &inventory.resources {
        tracing::info!(resource = %resource.name, devices = resource.devices.len(), backend = backend.name(), "resource");
    }
    if inventory.resources.is_empty() {
        tracing::warn!("no GPUs found: nothing to advertise");
    }
    // MIG GPUs are never whole, so never link-scored.
    let whole: Vec<String> = inventory
        .gpus
        .iter()
        .filter(|g| !g.mig_enabled)
        .map(|g| g.uuid.clone())
        .collect();
    let links = Arc::new(
        blocking(Arc::clone(&backend), move |b| {
            LinkMatrix::measure(b.as_ref(), &whole)
        })
        .await?,
    );

    // Health: driver events → tracker → snapshots every server watches.
    let (health_tx, health_rx) = watch::channel(HealthSnapshot::default());
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let policy = HealthPolicy {
        ignored_xids: config.ignored_xids.clone(),
        recovery: config.health_recovery,
    };
    tokio::spawn(crate::health::run(
        event_rx,
        policy,
        Arc::clone(&backend),
        health_tx,
        stop.clone(),
    ));
    if let Err(err) = backend.watch_health(event_tx, stop.clone()) {
        tracing::error!(%err, "cannot watch GPU health; devices stay Healthy unless the driver is re-checked");
    }

    let metrics = match args.metrics_listen {
        Some(addr) => {
            let metrics = Arc::new(Metrics::new());
            metrics.record_skipped(skipped);
            crate::metrics::serve(addr, Arc::clone(&metrics), stop.clone())
                .await
                .map_err(RunError::Metrics)?;
            let (metrics_for_health, inventory_for_health, mut health) = (
                Arc::clone(&metrics),
                Arc::clone(&inventory),
                health_rx.clone(),
            );
            let stop_health = stop.clone();
            tokio::spawn(async move {
                loop {
                    metrics_for_health
                        .record_health(&inventory_for_health, &health.borrow_and_update());
                    tokio::select! {
                        () = stop_health.cancelled() => return,
                        changed = health.changed() => if changed.is_err() { return },
                    }
                }
            });
            Some(metrics)
        }
        None => None,
    };

    let node = node_name(&args);
    let kube = if has_api_server() {
        match KubeSink::connect(&node).await {
            Ok(sink) => Some(sink),
            Err(err) => {
                tracing::warn!(%err, "an API server is configured but cannot be reached; GpuNodeReport will not be published");
                None
            }
        }
    } else {
        None
    };
    let reporter = Reporter {
        backend: Arc::clone(&backend),
        inventory: Arc::clone(&inventory),
        health: health_rx.clone(),
        node_name: node,
        interval: args.utilization_interval,
        proc_root: args.proc_root.clone(),
        pod_resources_socket: args.pod_resources_socket.clone(),
        report_file: args.report_file.clone(),
        metrics,
        kube,
    };
    let reporter = tokio::spawn(reporter.run(stop.clone()));

    let shared = PluginShared {
        policy: Arc::new(AllocatePolicy {
            options: config.allocate.clone(),
            sharing: config.sharing.clone(),
            mig_caps,
        }),
        links,
        health: health_rx,
    };
    let result = serve_until_stopped(&args.kubelet_dir, &inventory, &shared, &stop).await;
    stop.cancel();
    let _ = reporter.await;
    result
}

/// Serves and registers every resource, re-registering after kubelet restarts, until `stop`.
async fn serve_until_stopped(
    dir: &Path,
    inventory: &Inventory,
    shared: &PluginShared,
    stop: &CancellationToken,
) -> Result<(), RunError> {
    std::fs::create_dir_all(dir).map_err(|source| RunError::PluginDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let resources: &[Arc<Resource>] = &inventory.resources;
    let mut watch = crate::kubelet_watch::watch(dir)?;
    let mut served = serve_and_register(dir, resources, shared, stop)?;
    let mut check = tokio::time::interval(SOCKET_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut batch = Vec::new();
        tokio::select! {
            () = stop.cancelled() => break,
            event = watch.events.recv() => {
                let Some(event) = event else { break };
                batch.push(event);
                // A kubelet restart is a burst of deletions and a creation: take it as one.
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(DEBOUNCE) => {}
                }
                while let Ok(event) = watch.events.try_recv() {
                    batch.push(event);
                }
            }
            _ = check.tick() => {}
        }
        let sockets: Vec<PathBuf> = served.iter().map(|s| s.socket.clone()).collect();
        let lost = served.len() < resources.len();
        if lost || needs_restart(&batch, dir, &sockets) {
            tracing::info!(events = ?batch, "kubelet restarted or our sockets vanished: serving and registering again");
            served = restart(dir, resources, shared, stop, served).await;
        }
    }
    stop_all(served).await;
    tracing::info!("stopped serving; sockets removed");
    Ok(())
}

async fn restart(
    dir: &Path,
    resources: &[Arc<Resource>],
    shared: &PluginShared,
    stop: &CancellationToken,
    served: Vec<ServedResource>,
) -> Vec<ServedResource> {
    stop_all(served).await;
    match serve_and_register(dir, resources, shared, stop) {
        Ok(served) => served,
        Err(err) => {
            // Try again on the next socket check rather than give up the node.
            tracing::error!(%err, "cannot serve again");
            Vec::new()
        }
    }
}
