//! Starting the gate-release controller inside `serve`: every replica campaigns for the Lease,
//! the leader runs the controller, and SIGTERM stops writes and gives the Lease up.

use std::path::Path;

use gpufair_controller::snapshot::GpuKinds;
use gpufair_controller::step::CycleSettings;
use gpufair_controller::{
    ControllerConfig, ControllerMetrics, Leadership, LeaseConfig, QueueCache, ReleaseLimit,
};
use gpufair_core::units::ResourceTable;
use tokio::task::JoinSet;

use crate::ServeError;
use crate::cli::ControllerArgs;
use crate::config::{ConfigFileError, load_config};
use gpufair_webhook::shutdown::Shutdown;

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
const FALLBACK_NAMESPACE: &str = "gpufair-system";

/// The Lease's namespace: the flag, else the pod's own namespace, else `gpufair-system`.
fn lease_namespace(args: &ControllerArgs) -> String {
    args.lease_namespace.clone().unwrap_or_else(|| {
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| FALLBACK_NAMESPACE.to_string())
    })
}

/// This replica's identity: the flag (the pod name), else the host name; the process id is
/// appended so a restarted container never mistakes the old holder for itself.
fn identity(args: &ControllerArgs) -> String {
    let base = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "gpufair-webhook".to_string());
    format!("{base}_{}", std::process::id())
}

/// The controller's settings from the flags and the config file.
pub fn controller_config(
    args: &ControllerArgs,
    config_path: Option<&Path>,
    instance: &str,
) -> Result<ControllerConfig, ServeError> {
    let config = load_config(config_path)?;
    let release_limit = ReleaseLimit::new(args.release_rate, args.release_burst)
        .map_err(|e| ServeError::Args(format!("--release-rate/--release-burst: {e}")))?;
    let policy = config
        .admission
        .to_policy()
        .map_err(ConfigFileError::from)?;
    Ok(ControllerConfig {
        cycle: CycleSettings {
            gate: policy.gate.clone(),
            gpus: GpuKinds {
                patterns: policy.gpu_resources.clone(),
                table: ResourceTable::default(),
            },
            unbound_timeout: args.unbound_timeout,
            explain_interval: std::time::Duration::from_secs(300),
            explanations_per_cycle: args.explanations_per_cycle,
            family_alpha: config.admission.right_sizing.alpha,
        },
        options: gpufair_controller::SharedOptions::new(
            config.decide_options().map_err(ConfigFileError::from)?,
        ),
        cycle_interval: args.cycle_interval,
        debounce: args.debounce,
        release_limit,
        status_interval: args.status_interval,
        instance: instance.to_string(),
    })
}

/// Spawns the elector and the controller, which reads Queues from `queues`; both stop when
/// stopping begins. Refused, naming the flags, when the Lease timing is inconsistent.
pub fn spawn(
    tasks: &mut JoinSet<()>,
    client: kube::Client,
    args: &ControllerArgs,
    config: ControllerConfig,
    metrics: ControllerMetrics,
    queues: QueueCache,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let timing = args.lease_timing().map_err(ServeError::Args)?;
    let lease = LeaseConfig::with_timing(
        args.lease_name.clone(),
        lease_namespace(args),
        config.instance.clone(),
        timing,
    );
    tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "campaigning for the controller lease");
    let leadership = Leadership::new();
    let stop = shutdown.clone();
    tasks.spawn(gpufair_controller::run_elector(
        client.clone(),
        lease,
        leadership.clone(),
        async move { stop.stopping().await },
    ));
    tasks.spawn(gpufair_controller::run(
        client,
        config,
        leadership,
        metrics,
        queues,
        async move { shutdown.stopping().await },
    ));
    Ok(())
}

/// The controller's client: kube's default retries are off. They retry a 429 up to 15 times
/// with backoff growing to minutes, and a PodDisruptionBudget's refusal of an eviction is a 429
/// without Retry-After, so one blocked eviction would stall every cycle behind it. The
/// controller retries everything on its next cycle instead, with fresh state.
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}

/// Identity for a new replica.
pub fn replica_identity(args: &ControllerArgs) -> String {
    identity(args)
}
