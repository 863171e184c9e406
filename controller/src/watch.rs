//! The four reflectors (managed pods, Nodes, Queues, GpuNodeReports) and the events that should
//! start a cycle. Only changes that can alter a decision wake the loop: Node heartbeats and the
//! controller's own Queue status writes do not.

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

/// The caches the cycle reads.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub queues: Store<Queue>,
    pub reports: Store<GpuNodeReport>,
}

impl Caches {
    /// Waits until every cache holds a complete listing.
    pub async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.queues.wait_until_ready().await?;
        self.reports.wait_until_ready().await?;
        Ok(())
    }
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

/// Starts the reflectors; they run until `tasks` is dropped or aborted.
pub fn start(client: &Client, tasks: &mut JoinSet<()>, wake: Arc<Notify>) -> Caches {
    let managed = watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true"));
    let pods = spawn_reflector(
        tasks,
        Api::<Pod>::all(client.clone()),
        managed,
        wake.clone(),
        |_| true,
    );
    let mut node_seen: HashMap<String, u64> = HashMap::new();
    let nodes = spawn_reflector(
        tasks,
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
        move |node: &Node| {
            let name = node.metadata.name.clone().unwrap_or_default();
            let print = node_fingerprint(node);
            node_seen.insert(name, print) != Some(print)
        },
    );
    let mut generations: HashMap<String, Option<i64>> = HashMap::new();
    let queues = spawn_reflector(
        tasks,
        Api::<Queue>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
        move |queue: &Queue| {
            let name = queue.metadata.name.clone().unwrap_or_default();
            let generation = queue.metadata.generation;
            generations.insert(name, generation) != Some(generation)
        },
    );
    // Reports only change what is charged, which the next cycle picks up anyway.
    let reports = spawn_reflector(
        tasks,
        Api::<GpuNodeReport>::all(client.clone()),
        watcher::Config::default(),
        wake,
        |_| false,
    );
    Caches {
        pods,
        nodes,
        queues,
        reports,
    }
}
