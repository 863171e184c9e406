//! The webhook's view of Queues: from a file (`--queues-file`) or the cluster's Queue watch.
//!
//! Admission only needs each queue's name, namespaces, node pool and allowed priority classes,
//! so only those are kept (not the status ledger), indexed by name and by namespace. Status
//! updates, which the controller writes often, leave these facts unchanged and are skipped.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gpufair_api::Queue;
use gpufair_core::mutation::{QueueFacts, QueueLookup};
use serde::Deserialize;

use crate::facts::queue_facts;
use crate::kube_api::WatchEvent;
use crate::metrics::{Metrics, ReloadOutcome};
use crate::reload::{Fingerprint, watch_files};
use crate::shutdown::Shutdown;

/// Queues by name, plus which queues list each namespace.
#[derive(Debug, Default)]
pub struct QueueIndex {
    by_name: HashMap<String, QueueFacts>,
    /// Sorted queue names per namespace.
    by_namespace: HashMap<String, Vec<String>>,
}

impl QueueIndex {
    pub fn from_queues(queues: impl IntoIterator<Item = QueueFacts>) -> Self {
        let mut index = Self::default();
        for queue in queues {
            index.upsert(queue);
        }
        index
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Adds or replaces a queue; returns false when nothing admission reads changed.
    pub fn upsert(&mut self, queue: QueueFacts) -> bool {
        if self.by_name.get(&queue.name) == Some(&queue) {
            return false;
        }
        self.remove(&queue.name.clone());
        for namespace in &queue.namespaces {
            let names = self.by_namespace.entry(namespace.clone()).or_default();
            if let Err(at) = names.binary_search(&queue.name) {
                names.insert(at, queue.name.clone());
            }
        }
        self.by_name.insert(queue.name.clone(), queue);
        true
    }

    pub fn remove(&mut self, name: &str) {
        if let Some(old) = self.by_name.remove(name) {
            for namespace in &old.namespaces {
                if let Some(names) = self.by_namespace.get_mut(namespace) {
                    names.retain(|n| n != name);
                    if names.is_empty() {
                        self.by_namespace.remove(namespace);
                    }
                }
            }
        }
    }
}

impl QueueLookup for QueueIndex {
    fn by_name(&self, name: &str) -> Option<&QueueFacts> {
        self.by_name.get(name)
    }

    fn listing_namespace(&self, namespace: &str) -> Vec<&QueueFacts> {
        self.by_namespace
            .get(namespace)
            .map(|names| names.iter().filter_map(|n| self.by_name.get(n)).collect())
            .unwrap_or_default()
    }
}

/// The shared index and whether it reflects a complete listing yet.
#[derive(Default)]
pub struct QueueStore {
    index: RwLock<QueueIndex>,
    synced: AtomicBool,
}

impl QueueStore {
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Runs `f` against the current index. A poisoned lock only means a writer panicked
    /// half-way through an update of plain maps; reading them is still safe.
    pub fn read<T>(&self, f: impl FnOnce(&QueueIndex) -> T) -> T {
        let guard = self.index.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
    }

    fn write<T>(&self, f: impl FnOnce(&mut QueueIndex) -> T) -> T {
        let mut guard = self.index.write().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    pub fn replace(&self, index: QueueIndex) {
        self.write(|current| *current = index);
        self.synced.store(true, Ordering::Release);
    }

    pub fn len(&self) -> usize {
        self.read(QueueIndex::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QueueFileError {
    #[error("cannot read queues file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("queues file {path}, document {document}: {message}")]
    Document {
        path: PathBuf,
        document: usize,
        message: String,
    },
}

/// Reads Queue manifests, one YAML document each. Any bad document fails the whole file: a
/// half-read file would silently drop a team's queue and deny its pods.
pub fn load_queues_file(path: &Path) -> Result<Vec<QueueFacts>, QueueFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| QueueFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_queues(&text, path)
}

pub(crate) fn parse_queues(text: &str, path: &Path) -> Result<Vec<QueueFacts>, QueueFileError> {
    let mut queues = BTreeMap::new();
    for (number, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let fail = |message: String| QueueFileError::Document {
            path: path.to_path_buf(),
            document: number + 1,
            message,
        };
        let value = serde_yaml::Value::deserialize(document).map_err(|e| fail(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let queue: Queue = serde_yaml::from_value(value).map_err(|e| fail(e.to_string()))?;
        let facts = queue_facts(&queue).ok_or_else(|| fail("metadata.name is missing".into()))?;
        queue
            .spec
            .validate(&facts.name)
            .map_err(|e| fail(e.to_string()))?;
        if queues.contains_key(&facts.name) {
            return Err(fail(format!("Queue {:?} appears twice", facts.name)));
        }
        queues.insert(facts.name.clone(), facts);
    }
    Ok(queues.into_values().collect())
}

/// Loads the file into the store; on failure the previous queues stay (and a store that never
/// loaded stays not ready).
pub fn reload_file(path: &Path, store: &QueueStore, metrics: &Metrics) {
    match load_queues_file(path) {
        Ok(queues) => {
            let count = queues.len();
            store.replace(QueueIndex::from_queues(queues));
            metrics.queue_reload(ReloadOutcome::Success);
            metrics.set_queue_count(count);
            tracing::info!(path = %path.display(), queues = count, "queues loaded");
        }
        Err(err) => {
            metrics.queue_reload(ReloadOutcome::Error);
            tracing::error!(error = %err, "queues file refused; keeping the previous queues");
        }
    }
}

/// Reloads the queues file whenever it differs from `loaded_from`, the file as it was just
/// before the last load, so a change between that load and this watch is still seen.
pub async fn watch_file(
    path: PathBuf,
    loaded_from: Fingerprint,
    store: Arc<QueueStore>,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: Shutdown,
) {
    let paths = vec![path.clone()];
    watch_files(paths, interval, loaded_from, shutdown, move || {
        reload_file(&path, &store, &metrics)
    })
    .await;
}

fn cluster_facts(queue: &Queue) -> Option<QueueFacts> {
    let facts = queue_facts(queue)?;
    if let Err(err) = queue.spec.validate(&facts.name) {
        // The CRD schema catches most mistakes; what it cannot is logged and the queue is
        // still used for admission, whose fields (namespaces, nodePool) are not affected.
        tracing::warn!(error = %err, "Queue has an invalid spec");
    }
    Some(facts)
}

/// Admission's side of the cluster's Queue watch (the process runs one, gpufair-runtime): a
/// complete listing replaces the index whole, later events update it one Queue at a time.
pub struct ClusterQueues {
    store: Arc<QueueStore>,
    metrics: Arc<Metrics>,
    /// Queues of a listing in progress, put in place when it is complete.
    relist: Option<Vec<QueueFacts>>,
}

impl ClusterQueues {
    pub fn new(store: Arc<QueueStore>, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            metrics,
            relist: None,
        }
    }

    /// Applies one event of the watch.
    pub fn apply(&mut self, event: &WatchEvent<Queue>) {
        let (store, metrics) = (&self.store, &self.metrics);
        match event {
            WatchEvent::Init => self.relist = Some(Vec::new()),
            WatchEvent::InitApply(queue) => {
                if let (Some(list), Some(facts)) = (self.relist.as_mut(), cluster_facts(queue)) {
                    list.push(facts);
                }
            }
            WatchEvent::InitDone => {
                let list = self.relist.take().unwrap_or_default();
                let count = list.len();
                store.replace(QueueIndex::from_queues(list));
                metrics.queue_reload(ReloadOutcome::Success);
                metrics.set_queue_count(count);
                tracing::info!(queues = count, "Queues synced from the cluster");
            }
            WatchEvent::Apply(queue) => {
                if let Some(facts) = cluster_facts(queue) {
                    store.write(|index| index.upsert(facts));
                    metrics.set_queue_count(store.len());
                }
            }
            WatchEvent::Delete(queue) => {
                if let Some(name) = queue.metadata.name.as_deref() {
                    store.write(|index| index.remove(name));
                    metrics.set_queue_count(store.len());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUES: &str = "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {name: b}\nspec: {namespaces: [ml, web]}\n---\napiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec: {namespaces: [ml]}\n---\n";

    #[test]
    fn parses_documents_and_indexes_namespaces() {
        let queues = parse_queues(QUEUES, Path::new("q.yaml")).unwrap();
        let index = QueueIndex::from_queues(queues);
        let names: Vec<_> = index
            .listing_namespace("ml")
            .iter()
            .map(|q| q.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(index.listing_namespace("web").len(), 1);
    }

    #[test]
    fn upsert_moves_namespaces_and_reports_no_change() {
        let mut index = QueueIndex::from_queues(parse_queues(QUEUES, Path::new("q")).unwrap());
        let mut moved = index.by_name("b").unwrap().clone();
        assert!(!index.upsert(moved.clone()));
        moved.namespaces = vec!["other".into()];
        assert!(index.upsert(moved));
        assert!(index.listing_namespace("web").is_empty());
        assert_eq!(index.listing_namespace("other").len(), 1);
        index.remove("b");
        assert!(index.listing_namespace("other").is_empty());
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn bad_documents_fail_the_file_with_their_number() {
        let cases = [
            (
                format!(
                    "{QUEUES}apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {{name: c}}\nspec: {{weight: 0}}\n"
                ),
                "document 3",
            ),
            (
                format!(
                    "{QUEUES}apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {{name: a}}\nspec: {{}}\n"
                ),
                "appears twice",
            ),
            (
                "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {}\nspec: {}\n"
                    .to_string(),
                "metadata.name",
            ),
            ("spec: [\n".to_string(), "document 1"),
        ];
        for (text, expected) in cases {
            let err = parse_queues(&text, Path::new("q.yaml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    fn cluster_queue(name: &str, namespaces: &[&str]) -> Queue {
        serde_yaml::from_str(&format!(
            "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {{namespaces: {namespaces:?}}}\n"
        ))
        .unwrap()
    }

    #[test]
    fn the_cluster_watch_syncs_on_a_complete_listing_and_then_updates() {
        let (store, metrics) = (Arc::new(QueueStore::default()), Arc::new(Metrics::new()));
        let mut cluster = ClusterQueues::new(store.clone(), metrics.clone());
        cluster.apply(&WatchEvent::Init);
        cluster.apply(&WatchEvent::InitApply(cluster_queue("a", &["ml"])));
        assert!(
            !store.is_synced(),
            "ready only once the listing is complete"
        );
        cluster.apply(&WatchEvent::InitDone);
        assert!(store.is_synced());
        cluster.apply(&WatchEvent::Apply(cluster_queue("b", &["ml", "web"])));
        assert_eq!(store.len(), 2);
        assert!(metrics.encode().contains("gpufair_webhook_queues 2"));
        // A relist (after the watch broke): the old index serves until the new one is whole.
        cluster.apply(&WatchEvent::Init);
        cluster.apply(&WatchEvent::InitApply(cluster_queue("b", &["web"])));
        assert_eq!(store.read(|i| i.listing_namespace("ml").len()), 2);
        cluster.apply(&WatchEvent::InitDone);
        assert_eq!(store.len(), 1);
        assert!(store.read(|i| i.listing_namespace("ml").is_empty()));
        cluster.apply(&WatchEvent::Delete(cluster_queue("b", &["web"])));
        assert!(store.is_empty() && store.is_synced());
    }

    #[tokio::test]
    async fn a_change_between_loading_and_watching_is_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queues.yaml");
        let one = "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec: {namespaces: [ml]}\n";
        std::fs::write(&path, one).unwrap();
        let (store, metrics) = (Arc::new(QueueStore::default()), Arc::new(Metrics::new()));
        let loaded_from = crate::reload::fingerprint(std::slice::from_ref(&path));
        reload_file(&path, &store, &metrics);
        assert_eq!(store.len(), 1);
        // The file changes before the watcher has looked at it even once.
        std::fs::write(&path, QUEUES).unwrap();
        let shutdown = Shutdown::new();
        let watching = tokio::spawn(watch_file(
            path,
            loaded_from,
            store.clone(),
            metrics,
            Duration::from_millis(10),
            shutdown.clone(),
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while store.len() != 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.begin_draining();
        watching.await.unwrap();
        assert_eq!(
            store.len(),
            2,
            "the change made before watching began was not loaded"
        );
    }
}
