//! Two queues with weights 2:1 and more demand than 12 GPUs settle at 8:4: 1-GPU pods that run
//! 2 s each keep both queues saturated, and the GPUs running per queue are sampled once the
//! first pods have turned over, for as long as both queues still have pods waiting.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::ensure;
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{ClusterOptions, NodeOptions};
use serde_json::json;

use crate::common::{check_invariants, count, running, start, submit};

const RUN_SECONDS: f64 = 2.0;
// Twenty seconds of demand for each queue at its share (heavy turns over 4 pods a second, light
// 2): pods start as they are submitted, and submitting them takes seconds on a busy machine.
const HEAVY_PODS: u32 = 80;
const LIGHT_PODS: u32 = 40;
const SAMPLES_WANTED: u32 = 80;
// A split is only judged on enough samples taken while both queues had demand.
const SAMPLES_NEEDED: u32 = 40;

pub async fn weights_2_to_1_on_12_gpus_settle_at_8_to_4() -> anyhow::Result<()> {
    let options = ClusterOptions {
        nodes: (1..=3)
            .map(|i| NodeOptions::new(&format!("gpu-{i}"), 4))
            .collect(),
        ..ClusterOptions::default()
    };
    let cluster = start(options).await?;
    cluster
        .queue("heavy", "heavy", json!({"weight": 2}))
        .await?;
    cluster
        .queue("light", "light", json!({"weight": 1}))
        .await?;
    // Interleaved, so neither queue's demand is seen first.
    for i in 0..HEAVY_PODS.max(LIGHT_PODS) {
        if i < HEAVY_PODS {
            submit(
                &cluster,
                gpu_pod("heavy", &format!("h-{i:02}"), 1),
                Some(RUN_SECONDS),
            )
            .await?;
        }
        if i < LIGHT_PODS {
            submit(
                &cluster,
                gpu_pod("light", &format!("l-{i:02}"), 1),
                Some(RUN_SECONDS),
            )
            .await?;
        }
    }
    // Let the first pods turn over, then sample every 100 ms while both queues still have pods
    // waiting: a sample taken after one queue ran dry says nothing about the split.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut samples: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    let (mut heavy_sum, mut light_sum, mut n) = (0usize, 0usize, 0u32);
    let (mut pending_heavy, mut pending_light) = (0, 0);
    while n < SAMPLES_WANTED {
        let pods = cluster.monitor.pods();
        pending_heavy = count(&pods, "heavy", |p| p.released.is_none());
        pending_light = count(&pods, "light", |p| p.released.is_none());
        if pending_heavy == 0 || pending_light == 0 {
            break;
        }
        let heavy = count(&pods, "heavy", running);
        let light = count(&pods, "light", running);
        *samples.entry((heavy, light)).or_default() += 1;
        heavy_sum += heavy;
        light_sum += light;
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        n >= SAMPLES_NEEDED,
        "only {n} samples were taken while both queues had demand ({pending_heavy} heavy, {pending_light} light pods waiting when sampling stopped; {SAMPLES_NEEDED} needed)"
    );
    let (mode, times) = samples
        .iter()
        .max_by_key(|(_, times)| **times)
        .map(|(pair, times)| (*pair, *times))
        .unwrap_or_default();
    let heavy_mean = heavy_sum as f64 / f64::from(n);
    let light_mean = light_sum as f64 / f64::from(n);
    println!(
        "  running (heavy, light) most often {mode:?} ({times}/{n} samples); means {heavy_mean:.2} : {light_mean:.2}"
    );
    ensure!(
        mode == (8, 4),
        "the split seen most often is {mode:?}, not (8, 4); samples: {samples:?}"
    );
    let ratio = heavy_mean / light_mean;
    ensure!(
        (1.8..=2.2).contains(&ratio),
        "mean GPUs heavy:light = {heavy_mean:.2}:{light_mean:.2} = {ratio:.2}, not 2 ± 10%"
    );
    check_invariants(&cluster).await?;
    Ok(())
}
