//! The controller restarts (SIGTERM, a new process); the usage ledger in Queue status carries
//! on from where it was instead of starting again from zero.

use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use serde_json::json;

use crate::common::{
    check_invariants, queue_ledger, start, submit, wait_controller_running, wait_pods, wait_until,
};

/// Queue `team`'s ledger as stored now.
async fn read_ledger(cluster: &Cluster) -> Option<(f64, f64)> {
    cluster
        .api
        .get("gpufair.io/v1alpha1", "Queue", "", "team")
        .await
        .ok()
        .flatten()
        .as_ref()
        .and_then(queue_ledger)
}

pub async fn controller_restart_keeps_the_queue_ledger() -> anyhow::Result<()> {
    let mut cluster = start(ClusterOptions::default()).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    for i in 0..4 {
        submit(&cluster, gpu_pod("team", &format!("long-{i}"), 1), None).await?;
    }
    wait_pods(
        &cluster,
        "4 pods running",
        Duration::from_secs(10),
        |pods| pods.iter().filter(|p| p.running.is_some()).count() == 4,
    )
    .await?;
    // 4 GPUs for about 5 s: about 20 GPU-seconds in the ledger before the restart.
    wait_until(
        "16 GPU-seconds charged",
        Duration::from_secs(20),
        || async {
            read_ledger(&cluster)
                .await
                .filter(|(charged, _)| *charged >= 16.0)
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    let (before, before_sample) = read_ledger(&cluster)
        .await
        .context("ledger before the restart")?;

    cluster.restart(0).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(20)).await?;
    wait_controller_running(&cluster, leader).await?;
    let (after, after_sample) = wait_until(
        "a ledger written after the restart",
        Duration::from_secs(20),
        || async {
            read_ledger(&cluster)
                .await
                .filter(|(_, sample)| *sample > before_sample)
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    println!(
        "  charged {before:.1} GPU-s before the restart, {after:.1} at the new leader's first write ({:.1}s later)",
        after_sample - before_sample
    );
    ensure!(
        after >= before,
        "the ledger was reset: {before:.1} GPU-s charged before the restart, {after:.1} after"
    );
    // And it keeps counting: 4 GPUs still run.
    let (later, _) = wait_until("the ledger growing", Duration::from_secs(10), || async {
        read_ledger(&cluster)
            .await
            .filter(|(charged, _)| *charged >= after + 4.0)
    })
    .await?;
    ensure!(later > after, "the ledger keeps counting after the restart");
    check_invariants(&cluster).await?;
    Ok(())
}
