//! A 1-GPU pod is gated at creation, then released and bound within 2 s.

use std::time::{Duration, Instant};

use anyhow::ensure;
use gpufair_integration::cluster::ClusterOptions;
use gpufair_integration::cluster::monitor::pinned_node;
use gpufair_integration::cluster::pods::gpu_pod;
use serde_json::json;

use crate::common::{check_invariants, start, submit, wait_until};

pub async fn one_gpu_pod_is_gated_then_released_and_bound_within_2s() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions::default()).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;

    let submitted = Instant::now();
    let created = submit(&cluster, gpu_pod("team", "solo", 1), None).await?;
    ensure!(
        created["metadata"]["labels"]["gpufair.io/queue"] == "team",
        "the webhook put the pod in queue team: {created}"
    );
    let bound = cluster
        .api
        .wait_for("v1", "Pod", "team", "solo", Duration::from_secs(10), |p| {
            p.is_some_and(|p| !p["spec"]["nodeName"].is_null())
        })
        .await?;
    let elapsed = submitted.elapsed();
    ensure!(
        elapsed <= Duration::from_secs(2),
        "created → bound took {elapsed:?} (more than 2 s)"
    );
    let bound = bound.unwrap_or_default();
    // kube-apiserver took the release patch (gate removal plus the KEP-3838 node pin), and
    // kube-scheduler bound the pod to the node it was pinned to.
    let pinned = pinned_node(&bound);
    ensure!(
        pinned.is_some() && pinned.as_deref() == bound["spec"]["nodeName"].as_str(),
        "bound to the pinned node: pinned {pinned:?}, bound to {}",
        bound["spec"]["nodeName"]
    );
    ensure!(
        bound["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(|g| g.is_empty()),
        "gate removed: {bound}"
    );
    // The Event is written after the release itself.
    wait_until(
        "a Released Event for the pod",
        Duration::from_secs(5),
        || async {
            cluster
                .pod_events()
                .await
                .into_iter()
                .find(|e| e.pod == "solo" && e.reason == "Released")
        },
    )
    .await?;
    check_invariants(&cluster).await?;
    println!(
        "  solo: created → bound in {:.0} ms",
        elapsed.as_secs_f64() * 1000.0
    );
    Ok(())
}
