//! Under each injected fault (500s, 429s, slow answers, dropped watches, 410 Gone, conflicts)
//! the controller recovers: a batch of pods, more than fits at once, is released and run to
//! the end, nothing is released twice and no node is promised more than it has. The faults
//! come from the fault proxy the replicas reach the API server through, except 410 Gone: etcd
//! is compacted for real (kube-apiserver without its watch cache, so watches read etcd), every
//! watch is dropped, and the watches resuming from before the compaction are answered 410 by
//! the API server itself.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use gpufair_integration::controlplane::ControlPlaneOptions;
use gpufair_integration::faults::{Fault, FaultRule, Verb};
use serde_json::json;

use crate::common::{check_invariants, start, submit, wait_pods, wait_until};

const BATCH: usize = 10;

const FAULTS: [&str; 6] = [
    "500s",
    "429s",
    "slow answers",
    "dropped watches",
    "410 Gone",
    "conflicts",
];

async fn inject(cluster: &Cluster, fault: &str) -> anyhow::Result<()> {
    let faults = cluster.faults();
    match fault {
        "500s" => faults.arm(FaultRule::new(Some("pods"), None, Fault::ServerError, 6)),
        "429s" => faults.arm(FaultRule::new(
            Some("pods"),
            None,
            Fault::TooManyRequests {
                retry_after_seconds: 1,
            },
            6,
        )),
        "slow answers" => faults.arm(FaultRule::new(
            Some("pods"),
            None,
            Fault::Delay(Duration::from_millis(1500)),
            6,
        )),
        "dropped watches" => {
            // Every watch open now ends, and the next two pod watches end again at once.
            faults.arm(FaultRule::new(
                Some("pods"),
                Some(Verb::Watch),
                Fault::CutWatch {
                    after: Duration::ZERO,
                },
                2,
            ));
            faults.drop_all_watches();
        }
        "410 Gone" => {
            // Every watch resumes from a revision etcd no longer has.
            let revision = cluster.plane.compact_etcd().await?;
            println!("  etcd compacted at revision {revision}");
            faults.drop_all_watches();
        }
        "conflicts" => {
            faults.arm(FaultRule::new(
                Some("pods"),
                Some(Verb::Patch),
                Fault::Conflict,
                3,
            ));
            faults.arm(FaultRule::new(
                Some("queues/status"),
                None,
                Fault::Conflict,
                3,
            ));
        }
        other => anyhow::bail!("no such fault {other}"),
    }
    Ok(())
}

pub async fn controller_recovers_from_each_injected_fault() -> anyhow::Result<()> {
    let options = ClusterOptions {
        cycle_interval: "1s".into(),
        fault_proxy: true,
        control_plane: ControlPlaneOptions {
            watch_cache: false,
            ..ControlPlaneOptions::default()
        },
        ..ClusterOptions::default()
    };
    let cluster = start(options).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    let faults = cluster.faults();
    ensure!(
        faults.open_watches() > 0,
        "the replicas watch nothing through the fault proxy"
    );
    let mut report = Vec::new();
    for (round, fault) in FAULTS.into_iter().enumerate() {
        let began = Instant::now();
        let (injected, cut, gone) = (
            faults.injected().len(),
            faults.watches_cut(),
            faults.gone_from_server(),
        );
        inject(&cluster, fault).await?;
        for i in 0..BATCH {
            submit(
                &cluster,
                gpu_pod("team", &format!("r{round}-{i}"), 1),
                Some(1.0),
            )
            .await?;
        }
        let prefix = format!("r{round}-");
        wait_pods(
            &cluster,
            &format!("every pod of the batch run under {fault}"),
            Duration::from_secs(30),
            |pods| {
                pods.iter()
                    .filter(|p| p.name.starts_with(&prefix) && p.finished.is_some())
                    .count()
                    == BATCH
            },
        )
        .await
        .with_context(|| format!("under {fault}:\n{}", cluster.logs()))?;
        // The armed faults were all taken by the replicas' requests.
        wait_until(
            &format!("every armed {fault} fault to hit a request"),
            Duration::from_secs(10),
            || async { (faults.remaining() == 0).then_some(()) },
        )
        .await
        .with_context(|| format!("injected so far: {:?}", faults.injected()))?;
        check_invariants(&cluster)
            .await
            .with_context(|| format!("under {fault}"))?;
        faults.clear();
        let detail = match fault {
            "dropped watches" => format!("{} watches cut", faults.watches_cut() - cut),
            "410 Gone" => {
                let from_server = faults.gone_from_server() - gone;
                ensure!(
                    from_server > 0,
                    "no watch or list was answered 410 Gone by the API server after the compaction"
                );
                format!("{from_server} 410s from kube-apiserver")
            }
            _ => format!("{} injected", faults.injected().len() - injected),
        };
        report.push(format!(
            "{fault} {:.1}s ({detail})",
            began.elapsed().as_secs_f64()
        ));
    }
    println!(
        "  batches of {BATCH} pods on 8 GPUs run through: {}",
        report.join(", ")
    );
    Ok(())
}
