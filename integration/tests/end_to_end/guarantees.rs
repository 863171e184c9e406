//! A guarantee puts its queue ahead of the others only with work it covers. Queue `zeta`,
//! guaranteed 2 GPUs, and queue `alpha`, of three times its weight, each wait with a pod of the
//! whole 8-GPU node while `filler`'s pod runs there. When that pod goes, the node goes to
//! `alpha`: `zeta`'s pod could never be given through a guarantee of 2, so it is served by
//! share like any other, and `alpha` stands further below its share (8 of 4.5 GPUs against 8 of
//! 3.5). Served first on the guarantee's account, `zeta`'s pod would have taken the node.

use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{ClusterOptions, NodeOptions};
use serde_json::json;

use crate::common::{check_invariants, run_pod, start, submit, wait_pods};

pub async fn a_guarantee_does_not_serve_a_pod_larger_than_itself_first() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions {
        nodes: vec![NodeOptions::new("gpu-1", 8)],
        ..ClusterOptions::default()
    })
    .await?;
    cluster
        .queue("filler", "filler", json!({"weight": 1}))
        .await?;
    cluster
        .queue("alpha", "alpha", json!({"weight": 3}))
        .await?;
    cluster
        .queue("zeta", "zeta", json!({"weight": 1, "guaranteed": 2}))
        .await?;
    run_pod(&cluster, "filler", "busy", 8).await?;
    submit(&cluster, gpu_pod("zeta", "zeta-whole", 8), None).await?;
    submit(&cluster, gpu_pod("alpha", "alpha-whole", 8), None).await?;
    // Both are seen waiting by a cycle or more before the node frees.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = cluster.monitor.pods();
    ensure!(
        pods.iter()
            .filter(|p| p.name.ends_with("-whole"))
            .all(|p| p.released.is_none()),
        "a pod of the whole node was released while the node was busy"
    );
    cluster
        .api
        .delete("v1", "Pod", "filler", "busy", true)
        .await?;
    wait_pods(
        &cluster,
        "a pod of the whole node running",
        Duration::from_secs(20),
        |pods| {
            pods.iter()
                .any(|p| p.name.ends_with("-whole") && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    let pods = cluster.monitor.pods();
    let running: Vec<&str> = pods
        .iter()
        .filter(|p| p.name.ends_with("-whole") && p.running.is_some())
        .map(|p| p.name.as_str())
        .collect();
    ensure!(
        running == ["alpha-whole"],
        "the freed node went to {running:?}, not to alpha-whole"
    );
    check_invariants(&cluster).await?;
    Ok(())
}
