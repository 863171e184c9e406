//! kube-scheduler never preempts around gpufair. Its own preemption knows nothing of gangs,
//! `minRunTime` or cooldowns, so a released pod that finds less room than the controller
//! counted must wait (and be handled by gpufair), not evict a managed pod.
//!
//! The room is taken away between release and binding: kube-scheduler is paused (SIGSTOP),
//! gpufair releases an elastic pod onto the node where a backfill pod runs, a GPU then turns
//! unhealthy (allocatable 4 → 2), and kube-scheduler resumes. With `preemptionPolicy:
//! PreemptLowerPriority` on the elastic class it would evict the backfill pod to bind the
//! elastic one; gpufair's classes say `Never`.

use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{ClusterOptions, NodeOptions};
use serde_json::json;

use gpufair_integration::cluster::events::released_more_than_once;

use crate::common::{start, submit, wait_pods};

fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill {signal} {pid}: {status}");
    Ok(())
}

pub async fn stock_scheduler_never_preempts_a_managed_pod() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions {
        nodes: vec![NodeOptions::new("gpu-1", 4).without_device_plugin()],
        ..ClusterOptions::default()
    })
    .await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut backfill = gpu_pod("team", "backfill", 2);
    backfill["metadata"]["labels"]["ai-task-type"] = json!("processing");
    submit(&cluster, backfill, None).await?;
    wait_pods(
        &cluster,
        "the backfill pod running",
        Duration::from_secs(15),
        |pods| {
            pods.iter()
                .any(|p| p.name == "backfill" && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;

    let scheduler = cluster
        .plane
        .scheduler
        .pid()
        .context("kube-scheduler runs")?;
    signal(scheduler, "-STOP")?;
    let outcome = async {
        submit(&cluster, gpu_pod("team", "elastic", 2), None).await?;
        wait_pods(
            &cluster,
            "the elastic pod released",
            Duration::from_secs(15),
            |pods| {
                pods.iter()
                    .any(|p| p.name == "elastic" && p.released.is_some())
            },
        )
        .await
        .with_context(|| cluster.logs())?;
        let elastic = cluster
            .api
            .get("v1", "Pod", "team", "elastic")
            .await?
            .context("the elastic pod")?;
        ensure!(
            elastic["spec"]["priorityClassName"] == "gpufair-elastic",
            "a train pod is in the elastic tier: {}",
            elastic["spec"]
        );
        // A GPU turns unhealthy: the kubelet's device manager lowers allocatable.
        cluster
            .api
            .set_node_resource("gpu-1", "nvidia.com/gpu", 4, 2)
            .await?;
        anyhow::Ok(())
    }
    .await;
    signal(scheduler, "-CONT")?;
    outcome?;

    // kube-scheduler now tries the elastic pod against a node with no room left. Give it time
    // to preempt if it would.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let backfill = cluster
        .monitor
        .pod("team", "backfill")
        .context("backfill seen")?;
    ensure!(
        backfill.deleting.is_none() && backfill.gone.is_none() && backfill.finished.is_none(),
        "kube-scheduler preempted the managed backfill pod: {backfill:?}"
    );
    let elastic = cluster.api.get("v1", "Pod", "team", "elastic").await?;
    let nominated = elastic
        .as_ref()
        .map(|p| p["status"]["nominatedNodeName"].clone())
        .unwrap_or_default();
    ensure!(
        nominated.is_null(),
        "kube-scheduler nominated a node for the elastic pod (a preemption): {nominated}"
    );
    let preempted: Vec<String> = cluster
        .api
        .events(Some("team"))
        .await?
        .iter()
        .filter(|e| e["reason"] == "Preempted" || e["reason"] == "Preempting")
        .filter(|e| {
            let source = e["reportingController"]
                .as_str()
                .or_else(|| e["source"]["component"].as_str())
                .unwrap_or_default();
            source.contains("scheduler")
        })
        .map(|e| e.to_string())
        .collect();
    ensure!(
        preempted.is_empty(),
        "kube-scheduler preemption events: {preempted:?}"
    );
    // The scheduler has not bound the elastic pod past capacity either.
    ensure!(
        elastic
            .as_ref()
            .is_none_or(|p| p["spec"]["nodeName"].is_null()),
        "the elastic pod was bound onto a node without room: {elastic:?}"
    );
    // Room comes back (the GPU recovers); gpufair's pod binds, the backfill pod still runs.
    cluster
        .api
        .set_node_resource("gpu-1", "nvidia.com/gpu", 4, 4)
        .await?;
    wait_pods(
        &cluster,
        "the elastic pod running",
        Duration::from_secs(60),
        |pods| {
            pods.iter()
                .any(|p| p.name == "elastic" && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    let backfill = cluster
        .monitor
        .pod("team", "backfill")
        .context("backfill")?;
    ensure!(
        backfill.deleting.is_none() && backfill.gone.is_none(),
        "the backfill pod kept running: {backfill:?}"
    );
    // Not `check_invariants`: the node was promised more than it had while the GPU was down,
    // by the test's own hand, which is the point of the case.
    let twice = released_more_than_once(&cluster.pod_events().await);
    ensure!(twice.is_empty(), "pods released more than once: {twice:?}");
    Ok(())
}
