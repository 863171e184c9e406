//! The controller's Queue cache, filled by a Queue watch the controller does not own.
//!
//! Admission and the controller both read Queues, and the process watches them once: every
//! event goes to admission's index and, through [`QueueFeed`], into this cache (gpufair-runtime
//! composes the two). The cache keeps whole Queues, status included, since each leader adopts
//! the ledger from Queue status; it outlives leadership terms, so a new leader starts from a
//! cache already in step with the cluster.

use std::collections::HashMap;
use std::sync::Arc;

use gpufair_api::Queue;
use tokio::sync::{Notify, watch};

use crate::kube_api::{Store, WatchEvent, Writer, store};

/// The writing side: where the process's Queue watch hands its events.
pub struct QueueFeed {
    writer: Writer<Queue>,
    /// Each Queue's generation as last seen: its spec changed when this does.
    generations: HashMap<String, Option<i64>>,
    changed: watch::Sender<()>,
}

/// The reading side, shared by every leadership term.
#[derive(Clone)]
pub struct QueueCache {
    store: Store<Queue>,
    changed: watch::Receiver<()>,
}

/// A cache and the feed that fills it.
pub fn queue_cache() -> (QueueCache, QueueFeed) {
    let (store, writer) = store();
    let (changed, seen) = watch::channel(());
    (
        QueueCache {
            store,
            changed: seen,
        },
        QueueFeed {
            writer,
            generations: HashMap::new(),
            changed,
        },
    )
}

impl QueueFeed {
    /// Applies one watch event to the cache, and signals a change that can alter a decision:
    /// a Queue seen for the first time or with a new generation. The controller's own status
    /// writes leave the generation as it was, so they do not.
    pub fn apply(&mut self, event: &WatchEvent<Queue>) {
        self.writer.apply_watcher_event(event);
        let touched = match event {
            WatchEvent::Apply(queue) | WatchEvent::InitApply(queue) | WatchEvent::Delete(queue) => {
                queue
            }
            WatchEvent::Init | WatchEvent::InitDone => return,
        };
        let name = touched.metadata.name.clone().unwrap_or_default();
        let generation = touched.metadata.generation;
        if self.generations.insert(name, generation) != Some(generation) {
            self.changed.send_replace(());
        }
    }
}

impl QueueCache {
    /// The Queues as the watch last left them.
    pub fn store(&self) -> &Store<Queue> {
        &self.store
    }

    /// Wakes `wake` on every change signalled after this call, until the feed is dropped. A
    /// change signalled before it (say, during another term) is not passed on.
    pub fn forward_changes(&self, wake: Arc<Notify>) -> impl Future<Output = ()> + Send + 'static {
        let mut changes = self.changed.clone();
        changes.mark_unchanged();
        async move {
            while changes.changed().await.is_ok() {
                wake.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn queue(name: &str, generation: i64, weight: f64) -> Queue {
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name, "generation": generation},
            "spec": {"weight": weight},
        }))
        .expect("a Queue")
    }

    /// Whether `wake` gets a permit within a short wait.
    async fn woken(wake: &Notify) -> bool {
        tokio::time::timeout(Duration::from_millis(50), wake.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn the_cache_follows_the_watch_and_wakes_on_spec_changes_only() {
        let (cache, mut feed) = queue_cache();
        let wake = Arc::new(Notify::new());
        let forwarding = tokio::spawn(cache.forward_changes(wake.clone()));

        feed.apply(&WatchEvent::Init);
        feed.apply(&WatchEvent::InitApply(queue("a", 1, 1.0)));
        feed.apply(&WatchEvent::InitDone);
        tokio::time::timeout(Duration::from_secs(1), cache.store().wait_until_ready())
            .await
            .expect("ready after the first listing")
            .expect("the feed is alive");
        assert_eq!(cache.store().state().len(), 1);
        assert!(woken(&wake).await, "a new Queue is a change");

        // A status write: same generation, the cache updated, no wake.
        let mut written = queue("a", 1, 1.0);
        written.status = Some(gpufair_api::QueueStatus::default());
        feed.apply(&WatchEvent::Apply(written));
        assert!(cache.store().state()[0].status.is_some());
        assert!(!woken(&wake).await, "a status write is not a change");

        // A spec change bumps the generation.
        feed.apply(&WatchEvent::Apply(queue("a", 2, 3.0)));
        assert_eq!(cache.store().state()[0].spec.weight, 3.0);
        assert!(woken(&wake).await, "a new generation is a change");

        feed.apply(&WatchEvent::Delete(queue("a", 2, 3.0)));
        assert!(cache.store().state().is_empty());

        drop(feed);
        tokio::time::timeout(Duration::from_secs(1), forwarding)
            .await
            .expect("forwarding ends with the feed")
            .expect("forwarding did not panic");
    }

    #[tokio::test]
    async fn a_change_before_a_term_starts_does_not_wake_it() {
        let (cache, mut feed) = queue_cache();
        feed.apply(&WatchEvent::Apply(queue("a", 1, 1.0)));
        let wake = Arc::new(Notify::new());
        let forwarding = tokio::spawn(cache.forward_changes(wake.clone()));
        assert!(!woken(&wake).await);
        feed.apply(&WatchEvent::Apply(queue("b", 1, 1.0)));
        assert!(woken(&wake).await);
        forwarding.abort();
    }
}
