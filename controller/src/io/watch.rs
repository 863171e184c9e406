//! The caches a term reads (managed pods into a [`PodStore`] of parsed facts; Nodes and
//! GpuNodeReports into reflectors; Queues from the process's one Queue watch, through a
//! [`QueueCache`]) and the events that should start a cycle. Only changes that can alter a
//! decision wake the loop: Node heartbeats and the controller's own Queue status writes do not.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use gpufair_api::{GpuNodeReport, Queue};
use gpufair_core::labels::MANAGED_LABEL;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::task::JoinSet;

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
    Reflector(#[from] reflector::store::WriterDropped),
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

fn spawn_reflector<K, F>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    config: watcher::Config,
    wake: Arc<Notify>,
    trim: fn(&mut K),
    mut relevant: F,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    F: FnMut(&K) -> bool + Send + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects();
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(object) => {
                    if relevant(&object) {
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
    api: Api<Pod>,
    wake: Arc<Notify>,
    writer: PodStoreWriter,
) {
    let managed = watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true"));
    let stream = watcher(api, managed).default_backoff();
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    writer.apply(&event);
                    if matches!(
                        event,
                        watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                            | watcher::Event::InitDone
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
    client: &Client,
    tasks: &mut JoinSet<()>,
    wake: Arc<Notify>,
    gate: &str,
    queues: &QueueCache,
) -> Caches {
    let (pods, writer) = pod_store(gate);
    spawn_pod_watch(tasks, Api::<Pod>::all(client.clone()), wake.clone(), writer);
    let mut node_seen: HashMap<String, u64> = HashMap::new();
    let nodes = spawn_reflector(
        tasks,
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
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
    let reports = spawn_reflector(
        tasks,
        Api::<GpuNodeReport>::all(client.clone()),
        watcher::Config::default(),
        wake,
        |_| {},
        |_| false,
    );
    Caches {
        pods,
        nodes,
        queues: queues.store().clone(),
        reports,
    }
}
