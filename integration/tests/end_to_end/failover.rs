//! Two replicas: the leader is killed (SIGKILL, so it cannot give the Lease up); the other
//! takes over within 15 s and releases what arrived meanwhile; no pod is released twice.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpufair_integration::cluster::ClusterOptions;
use gpufair_integration::cluster::pods::gpu_pod;
use serde_json::json;

use crate::common::{check_invariants, start, submit, wait_controller_running, wait_pods};

pub async fn killed_leader_is_replaced_within_15s_and_nothing_is_released_twice()
-> anyhow::Result<()> {
    let options = ClusterOptions {
        replicas: 2,
        ..ClusterOptions::default()
    };
    let mut cluster = start(options).await?;
    let leader = cluster.leader().await.context("a leader")?;
    let other = 1 - leader;
    // Admission through the replica that stays, so pods can be created throughout.
    cluster.admit_through(other).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    for i in 0..6 {
        submit(
            &cluster,
            gpu_pod("team", &format!("before-{i}"), 1),
            Some(1.5),
        )
        .await?;
    }
    wait_pods(
        &cluster,
        "the first pods released",
        Duration::from_secs(10),
        |pods| pods.iter().filter(|p| p.released.is_some()).count() == 6,
    )
    .await?;

    let old_identity = cluster.replicas[leader].lease_identity();
    let new_identity = cluster.replicas[other].lease_identity();
    cluster.replicas[leader].kill();
    let killed = Instant::now();
    // Pods keep arriving while nobody leads.
    let mut submitted = 0;
    let takeover = loop {
        if cluster.leader_identity().await.as_deref() == Some(new_identity.as_str()) {
            break killed.elapsed();
        }
        ensure!(
            killed.elapsed() < Duration::from_secs(20),
            "no takeover within 20 s; lease holder {:?}\n{}",
            cluster.leader_identity().await,
            cluster.logs()
        );
        if submitted < 12 {
            submit(
                &cluster,
                gpu_pod("team", &format!("during-{submitted}"), 1),
                Some(1.0),
            )
            .await?;
            submitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    ensure!(
        takeover <= Duration::from_secs(15),
        "the other replica took over {:.1}s after the kill (more than 15 s)",
        takeover.as_secs_f64()
    );
    wait_controller_running(&cluster, other).await?;
    let total = 6 + submitted;
    wait_pods(
        &cluster,
        "every pod released and run",
        Duration::from_secs(30),
        |pods| pods.iter().filter(|p| p.finished.is_some()).count() == total,
    )
    .await
    .with_context(|| cluster.logs())?;
    let events = cluster.pod_events().await;
    let by_new = events
        .iter()
        .filter(|e| e.reason == "Released" && e.reporter == new_identity)
        .count();
    let by_old = events
        .iter()
        .filter(|e| e.reason == "Released" && e.reporter == old_identity)
        .count();
    ensure!(
        by_new >= submitted,
        "the new leader released the pods that arrived after the kill ({by_new} Released Events by it, {submitted} pods arrived)"
    );
    check_invariants(&cluster).await?;
    println!(
        "  takeover {:.1}s after SIGKILL; releases: {by_old} by the killed leader, {by_new} by its successor",
        takeover.as_secs_f64()
    );
    Ok(())
}
