//! The webhook's view of WorkloadFamilies: each family's smoothed peak memory, for
//! right-sizing. Kept in step with the cluster by its WorkloadFamily watch; a family not (yet)
//! seen simply has no history, so right-sizing declines and says so. Readiness does not wait
//! for it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use gpufair_api::WorkloadFamily;
use gpufair_core::rightsize::{FamilyHistory, FamilyLookup};

use crate::kube_api::WatchEvent;

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

/// Admission's side of the cluster's WorkloadFamily watch: a complete listing replaces the
/// index whole, later events update it one family at a time.
pub struct ClusterFamilies {
    store: Arc<FamilyStore>,
    /// Families of a listing in progress, put in place when it is complete.
    relist: Option<FamilyIndex>,
}

impl ClusterFamilies {
    pub fn new(store: Arc<FamilyStore>) -> Self {
        Self {
            store,
            relist: None,
        }
    }

    /// Applies one event of the watch.
    pub fn apply(&mut self, event: &WatchEvent<WorkloadFamily>) {
        match event {
            WatchEvent::Init => self.relist = Some(FamilyIndex::default()),
            WatchEvent::InitApply(family) => {
                if let Some(index) = self.relist.as_mut() {
                    index.upsert(family);
                }
            }
            WatchEvent::InitDone => {
                let index = self.relist.take().unwrap_or_default();
                tracing::info!(families = index.len(), "WorkloadFamilies synced");
                self.store.write(|current| *current = index);
            }
            WatchEvent::Apply(family) => self.store.write(|i| i.upsert(family)),
            WatchEvent::Delete(family) => self.store.write(|i| i.remove(family)),
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

    fn family(name: &str, samples: u32) -> WorkloadFamily {
        let mut family = WorkloadFamily::new(name, WorkloadFamilySpec::default());
        family.metadata.namespace = Some("ml".into());
        family.status = Some(WorkloadFamilyStatus {
            smoothed_peak_bytes: 1 << 30,
            samples,
            ..WorkloadFamilyStatus::default()
        });
        family
    }

    #[test]
    fn a_listing_replaces_the_index_once_complete() {
        let store = Arc::new(FamilyStore::default());
        let mut cluster = ClusterFamilies::new(store.clone());
        cluster.apply(&WatchEvent::Init);
        cluster.apply(&WatchEvent::InitApply(family("a", 1)));
        cluster.apply(&WatchEvent::InitDone);
        cluster.apply(&WatchEvent::Apply(family("b", 2)));
        assert_eq!(store.read(FamilyIndex::len), 2);
        // A relist (after the watch broke): the old index serves until the new one is whole.
        cluster.apply(&WatchEvent::Init);
        cluster.apply(&WatchEvent::InitApply(family("b", 5)));
        assert_eq!(
            store.read(|i| i.history("ml", "a").map(|h| h.samples)),
            Some(1)
        );
        cluster.apply(&WatchEvent::InitDone);
        assert!(store.read(|i| i.history("ml", "a")).is_none());
        assert_eq!(
            store.read(|i| i.history("ml", "b").map(|h| h.samples)),
            Some(5)
        );
        cluster.apply(&WatchEvent::Delete(family("b", 5)));
        assert!(store.read(FamilyIndex::is_empty));
    }
}
