//! A queue below its guarantee gets a whole victim workload evicted through the eviction
//! subresource, with Events; and a PodDisruptionBudget that blocks the first victim, wholly or
//! for all but one of its pods, leads to another victim or to waiting, never to a half-evicted
//! gang.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpufair_integration::cluster::monitor::PodRecord;
use gpufair_integration::cluster::pods::{gang_pod, gpu_pod};
use gpufair_integration::cluster::{Cluster, ClusterOptions};
use serde_json::{Value, json};

use gpufair_integration::controlplane::audit;

use crate::common::{
    GPUFAIR_ACCOUNTS, check_invariants, running, start, submit, wait_pods, wait_until,
};

/// Two batch gangs (2 pods × 2 GPUs each) fill both 4-GPU nodes, `younger` starting more
/// than a second after `older`; once both are older than the preemption cooldown, `budget`
/// (if any, without a selector) is made for `younger`, and `prod` (guaranteed 4) asks for
/// 4 GPUs: its first victim is [`FIRST_VICTIM`]. Pods' start times have whole-second
/// resolution, hence the gap: within one second the two would tie and the node names would
/// decide.
async fn crowded_cluster(budget: Option<Value>) -> anyhow::Result<Cluster> {
    let cluster = start(ClusterOptions::default()).await?;
    cluster
        .queue("prod", "prod", json!({"weight": 1, "guaranteed": 4}))
        .await?;
    cluster
        .queue("batch", "batch", json!({"weight": 1}))
        .await?;
    for gang in ["older", "younger"] {
        for i in 0..2 {
            submit(&cluster, gang_pod("batch", gang, i, 2, 2), None).await?;
        }
        wait_pods(
            &cluster,
            &format!("gang {gang} running"),
            Duration::from_secs(10),
            |pods| {
                pods.iter()
                    .filter(|p| p.group.as_deref() == Some(gang) && p.running.is_some())
                    .count()
                    == 2
            },
        )
        .await?;
        if gang == "older" {
            tokio::time::sleep(START_TIME_RESOLUTION + Duration::from_millis(200)).await;
        }
    }
    let pods = cluster.monitor.pods();
    for gang in ["older", "younger"] {
        let members = gang_members(&pods, gang);
        ensure!(
            members
                .iter()
                .all(|p| p.node.is_some() && p.node == members[0].node),
            "each gang fills one node: {pods:?}"
        );
    }
    if let Some(mut budget) = budget {
        budget["spec"]["selector"] = json!({"matchLabels": {"gpufair.io/pod-group": FIRST_VICTIM}});
        let name = budget["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        cluster.api.create(budget).await?;
        // Until the disruption controller has counted the gang's pods, the budget allows no
        // eviction at all, and the first victim's would be refused for that alone.
        let last_seen = std::sync::Mutex::new(Value::Null);
        wait_until(
            "the disruption controller to count the budget's pods",
            Duration::from_secs(20),
            || async {
                let budget = cluster
                    .api
                    .get("policy/v1", "PodDisruptionBudget", "batch", &name)
                    .await
                    .ok()??;
                let counted = budget["status"]["expectedPods"] == 2;
                *last_seen.lock().unwrap_or_else(|p| p.into_inner()) = budget;
                counted.then_some(())
            },
        )
        .await
        .with_context(|| {
            format!(
                "last seen: {}",
                last_seen.lock().unwrap_or_else(|p| p.into_inner())
            )
        })?;
    }
    // Both gangs are now older than the 2 s cooldown (the youngest victim age allowed).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    submit(&cluster, gpu_pod("prod", "urgent", 4), None).await?;
    Ok(cluster)
}

fn evicted(pod: &PodRecord) -> bool {
    pod.deleting.is_some() || (pod.gone.is_some() && pod.phase == "Running")
}

fn gang_members<'a>(pods: &'a [PodRecord], gang: &str) -> Vec<&'a PodRecord> {
    pods.iter()
        .filter(|p| p.group.as_deref() == Some(gang))
        .collect()
}

fn other_gang(gang: &str) -> &'static str {
    if gang == "older" { "younger" } else { "older" }
}

/// How `gang` is half-evicted in `pods`, if it is: some members evicted, others not.
fn half_evicted(pods: &[PodRecord], gang: &str) -> Option<String> {
    let members = gang_members(pods, gang);
    let gone = members.iter().filter(|p| evicted(p)).count();
    (gone != 0 && gone != members.len()).then(|| {
        format!(
            "gang {gang} half-evicted: {gone} of {} members",
            members.len()
        )
    })
}

/// Each gang is either wholly evicted or wholly running.
fn never_half_evicted(pods: &[PodRecord]) -> anyhow::Result<()> {
    for gang in ["older", "younger"] {
        if let Some(what) = half_evicted(pods, gang) {
            anyhow::bail!(what);
        }
    }
    Ok(())
}

/// The preemptor's first victim in [`crowded_cluster`]: among equally full nodes a hold takes
/// the one whose work has run the fewest GPU-seconds, so the gang that started later.
const FIRST_VICTIM: &str = "younger";

/// The resolution of a pod's `status.startTime`.
const START_TIME_RESOLUTION: Duration = Duration::from_secs(1);

/// How long a gang may be seen part-way through its eviction. The controller evicts a gang's
/// pods one call after another, so a watcher sampling while it works can see one evicted and
/// the other not yet; a gang left half-evicted stays so.
const EVICTION_IN_PROGRESS: Duration = Duration::from_secs(1);

/// Since when each gang has been seen half-evicted, while watching.
#[derive(Default)]
struct HalfEvictionWatch(HashMap<&'static str, Instant>);

impl HalfEvictionWatch {
    /// Fails once a gang has stayed half-evicted for longer than [`EVICTION_IN_PROGRESS`].
    fn check(&mut self, pods: &[PodRecord]) -> anyhow::Result<()> {
        for gang in ["older", "younger"] {
            let Some(what) = half_evicted(pods, gang) else {
                self.0.remove(gang);
                continue;
            };
            let since = *self.0.entry(gang).or_insert_with(Instant::now);
            ensure!(
                since.elapsed() <= EVICTION_IN_PROGRESS,
                "{what}, for {:.1}s",
                since.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }
}

pub async fn queue_below_guarantee_evicts_a_whole_victim_with_events() -> anyhow::Result<()> {
    // A budget that allows evicting the whole gang: its status records what went through the
    // eviction subresource. (The pods are bare, and the disruption controller works out
    // `maxUnavailable` only for pods of a controller with a scale, so the budgets here say
    // `minAvailable`.)
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "batch", "namespace": "batch"},
        "spec": {"minAvailable": 0}});
    let cluster = crowded_cluster(Some(budget)).await?;
    wait_pods(
        &cluster,
        "urgent running",
        Duration::from_secs(20),
        |pods| {
            pods.iter()
                .any(|p| p.name == "urgent" && p.running.is_some())
        },
    )
    .await
    .with_context(|| cluster.logs())?;
    let pods = cluster.monitor.pods();
    never_half_evicted(&pods)?;
    let victims: Vec<&PodRecord> = pods.iter().filter(|p| evicted(p)).collect();
    ensure!(
        victims.len() == 2 && victims[0].group == victims[1].group,
        "one whole gang evicted: {victims:?}"
    );
    let victim_gang = victims[0].group.clone().unwrap_or_default();
    ensure!(
        victim_gang == FIRST_VICTIM,
        "the victim is the gang whose work has run least, on the node the preemptor is held on ({FIRST_VICTIM}), not {victim_gang}"
    );
    let survivors = gang_members(&pods, other_gang(&victim_gang));
    ensure!(
        survivors.iter().all(|p| running(p)),
        "the other gang keeps running: {survivors:?}"
    );
    // The audit log says how each victim went: an eviction the API server granted (201), so
    // through the budget. (The budget's disruptedPods forgets a pod once it is gone.)
    let evictions = audit::read(&cluster.plane.audit_log);
    for victim in &victims {
        ensure!(
            evictions
                .iter()
                .any(|e| e.user.starts_with(GPUFAIR_ACCOUNTS)
                    && e.resource_path() == "pods/eviction"
                    && e.namespace == victim.namespace
                    && e.name == victim.name
                    && e.code == 201),
            "{} went through pods/eviction",
            victim.name
        );
    }
    let events = cluster.pod_events().await;
    for victim in &victims {
        let event = events
            .iter()
            .find(|e| e.pod == victim.name && e.reason == "Preempted")
            .with_context(|| format!("a Preempted Event on {}", victim.name))?;
        ensure!(
            event.message.contains("queue prod"),
            "the Event names the preemptor's queue: {}",
            event.message
        );
    }
    ensure!(
        events
            .iter()
            .any(|e| e.pod == "urgent" && e.reason == "PreemptedOthers"),
        "a PreemptedOthers Event on the preemptor"
    );
    check_invariants(&cluster).await?;
    let urgent = pods
        .iter()
        .find(|p| p.name == "urgent")
        .context("urgent seen")?;
    println!(
        "  urgent: created → running in {:.2}s, victim gang {victim_gang}",
        urgent
            .running
            .zip(urgent.first_seen)
            .map_or(0.0, |(r, c)| r.duration_since(c).as_secs_f64())
    );
    Ok(())
}

pub async fn budget_blocking_the_first_victim_never_half_evicts_a_gang() -> anyhow::Result<()> {
    // The first choice may lose nobody.
    first_victim_protected_by(json!({"minAvailable": 2})).await
}

/// A budget allowing one disruption passes the eviction dry run of each pod of a two-pod gang
/// on its own; evicting the gang would still take two. The controller must count the whole
/// workload against the budget and leave it be.
pub async fn budget_allowing_one_pod_never_half_evicts_a_two_pod_gang() -> anyhow::Result<()> {
    first_victim_protected_by(json!({"minAvailable": 1})).await
}

/// The first victim's gang gets a budget with `spec`, which must keep it whole and running; the
/// refusal turns the preemptor to the other gang, which goes whole.
async fn first_victim_protected_by(spec: Value) -> anyhow::Result<()> {
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "first-victim", "namespace": "batch"},
        "spec": spec});
    let cluster = crowded_cluster(Some(budget)).await?;
    let protected = FIRST_VICTIM;
    // Watch for 8 s: the protected gang must never be touched, and no gang may be left
    // half-evicted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    let mut watch = HalfEvictionWatch::default();
    while tokio::time::Instant::now() < deadline {
        watch
            .check(&cluster.monitor.pods())
            .with_context(|| cluster.logs())?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pods = cluster.monitor.pods();
    never_half_evicted(&pods).with_context(|| cluster.logs())?;
    let kept = gang_members(&pods, protected);
    ensure!(
        kept.iter().all(|p| running(p) && !evicted(p)),
        "the gang its budget protects is untouched: {kept:?}"
    );
    let urgent = pods
        .iter()
        .find(|p| p.name == "urgent")
        .context("urgent seen")?;
    // A refused victim is passed over: the preemptor turns to the other gang.
    let other = gang_members(&pods, other_gang(protected));
    ensure!(
        other.len() == 2 && other.iter().all(|p| evicted(p)),
        "the other gang is evicted whole instead: {other:?}\n{}",
        cluster.logs()
    );
    ensure!(
        urgent.released.is_some(),
        "the other gang was evicted, so urgent is released"
    );
    let blocked = cluster.replicas[0].log_lines_with("blocked by a disruption budget");
    ensure!(
        !blocked.is_empty(),
        "the controller tried the protected gang and was refused:\n{}",
        cluster.logs()
    );
    check_invariants(&cluster).await?;
    println!(
        "  budget on {protected}: the other gang was evicted whole; {} refused attempts",
        blocked.len()
    );
    Ok(())
}
