//! The controller restarts while it holds a node for a big workload: the new leader carries on
//! the hold's idle budget from `Queue.status.carried` instead of granting it a fresh one, so
//! the bound on what a hold leaves idle holds across restarts; and a hold given up is stored
//! with what blocked it and when, and stays so across a restart. Work of the backfill tier, and
//! with `holdBackfill` other work, runs in what a hold leaves idle and is evicted once the held
//! node has drained otherwise; realtime work within its queue's share runs there too, and the
//! hold drains around it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions, NodeOptions, TEST_CONFIG};
use serde_json::{Value, json};

use crate::common::{
    check_invariants, run_pod, start, submit, wait_controller_running, wait_pods, wait_until,
};

/// What queue `big`'s status holds at `pointer`, if it has any.
async fn big_status(cluster: &Cluster, pointer: &str) -> Option<Value> {
    let queue = cluster
        .api
        .get("gpufair.io/v1alpha1", "Queue", "", "big")
        .await
        .ok()
        .flatten()?;
    queue.pointer(pointer).cloned()
}

/// Queue `big`'s first stored hold: its idle GPU-seconds and when it was last kept.
async fn stored_hold(cluster: &Cluster) -> Option<(f64, f64, Value)> {
    let hold = big_status(cluster, "/status/carried/holds/0").await?;
    Some((hold["idleGpuSeconds"].as_f64()?, hold["at"].as_f64()?, hold))
}

/// One 4-GPU node under `config_yaml`, with queue `small`'s 1-GPU pod `one` running (it may not
/// be preempted for an hour) and queue `big`'s pod `whole` submitted for the whole node: `big`,
/// guaranteed all of it, holds the node while it waits, leaving 3 GPUs idle.
async fn big_waits_behind_small(config_yaml: String) -> anyhow::Result<Cluster> {
    let cluster = start(ClusterOptions {
        nodes: vec![NodeOptions::new("gpu-1", 4)],
        config_yaml,
        ..ClusterOptions::default()
    })
    .await?;
    make_big_wait_behind_small(&cluster).await?;
    Ok(cluster)
}

/// On `cluster`, queue `small` runs a 1-GPU pod that may not be evicted within the hour and
/// queue `big`, guaranteed 4 GPUs, submits a 4-GPU pod that finds no node free.
async fn make_big_wait_behind_small(cluster: &Cluster) -> anyhow::Result<()> {
    cluster
        .queue("small", "small", json!({"weight": 1, "minRunTime": "1h"}))
        .await?;
    cluster
        .queue("big", "big", json!({"weight": 1, "guaranteed": 4}))
        .await?;
    run_pod(cluster, "small", "one", 1).await?;
    submit(cluster, gpu_pod("big", "whole", 4), None).await?;
    Ok(())
}

/// Checks that `big`'s pod still waits while `small`'s runs, then ends `small`'s pod.
async fn end_small_while_big_waits(cluster: &Cluster) -> anyhow::Result<()> {
    ensure!(
        big_waits(cluster),
        "big's pod still waits while small's runs"
    );
    cluster
        .api
        .delete("v1", "Pod", "small", "one", true)
        .await?;
    Ok(())
}

/// Whether `big`'s pod still waits for the node.
fn big_waits(cluster: &Cluster) -> bool {
    cluster
        .monitor
        .pods()
        .iter()
        .any(|p| p.name == "whole" && p.running.is_none())
}

pub async fn controller_restart_keeps_a_holds_idle_budget() -> anyhow::Result<()> {
    let mut cluster = big_waits_behind_small(TEST_CONFIG.into()).await?;
    let (before, before_at, hold) = wait_until(
        "a hold of 6 idle GPU-seconds in big's status",
        Duration::from_secs(30),
        || async {
            stored_hold(&cluster)
                .await
                .filter(|(idle, _, _)| *idle >= 6.0)
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    ensure!(
        hold["nodes"] == json!(["gpu-1"]),
        "the hold is on the node: {hold}"
    );

    cluster.restart(0).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(20)).await?;
    wait_controller_running(&cluster, leader).await?;
    // The old leader went on writing until it stopped: only a hold kept by a cycle that ran
    // after the new leader started is the new leader's.
    let resumed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let (after, after_at, _) = wait_until(
        "a hold written by the new leader",
        Duration::from_secs(30),
        || async {
            stored_hold(&cluster)
                .await
                .filter(|(_, at, _)| *at >= resumed)
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    println!(
        "  the hold had left {before:.1} GPU-s idle before the restart, {after:.1} at the new leader's first write ({:.1}s later)",
        after_at - before_at
    );
    ensure!(
        after >= before + 3.0 * (after_at - before_at) * 0.5,
        "the hold's idle budget started afresh: {before:.1} GPU-s before the restart, \
         {after:.1} after {:.1}s more with 3 GPUs idle",
        after_at - before_at
    );
    ensure!(big_waits(&cluster), "big's pod still waits for the node");
    check_invariants(&cluster).await?;
    Ok(())
}

/// Queue `big`'s first stored given-up hold.
async fn stored_given_up(cluster: &Cluster) -> Option<Value> {
    big_status(cluster, "/status/carried/givenUp/0").await
}

/// When queue `big`'s ledger was last sampled, by whichever leader wrote it.
async fn ledger_sampled_at(cluster: &Cluster) -> Option<f64> {
    big_status(cluster, "/status/ledger/lastSample")
        .await?
        .as_f64()
}

async fn pod_uid(cluster: &Cluster, namespace: &str, name: &str) -> anyhow::Result<String> {
    let pod = cluster
        .api
        .get("v1", "Pod", namespace, name)
        .await?
        .with_context(|| format!("pod {namespace}/{name} is gone"))?;
    pod.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("pod {namespace}/{name} has no UID"))
}

pub async fn a_hold_given_up_is_stored_with_its_blocker_and_when_across_a_restart()
-> anyhow::Result<()> {
    // A 2 s idle limit: the 4-GPU hold's budget is 8 GPU-seconds, spent in about 3 s with 3
    // GPUs idle. `small`'s pod may not be preempted for an hour, so the drain cannot be ended
    // by eviction and the hold is given up, with that pod as its blocker. `big` has received
    // nothing, so its hold is given up only for idle time some waiting workload could have
    // used: `small`'s second pod, submitted once the hold stands, waits for those GPUs.
    let config = TEST_CONFIG.replacen("fairshare:\n", "fairshare:\n  holdIdleLimit: 2s\n", 1);
    let submitted = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let mut cluster = big_waits_behind_small(config).await?;
    wait_until("big's hold stored", Duration::from_secs(30), || async {
        stored_hold(&cluster).await
    })
    .await
    .with_context(|| cluster.logs())?;
    submit(&cluster, gpu_pod("small", "two", 1), None).await?;
    let given_up = wait_until(
        "a given-up hold in big's status",
        Duration::from_secs(30),
        || async { stored_given_up(&cluster).await },
    )
    .await
    .with_context(|| cluster.logs())?;
    let (blocker, waiting) = (
        pod_uid(&cluster, "small", "one").await?,
        pod_uid(&cluster, "big", "whole").await?,
    );
    ensure!(
        given_up["workload"] == json!(waiting) && given_up["blockers"] == json!([blocker]),
        "the given-up hold names big's pod and small's as its blocker: {given_up}"
    );
    let at = given_up["at"]
        .as_f64()
        .with_context(|| format!("the given-up hold records when: {given_up}"))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    ensure!(
        (submitted..=now).contains(&at),
        "given up at {at}, outside {submitted}..{now}"
    );

    cluster.restart(0).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(20)).await?;
    wait_controller_running(&cluster, leader).await?;
    let resumed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    wait_until(
        "a status written by the new leader",
        Duration::from_secs(30),
        || async { ledger_sampled_at(&cluster).await.filter(|t| *t >= resumed) },
    )
    .await
    .with_context(|| cluster.logs())?;
    // The new leader read the given-up hold back and stores it as it was: its blocker still
    // runs and its workload still waits, with no other node to hold.
    let kept = stored_given_up(&cluster)
        .await
        .context("the given-up hold is gone after the restart")?;
    ensure!(
        kept == given_up,
        "the given-up hold changed across the restart: {given_up} → {kept}"
    );
    ensure!(big_waits(&cluster), "big's pod still waits for the node");
    check_invariants(&cluster).await?;
    Ok(())
}

/// With `fairshare.holdBackfill: true`, queue `extra`'s 1-GPU training pod runs as backfill in
/// the 3 GPUs `big`'s hold leaves idle; once `small`'s pod ends, the backfill is evicted and
/// `big`'s pod starts on the whole node. Backfill goes only to work that keeps its queue within
/// its share: a second node, kept busy by queue `busy`, leaves room for `extra`'s guarantee of
/// one GPU beside `big`'s of four, and with `big`'s hold made first (the one hold for queues
/// below their guarantee), `extra`'s pod gets no hold of its own.
pub async fn backfill_runs_in_a_holds_idle_capacity_until_the_node_drains() -> anyhow::Result<()> {
    let config = TEST_CONFIG.replacen("fairshare:\n", "fairshare:\n  holdBackfill: true\n", 1);
    fill_a_hold_until_it_drains(config, gpu_pod("extra", "fill", 1)).await
}

/// With the default configuration, the same for a pod of the backfill tier (`ai-task-type:
/// processing`): work its owners declared gap-filling takes held capacity left idle without
/// `holdBackfill`, and leaves it once the held node has drained otherwise.
pub async fn processing_runs_in_a_holds_idle_capacity_by_default() -> anyhow::Result<()> {
    let mut fill = gpu_pod("extra", "fill", 1);
    fill["metadata"]["labels"]["ai-task-type"] = json!("processing");
    fill_a_hold_until_it_drains(TEST_CONFIG.into(), fill).await
}

/// Two 4-GPU nodes under `config_yaml`: `busy` fills one, `big` waits behind `small` on the
/// other (see [`make_big_wait_behind_small`]) and holds it, and queue `name` (of `spec`) exists,
/// with nothing submitted yet.
async fn hold_beside_a_busy_node(
    config_yaml: String,
    name: &str,
    spec: Value,
) -> anyhow::Result<Cluster> {
    let cluster = start(ClusterOptions {
        config_yaml,
        ..ClusterOptions::default()
    })
    .await?;
    cluster
        .queue("busy", "busy", json!({"weight": 1, "minRunTime": "1h"}))
        .await?;
    run_pod(&cluster, "busy", "four", 4).await?;
    make_big_wait_behind_small(&cluster).await?;
    cluster.queue(name, name, spec).await?;
    wait_until("big's hold stored", Duration::from_secs(30), || async {
        stored_hold(&cluster).await
    })
    .await
    .with_context(|| cluster.logs())?;
    Ok(cluster)
}

/// Two 4-GPU nodes under `config_yaml`: `big` waits behind `small` on one (see
/// [`make_big_wait_behind_small`]), `busy` fills the other, and queue `extra`'s pod `fill` (one
/// GPU) runs as backfill in `big`'s hold until `small`'s pod ends, then leaves for `big`'s.
async fn fill_a_hold_until_it_drains(config_yaml: String, fill: Value) -> anyhow::Result<()> {
    let extra = json!({"weight": 1, "guaranteed": 1});
    let cluster = hold_beside_a_busy_node(config_yaml, "extra", extra).await?;
    submit(&cluster, fill, None).await?;
    wait_pods(
        &cluster,
        "extra's pod fill running as backfill",
        Duration::from_secs(20),
        |pods| pods.iter().any(|p| p.name == "fill" && p.running.is_some()),
    )
    .await
    .with_context(|| cluster.logs())?;
    // Small's pod ends: the node has drained but for the backfill, which leaves for big's pod.
    end_small_while_big_waits(&cluster).await?;
    wait_pods(
        &cluster,
        "big's pod running after the backfill left",
        Duration::from_secs(30),
        |pods| {
            let fill_left = pods
                .iter()
                .any(|p| p.name == "fill" && (p.deleting.is_some() || p.gone.is_some()));
            fill_left
                && pods
                    .iter()
                    .any(|p| p.name == "whole" && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    check_invariants(&cluster).await?;
    Ok(())
}

/// Queue `serve`'s realtime pod (`ai-task-type: inference`, one GPU, within its queue's share)
/// runs at once in the 3 GPUs `big`'s hold leaves idle, instead of waiting for the drain of a
/// workload of a lower tier; it is not evicted for the hold, which drains around it: `big`'s pod
/// starts once both `small`'s pod and the answer have ended.
pub async fn realtime_work_runs_in_a_holds_idle_capacity() -> anyhow::Result<()> {
    let serve = json!({"weight": 1});
    let cluster = hold_beside_a_busy_node(TEST_CONFIG.into(), "serve", serve).await?;
    let mut answer = gpu_pod("serve", "answer", 1);
    answer["metadata"]["labels"]["ai-task-type"] = json!("inference");
    submit(&cluster, answer, Some(ANSWER_SECONDS)).await?;
    wait_pods(
        &cluster,
        "serve's realtime pod running in the held node's idle GPUs",
        Duration::from_secs(10),
        |pods| {
            pods.iter()
                .any(|p| p.name == "answer" && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    end_small_while_big_waits(&cluster).await?;
    wait_pods(
        &cluster,
        "big's pod running once small's pod and the answer have ended",
        Duration::from_secs(30),
        |pods| {
            pods.iter()
                .any(|p| p.name == "whole" && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    let pods = cluster.monitor.pods();
    let answer = pods
        .iter()
        .find(|p| p.name == "answer")
        .context("the answer was seen")?;
    ensure!(
        answer.finished.is_some() && answer.deleting.is_none(),
        "the answer was evicted for the hold instead of ending: {answer:?}"
    );
    check_invariants(&cluster).await?;
    Ok(())
}

/// How long the realtime pod runs, seconds: long enough to be seen beside the hold.
const ANSWER_SECONDS: f64 = 6.0;
