//! Under each injected fault (500s, 429s, slow answers, a dropped watch, 410 Gone, conflicts)
//! the controller recovers: a batch of pods, more than fits at once, is released and run to
//! the end, nothing is released twice and no node is promised more than it has.

use std::time::{Duration, Instant};

use anyhow::Context;
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use gpufair_integration::standin::{Fault, FaultRule, Verb};
use serde_json::json;

use crate::common::{check_invariants, start, submit, wait_pods};

const BATCH: usize = 10;

fn inject(cluster: &Cluster, fault: &str) {
    let faults = cluster.standin.faults();
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
        "dropped watch" => faults.drop_all_watches(),
        "410 Gone" => {
            // Every watch resumes from a version the server no longer has.
            cluster.standin.compact_history();
            faults.arm(FaultRule::new(
                Some("pods"),
                Some(Verb::Watch),
                Fault::Gone,
                1,
            ));
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
        other => panic!("no such fault {other}"),
    }
}

pub async fn controller_recovers_from_each_injected_fault() -> anyhow::Result<()> {
    let options = ClusterOptions {
        cycle_interval: "1s".into(),
        ..ClusterOptions::default()
    };
    let cluster = start(options).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut report = Vec::new();
    for (round, fault) in [
        "500s",
        "429s",
        "slow answers",
        "dropped watch",
        "410 Gone",
        "conflicts",
    ]
    .into_iter()
    .enumerate()
    {
        let began = Instant::now();
        inject(&cluster, fault);
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
        check_invariants(&cluster).await.with_context(|| format!("under {fault}"))?;
        cluster.standin.faults().clear();
        report.push(format!("{fault} {:.1}s", began.elapsed().as_secs_f64()));
    }
    println!(
        "  batches of {BATCH} pods on 8 GPUs run through: {}",
        report.join(", ")
    );
    Ok(())
}
