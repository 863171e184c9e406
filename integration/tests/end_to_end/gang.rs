//! A gang of 4 pods × 2 GPUs is released whole, and only once all four fit: while a 2-GPU pod
//! holds part of the 8 GPUs no member is released; once it finishes, all four are released in
//! one go and bound.

use std::time::Duration;

use anyhow::ensure;
use gpufair_integration::cluster::ClusterOptions;
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use serde_json::json;

use crate::common::{check_invariants, start, submit, wait_pods};

const BLOCKER_SECONDS: f64 = 4.0;

pub async fn gang_is_released_whole_only_once_all_members_fit() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions::default()).await?;
    cluster
        .queue("train", "train", json!({"weight": 1}))
        .await?;

    submit(
        &cluster,
        gpu_pod("train", "blocker", 2),
        Some(BLOCKER_SECONDS),
    )
    .await?;
    wait_pods(
        &cluster,
        "the blocker running",
        Duration::from_secs(10),
        |pods| {
            pods.iter()
                .any(|p| p.name == "blocker" && p.running.is_some())
        },
    )
    .await?;
    for i in 0..4 {
        submit(&cluster, gang_pod("train", "gang", i, 4, 2), Some(30.0)).await?;
    }
    wait_pods(
        &cluster,
        "the gang running",
        Duration::from_secs(20),
        |pods| {
            pods.iter()
                .filter(|p| p.group.as_deref() == Some("gang") && p.running.is_some())
                .count()
                == 4
        },
    )
    .await
    .map_err(|e| e.context(cluster.logs()))?;

    let pods = cluster.monitor.pods();
    let blocker = pods
        .iter()
        .find(|p| p.name == "blocker")
        .expect("blocker seen");
    let blocker_done = blocker
        .finished
        .expect("the blocker finished before the gang ran");
    let members: Vec<_> = pods
        .iter()
        .filter(|p| p.group.as_deref() == Some("gang"))
        .collect();
    ensure!(members.len() == 4, "four members seen: {members:?}");
    let releases: Vec<_> = members
        .iter()
        .map(|p| p.released.expect("released"))
        .collect();
    let first = *releases.iter().min().expect("four releases");
    let last = *releases.iter().max().expect("four releases");
    ensure!(
        first >= blocker_done,
        "a member was released {:.2}s before the blocker finished: the gang did not fit yet",
        blocker_done.duration_since(first).as_secs_f64()
    );
    ensure!(
        last.duration_since(first) <= Duration::from_millis(500),
        "members released {:.2}s apart: not released whole",
        last.duration_since(first).as_secs_f64()
    );
    let mut per_node = std::collections::BTreeMap::new();
    for member in &members {
        *per_node
            .entry(member.node.clone().unwrap_or_default())
            .or_insert(0) += 1;
    }
    ensure!(
        per_node.values().all(|&n| n == 2),
        "two 2-GPU members per 4-GPU node: {per_node:?}"
    );
    let waited = cluster
        .pod_events()
        .await
        .into_iter()
        .find(|e| e.pod.starts_with("gang-") && e.reason == "Waiting");
    ensure!(
        waited.is_some(),
        "a Waiting Event on a member while the gang did not fit"
    );
    check_invariants(&cluster).await?;
    println!(
        "  gang released {:.2}s after the blocker finished, members within {:.0} ms; wait reason: {}",
        first.duration_since(blocker_done).as_secs_f64(),
        last.duration_since(first).as_secs_f64() * 1000.0,
        waited.map(|e| e.message).unwrap_or_default()
    );
    Ok(())
}
