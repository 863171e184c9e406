//! Journals: for each of the stand-in's own controllers (scheduler, kubelet, disruption
//! budgets), the keys of the objects that changed since its last pass.
//!
//! A pass then looks at what changed instead of walking every object: with thousands of pods,
//! a walk per change makes creating N pods cost N² under the store's lock. A journal is a set,
//! not a queue, so an object written many times between two passes is looked at once, and it
//! never overflows the way a broadcast receiver lags: the controller sees every key exactly
//! as the store holds it when the pass reads it.

use std::collections::BTreeSet;

use super::store::Key;

/// Which journal of the store: returned by `Inner::open_journal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalId(pub(super) usize);

/// A changed object: its resource ([`super::resources::ResourceKind::key`]) and its
/// namespace/name key (namespace empty for cluster-scoped objects).
pub type Entry = (String, Key);

/// The changed keys of some resources, kept for one reader.
#[derive(Debug)]
pub struct Journal {
    resources: Vec<String>,
    changed: BTreeSet<Entry>,
}

impl Journal {
    pub fn new(resources: &[&str]) -> Self {
        Self {
            resources: resources.iter().map(|r| r.to_string()).collect(),
            changed: BTreeSet::new(),
        }
    }

    pub fn follows(&self, resource: &str) -> bool {
        self.resources.iter().any(|r| r == resource)
    }

    /// Notes a change to `key` of `resource` when this journal follows that resource.
    pub fn note(&mut self, resource: &str, key: &Key) {
        if self.follows(resource) {
            self.changed.insert((resource.to_string(), key.clone()));
        }
    }

    /// Everything noted since the last take, in resource, namespace, name order.
    pub fn take(&mut self) -> BTreeSet<Entry> {
        std::mem::take(&mut self.changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("default".to_string(), name.to_string())
    }

    #[test]
    fn notes_followed_resources_once_until_taken() {
        let mut journal = Journal::new(&["pods", "nodes"]);
        journal.note("pods", &key("a"));
        journal.note("pods", &key("a"));
        journal.note("leases.coordination.k8s.io", &key("l"));
        journal.note("nodes", &(String::new(), "n1".to_string()));
        let taken: Vec<Entry> = journal.take().into_iter().collect();
        assert_eq!(
            taken,
            vec![
                ("nodes".to_string(), (String::new(), "n1".to_string())),
                ("pods".to_string(), key("a")),
            ]
        );
        assert!(journal.take().is_empty());
    }
}
