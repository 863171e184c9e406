//! The stock kube-scheduler never preempts around gpufair. A GPU pod outside gpufair (in a
//! namespace the webhook skips) takes GPUs the controller does not see, so a pod it releases
//! finds less room on its node than it counted. kube-scheduler's own preemption knows nothing
//! of gangs, `minRunTime` or cooldowns: with `preemptionPolicy: PreemptLowerPriority` on the
//! pod's class it would evict one member of a backfill gang to make room. gpufair's classes say
//! `Never`, so the released pod waits, pinned, until room frees, and then binds there.

use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::monitor::PodRecord;
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use gpufair_integration::cluster::{ClusterOptions, NodeOptions};
use gpufair_integration::controlplane::audit;
use serde_json::json;

use crate::common::{check_audit, running, start, submit, wait_pods};

/// How long the released pod is watched waiting for room that only the outside pod's end frees.
const STARVED_FOR: Duration = Duration::from_secs(6);

fn gang_members(pods: &[PodRecord]) -> Vec<&PodRecord> {
    pods.iter()
        .filter(|p| p.group.as_deref() == Some("filler"))
        .collect()
}

pub async fn kube_scheduler_never_preempts_a_managed_pod() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions {
        nodes: vec![NodeOptions::new("gpu-1", 4)],
        ..ClusterOptions::default()
    })
    .await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;

    // A backfill-tier gang (priority 1,000) on two of the node's four GPUs.
    for i in 0..2 {
        let mut member = gang_pod("team", "filler", i, 2, 1);
        member["metadata"]["labels"]["ai-task-type"] = json!("processing");
        submit(&cluster, member, None).await?;
    }
    wait_pods(
        &cluster,
        "the filler gang running",
        Duration::from_secs(15),
        |pods| gang_members(pods).iter().filter(|p| running(p)).count() == 2,
    )
    .await?;

    // Outside gpufair: a namespace the webhook skips, a class above backfill, two GPUs. The
    // controller watches managed pods only, so it still counts two GPUs free on gpu-1.
    cluster
        .api
        .ensure_namespace("outside", &[("gpufair.io/webhook", "skip")])
        .await?;
    cluster
        .api
        .create_priority_class("outside", "outside-service", 5000, "Never")
        .await?;
    let mut outside = gpu_pod("outside", "exporter", 2);
    outside["spec"]["priorityClassName"] = json!("outside-service");
    cluster.api.submit_pod(outside, None).await?;
    wait_pods(
        &cluster,
        "the outside pod running",
        Duration::from_secs(15),
        |pods| pods.iter().any(|p| p.name == "exporter" && running(p)),
    )
    .await?;

    // A realtime pod (priority 1,000,000) of one GPU: released onto gpu-1, where none is free.
    let mut serve = gpu_pod("team", "serve", 1);
    serve["metadata"]["labels"]["ai-task-type"] = json!("inference");
    submit(&cluster, serve, None).await?;
    wait_pods(
        &cluster,
        "serve released",
        Duration::from_secs(15),
        |pods| {
            pods.iter()
                .any(|p| p.name == "serve" && p.released.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    tokio::time::sleep(STARVED_FOR).await;
    let pods = cluster.monitor.pods();
    let filler = gang_members(&pods);
    let deletions: Vec<String> = audit::read(&cluster.plane.audit_log)
        .into_iter()
        .filter(|e| e.resource == "pods" && e.verb == "delete")
        .map(|e| {
            format!(
                "{} deleted {}/{}: {}",
                e.user_agent, e.namespace, e.name, e.code
            )
        })
        .collect();
    ensure!(
        filler.len() == 2 && filler.iter().all(|p| running(p) && p.deleting.is_none()),
        "the backfill gang stays whole: {filler:?}; deletions: {deletions:?}"
    );
    let serve = cluster.monitor.pod("team", "serve").context("serve seen")?;
    ensure!(
        serve.bound.is_none(),
        "serve found no room while the outside pod ran, yet was bound: {serve:?}"
    );
    // The audit log: kube-scheduler deleted no pod (its preemption deletes the victims). The
    // control plane's components share one identity here; the User-Agent names them.
    let preempted: Vec<&String> = deletions
        .iter()
        .filter(|d| d.starts_with("kube-scheduler/"))
        .collect();
    ensure!(
        preempted.is_empty(),
        "kube-scheduler preempted: {preempted:?}"
    );

    // Room frees when the outside pod ends; the released pod binds to the node it was pinned to.
    cluster
        .api
        .delete("v1", "Pod", "outside", "exporter", true)
        .await?;
    wait_pods(
        &cluster,
        "serve bound once the outside pod is gone",
        Duration::from_secs(20),
        |pods| {
            pods.iter().any(|p| {
                p.name == "serve" && p.bound.is_some() && p.node.as_deref() == Some("gpu-1")
            })
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    // The monitor rightly saw gpu-1 promised past its capacity while the outside pod ran: the
    // controller cannot count what it does not watch. The other invariants hold.
    check_audit(&cluster)?;
    println!(
        "  serve released onto a node an outside pod had filled: waited {:.0} s unbound, no pod preempted, bound once room freed",
        STARVED_FOR.as_secs_f64()
    );
    Ok(())
}
