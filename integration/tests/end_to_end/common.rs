//! What every case shares: the binaries, a cluster started and ready to release, and the
//! invariants checked at the end of each case.

use std::time::Duration;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use anyhow::{Context, bail, ensure};
use gpufair_integration::cluster::events::released_more_than_once;
use gpufair_integration::cluster::monitor::PodRecord;
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::rbac::{self, Grant};
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use gpufair_integration::controlplane::audit;
use gpufair_integration::tools::Tool;
use serde_json::Value;

/// Builds every binary a case starts: gpufair's, the control plane, helm and Prometheus (from
/// their Go modules, the first time; this prints its progress).
pub fn binaries() -> anyhow::Result<()> {
    gpufair_integration::gpufair_binaries()?;
    gpufair_integration::controlplane::Binaries::locate()?;
    for tool in [Tool::Helm, Tool::Prometheus] {
        tool.locate()?;
    }
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

pub use gpufair_integration::storm::ledger::ledger_of as queue_ledger;

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
    check_audit(cluster)
}

/// The audit user name prefix of gpufair's ServiceAccounts.
pub const GPUFAIR_ACCOUNTS: &str = "system:serviceaccount:gpufair-system:";

/// What gpufair's ServiceAccounts did in every case so far, by account name, from the API
/// server's audit logs.
pub static USED: Mutex<BTreeMap<String, BTreeSet<Grant>>> = Mutex::new(BTreeMap::new());

/// No request by a gpufair ServiceAccount was refused (403), and what each did is recorded for
/// the comparison with deploy/'s grants at the end of the suite.
pub fn check_audit(cluster: &Cluster) -> anyhow::Result<()> {
    let entries = audit::read(&cluster.plane.audit_log);
    let (warming_up, refused): (Vec<_>, Vec<_>) = entries
        .iter()
        .filter(|e| e.user.starts_with(GPUFAIR_ACCOUNTS) && e.code == 403)
        .partition(|e| {
            e.received
                .is_some_and(|at| cluster.plane.while_apiserver_warmed_up(at))
        });
    let described = |entries: &[&audit::AuditEntry]| {
        entries
            .iter()
            .map(|e| format!("{} {} {} ({})", e.user, e.verb, e.uri, e.reason))
            .collect::<Vec<_>>()
    };
    ensure!(
        refused.is_empty(),
        "gpufair requests refused by RBAC: {:?}",
        described(&refused)
    );
    if !warming_up.is_empty() {
        println!(
            "  {} requests refused while a restarted kube-apiserver's RBAC caches filled, e.g. {:?}",
            warming_up.len(),
            described(&warming_up[..1])
        );
    }
    let mut used = USED.lock().unwrap_or_else(|p| p.into_inner());
    for entry in entries
        .iter()
        .filter(|e| e.user.starts_with(GPUFAIR_ACCOUNTS) && !e.resource.is_empty())
    {
        let account = entry.user.trim_start_matches(GPUFAIR_ACCOUNTS).to_string();
        used.entry(account).or_default().insert((
            entry.verb.clone(),
            entry.api_group.clone(),
            entry.resource_path(),
        ));
    }
    Ok(())
}

/// Compares what each gpufair ServiceAccount did over the whole suite with what deploy/base
/// grants it: used and not granted fails (it would have been a 403); granted and never used is
/// reported, since some grants serve paths no case drives (a pinned pod that never binds and
/// has an owner is deleted, for one).
pub fn compare_with_grants() -> anyhow::Result<String> {
    let rendered = gpufair_integration::controlplane::kustomize(
        &gpufair_integration::workspace_root().join("deploy/base"),
    )?;
    let objects = gpufair_integration::cluster::install::parse_documents(&rendered)?;
    let used = USED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut report = String::new();
    for (account, did) in &used {
        let grants = rbac::granted(&objects, "gpufair-system", account);
        let beyond: Vec<&Grant> = did.difference(&grants).collect();
        ensure!(
            beyond.is_empty(),
            "{account} used what deploy/ does not grant it: {beyond:?}"
        );
        let unused: Vec<&Grant> = grants.difference(did).collect();
        report.push_str(&format!(
            "  {account}: used {} of its {} grants; never used here: {unused:?}\n",
            did.len(),
            grants.len()
        ));
    }
    Ok(report)
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

/// Submits `queue`'s `gpus`-GPU pod `name` and waits until it runs.
pub async fn run_pod(cluster: &Cluster, queue: &str, name: &str, gpus: u32) -> anyhow::Result<()> {
    run(cluster, gpu_pod(queue, name, gpus)).await
}

/// Submits `pod` (its namespace is its queue's) and waits until it runs.
pub async fn run(cluster: &Cluster, pod: Value) -> anyhow::Result<()> {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let queue = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    submit(cluster, pod, None).await?;
    wait_pods(
        cluster,
        &format!("{queue}'s pod {name} running"),
        Duration::from_secs(20),
        |pods| pods.iter().any(|p| p.name == name && p.running.is_some()),
    )
    .await
    .with_context(|| cluster.logs())
}
