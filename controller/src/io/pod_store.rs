//! The managed pods, kept as parsed facts rather than as objects.
//!
//! A reflector would keep every managed pod whole for as long as it exists; the controller reads
//! a few hundred bytes of each. This store applies the pod watch's events to a [`FactsCache`]:
//! a pod is parsed once per version as it arrives, a deleted pod is forgotten, and a relist
//! (after a dropped watch or an expired resourceVersion) forgets every pod it no longer lists.

use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::facts::FactsCache;
use crate::kube_api::WatchEvent;

/// The reading side: what the cycle builds its snapshot from.
#[derive(Clone)]
pub struct PodStore {
    facts: Arc<Mutex<FactsCache>>,
    ready: watch::Receiver<bool>,
}

/// The writing side, fed by the pod watch.
pub struct PodStoreWriter {
    facts: Arc<Mutex<FactsCache>>,
    ready: watch::Sender<bool>,
    gate: String,
}

/// The pod watch ended before it listed every pod once.
#[derive(Debug, thiserror::Error)]
#[error("the pod watch stopped before its first complete listing")]
pub struct WatchEnded;

/// A store for pods carrying `gate`, and its writer.
pub fn pod_store(gate: &str) -> (PodStore, PodStoreWriter) {
    let facts = Arc::new(Mutex::new(FactsCache::default()));
    let (sender, receiver) = watch::channel(false);
    (
        PodStore {
            facts: facts.clone(),
            ready: receiver,
        },
        PodStoreWriter {
            facts,
            ready: sender,
            gate: gate.to_string(),
        },
    )
}

fn lock(facts: &Mutex<FactsCache>) -> MutexGuard<'_, FactsCache> {
    // A panic while holding the lock leaves at worst a half-applied event, which the next
    // relist repairs; the facts stay usable.
    facts
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl PodStore {
    /// Waits for the first complete listing.
    pub async fn wait_until_ready(&self) -> Result<(), WatchEnded> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| WatchEnded)
    }

    /// The pods as of now. Hold the guard only while reading (never across an `.await`): the
    /// watch waits for it.
    pub fn read(&self) -> MutexGuard<'_, FactsCache> {
        lock(&self.facts)
    }
}

impl crate::step::PodSource for PodStore {
    fn read_pods<R>(&self, read: impl FnOnce(&FactsCache) -> R) -> R {
        read(&self.read())
    }
}

impl PodStoreWriter {
    /// Applies one watch event.
    pub fn apply(&self, event: &WatchEvent<Pod>) {
        let mut facts = lock(&self.facts);
        match event {
            WatchEvent::Apply(pod) | WatchEvent::InitApply(pod) => {
                facts.facts(pod, &self.gate);
            }
            WatchEvent::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    facts.remove(uid);
                }
            }
            WatchEvent::Init => facts.begin_cycle(),
            WatchEvent::InitDone => {
                facts.end_cycle();
                drop(facts);
                self.ready.send_replace(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::gated_pod;
    use gpufair_core::mutation::DEFAULT_GATE;

    #[tokio::test]
    async fn events_keep_the_facts_and_a_relist_forgets_what_is_gone() {
        let (store, writer) = pod_store(DEFAULT_GATE);
        let a = gated_pod("ns", "a", "team", 1, 0);
        let b = gated_pod("ns", "b", "team", 1, 0);
        writer.apply(&WatchEvent::Init);
        writer.apply(&WatchEvent::InitApply(a.clone()));
        writer.apply(&WatchEvent::InitApply(b.clone()));
        assert!(
            tokio::time::timeout(
                std::time::Duration::from_millis(20),
                store.wait_until_ready()
            )
            .await
            .is_err(),
            "not ready before the listing completes"
        );
        writer.apply(&WatchEvent::InitDone);
        store.wait_until_ready().await.expect("ready");
        assert_eq!(store.read().len(), 2);

        let c = gated_pod("ns", "c", "team", 1, 0);
        writer.apply(&WatchEvent::Apply(c.clone()));
        writer.apply(&WatchEvent::Delete(a));
        let uids: Vec<String> = store
            .read()
            .pods()
            .map(|f| f.reference.uid.to_string())
            .collect();
        assert_eq!(uids.len(), 2);
        assert!(uids.contains(&"uid-ns-b".to_string()) && uids.contains(&"uid-ns-c".to_string()));

        // The watch dropped; the relist no longer has b (deleted meanwhile).
        writer.apply(&WatchEvent::Init);
        writer.apply(&WatchEvent::InitApply(c));
        writer.apply(&WatchEvent::InitDone);
        let store = store.read();
        assert_eq!(store.len(), 1);
        assert!(store.get("uid-ns-c").is_some());
    }

    #[tokio::test]
    async fn a_watch_that_ends_first_is_an_error() {
        let (store, writer) = pod_store(DEFAULT_GATE);
        drop(writer);
        assert!(store.wait_until_ready().await.is_err());
    }
}
