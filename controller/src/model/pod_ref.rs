//! A pod as API calls name it, and the shape of its required node affinity: what the cached
//! facts record of every pod and what the snapshot hands on to release and eviction.

use std::sync::Arc;

/// A pod, as named in API calls. Shared text: a cycle copies each pod's name into several
/// places, and a copy should not cost three allocations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
}

impl PodRef {
    pub fn new(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }
}

/// How the pod's required node affinity looks, so the pin can be added by JSON patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AffinityShape {
    NoAffinity,
    NoNodeAffinity,
    NoRequired,
    /// One entry per required term: whether it already has `matchFields`.
    Terms(Vec<bool>),
}
