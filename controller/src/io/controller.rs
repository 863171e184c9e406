//! The controller loop on the elected leader: watch, build the snapshot, decide, apply.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use tokio::sync::Notify;

use crate::apply::{Applier, ApplyError, EvictionOutcome, RateLimiter, announce_eviction};
use crate::family_status;
use crate::kube_api::{EventType, KubeControllerApi};
use crate::leader::Leadership;
use crate::leader_model::{Decided, EvictionSettled, Model, ReleaseSettled};
use crate::ledger::queue_status;
use crate::metrics::{ControllerMetrics, PreemptionLabels, QueueLabels};
use crate::options::SharedOptions;
use crate::plan::{explanation_turns, plan_explaining};
use crate::queue_cache::QueueCache;
use crate::release::{Outcome, PodOutcome, ReleasePipeline};
use crate::snapshot::{Cluster, GpuKinds, build_from_facts};
use crate::token_bucket::ReleaseLimit;
use crate::waiting_status::{QueueWaiting, waiting_view};
use crate::watch::{Caches, start};

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The scheduling gate the webhook adds (only this gate is ever removed).
    pub gate: String,
    pub gpus: GpuKinds,
    /// Read at the start of every cycle, so a reloaded config applies without a restart.
    pub options: SharedOptions,
    /// A cycle runs at least this often.
    pub cycle_interval: Duration,
    /// Events are gathered this long before a cycle starts.
    pub debounce: Duration,
    /// Releases per second once the burst is spent, and how many may go at once.
    pub release_limit: ReleaseLimit,
    /// How often Queue status (the ledger) is written.
    pub status_interval: Duration,
    /// A released pod that has not bound after this long is given up on.
    pub unbound_timeout: Duration,
    /// Least time between two explanation Events on one waiting pod.
    pub explain_interval: Duration,
    /// Most explanation Events one cycle sends; the pods left out stay due.
    pub explanations_per_cycle: usize,
    /// Identity of this replica in Events.
    pub instance: String,
    /// Weight of a finished pod's peak in its family's smoothed peak (right-sizing).
    pub family_alpha: f64,
}

/// A pod's workload family, as the facts store keeps it.
type FactsFamily = (crate::families::FamilyKey, gpufair_api::WorkloadFamilySpec);

/// Explanation Events and Queue status writes in flight at once.
const WRITES_IN_FLIGHT: usize = 16;

fn unix_now() -> f64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0
}

/// What the leader remembers between cycles: the model, and when it last wrote Queue status.
#[derive(Default)]
struct State {
    model: Model,
    last_status_write: Option<Instant>,
}

/// Runs the controller while this replica leads, until `stop` resolves. `queues` is filled by
/// the process's Queue watch, which the caller runs.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    leadership: Leadership,
    metrics: ControllerMetrics,
    queues: QueueCache,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        metrics.leader.set(0);
        tokio::select! {
            _ = leadership.leading() => {}
            _ = &mut stop => return,
        }
        metrics.leader.set(1);
        tokio::select! {
            _ = lead(client.clone(), &config, &leadership, &metrics, &queues) => {}
            _ = leadership.lost() => tracing::warn!("leadership lost: controller stopped"),
            _ = &mut stop => {
                metrics.leader.set(0);
                return;
            }
        }
        metrics.clear_queues();
    }
}

/// One term of leadership: start the caches, then cycle until dropped.
async fn lead(
    client: Client,
    config: &ControllerConfig,
    leadership: &Leadership,
    metrics: &ControllerMetrics,
    queues: &QueueCache,
) {
    let wake = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    let api = KubeControllerApi::new(client, Some(config.instance.clone()));
    let caches = start(&api, &mut tasks, wake.clone(), &config.gate, queues);
    if caches.ready().await.is_err() {
        return;
    }
    tracing::info!("caches synced; controller running");
    let applier = Applier::new(api, leadership.clone());
    let mut releases = ReleasePipeline::start(
        applier.clone(),
        RateLimiter::new(config.release_limit),
        unix_now,
    );
    let mut state = State::default();
    state
        .model
        .families
        .adopt(&family_status::load(applier.api()).await);
    loop {
        cycle(
            config,
            &caches,
            &applier,
            metrics,
            &mut releases,
            &mut state,
        )
        .await;
        tokio::select! {
            _ = wake.notified() => tokio::time::sleep(config.debounce).await,
            _ = tokio::time::sleep(config.cycle_interval) => {}
        }
    }
}

/// One Queue's status write, answered with the queue's name.
async fn write_status(
    applier: &Applier,
    name: String,
    version: Option<String>,
    status: gpufair_api::QueueStatus,
) -> (String, Result<(), ApplyError>) {
    let result = applier.write_status(&name, version, &status).await;
    (name, result)
}

/// Logs and counts finished releases, and folds them into the model. Returns false when one
/// found that this replica no longer leads.
fn settle_releases(outcomes: Vec<Outcome>, metrics: &ControllerMetrics, model: &mut Model) -> bool {
    let mut leading = true;
    for Outcome {
        queue,
        pod,
        decided_at,
        outcome,
    } in outcomes
    {
        let settled = match outcome {
            PodOutcome::Released { at } => {
                let waited = (at - pod.created_at()).max(0.0);
                metrics.release_latency.observe(waited);
                metrics
                    .queue_wait
                    .get_or_create(&QueueLabels { queue })
                    .observe(waited);
                metrics.release_apply.observe((at - decided_at).max(0.0));
                ReleaseSettled::Released { at }
            }
            PodOutcome::Changed => {
                tracing::info!(pod = %format!("{}/{}", pod.pod().namespace, pod.pod().name), "pod changed; re-reading before any release");
                ReleaseSettled::Changed
            }
            PodOutcome::NotLeader => ReleaseSettled::NotLeader,
            PodOutcome::Failed(err) => {
                tracing::warn!(error = %err, pod = %pod.pod().name, "release failed");
                ReleaseSettled::NotReleased
            }
            PodOutcome::Skipped => ReleaseSettled::NotReleased,
        };
        leading &= model.settle_release(&pod, settled);
    }
    leading
}

/// An eviction's outcome as the model reads it.
fn eviction_settled(result: &Result<EvictionOutcome, ApplyError>) -> EvictionSettled {
    match result {
        Ok(EvictionOutcome::Evicted) => EvictionSettled::Evicted,
        Ok(EvictionOutcome::Partial { remaining }) => EvictionSettled::Partial {
            remaining: remaining.clone(),
        },
        Err(ApplyError::Blocked { .. }) => EvictionSettled::Blocked,
        Err(_) => EvictionSettled::Failed,
    }
}

async fn cycle(
    config: &ControllerConfig,
    caches: &Caches,
    applier: &Applier,
    metrics: &ControllerMetrics,
    releases: &mut ReleasePipeline,
    state: &mut State,
) {
    let started = Instant::now();
    let now = unix_now();
    if !settle_releases(releases.finished(), metrics, &mut state.model) {
        return;
    }
    let options = config.options.current();
    let nodes = caches.nodes.state();
    let queues = caches.queues.state();
    let reports = caches.reports.state();
    {
        let pods = caches.pods.read();
        // Reports name pods by UID; one without a UID is found by namespace and name.
        let by_name: HashMap<(&str, &str), &FactsFamily> = if reports
            .iter()
            .any(|r| r.spec.pods.iter().any(|p| p.uid.is_empty()))
        {
            pods.pods()
                .filter_map(|f| {
                    let family = f.family.as_ref()?;
                    Some(((&*f.reference.namespace, &*f.reference.name), family))
                })
                .collect()
        } else {
            HashMap::new()
        };
        state.model.families.observe_by(
            &reports,
            |uid, namespace, name| {
                if uid.is_empty() {
                    by_name.get(&(namespace, name)).map(|f| (*f).clone())
                } else {
                    pods.get(uid).and_then(|f| f.family.clone())
                }
            },
            config.family_alpha,
            unix_now(),
        );
    }

    state.model.begin_cycle(now);
    let cluster = Cluster {
        nodes: &nodes,
        queues: &queues,
        reports: &reports,
    };
    // The pod store's lock is held for the build only, never across an `.await`.
    let (built, owned) = {
        let pods = caches.pods.read();
        let built = build_from_facts(&pods, &cluster, &state.model.memory, &config.gpus);
        let owned: HashSet<String> = built
            .unbound
            .iter()
            .filter(|(pod, _)| pods.get(&pod.uid).is_some_and(|f| f.owned))
            .map(|(pod, _)| pod.uid.to_string())
            .collect();
        (built, owned)
    };
    let mut decided = state.model.decide(built, &queues, &options, now);
    metrics
        .cycle_seconds
        .observe(started.elapsed().as_secs_f64());
    for warning in decided.built.warnings.drain(..) {
        tracing::warn!("{warning}");
    }
    let Decided {
        built, decisions, ..
    } = &decided;
    let params_of = |queue: &str| decided.params_of(&options, queue);

    // Ledger and per-queue gauges.
    for figures in state.model.record_cycle(&decided, &options, now) {
        metrics.observe_queue(&figures);
    }

    // Explanations, at most one per pod per interval and `explanations_per_cycle` per cycle:
    // each pod's facts keep when it was last told, and only the pods due one get a message
    // formatted. Pods are offered nearest to release first; those past the cap stay due.
    let explain = explanation_turns(
        now,
        config.explain_interval.as_secs_f64(),
        config.explanations_per_cycle,
    );
    let mut actions = plan_explaining(built, decisions, &config.gate, explain);

    // Released pods that do not bind in time: an Event, then deletion when an owner will
    // recreate the pod; either way they stop holding capacity.
    let present: HashSet<&str> = built.unbound.iter().map(|(p, _)| &*p.uid).collect();
    state
        .model
        .released_at
        .retain(|uid, _| present.contains(uid.as_str()));
    for (pod, node) in &built.unbound {
        let at = *state
            .model
            .released_at
            .entry(pod.uid.to_string())
            .or_insert(now);
        if now - at < config.unbound_timeout.as_secs_f64() {
            continue;
        }
        let owned = owned.contains(&*pod.uid);
        let note = format!(
            "Released onto node {node} but not scheduled within {}; {}",
            gpufair_core::time_text::duration(config.unbound_timeout.as_secs_f64()),
            if owned {
                "deleting it so its owner recreates it (gated again)"
            } else {
                "it has no owner to recreate it, so it is left pending and no longer holds capacity"
            }
        );
        applier
            .event(
                pod,
                EventType::Warning,
                "NotScheduledAfterRelease",
                "Expire",
                note,
                None,
            )
            .await;
        if owned && let Err(err) = applier.delete_unbound(pod).await {
            tracing::warn!(error = %err, pod = %pod.name, "could not delete an unbound pod");
            continue;
        }
        state.model.memory.expired.insert(pod.uid.to_string());
    }

    // Evictions: unfinished ones first, then this cycle's.
    let unfinished = std::mem::take(&mut state.model.unfinished_evictions);
    for (workload, pods) in unfinished {
        let result = applier.evict(&workload, &pods).await;
        match &result {
            Ok(_) | Err(ApplyError::Blocked { .. }) => {}
            Err(err) => tracing::warn!(error = %err, workload, "eviction failed"),
        }
        state
            .model
            .settle_unfinished_eviction(workload, pods, eviction_settled(&result));
    }
    for eviction in &actions.evictions {
        if eviction
            .pods
            .iter()
            .all(|p| state.model.evicted.contains(&*p.uid))
        {
            continue;
        }
        let result = applier.evict(&eviction.workload, &eviction.pods).await;
        match &result {
            Ok(_) => {
                metrics
                    .preemptions
                    .get_or_create(&PreemptionLabels {
                        victim_queue: eviction.victim_queue.clone(),
                        preemptor_queue: eviction.preemptor_queue.clone(),
                    })
                    .inc();
            }
            Err(ApplyError::Blocked { workload, why }) => {
                tracing::info!(
                    workload,
                    why,
                    "preemption blocked by a disruption budget; other victims are chosen for a minute"
                );
            }
            Err(err) => {
                tracing::warn!(error = %err, workload = %eviction.workload, "eviction failed")
            }
        }
        let went = result.is_ok();
        state
            .model
            .settle_eviction(eviction, now, eviction_settled(&result));
        if went {
            announce_eviction(applier, eviction).await;
        }
    }

    // Releases go to the pipeline; this cycle does not wait for them. Each pod counts as
    // released onto its node from now on, so the next snapshot never plans it again while it
    // is in flight; `settle_releases` takes back the ones that did not go through.
    for workload in std::mem::take(&mut actions.releases) {
        for pod in &workload.pods {
            state
                .model
                .memory
                .released
                .insert(pod.pod().uid.to_string(), pod.node.clone());
        }
        releases.submit(workload, now);
    }

    // Explanations chosen above. A few at a time: one after another, the first cycle of a large backlog spent a round
    // trip per waiting pod before the next cycle could run.
    futures::stream::iter(&actions.explanations)
        .for_each_concurrent(WRITES_IN_FLIGHT, |explanation| {
            applier.event(
                &explanation.pod,
                EventType::Normal,
                "Waiting",
                "Hold",
                explanation.message.clone(),
                None,
            )
        })
        .await;

    // Queue status, every status interval.
    let due = state
        .last_status_write
        .is_none_or(|t| t.elapsed() >= config.status_interval);
    if due {
        state.last_status_write = Some(Instant::now());
        let outcomes: HashMap<&str, &gpufair_core::admission::QueueOutcome> = decisions
            .queues
            .iter()
            .map(|o| (built.snapshot.queues[o.queue].name.as_str(), o))
            .collect();
        let waiting: HashMap<&str, QueueWaiting> = built
            .snapshot
            .queues
            .iter()
            .map(|q| q.name.as_str())
            .zip(waiting_view(built, decisions))
            .collect();
        let writes: Vec<_> = queues
            .iter()
            .filter_map(|queue| {
                let name = queue.metadata.name.as_deref()?;
                let entry = state.model.book.get(name)?;
                let status = queue_status(
                    queue.status.as_ref(),
                    entry,
                    params_of(name),
                    now,
                    outcomes.get(name).copied(),
                    waiting.get(name),
                );
                Some(write_status(
                    applier,
                    name.to_string(),
                    queue.metadata.resource_version.clone(),
                    status,
                ))
            })
            .collect();
        let results: Vec<_> = futures::stream::iter(writes)
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (name, result) in results {
            match result {
                Ok(()) => {}
                Err(ApplyError::NotLeader(_)) => return,
                Err(err) => tracing::warn!(error = %err, queue = name, "Queue status write failed"),
            }
        }
        if let Err(ApplyError::NotLeader(_)) =
            family_status::write_changed(applier, &mut state.model.families).await
        {
            return;
        }
    }

    // Forget pods that are gone.
    let pods = caches.pods.read();
    state.model.forget(|uid| pods.get(uid).is_none());
}
