//! `kubectl-gpufair`, the real binary, against the real control plane: a pod that cannot fit
//! waits gated, and `queues`, `pending` and `why` say so from Queue status; a missing pod and a
//! cluster without gpufair's CRDs get plain errors.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use serde_json::{Value, json};

use crate::common::{check_invariants, start, submit, wait_until};

/// What one run of the plugin printed.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `kubectl-gpufair ARGS` with the admin's kubeconfig in `KUBECONFIG`, as kubectl would.
async fn plugin(cluster: &Cluster, args: &[&str]) -> anyhow::Result<Run> {
    let binary = gpufair_integration::binary("kubectl-gpufair");
    let kubeconfig = cluster.kubeconfig();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(binary)
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .output()
    })
    .await?
    .context("running kubectl-gpufair")?;
    Ok(Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// The kubeconfig's current context, to pass as `--context`.
fn current_context(cluster: &Cluster) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(cluster.kubeconfig())?;
    let config: Value = serde_yaml::from_str(&text)?;
    config["current-context"]
        .as_str()
        .map(str::to_string)
        .context("the admin kubeconfig names a current context")
}

pub async fn kubectl_gpufair_explains_a_gated_pod_from_queue_status() -> anyhow::Result<()> {
    let cluster = start(ClusterOptions::default()).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    // Both nodes' four GPUs taken, for as long as the case runs.
    for name in ["filler-1", "filler-2"] {
        submit(&cluster, gpu_pod("team", name, 4), None).await?;
        cluster
            .api
            .wait_for("v1", "Pod", "team", name, Duration::from_secs(15), |p| {
                p.is_some_and(|p| !p["spec"]["nodeName"].is_null())
            })
            .await?;
    }
    submit(&cluster, gpu_pod("team", "waiting", 2), None).await?;
    wait_until(
        "Queue team's status to list pod waiting",
        Duration::from_secs(15),
        || async {
            let queue = cluster
                .api
                .get("gpufair.io/v1alpha1", "Queue", "", "team")
                .await
                .ok()??;
            queue["status"]["waitingHead"]
                .as_array()?
                .iter()
                .any(|w| w["pod"] == "waiting")
                .then_some(())
        },
    )
    .await?;

    let queues = plugin(&cluster, &["queues"]).await?;
    ensure!(queues.success, "queues failed: {}", queues.stderr);
    let team = queues
        .stdout
        .lines()
        .find(|l| l.starts_with("team "))
        .with_context(|| format!("a line for queue team:\n{}", queues.stdout))?;
    let cells: Vec<&str> = team.split_whitespace().collect();
    ensure!(
        queues.stdout.starts_with("QUEUE ")
            && cells.get(1) == Some(&"default")
            && cells.get(6) == Some(&"8.00"),
        "queue team in pool default with 8 GPU-equivalents allocated:\n{}",
        queues.stdout
    );
    ensure!(
        cells.get(10) == Some(&"1"),
        "one workload waiting in queue team:\n{}",
        queues.stdout
    );

    let context = current_context(&cluster)?;
    let why = plugin(
        &cluster,
        &["why", "waiting", "-n", "team", "--context", &context],
    )
    .await?;
    ensure!(why.success, "why failed: {}", why.stderr);
    let paragraph = why.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for part in [
        "Pod team/waiting waits in queue team, pool default: 1st of 1 waiting in the queue (elastic tier)",
        "the queue is 1st of 1 queue with waiting work in the pool's order of service",
        "It waits because",
        "release score",
        "urgency",
        "time waited",
        "It would be released by",
        "Waiting since",
    ] {
        ensure!(
            paragraph.contains(part),
            "why says {part:?}:\n{}",
            why.stdout
        );
    }

    let pending = plugin(&cluster, &["pending", "team", "-o", "json"]).await?;
    ensure!(pending.success, "pending failed: {}", pending.stderr);
    let listed: Value = serde_json::from_str(&pending.stdout)
        .with_context(|| format!("pending -o json is JSON:\n{}", pending.stdout))?;
    ensure!(
        listed["workloads"][0]["pod"] == "waiting"
            && listed["workloads"][0]["position"] == 1
            && listed["workloads"][0]["gpuEquivalents"] == 2.0,
        "pending lists pod waiting first, asking 2 GPUs: {listed}"
    );
    let pending_table = plugin(&cluster, &["pending"]).await?;
    ensure!(
        pending_table.success,
        "pending failed: {}",
        pending_table.stderr
    );

    let running = plugin(&cluster, &["why", "filler-1", "-n", "team", "-o", "yaml"]).await?;
    ensure!(
        running.success && running.stdout.contains("state: bound"),
        "a bound pod is said not to wait:\n{}{}",
        running.stdout,
        running.stderr
    );
    let missing = plugin(&cluster, &["why", "nope", "-n", "team"]).await?;
    ensure!(
        !missing.success
            && missing
                .stderr
                .contains("pod \"nope\" not found in namespace \"team\""),
        "a missing pod is named: {}",
        missing.stderr
    );
    check_invariants(&cluster).await?;

    // Without gpufair's Queue CRD, a plain error.
    cluster
        .api
        .delete(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "queues.gpufair.io",
            false,
        )
        .await?;
    let not_installed = wait_until(
        "the API server to stop serving Queues",
        Duration::from_secs(20),
        || async {
            let run = plugin(&cluster, &["queues"]).await.ok()?;
            (!run.success).then_some(run)
        },
    )
    .await?;
    ensure!(
        not_installed.stderr.contains("gpufair is not installed"),
        "says gpufair is not installed: {}",
        not_installed.stderr
    );

    println!("  $ kubectl gpufair queues\n{}", queues.stdout);
    println!("  $ kubectl gpufair why waiting -n team\n{}", why.stdout);
    println!("  $ kubectl gpufair pending\n{}", pending_table.stdout);
    println!(
        "  $ kubectl gpufair queues   # without the CRDs\n{}",
        not_installed.stderr
    );
    Ok(())
}
