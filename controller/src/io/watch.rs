//! The caches a term reads (managed pods into a [`PodStore`] of parsed facts; Nodes and
//! GpuNodeReports into reflectors; Queues from the process's one Queue watch, through a
//! [`QueueCache`]) and the events that should start a cycle. Only changes that can alter a
//! decision wake the loop: Node heartbeats and the controller's own Queue status writes do not.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use gpufair_api::{GpuNodeReport, Queue};
use k8s_openapi::api::core::v1::Node;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::kube_api::{
    ControllerApi, KubeControllerApi, Store, WatchError, WatchEvent, WriterDropped, store,
};
use crate::pod_store::{PodStore, PodStoreWriter, WatchEnded, pod_store};
use crate::queue_cache::QueueCache;
use crate::trim::trim_node;

/// The caches the cycle reads.
#[derive(Clone)]
pub struct Caches {
    pub pods: PodStore,
    pub nodes: Store<Node>,
    pub queues: Store<Queue>,
    pub reports: Store<GpuNodeReport>,
}

impl Caches {
    /// Waits until every cache holds a complete listing.
    pub async fn ready(&self) -> Result<(), CachesEnded> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.queues.wait_until_ready().await?;
        self.reports.wait_until_ready().await?;
        Ok(())
    }
}

/// A watch stopped before its cache held a complete listing.
#[derive(Debug, thiserror::Error)]
pub enum CachesEnded {
    #[error(transparent)]
    Pods(#[from] WatchEnded),
    #[error("a watch stopped before its first complete listing: {0}")]
    Reflector(#[from] WriterDropped),
}

/// What about a Node can change a decision: labels, taints, allocatable, readiness,
/// cordoning. Heartbeats change none of it.
fn node_fingerprint(node: &Node) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.metadata.labels.hash(&mut h);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
    }
    if let Some(status) = &node.status {
        for (k, v) in status.allocatable.iter().flatten() {
            (k, &v.0).hash(&mut h);
        }
        for c in status.conditions.iter().flatten() {
            if c.type_ == "Ready" {
                c.status.hash(&mut h);
            }
        }
    }
    h.finish()
}

/// Keeps a store of what `watch` streams, each object trimmed by `trim`, and wakes the loop
/// when an object added, changed or deleted is `relevant`.
fn spawn_reflector<K, F>(
    tasks: &mut JoinSet<()>,
    watch: impl Stream<Item = Result<WatchEvent<K>, WatchError>> + Send + 'static,
    wake: Arc<Notify>,
    trim: fn(&mut K),
    mut relevant: F,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    F: FnMut(&K) -> bool + Send + 'static,
{
    let (reader, mut writer) = store();
    tasks.spawn(async move {
        futures::pin_mut!(watch);
        while let Some(event) = watch.next().await {
            match event {
                Ok(event) => {
                    let event = event.modify(trim);
                    writer.apply_watcher_event(&event);
                    let touched = match &event {
                        WatchEvent::Apply(object)
                        | WatchEvent::InitApply(object)
                        | WatchEvent::Delete(object) => object,
                        WatchEvent::Init | WatchEvent::InitDone => continue,
                    };
                    if relevant(touched) {
                        wake.notify_one();
                    }
                }
                Err(err) => tracing::warn!(error = %err, "watch failed; retrying"),
            }
        }
    });
    reader
}

/// Watches managed pods into `writer`; every pod event can change a decision.
fn spawn_pod_watch(
    tasks: &mut JoinSet<()>,
    api: &KubeControllerApi,
    wake: Arc<Notify>,
    writer: PodStoreWriter,
) {
    let stream = api.watch_managed_pods();
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    writer.apply(&event);
                    if matches!(
                        event,
                        WatchEvent::Apply(_) | WatchEvent::Delete(_) | WatchEvent::InitDone
                    ) {
                        wake.notify_one();
                    }
                }
                Err(err) => tracing::warn!(error = %err, "pod watch failed; retrying"),
            }
        }
    });
}

/// Starts the watches, and the wake-ups from `queues`; they run until `tasks` is dropped or
/// aborted. `gate` is the scheduling gate the webhook adds, which decides how each pod is read.
pub fn start(
    api: &KubeControllerApi,
    tasks: &mut JoinSet<()>,
    wake: Arc<Notify>,
    gate: &str,
    queues: &QueueCache,
) -> Caches {
    let (pods, writer) = pod_store(gate);
    spawn_pod_watch(tasks, api, wake.clone(), writer);
    let mut node_seen: HashMap<String, u64> = HashMap::new();
    let nodes = spawn_reflector(
        tasks,
        api.watch_nodes(),
        wake.clone(),
        trim_node,
        move |node: &Node| {
            let name = node.metadata.name.clone().unwrap_or_default();
            let print = node_fingerprint(node);
            node_seen.insert(name, print) != Some(print)
        },
    );
    tasks.spawn(queues.forward_changes(wake.clone()));
    // Reports only change what is charged, which the next cycle picks up anyway.
    let reports = spawn_reflector(tasks, api.watch_gpu_node_reports(), wake, |_| {}, |_| false);
    Caches {
        pods,
        nodes,
        queues: queues.store().clone(),
        reports,
    }
}
