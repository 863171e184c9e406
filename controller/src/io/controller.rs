//! The controller loop on the elected leader: watch, build the snapshot, decide, apply.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::Notify;

use crate::apply::{Applier, RateLimiter};
use crate::carry_out::carry_out;
use crate::family_status;
use crate::kube_api::KubeControllerApi;
use crate::leader::Leadership;
use crate::leader_model::{Model, ReleaseSettled};
use crate::metrics::{ControllerMetrics, QueueLabels};
use crate::options::SharedOptions;
use crate::queue_cache::QueueCache;
use crate::release::{Outcome, PodOutcome, ReleasePipeline};
use crate::snapshot::Cluster;
use crate::step::{CycleSettings, View, step};
use crate::token_bucket::ReleaseLimit;
use crate::watch::{Caches, start};

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// What each cycle needs besides the caches and the options.
    pub cycle: CycleSettings,
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
    /// Identity of this replica in Events.
    pub instance: String,
}

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
    let caches = start(&api, &mut tasks, wake.clone(), &config.cycle.gate, queues);
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

/// One cycle: fold in the releases that finished since the last, step the model on the caches,
/// send what it planned, and fold in what became of it.
async fn cycle(
    config: &ControllerConfig,
    caches: &Caches,
    applier: &Applier,
    metrics: &ControllerMetrics,
    releases: &mut ReleasePipeline,
    state: &mut State,
) {
    let now = unix_now();
    if !settle_releases(releases.finished(), metrics, &mut state.model) {
        return;
    }
    let options = config.options.current();
    let nodes = caches.nodes.state();
    let queues = caches.queues.state();
    let reports = caches.reports.state();
    let view = View {
        pods: &caches.pods,
        cluster: Cluster {
            nodes: &nodes,
            queues: &queues,
            reports: &reports,
        },
        options: &options,
    };
    let status_due = state
        .last_status_write
        .is_none_or(|t| t.elapsed() >= config.status_interval);
    if status_due {
        state.last_status_write = Some(Instant::now());
    }
    let started = Instant::now();
    let actions = step(&mut state.model, &view, &config.cycle, now, status_due);
    metrics
        .cycle_seconds
        .observe(started.elapsed().as_secs_f64());
    for warning in &actions.warnings {
        tracing::warn!("{warning}");
    }
    for figures in &actions.figures {
        metrics.observe_queue(figures);
    }
    let (outcomes, leading) = carry_out(actions, applier, metrics, releases, now).await;
    state.model.settle(outcomes, now);
    if leading {
        let pods = caches.pods.read();
        state.model.forget(|uid| pods.get(uid).is_none());
    }
}
