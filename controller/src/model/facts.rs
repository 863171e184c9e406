//! What the snapshot reads from each pod, parsed once per pod version.
//!
//! A cycle looks at every managed pod, but between two cycles only a few of them change. Parsing
//! a pod (quantities, node constraints, labels, annotations, times) costs far more than looking
//! it up, so the controller keeps the parsed facts keyed by UID, updated as watch events arrive,
//! and never keeps the pods themselves: a few hundred bytes per pod instead of the whole object.
//! Request shapes and constraint sets are interned: pods that ask for the same thing share one
//! value, so a cycle works per distinct shape, not per pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gpufair_api::WorkloadFamilySpec;
use gpufair_core::labels::{MANAGED_LABEL, POD_GROUP_LABEL, QUEUE_LABEL, Tier, Urgency, UserTier};
use gpufair_core::mutation::{AdmittedLabels, read_admitted_labels};
use k8s_openapi::api::core::v1::Pod;

use crate::eligibility::Constraints;
use crate::families::{FamilyKey, pod_family};
use crate::pod_ref::{AffinityShape, PodRef};
use crate::requests::pod_requests;

/// Where a managed pod stands, as far as gpufair is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Unmanaged, finished, or deleted while gated: takes no part.
    Ignored,
    /// Bound to this node and not finished.
    Bound(Arc<str>),
    /// Carries gpufair's gate at this index.
    Gated(usize),
    /// gpufair's gate is gone but the pod is not bound yet; pinned to this node, if to one.
    Released(Option<Arc<str>>),
}

/// A pod's effective requests (base units), sorted by resource name. Shared by every pod that
/// asks for exactly the same.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestShape(pub Vec<(String, f64)>);

/// Everything [`crate::snapshot::build`] needs from one pod version.
///
/// The fields are laid out in the order given (`repr(C)`), those every cycle's build reads
/// first: the build reads every pod's facts, and at 200,000 pods each read misses the cache,
/// so what it needs should sit in as few cache lines as possible, the rest after.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct PodFacts {
    pub state: PodState,
    /// The requests, or why they could not be read.
    pub requests: Result<Arc<RequestShape>, String>,
    /// Node constraints; read for gated pods only (the others are placed already).
    pub constraints: Option<Arc<Constraints>>,
    pub queue: Option<Arc<str>>,
    pub reference: PodRef,
    /// `<namespace>/<pod-group>` for a gang member.
    pub gang: Option<String>,
    pub created_at: f64,
    pub deadline: Option<f64>,
    pub started_at: Option<f64>,
    pub min_member: u32,
    pub tier: Tier,
    pub urgency: Urgency,
    pub user_tier: UserTier,
    /// Whether a controller (a Job, a ReplicaSet…) owns the pod and would recreate it.
    pub owned: bool,
    pub resource_version: String,
    pub affinity: AffinityShape,
    /// The workload family its GPU memory history is kept under, if it has one.
    pub family: Option<(FamilyKey, WorkloadFamilySpec)>,
    /// When the pod was last told why it waits; carried from one version of the pod to the next.
    pub last_explained: LastExplained,
    /// For a pod that ran on a node and has finished: when its last container ended.
    pub finished_at: Option<f64>,
    /// When the pod was bound to its node (its `PodScheduled` condition turning true): from
    /// then it holds the node's GPUs, whether or not its containers started.
    pub bound_at: Option<f64>,
}

/// When a pod was last sent an Event saying why it waits (Unix seconds), if ever.
///
/// Kept with the pod's facts rather than in a map by UID: a cycle asks about every waiting pod,
/// and with 200,000 waiting, keeping such a map (collecting the waiting UIDs, dropping the
/// others, one lookup per pod) cost more per cycle than building and deciding it.
/// The facts are shared read-only, so the time is an atomic; one cycle at a time touches it.
#[derive(Debug)]
pub struct LastExplained(AtomicU64);

/// Bits no time is stored as (a NaN): never explained.
const NEVER: u64 = u64::MAX;

impl LastExplained {
    pub fn get(&self) -> Option<f64> {
        let bits = self.0.load(Ordering::Relaxed);
        (bits != NEVER).then(|| f64::from_bits(bits))
    }

    pub fn set(&self, at: f64) {
        self.0.store(at.to_bits(), Ordering::Relaxed);
    }
}

impl Default for LastExplained {
    fn default() -> Self {
        Self(AtomicU64::new(NEVER))
    }
}

impl Clone for LastExplained {
    fn clone(&self) -> Self {
        Self(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

fn seconds(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    time.0.as_millisecond() as f64 / 1000.0
}

/// The instant a span of use starts or ends, from a Kubernetes timestamp in Unix seconds.
/// Object timestamps (`metav1.Time`) carry whole seconds: the event happened somewhere in the
/// second written, so its middle is the unbiased estimate. Taking the start of the second
/// instead charged every pod that finished while no leader watched half a second short on
/// average (the controller storm in RELIABILITY.md). A time with a fraction is taken as it is.
pub fn mid_second(seconds: f64) -> f64 {
    if seconds.fract() == 0.0 {
        seconds + 0.5
    } else {
        seconds
    }
}

fn span_instant(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    mid_second(seconds(time))
}

fn state_of(pod: &Pod, gate: &str, intern: &mut impl FnMut(&str) -> Arc<str>) -> PodState {
    let managed = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_LABEL))
        .is_some_and(|v| v == "true");
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !managed || matches!(phase, Some("Succeeded" | "Failed")) {
        return PodState::Ignored;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return PodState::Ignored;
    };
    if let Some(node) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return PodState::Bound(intern(node));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Ignored;
    }
    match spec
        .scheduling_gates
        .iter()
        .flatten()
        .position(|g| g.name == gate)
    {
        Some(index) => PodState::Gated(index),
        None => PodState::Released(Constraints::of(spec).pinned_node().map(intern)),
    }
}

/// When a finished pod that was bound to a node stopped using it: the latest `finishedAt` of its
/// containers. `None` for a pod still running, never bound, or without that record.
fn finished_at(pod: &Pod) -> Option<f64> {
    let status = pod.status.as_ref()?;
    if !matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    pod.spec.as_ref()?.node_name.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(span_instant)
        .reduce(f64::max)
}

/// When the pod's `PodScheduled` condition last turned true, if it is true.
fn bound_at(pod: &Pod) -> Option<f64> {
    pod.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(span_instant)
}

fn affinity_shape(pod: &Pod) -> AffinityShape {
    let spec = pod.spec.as_ref();
    let Some(affinity) = spec.and_then(|s| s.affinity.as_ref()) else {
        return AffinityShape::NoAffinity;
    };
    let Some(node) = affinity.node_affinity.as_ref() else {
        return AffinityShape::NoNodeAffinity;
    };
    match node
        .required_during_scheduling_ignored_during_execution
        .as_ref()
    {
        None => AffinityShape::NoRequired,
        Some(s) if s.node_selector_terms.is_empty() => AffinityShape::NoRequired,
        Some(s) => AffinityShape::Terms(
            s.node_selector_terms
                .iter()
                .map(|t| t.match_fields.is_some())
                .collect(),
        ),
    }
}

fn gang_key(pod: &Pod) -> Option<String> {
    let group = pod.metadata.labels.as_ref()?.get(POD_GROUP_LABEL)?;
    Some(format!(
        "{}/{group}",
        pod.metadata.namespace.as_deref().unwrap_or_default()
    ))
}

/// The tier, deadline, urgency, user tier and gang size admission left on the pod, read by
/// core (leniently: a value edited since admission counts as its default).
fn admitted_labels(pod: &Pod) -> AdmittedLabels {
    let none = BTreeMap::new();
    read_admitted_labels(
        pod.metadata.labels.as_ref().unwrap_or(&none),
        pod.metadata.annotations.as_ref().unwrap_or(&none),
    )
}

/// Interns values so that equal ones share one `Arc` (compared and hashed by address later).
#[derive(Debug)]
struct Interner<T: ?Sized + Eq + std::hash::Hash> {
    values: HashMap<Arc<T>, ()>,
}

impl<T: ?Sized + Eq + std::hash::Hash> Default for Interner<T> {
    fn default() -> Self {
        Self {
            values: HashMap::new(),
        }
    }
}

impl<T: ?Sized + Eq + std::hash::Hash> Interner<T> {
    /// Interns a copy of `value`, made only when no equal value is interned yet.
    fn intern_copy(&mut self, value: &T) -> Arc<T>
    where
        for<'v> Arc<T>: From<&'v T>,
    {
        if let Some((shared, _)) = self.values.get_key_value(value) {
            return shared.clone();
        }
        let shared = Arc::from(value);
        self.values.insert(shared.clone(), ());
        shared
    }

    fn intern(&mut self, value: T) -> Arc<T>
    where
        T: Sized,
    {
        if let Some((shared, _)) = self.values.get_key_value(&value) {
            return shared.clone();
        }
        let shared = Arc::new(value);
        self.values.insert(shared.clone(), ());
        shared
    }

    /// Forgets values no cached pod uses any more.
    fn sweep(&mut self) {
        self.values.retain(|v, _| Arc::strong_count(v) > 1);
    }
}

/// Request shapes hash by their bits: `f64` has no `Hash`, and equal shapes have equal bits.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ShapeKey(Vec<(String, u64)>);

/// How many cached pods are gated, and how many are bound or released onto a node.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StateCounts {
    pub gated: usize,
    pub placed: usize,
}

impl StateCounts {
    fn slot(&mut self, state: &PodState) -> Option<&mut usize> {
        match state {
            PodState::Gated(_) => Some(&mut self.gated),
            PodState::Bound(_) | PodState::Released(_) => Some(&mut self.placed),
            PodState::Ignored => None,
        }
    }

    fn add(&mut self, state: &PodState) {
        if let Some(count) = self.slot(state) {
            *count += 1;
        }
    }

    fn remove(&mut self, state: &PodState) {
        if let Some(count) = self.slot(state) {
            *count = count.saturating_sub(1);
        }
    }
}

/// A cached pod and the cycle that last saw it.
#[derive(Debug)]
struct Cached {
    facts: Arc<PodFacts>,
    seen: u64,
}

/// The parsed facts of every managed pod, by UID, valid for one pod version each. Pods keep the
/// order they were first seen in, so a build from the same events is the same build.
#[derive(Debug, Default)]
pub struct FactsCache {
    gate: String,
    by_uid: indexmap::IndexMap<String, Cached, foldhash::fast::RandomState>,
    /// How many of the cached pods are in each state, kept as pods come and go.
    counts: StateCounts,
    /// The current refresh; pods not looked up in it are dropped at its end.
    cycle: u64,
    shapes: HashMap<ShapeKey, Arc<RequestShape>>,
    constraints: Interner<Constraints>,
    /// Queue and node names: the snapshot build looks each distinct one up once, by address.
    names: Interner<str>,
    /// Cycles since the last sweep of interned values.
    since_sweep: u32,
}

impl FactsCache {
    /// The facts of `pod`: cached when its UID and resourceVersion are known, parsed otherwise.
    pub fn facts(&mut self, pod: &Pod, gate: &str) -> Arc<PodFacts> {
        if self.gate != gate {
            // A different gate changes every pod's state: start over.
            self.by_uid.clear();
            self.counts = StateCounts::default();
            self.gate = gate.to_string();
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let version = pod.metadata.resource_version.as_deref().unwrap_or_default();
        // Without a UID or version a pod cannot be recognised again: parse it every time.
        let cacheable = !uid.is_empty() && !version.is_empty();
        if cacheable
            && let Some(cached) = self.by_uid.get_mut(uid)
            && cached.facts.resource_version == version
        {
            cached.seen = self.cycle;
            return cached.facts.clone();
        }
        let facts = Arc::new(self.parse(pod, gate));
        if cacheable {
            let cached = Cached {
                facts: facts.clone(),
                seen: self.cycle,
            };
            self.counts.add(&facts.state);
            if let Some(replaced) = self.by_uid.insert(uid.to_string(), cached) {
                self.counts.remove(&replaced.facts.state);
                // A new version of a waiting pod is the same pod waiting: not told again early.
                if let Some(at) = replaced.facts.last_explained.get() {
                    facts.last_explained.set(at);
                }
            }
        }
        facts
    }

    /// Starts a full listing: every pod that exists is to be looked up with [`Self::facts`]
    /// before [`Self::end_cycle`].
    pub fn begin_cycle(&mut self) {
        self.cycle += 1;
    }

    /// Ends a full listing: forgets the pods it did not look up, which are gone.
    pub fn end_cycle(&mut self) {
        let cycle = self.cycle;
        let counts = &mut self.counts;
        self.by_uid.retain(|_, cached| {
            let keep = cached.seen == cycle;
            if !keep {
                counts.remove(&cached.facts.state);
            }
            keep
        });
        self.sweep_now_and_then();
    }

    /// Makes the cache hold exactly `pods` (a full listing).
    pub fn refresh(&mut self, pods: &[Arc<Pod>], gate: &str) {
        self.begin_cycle();
        for pod in pods {
            self.facts(pod, gate);
        }
        self.end_cycle();
    }

    /// Forgets a deleted pod.
    pub fn remove(&mut self, uid: &str) {
        if let Some(removed) = self.by_uid.swap_remove(uid) {
            self.counts.remove(&removed.facts.state);
        }
        self.sweep_now_and_then();
    }

    /// Every cached pod's facts.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<PodFacts>> + Clone {
        self.by_uid.values().map(|c| &c.facts)
    }

    fn sweep_now_and_then(&mut self) {
        self.since_sweep += 1;
        // Interned values are few and small; sweeping them now and then is enough.
        if self.since_sweep >= 1024 {
            self.since_sweep = 0;
            self.shapes.retain(|_, v| Arc::strong_count(v) > 1);
            self.constraints.sweep();
            self.names.sweep();
        }
    }

    /// The cached facts of the pod with this UID, if any.
    pub fn get(&self, uid: &str) -> Option<&Arc<PodFacts>> {
        self.by_uid.get(uid).map(|c| &c.facts)
    }

    /// How many pods are cached.
    /// How many cached pods wait behind the gate and how many hold a node: what a build
    /// reserves room for, so its vectors do not grow by copying.
    pub fn counts(&self) -> StateCounts {
        self.counts
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }

    fn shape(&mut self, requests: Vec<(String, f64)>) -> Arc<RequestShape> {
        let key = ShapeKey(
            requests
                .iter()
                .map(|(name, value)| (name.clone(), value.to_bits()))
                .collect(),
        );
        self.shapes
            .entry(key)
            .or_insert_with(|| Arc::new(RequestShape(requests)))
            .clone()
    }

    fn parse(&mut self, pod: &Pod, gate: &str) -> PodFacts {
        let state = state_of(pod, gate, &mut |name| self.names.intern_copy(name));
        let spec = pod.spec.as_ref();
        let requests = match spec.map(pod_requests) {
            Some(Ok(r)) => Ok(self.shape(r.into_iter().collect())),
            Some(Err(err)) => Err(err.to_string()),
            None => Err("the pod has no spec".to_string()),
        };
        let admitted = admitted_labels(pod);
        let constraints = match (&state, spec) {
            (PodState::Gated(_), Some(spec)) => {
                Some(self.constraints.intern(Constraints::of(spec)))
            }
            _ => None,
        };
        PodFacts {
            resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
            reference: PodRef::new(
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.metadata.uid.as_deref().unwrap_or_default(),
            ),
            queue: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(QUEUE_LABEL))
                .map(|q| self.names.intern_copy(q)),
            requests,
            constraints,
            gang: gang_key(pod),
            min_member: admitted.min_member,
            tier: admitted.tier,
            deadline: admitted.deadline_s,
            urgency: admitted.urgency,
            user_tier: admitted.user_tier,
            created_at: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0.0, seconds),
            started_at: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(seconds),
            affinity: affinity_shape(pod),
            family: pod_family(pod),
            last_explained: LastExplained::default(),
            finished_at: finished_at(pod),
            bound_at: bound_at(pod),
            owned: pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true)),
            state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{bound_pod, gated_pod};
    use gpufair_core::mutation::DEFAULT_GATE;

    #[test]
    fn whole_second_times_are_taken_at_the_middle_of_their_second() {
        assert_eq!(mid_second(100.0), 100.5);
        assert_eq!(mid_second(100.25), 100.25);
        let time = |text: &str| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(text.parse().expect("a time"))
        };
        assert_eq!(span_instant(&time("2023-11-14T22:13:20Z")), 1_700_000_000.5);
        assert_eq!(
            span_instant(&time("2023-11-14T22:13:20.250Z")),
            1_700_000_000.25
        );
    }

    #[test]
    fn a_pod_is_parsed_once_per_version() {
        let mut cache = FactsCache::default();
        let pod = gated_pod("ns", "a", "team", 2, 1_700_000_000);
        let first = cache.facts(&pod, DEFAULT_GATE);
        let again = cache.facts(&pod, DEFAULT_GATE);
        assert!(Arc::ptr_eq(&first, &again), "same version: cached");
        assert_eq!(first.state, PodState::Gated(0));

        let mut bound = bound_pod("ns", "a", "team", 2, "node-1", 1_700_000_000);
        bound.metadata.resource_version = Some("8".into());
        let after = cache.facts(&bound, DEFAULT_GATE);
        assert!(!Arc::ptr_eq(&first, &after), "new version: parsed again");
        assert_eq!(after.state, PodState::Bound("node-1".into()));
        assert_eq!(after.started_at, Some(1_700_000_000.0));
    }

    #[test]
    fn a_waiting_pod_is_due_an_explanation_once_per_interval_across_versions() {
        use crate::snapshot::PendingPod;
        let mut cache = FactsCache::default();
        let pod = gated_pod("ns", "a", "team", 2, 0);
        let pending = PendingPod::new(cache.facts(&pod, DEFAULT_GATE), 0);
        assert!(pending.take_explanation_turn(100.0, 60.0), "never told");
        assert!(!pending.take_explanation_turn(130.0, 60.0), "told 30 s ago");
        assert!(pending.take_explanation_turn(160.0, 60.0), "told 60 s ago");
        assert_eq!(pending.facts().last_explained.get(), Some(160.0));

        // A new version of the same pod (a label changed) remembers when it was told.
        let mut changed = pod.clone();
        changed.metadata.resource_version = Some("9".into());
        let after = PendingPod::new(cache.facts(&changed, DEFAULT_GATE), 0);
        assert!(!std::ptr::eq(
            pending_facts(&pending),
            pending_facts(&after)
        ));
        assert!(!after.take_explanation_turn(200.0, 60.0), "told 40 s ago");
        assert!(after.take_explanation_turn(220.0, 60.0));

        // Another pod has its own clock.
        let other = PendingPod::new(
            cache.facts(&gated_pod("ns", "b", "team", 2, 0), DEFAULT_GATE),
            0,
        );
        assert!(other.take_explanation_turn(221.0, 60.0));
    }

    fn pending_facts(pod: &crate::snapshot::PendingPod) -> *const PodFacts {
        pod.facts()
    }

    #[test]
    fn equal_requests_and_constraints_are_shared() {
        let mut cache = FactsCache::default();
        let a = cache.facts(&gated_pod("ns", "a", "team", 2, 0), DEFAULT_GATE);
        let b = cache.facts(&gated_pod("ns", "b", "team", 2, 0), DEFAULT_GATE);
        let c = cache.facts(&gated_pod("ns", "c", "team", 4, 0), DEFAULT_GATE);
        let shape = |f: &PodFacts| f.requests.clone().expect("valid requests");
        assert!(Arc::ptr_eq(&shape(&a), &shape(&b)));
        assert!(!Arc::ptr_eq(&shape(&a), &shape(&c)));
        let constraints = |f: &PodFacts| f.constraints.clone().expect("gated pods have them");
        assert!(Arc::ptr_eq(&constraints(&a), &constraints(&c)));
        let queue = |f: &PodFacts| f.queue.clone().expect("labelled with a queue");
        assert!(Arc::ptr_eq(&queue(&a), &queue(&c)));
    }

    #[test]
    fn state_counts_follow_pods_in_and_out() {
        let mut cache = FactsCache::default();
        let counts = |c: &FactsCache| (c.counts().gated, c.counts().placed);
        cache.begin_cycle();
        cache.facts(&gated_pod("ns", "a", "team", 1, 0), DEFAULT_GATE);
        cache.facts(&gated_pod("ns", "b", "team", 1, 0), DEFAULT_GATE);
        cache.end_cycle();
        assert_eq!(counts(&cache), (2, 0));
        let mut bound = bound_pod("ns", "a", "team", 1, "node-1", 0);
        bound.metadata.resource_version = Some("8".into());
        cache.facts(&bound, DEFAULT_GATE);
        assert_eq!(counts(&cache), (1, 1), "a new version replaces the old");
        cache.remove("uid-ns-b");
        assert_eq!(counts(&cache), (0, 1));
        cache.begin_cycle();
        cache.end_cycle();
        assert_eq!(counts(&cache), (0, 0), "a relist without the pod drops it");
    }

    #[test]
    fn pods_gone_are_forgotten() {
        let mut cache = FactsCache::default();
        cache.begin_cycle();
        cache.facts(&gated_pod("ns", "a", "team", 1, 0), DEFAULT_GATE);
        cache.facts(&gated_pod("ns", "b", "team", 1, 0), DEFAULT_GATE);
        cache.end_cycle();
        assert_eq!(cache.len(), 2);
        cache.begin_cycle();
        cache.facts(&gated_pod("ns", "a", "team", 1, 0), DEFAULT_GATE);
        cache.end_cycle();
        assert_eq!(cache.len(), 1);
        assert!(cache.get("uid-ns-a").is_some());
    }

    #[test]
    fn a_pod_without_a_version_is_never_cached() {
        let mut cache = FactsCache::default();
        let mut pod = gated_pod("ns", "a", "team", 1, 0);
        pod.metadata.resource_version = None;
        let first = cache.facts(&pod, DEFAULT_GATE);
        pod.spec.as_mut().unwrap().scheduling_gates = None;
        let second = cache.facts(&pod, DEFAULT_GATE);
        assert_eq!(first.state, PodState::Gated(0));
        assert_eq!(second.state, PodState::Released(None));
        assert!(cache.is_empty());
    }
}
