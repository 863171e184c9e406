//! Outages of the real thing, each in the middle of a burst of releases (a low release rate, so
//! the burst takes seconds): kube-apiserver SIGKILLed and started again; etcd stopped and
//! started again on the same data directory; the controller's leader SIGKILLed. Under each, no
//! pod is released twice, no node is promised past its capacity, and every pod, those
//! submitted before the outage and those after, runs to the end.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions, LeaseFlags, Replica};
use serde_json::json;

use crate::common::{check_invariants, start, submit, wait_pods};

/// Pods before the outage (two rounds on 8 GPUs) and after it.
const BEFORE: usize = 16;
const AFTER: usize = 8;
/// Releases per second, one at a time: the first 8 take 2 s to go out.
const RATE: f64 = 4.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outage {
    ApiServer,
    Etcd,
    Leader,
}

fn released(cluster: &Cluster) -> usize {
    cluster.monitor.count(|p| p.released.is_some())
}

async fn mid_burst(outage: Outage) -> anyhow::Result<()> {
    let options = ClusterOptions {
        replicas: if outage == Outage::Leader { 2 } else { 1 },
        release_rate: RATE,
        release_burst: 1,
        lease: (outage == Outage::Leader).then(|| LeaseFlags::new("1s", "700ms", "200ms")),
        ..ClusterOptions::default()
    };
    let mut cluster = start(options).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let leader = cluster.leader().await.context("a leader")?;
    if outage == Outage::Leader {
        // Admission through the replica that stays, so pods can be created throughout.
        cluster.admit_through(1 - leader).await?;
    }
    for i in 0..BEFORE {
        submit(
            &cluster,
            gpu_pod("team", &format!("before-{i}"), 1),
            Some(2.0),
        )
        .await?;
    }
    // Mid-burst: two releases out, six more of the first round to go.
    wait_pods(
        &cluster,
        "the first releases",
        Duration::from_secs(10),
        |pods| pods.iter().filter(|p| p.released.is_some()).count() >= 2,
    )
    .await?;
    let before = released(&cluster);
    let began = Instant::now();
    match outage {
        Outage::ApiServer => cluster
            .plane
            .restart_apiserver(Duration::from_secs(2))
            .await
            .with_context(|| cluster.plane.logs(20))?,
        Outage::Etcd => cluster
            .plane
            .restart_etcd(Duration::from_secs(2))
            .await
            .with_context(|| cluster.plane.logs(20))?,
        Outage::Leader => {
            let killed = cluster.replicas[leader].lease_identity();
            cluster.replicas[leader].kill();
            let identity = cluster.replicas[leader].identity.clone();
            cluster.replicas[leader] = Replica::start(&cluster.settings, &identity).await?;
            cluster.wait_ready(leader).await?;
            let deadline = Instant::now() + Duration::from_secs(15);
            while cluster
                .leader_identity()
                .await
                .is_none_or(|holder| holder == killed)
            {
                ensure!(
                    Instant::now() < deadline,
                    "no replica took the Lease over within 15 s of the kill\n{}",
                    cluster.logs()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let outage_took = began.elapsed();
    let during = released(&cluster) - before;
    for i in 0..AFTER {
        submit(
            &cluster,
            gpu_pod("team", &format!("after-{i}"), 1),
            Some(1.0),
        )
        .await?;
    }
    wait_pods(
        &cluster,
        "every pod run to the end",
        Duration::from_secs(60),
        |pods| pods.iter().filter(|p| p.finished.is_some()).count() == BEFORE + AFTER,
    )
    .await
    .with_context(|| format!("{}\n{}", cluster.logs(), cluster.plane.logs(20)))?;
    check_invariants(&cluster).await?;
    let terms: usize = cluster
        .replicas
        .iter()
        .map(|r| r.log_lines_with("controller running").len())
        .sum();
    println!(
        "  {outage:?}: {before} released before, {during} during the {:.1} s outage, {} pods run; {terms} controller terms",
        outage_took.as_secs_f64(),
        BEFORE + AFTER
    );
    Ok(())
}

pub async fn apiserver_killed_mid_burst_releases_nothing_twice() -> anyhow::Result<()> {
    mid_burst(Outage::ApiServer).await
}

pub async fn etcd_restarted_mid_burst_releases_nothing_twice() -> anyhow::Result<()> {
    mid_burst(Outage::Etcd).await
}

pub async fn leader_killed_mid_burst_releases_nothing_twice() -> anyhow::Result<()> {
    mid_burst(Outage::Leader).await
}
