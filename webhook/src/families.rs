//! The webhook's view of WorkloadFamilies: each family's smoothed peak memory, for
//! right-sizing. Kept in step with the cluster by a watch; a family not (yet) seen simply has
//! no history, so right-sizing declines and says so. Readiness does not wait for it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use gpufair_api::WorkloadFamily;
use gpufair_core::rightsize::{FamilyHistory, FamilyLookup};
use kube::runtime::watcher;

use crate::shutdown::Shutdown;

/// Histories by (namespace, family).
#[derive(Debug, Default)]
pub struct FamilyIndex {
    histories: HashMap<(String, String), FamilyHistory>,
}

impl FamilyIndex {
    fn key(family: &WorkloadFamily) -> Option<(String, String)> {
        Some((
            family.metadata.namespace.clone()?,
            family.metadata.name.clone()?,
        ))
    }

    pub fn upsert(&mut self, family: &WorkloadFamily) {
        if let (Some(key), Some(status)) = (Self::key(family), family.status.as_ref()) {
            self.histories.insert(key, status.history());
        }
    }

    pub fn remove(&mut self, family: &WorkloadFamily) {
        if let Some(key) = Self::key(family) {
            self.histories.remove(&key);
        }
    }

    pub fn len(&self) -> usize {
        self.histories.len()
    }

    pub fn is_empty(&self) -> bool {
        self.histories.is_empty()
    }
}

impl FamilyLookup for FamilyIndex {
    fn history(&self, namespace: &str, family: &str) -> Option<FamilyHistory> {
        self.histories
            .get(&(namespace.to_string(), family.to_string()))
            .copied()
    }
}

/// The shared index.
#[derive(Debug, Default)]
pub struct FamilyStore {
    index: RwLock<FamilyIndex>,
}

impl FamilyStore {
    /// Runs `f` against the current index (a poisoned lock still holds plain, readable maps).
    pub fn read<T>(&self, f: impl FnOnce(&FamilyIndex) -> T) -> T {
        let guard = self.index.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
    }

    pub fn write<T>(&self, f: impl FnOnce(&mut FamilyIndex) -> T) -> T {
        let mut guard = self.index.write().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

/// Keeps the store in step with the cluster's WorkloadFamilies until draining.
pub async fn watch_cluster(client: kube::Client, store: Arc<FamilyStore>, shutdown: Shutdown) {
    use kube::runtime::WatchStreamExt;
    let api: kube::Api<WorkloadFamily> = kube::Api::all(client);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut relist: Option<FamilyIndex> = None;
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = shutdown.draining() => return,
        };
        match event {
            None => return,
            Some(Err(err)) => tracing::warn!(error = %err, "WorkloadFamily watch failed; retrying"),
            Some(Ok(watcher::Event::Init)) => relist = Some(FamilyIndex::default()),
            Some(Ok(watcher::Event::InitApply(family))) => {
                if let Some(index) = relist.as_mut() {
                    index.upsert(&family);
                }
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let index = relist.take().unwrap_or_default();
                tracing::info!(families = index.len(), "WorkloadFamilies synced");
                store.write(|current| *current = index);
            }
            Some(Ok(watcher::Event::Apply(family))) => store.write(|i| i.upsert(&family)),
            Some(Ok(watcher::Event::Delete(family))) => store.write(|i| i.remove(&family)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufair_api::{WorkloadFamilySpec, WorkloadFamilyStatus};

    #[test]
    fn index_keys_by_namespace_and_name() {
        let mut family = WorkloadFamily::new("job.train", WorkloadFamilySpec::default());
        family.metadata.namespace = Some("ml".into());
        let mut index = FamilyIndex::default();
        index.upsert(&family);
        assert!(index.is_empty(), "no status, no history");
        family.status = Some(WorkloadFamilyStatus {
            smoothed_peak_bytes: 1 << 30,
            samples: 3,
            ..WorkloadFamilyStatus::default()
        });
        index.upsert(&family);
        assert_eq!(index.history("ml", "job.train").unwrap().samples, 3);
        assert!(index.history("other", "job.train").is_none());
        index.remove(&family);
        assert!(index.is_empty());
    }
}
