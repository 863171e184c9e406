//! A burst of pods that fit is released at once, not at the sustained release rate: the
//! controller's token bucket starts full.

use std::time::{Duration, Instant};

use anyhow::ensure;
use futures::StreamExt;
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{ClusterOptions, NodeOptions};
use serde_json::json;

use crate::common::{check_invariants, count, start, submit, wait_pods};

const PODS: usize = 100;
/// Sustained releases per second: alone it would need (PODS - 1) / RATE = 19.8 s.
const RATE: f64 = 5.0;
/// Well under what the sustained rate allows, well over what a burst needs.
const WITHIN: Duration = Duration::from_secs(10);

pub async fn burst_of_100_is_released_faster_than_the_sustained_rate() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions {
        nodes: (0..4)
            .map(|i| NodeOptions::new(&format!("gpu-{i}"), 32).without_device_plugin())
            .collect(),
        release_rate: RATE,
        release_burst: PODS as u32,
        ..ClusterOptions::default()
    })
    .await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;

    let started = Instant::now();
    let created: Vec<anyhow::Result<_>> = futures::stream::iter(0..PODS)
        .map(|i| submit(&cluster, gpu_pod("team", &format!("b-{i:03}"), 1), None))
        .buffer_unordered(PODS)
        .collect()
        .await;
    for result in created {
        result?;
    }
    let flat = Duration::from_secs_f64((PODS - 1) as f64 / RATE);
    wait_pods(
        &cluster,
        &format!("{PODS} pods released (the sustained rate alone needs {flat:?})"),
        WITHIN.saturating_sub(started.elapsed()),
        |pods| count(pods, "team", |p| p.released.is_some()) == PODS,
    )
    .await?;
    let elapsed = started.elapsed();
    ensure!(
        elapsed < flat,
        "{PODS} pods took {elapsed:?}, no faster than {RATE}/s alone ({flat:?})"
    );
    check_invariants(&cluster).await?;
    println!(
        "  {PODS} pods created and released in {:.2} s (at {RATE}/s alone: {:.1} s)",
        elapsed.as_secs_f64(),
        flat.as_secs_f64()
    );
    Ok(())
}
