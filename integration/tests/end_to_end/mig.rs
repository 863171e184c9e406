//! MIG slices in the forms H100/H200 nodes really offer: a slice with media extensions
//! (`1g.18gb+me`, advertised as `nvidia.com/mig-1g.18gb.me`) and a compute instance smaller than
//! its GPU instance (`1c.3g.71gb`). The device plugin advertises both from fake GPUs; each is one
//! compute slice of seven, so the controller counts it as 1/7 of a GPU in its Queue's
//! allocation and charges the ledger 1/7 GPU-second per second, not a whole GPU.

use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions, NodeOptions};
use serde_json::{Value, json};

use crate::common::{check_invariants, queue_ledger, start, submit, wait_pods, wait_until};

const MEDIA_SLICE: &str = "nvidia.com/mig-1g.18gb.me";
const COMPUTE_INSTANCE: &str = "nvidia.com/mig-1c.3g.71gb";

/// One H200 in MIG mode: two `1g.18gb+me` instances and a 3g GPU instance with a 1-slice
/// compute instance.
const H200_MIG: &str = "gpus:
  - uuid: GPU-5a000000-0000-0000-0000-000000000001
    model: NVIDIA H200
    memoryMiB: 143771
    mig:
      - { uuid: MIG-5a000000-0000-0000-0000-000000000011, profile: 1g.18gb+me, gpuInstance: 1, computeInstance: 0 }
      - { uuid: MIG-5a000000-0000-0000-0000-000000000012, profile: 1g.18gb+me, gpuInstance: 2, computeInstance: 0 }
      - { uuid: MIG-5a000000-0000-0000-0000-000000000013, profile: 1c.3g.71gb, gpuInstance: 3, computeInstance: 0 }
";

/// A training pod asking for one unit of `resource`.
fn slice_pod(namespace: &str, name: &str, resource: &str) -> Value {
    let mut pod = gpu_pod(namespace, name, 1);
    pod["spec"]["containers"][0]["resources"] =
        json!({"requests": {resource: "1"}, "limits": {resource: "1"}});
    pod
}

/// (allocated GPU-equivalents, GPU-seconds charged over all buckets, time of the last sample)
/// from Queue `name`'s status.
async fn queue_figures(cluster: &Cluster, name: &str) -> Option<(f64, f64, f64)> {
    let queue = cluster
        .api
        .get("gpufair.io/v1alpha1", "Queue", "", name)
        .await
        .ok()
        .flatten()?;
    let (charged, sampled) = queue_ledger(&queue)?;
    Some((queue["status"]["allocated"].as_f64()?, charged, sampled))
}

pub async fn media_and_compute_instance_slices_are_charged_one_seventh_of_a_gpu()
-> anyhow::Result<()> {
    let node = NodeOptions::with_fake_gpus(
        "h200-mig",
        H200_MIG,
        &[(MEDIA_SLICE, 2), (COMPUTE_INSTANCE, 1)],
    );
    let cluster = start(ClusterOptions {
        nodes: vec![node],
        ..ClusterOptions::default()
    })
    .await?;
    cluster
        .queue("media", "media", json!({"weight": 1}))
        .await?;
    cluster
        .queue("compute", "compute", json!({"weight": 1}))
        .await?;
    submit(&cluster, slice_pod("media", "media-0", MEDIA_SLICE), None).await?;
    submit(
        &cluster,
        slice_pod("compute", "compute-0", COMPUTE_INSTANCE),
        None,
    )
    .await?;
    wait_pods(
        &cluster,
        "both slice pods running",
        Duration::from_secs(20),
        |pods| pods.iter().filter(|p| p.running.is_some()).count() == 2,
    )
    .await
    .with_context(|| cluster.logs())?;

    let one_slice = 1.0 / 7.0;
    for queue in ["media", "compute"] {
        // Two status writes a few seconds apart, both after the pod was counted.
        let (allocated, charged, sampled) = wait_until(
            &format!("Queue {queue} allocated a slice"),
            Duration::from_secs(20),
            || async {
                queue_figures(&cluster, queue)
                    .await
                    .filter(|(allocated, _, _)| *allocated > 0.0)
            },
        )
        .await
        .with_context(|| cluster.logs())?;
        ensure!(
            (allocated - one_slice).abs() < 1e-6,
            "Queue {queue}: a 1-slice MIG pod is {allocated} GPU-equivalents, expected 1/7"
        );
        let (_, charged_later, sampled_later) = wait_until(
            &format!("Queue {queue}'s ledger 3 s later"),
            Duration::from_secs(20),
            || async {
                queue_figures(&cluster, queue)
                    .await
                    .filter(|(_, _, at)| *at >= sampled + 3.0)
            },
        )
        .await
        .with_context(|| cluster.logs())?;
        let rate = (charged_later - charged) / (sampled_later - sampled);
        println!(
            "  Queue {queue}: allocated {allocated:.4} GPU, charged {rate:.4} GPU-s per second"
        );
        ensure!(
            (rate - one_slice).abs() < 0.02,
            "Queue {queue}: the ledger charged {rate:.4} GPU-seconds per second for one MIG \
             slice, expected 1/7 ({one_slice:.4})"
        );
    }
    check_invariants(&cluster).await?;
    Ok(())
}
