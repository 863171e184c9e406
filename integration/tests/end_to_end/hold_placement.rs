//! A hold for a gang of pods smaller than a node keeps free room wherever the pool has it. Three
//! 4-GPU nodes are partly taken by queue `small` (1 GPU on gpu-1, 2 on gpu-2 and on gpu-3, none
//! of it evictable within the hour); queue `big`, guaranteed 8 GPUs, waits with a gang of four
//! 2-GPU pods, three of which free room could seat now. Its hold keeps all three nodes' free
//! room, so queue `other`'s 2-GPU pod, which fits only in gpu-3's free half, stays gated, and
//! once gpu-1's pod ends the gang starts. Held only on the nodes it would fill once drained
//! (gpu-1 and gpu-2), the gang would have let `other` take gpu-3 and waited for gpu-2 as well.

use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::monitor::PodRecord;
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use gpufair_integration::cluster::{Cluster, ClusterOptions, NodeOptions};
use serde_json::json;

use crate::common::{check_invariants, run, start, submit, wait_pods};

const GANG: &str = "gang";

/// Queue `small`'s pod `name` of `gpus` GPUs, on node `node`, running.
async fn run_small_on(cluster: &Cluster, name: &str, gpus: u32, node: &str) -> anyhow::Result<()> {
    let mut pod = gpu_pod("small", name, gpus);
    pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    run(cluster, pod).await
}

/// How many of the gang's pods run.
fn gang_running(pods: &[PodRecord]) -> usize {
    pods.iter()
        .filter(|p| p.group.as_deref() == Some(GANG) && p.running.is_some())
        .count()
}

pub async fn a_gang_is_held_on_free_room_wherever_the_pool_has_it() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions {
        nodes: ["gpu-1", "gpu-2", "gpu-3"]
            .into_iter()
            .map(|name| NodeOptions::new(name, 4))
            .collect(),
        ..ClusterOptions::default()
    })
    .await?;
    cluster
        .queue("small", "small", json!({"weight": 1, "minRunTime": "1h"}))
        .await?;
    cluster
        .queue("big", "big", json!({"weight": 1, "guaranteed": 8}))
        .await?;
    cluster
        .queue("other", "other", json!({"weight": 1}))
        .await?;
    run_small_on(&cluster, "s-1", 1, "gpu-1").await?;
    run_small_on(&cluster, "s-2", 2, "gpu-2").await?;
    run_small_on(&cluster, "s-3", 2, "gpu-3").await?;
    for i in 0..4 {
        submit(&cluster, gang_pod("big", GANG, i, 4, 2), None).await?;
    }
    // The gang is seen waiting, and held for, by a cycle or more before `other` asks.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        gang_running(&cluster.monitor.pods()) == 0,
        "the gang started without room"
    );
    submit(&cluster, gpu_pod("other", "o-2", 2), None).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = cluster.monitor.pods();
    let released = pods
        .iter()
        .find(|p| p.name == "o-2")
        .and_then(|p| p.released);
    ensure!(
        released.is_none(),
        "other's pod was released into gpu-3's free half while the gang was held for: {}",
        cluster.logs()
    );
    // gpu-1's pod ends: with gpu-2's and gpu-3's free halves still held, the gang has room.
    cluster
        .api
        .delete("v1", "Pod", "small", "s-1", true)
        .await?;
    wait_pods(
        &cluster,
        "the gang's four pods running",
        Duration::from_secs(20),
        |pods| gang_running(pods) == 4,
    )
    .await
    .with_context(|| cluster.logs())?;
    check_invariants(&cluster).await?;
    Ok(())
}
