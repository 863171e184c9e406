//! `gpufair-try`: gpufair without a GPU cluster, in one command. Starts a real Kubernetes control
//! plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, built from their Go
//! modules on first use) with kwok fake-GPU nodes (each fed by a real `gpufair-device-plugin`), a real
//! `gpufair-webhook serve` (admission and the gate-release controller), submits pods from two
//! queues over a few seconds, and prints as the run goes which pods wait and why, which are
//! released and onto which node, and when they run and finish.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use gpufair_integration::cluster::monitor::PodRecord;
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use gpufair_integration::cluster::{Cluster, ClusterOptions, NodeOptions};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(
    name = "gpufair-try",
    version,
    about = "Run gpufair's real components on fake GPUs against a real Kubernetes control plane, and watch it decide"
)]
struct Cli {
    /// How long to run, e.g. 40s or 2m (the pods are submitted in the first 8 s).
    #[arg(long, env = "GPUFAIR_TRY_DURATION", default_value = "40s", value_parser = duration)]
    duration: Duration,
    /// Fake-GPU nodes.
    #[arg(long, env = "GPUFAIR_TRY_NODES", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    nodes: u32,
    /// GPUs per node.
    #[arg(long, env = "GPUFAIR_TRY_GPUS_PER_NODE", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    gpus_per_node: u32,
}

fn duration(text: &str) -> Result<Duration, String> {
    let seconds =
        gpufair_core::duration::parse_duration(text).map_err(|e| format!("--duration: {e}"))?;
    if seconds <= 0.0 {
        return Err(format!("--duration {text:?} must be longer than 0s"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

/// One submission of the scripted workload.
struct Submission {
    at: f64,
    namespace: &'static str,
    name: &'static str,
    /// Pods × GPUs per pod (more than one pod makes a gang).
    pods: u32,
    gpus: u32,
    task: &'static str,
    run_seconds: f64,
}

/// Two teams: research (weight 2) trains, product (weight 1, 4 GPUs guaranteed) serves and
/// fine-tunes. Research fills the cluster first; product's guarantee and the weights then
/// decide who goes next.
const WORKLOAD: &[Submission] = &[
    Submission {
        at: 0.0,
        namespace: "research",
        name: "pretrain",
        pods: 2,
        gpus: 4,
        task: "train",
        run_seconds: 14.0,
    },
    Submission {
        at: 0.0,
        namespace: "research",
        name: "ablation-1",
        pods: 1,
        gpus: 2,
        task: "train",
        run_seconds: 8.0,
    },
    Submission {
        at: 0.5,
        namespace: "research",
        name: "ablation-2",
        pods: 1,
        gpus: 2,
        task: "train",
        run_seconds: 8.0,
    },
    Submission {
        at: 2.0,
        namespace: "product",
        name: "serve",
        pods: 1,
        gpus: 2,
        task: "inference",
        run_seconds: 20.0,
    },
    Submission {
        at: 3.0,
        namespace: "research",
        name: "sweep-1",
        pods: 1,
        gpus: 2,
        task: "train",
        run_seconds: 6.0,
    },
    Submission {
        at: 3.5,
        namespace: "research",
        name: "sweep-2",
        pods: 1,
        gpus: 2,
        task: "train",
        run_seconds: 6.0,
    },
    Submission {
        at: 4.0,
        namespace: "product",
        name: "finetune",
        pods: 2,
        gpus: 2,
        task: "train",
        run_seconds: 8.0,
    },
    Submission {
        at: 6.0,
        namespace: "research",
        name: "big-eval",
        pods: 2,
        gpus: 4,
        task: "processing",
        run_seconds: 6.0,
    },
    Submission {
        at: 8.0,
        namespace: "product",
        name: "batch-embed",
        pods: 1,
        gpus: 1,
        task: "processing",
        run_seconds: 5.0,
    },
];

fn pod_for(submission: &Submission, index: u32) -> Value {
    let mut pod = if submission.pods > 1 {
        gang_pod(
            submission.namespace,
            submission.name,
            index,
            submission.pods,
            submission.gpus,
        )
    } else {
        gpu_pod(submission.namespace, submission.name, submission.gpus)
    };
    pod["metadata"]["labels"]["ai-task-type"] = json!(submission.task);
    pod
}

/// Prints what changed since the last call: Events (waiting and why, released, preempted)
/// and pods starting and finishing.
struct Narrator {
    started: Instant,
    printed_events: HashSet<(String, String, u64)>,
    running: HashSet<String>,
    finished: HashSet<String>,
}

impl Narrator {
    fn stamp(&self) -> String {
        format!("[{:5.1}s]", self.started.elapsed().as_secs_f64())
    }

    async fn narrate(&mut self, cluster: &Cluster) {
        for event in cluster.pod_events().await {
            let key = (event.pod_uid.clone(), event.reason.clone(), event.count);
            if !self.printed_events.insert(key) {
                continue;
            }
            let pod = format!("{}/{}", event.namespace, event.pod);
            let line = match event.reason.as_str() {
                "Waiting" => format!("waiting   {pod}: {}", event.message),
                "Released" => format!("released  {pod}: {}", event.message),
                "Preempted" => format!("preempted {pod}: {}", event.message),
                "PreemptedOthers" => format!("preempts  {pod}: {}", event.message),
                other => format!("{other:<9} {pod}: {}", event.message),
            };
            println!("{} {line}", self.stamp());
        }
        for pod in cluster.monitor.pods() {
            self.pod_lines(&pod);
        }
    }

    fn pod_lines(&mut self, pod: &PodRecord) {
        if pod.queue.is_empty() {
            return;
        }
        if pod.running.is_some() && self.running.insert(pod.uid.clone()) {
            println!(
                "{} running   {} ({} GPUs) on {}",
                self.stamp(),
                pod.key(),
                pod.gpus,
                pod.node.as_deref().unwrap_or("?")
            );
        }
        if pod.finished.is_some() && self.finished.insert(pod.uid.clone()) {
            let how = if pod.phase == "Succeeded" {
                "finished "
            } else {
                "evicted  "
            };
            println!("{} {how} {}", self.stamp(), pod.key());
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    println!(
        "gpufair-try: starting a Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; built from Go modules on first use, about 15 minutes on two cores), {} kwok fake-GPU nodes (gpufair-device-plugin, {} GPUs each) and gpufair-webhook serve (admission + controller)...",
        cli.nodes, cli.gpus_per_node
    );
    let options = ClusterOptions {
        nodes: (1..=cli.nodes)
            .map(|i| NodeOptions::new(&format!("gpu-{i}"), cli.gpus_per_node))
            .collect(),
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(options)
        .await
        .context("starting the cluster")?;
    cluster
        .wait_for_leader(Duration::from_secs(30))
        .await
        .context("waiting for the controller to lead")?;
    cluster
        .queue("research", "research", json!({"weight": 2}))
        .await?;
    cluster
        .queue("product", "product", json!({"weight": 1, "guaranteed": 4}))
        .await?;
    println!(
        "queues: research (weight 2, namespace research), product (weight 1, 4 GPUs guaranteed, namespace product); kubeconfig: {}",
        cluster.kubeconfig().display()
    );

    let mut narrator = Narrator {
        started: Instant::now(),
        printed_events: HashSet::new(),
        running: HashSet::new(),
        finished: HashSet::new(),
    };
    let end = narrator.started + cli.duration;
    let mut next = 0;
    while Instant::now() < end {
        let now = narrator.started.elapsed().as_secs_f64();
        while next < WORKLOAD.len() && WORKLOAD[next].at <= now {
            let submission = &WORKLOAD[next];
            for i in 0..submission.pods {
                cluster
                    .api
                    .submit_pod(pod_for(submission, i), Some(submission.run_seconds))
                    .await
                    .with_context(|| format!("submitting {}", submission.name))?;
            }
            println!(
                "{} submitted {}/{} ({} pod(s) × {} GPUs, {}, runs {}s)",
                narrator.stamp(),
                submission.namespace,
                submission.name,
                submission.pods,
                submission.gpus,
                submission.task,
                submission.run_seconds
            );
            next += 1;
        }
        narrator.narrate(&cluster).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    narrator.narrate(&cluster).await;

    let mut used: BTreeMap<String, f64> = BTreeMap::new();
    let horizon = Instant::now();
    for pod in cluster.monitor.pods() {
        if let Some(running) = pod.running {
            let seconds = pod
                .finished
                .unwrap_or(horizon)
                .duration_since(running)
                .as_secs_f64();
            *used.entry(pod.queue.clone()).or_default() += f64::from(pod.gpus) * seconds;
        }
    }
    let summary: Vec<String> = used
        .iter()
        .filter(|(q, _)| !q.is_empty())
        .map(|(q, s)| format!("{q} {s:.0}"))
        .collect();
    println!("GPU-seconds received: {}", summary.join(", "));
    Ok(())
}
