//! What every case shares: the binaries, a cluster started and ready to release, and the
//! invariants checked at the end of each case.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use gpufair_integration::cluster::events::released_more_than_once;
use gpufair_integration::cluster::monitor::PodRecord;
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use serde_json::Value;

/// Builds every binary a case starts: gpufair's, and the control plane (from its Go modules,
/// the first time; this prints its progress).
pub fn binaries() -> anyhow::Result<()> {
    gpufair_integration::gpufair_binaries()?;
    gpufair_integration::controlplane::Binaries::locate()?;
    Ok(())
}

/// Starts a cluster and waits until a replica leads and its controller has synced its caches.
pub async fn start(options: ClusterOptions) -> anyhow::Result<Cluster> {
    let cluster = Cluster::start(options).await?;
    let leader = cluster
        .wait_for_leader(Duration::from_secs(30))
        .await
        .with_context(|| cluster.logs())?;
    wait_controller_running(&cluster, leader).await?;
    Ok(cluster)
}

/// Waits until replica `index` logs that its controller runs (caches synced).
pub async fn wait_controller_running(cluster: &Cluster, index: usize) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cluster.replicas[index]
        .log_lines_with("controller running")
        .is_empty()
    {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "replica {index} never started its controller:\n{}",
                cluster.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Submits a pod through admission, checks it was gated, and returns it.
pub async fn submit(
    cluster: &Cluster,
    pod: Value,
    run_seconds: Option<f64>,
) -> anyhow::Result<Value> {
    let created = cluster.api.submit_pod(pod, run_seconds).await?;
    let gated = created["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g["name"] == "gpufair.io/admission"));
    ensure!(
        gated,
        "pod {} was not gated at creation: {created}",
        created["metadata"]["name"]
    );
    Ok(created)
}

/// Polls `check` every 50 ms until it gives a value.
pub async fn wait_until<T, F>(
    what: &str,
    timeout: Duration,
    check: impl Fn() -> F,
) -> anyhow::Result<T>
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return Ok(found);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `check` holds on the monitor's records.
pub async fn wait_pods(
    cluster: &Cluster,
    what: &str,
    timeout: Duration,
    check: impl Fn(&[PodRecord]) -> bool,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check(&cluster.monitor.pods()) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// No pod was released twice (Released Events, across replicas) and no node was ever promised
/// more GPUs than it has.
pub async fn check_invariants(cluster: &Cluster) -> anyhow::Result<()> {
    let twice = released_more_than_once(&cluster.pod_events().await);
    ensure!(twice.is_empty(), "pods released more than once: {twice:?}");
    let over = cluster.monitor.capacity_violations();
    ensure!(over.is_empty(), "capacity exceeded: {over:?}");
    Ok(())
}

/// Pods of `namespace` in a given state.
pub fn count(pods: &[PodRecord], namespace: &str, state: impl Fn(&PodRecord) -> bool) -> usize {
    pods.iter()
        .filter(|p| p.namespace == namespace && state(p))
        .count()
}

/// Running now: started and neither finished nor gone.
pub fn running(pod: &PodRecord) -> bool {
    pod.running.is_some() && pod.finished.is_none() && pod.gone.is_none()
}
