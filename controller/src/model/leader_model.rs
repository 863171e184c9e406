//! What the leader remembers between cycles, and how what became of its requests folds back
//! in. The driver (`io/controller.rs`) sends the requests, logs and counts their outcomes, and
//! hands each outcome here as plain data; nothing here waits or talks to the API server.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gpufair_api::Queue;
use gpufair_core::admission::{CycleMemory, DecideOptions, Decisions, decide};
use gpufair_core::index::IndexVec;
use gpufair_core::params::FairShareParams;
use gpufair_core::snapshot::PoolId;

use crate::families::FamilyTracker;
use crate::ledger::LedgerBook;
use crate::plan::{Eviction, PodRelease};
use crate::snapshot::{Built, Memory, PodRef, REFUSED_EVICTION_BACKOFF_S};

/// What the leader remembers between cycles. Dropped when leadership is lost: a new leader
/// starts from the cluster's state (Queue status, pod pins), not from another replica's memory.
#[derive(Default)]
pub struct Model {
    pub book: LedgerBook,
    pub memory: Memory,
    /// When each released pod was released (or first seen released), by UID.
    pub released_at: HashMap<String, f64>,
    /// Victim pods already evicted, never evicted twice.
    pub evicted: HashSet<String>,
    /// Pods of workloads whose eviction was refused half-way; retried every cycle.
    pub unfinished_evictions: Vec<(String, Vec<PodRef>)>,
    /// Workload families' peak GPU memory, for right-sizing.
    pub families: FamilyTracker,
    /// Whether what the last leader's cycles carried (holds, preemption history) has been
    /// read back from the queues' status; done once, before this leader's first cycle.
    pub carried_restored: bool,
}

/// How one submitted pod's release ended, as far as the model cares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReleaseSettled {
    /// The gate is gone; `at` is when the API server answered (seconds since the epoch).
    Released { at: f64 },
    /// The patch's test failed: the pod changed since it was read.
    Changed,
    /// This replica no longer leads; nothing was sent.
    NotLeader,
    /// It failed, or was skipped after an earlier pod of its workload failed.
    NotReleased,
}

/// How one eviction request ended, as far as the model cares.
#[derive(Debug, Clone, PartialEq)]
pub enum EvictionSettled {
    /// Every pod is evicted (or already gone).
    Evicted,
    /// Some pods went; `remaining` were refused and are retried every cycle.
    Partial { remaining: Vec<PodRef> },
    /// A disruption budget refused it before any pod went.
    Blocked,
    /// Any other failure: nothing is remembered, the next cycle decides afresh.
    Failed,
}

/// What one cycle decided, with the build it decided on and each queue's pool.
pub struct Decided {
    pub built: Built,
    pub decisions: Decisions,
    pool_of: HashMap<String, PoolId>,
    pool_names: IndexVec<PoolId, String>,
}

impl Decided {
    /// The fair-share parameters of `queue`'s ledger: those of its pool.
    pub fn params_of<'a>(&self, options: &'a DecideOptions, queue: &str) -> &'a FairShareParams {
        params_for(options, &self.pool_of, &self.pool_names, queue)
    }
}

fn params_for<'a>(
    options: &'a DecideOptions,
    pool_of: &HashMap<String, PoolId>,
    pool_names: &IndexVec<PoolId, String>,
    queue: &str,
) -> &'a FairShareParams {
    pool_of
        .get(queue)
        .and_then(|&p| pool_names.get(p))
        .map_or(&options.fairshare, |pool| options.fairshare_of(pool))
}

impl Model {
    /// Before a new leader's first cycle: carries on from what the last leader's cycles stored
    /// in each queue's `status.carried`, so a hold keeps the idle budget it has spent and the
    /// hourly cap the evictions it counts. A queue whose stored part does not hold together
    /// starts without one; each such queue gives a warning naming the field.
    pub fn restore_carried(&mut self, queues: &[Arc<Queue>]) -> Vec<String> {
        if std::mem::replace(&mut self.carried_restored, true) {
            return Vec::new();
        }
        let mut warnings = Vec::new();
        let mut parts = Vec::new();
        for queue in queues {
            let Some(name) = queue.metadata.name.as_deref() else {
                continue;
            };
            let Some(stored) = queue.status.as_ref().and_then(|s| s.carried.as_ref()) else {
                continue;
            };
            match stored.to_memory(name) {
                Ok(part) => parts.push((name.to_string(), part)),
                Err(err) => warnings.push(format!(
                    "Queue {name:?}: {err}; its holds and preemption history start afresh"
                )),
            }
        }
        self.memory.carried = CycleMemory::restore(parts);
        warnings
    }

    /// Readies the memory a cycle's build reads, at `now`: refused victims whose backoff is
    /// over may be chosen again, and a new leader's first cycle asks for the pods' spans of use.
    pub fn begin_cycle(&mut self, now: f64) {
        self.memory.now = now;
        self.memory
            .refused_evictions
            .retain(|_, at| now - *at < REFUSED_EVICTION_BACKOFF_S);
        self.memory.usage_spans = self.book.is_first_cycle();
    }

    /// Decides on `built` (this cycle's build from the caches) at `now`: the ledgers adopt new
    /// queues from `queues`' status, their shares go into the snapshot, core decides, and
    /// what its next cycle needs of this one is remembered.
    pub fn decide(
        &mut self,
        mut built: Built,
        queues: &[Arc<Queue>],
        options: &DecideOptions,
        now: f64,
    ) -> Decided {
        let pool_of: HashMap<String, PoolId> = built
            .snapshot
            .queues
            .iter()
            .map(|q| (q.name.clone(), q.pool))
            .collect();
        let pool_names: IndexVec<PoolId, String> = built
            .snapshot
            .pools
            .iter()
            .map(|p| p.name.clone())
            .collect();
        let params_of = |queue: &str| params_for(options, &pool_of, &pool_names, queue);
        let capacity = &built.pool_capacity;
        self.book.adopt(queues, params_of, now, |q| {
            q.metadata
                .name
                .as_ref()
                .and_then(|n| pool_of.get(n))
                .map_or(0.0, |&p| capacity[p])
        });
        let shares = self.book.shares(params_of, now);
        for queue in &mut built.snapshot.queues {
            if let Some(s) = shares.get(&queue.name) {
                queue.shares = *s;
            }
        }
        self.memory.shares = shares;
        let decisions = decide(&built.snapshot, options);
        self.memory.carried.remember(&built.snapshot, &decisions);
        Decided {
            built,
            decisions,
            pool_of,
            pool_names,
        }
    }

    /// Folds one finished release in. Returns false when it found that this replica no longer
    /// leads.
    pub fn settle_release(&mut self, pod: &PodRelease, settled: ReleaseSettled) -> bool {
        let uid = pod.pod().uid.to_string();
        match settled {
            ReleaseSettled::Released { at } => {
                self.released_at.insert(uid, at);
                return true;
            }
            ReleaseSettled::Changed => {
                self.memory
                    .stale
                    .insert(uid.clone(), pod.resource_version().to_string());
            }
            ReleaseSettled::NotLeader | ReleaseSettled::NotReleased => {}
        }
        // The gate is still there: the pod is pending again, planned from fresh state.
        self.memory.released.remove(&uid);
        settled != ReleaseSettled::NotLeader
    }

    /// Folds in the retry of an eviction left unfinished by an earlier cycle: what is still
    /// refused stays to be retried; a failure other than a refusal drops it.
    pub fn settle_unfinished_eviction(
        &mut self,
        workload: String,
        pods: Vec<PodRef>,
        settled: EvictionSettled,
    ) {
        match settled {
            EvictionSettled::Partial { remaining } => {
                self.unfinished_evictions.push((workload, remaining))
            }
            EvictionSettled::Blocked => self.unfinished_evictions.push((workload, pods)),
            EvictionSettled::Evicted | EvictionSettled::Failed => {}
        }
    }

    /// Folds in this cycle's eviction of `eviction`, sent at `now`: once any pod went, every
    /// pod counts as evicted (never evicted twice), core remembers the preemption, and a
    /// partial one is retried; a refused one is passed over for a while.
    pub fn settle_eviction(&mut self, eviction: &Eviction, now: f64, settled: EvictionSettled) {
        match settled {
            EvictionSettled::Evicted | EvictionSettled::Partial { .. } => {
                for pod in &eviction.pods {
                    self.evicted.insert(pod.uid.to_string());
                }
                self.memory.carried.evicted(
                    now,
                    eviction.pods.len(),
                    &eviction.preemptor_queue,
                    &eviction.victim_queue,
                    eviction.backfill,
                );
                if let EvictionSettled::Partial { remaining } = settled {
                    self.unfinished_evictions
                        .push((eviction.workload.clone(), remaining));
                }
            }
            EvictionSettled::Blocked => {
                self.memory
                    .refused_evictions
                    .insert(eviction.workload.clone(), now);
            }
            EvictionSettled::Failed => {}
        }
    }

    /// Forgets the pods that are `gone` from the cache.
    pub fn forget(&mut self, gone: impl Fn(&str) -> bool) {
        self.memory.stale.retain(|uid, _| !gone(uid));
        self.memory.expired.retain(|uid| !gone(uid));
        self.memory.released.retain(|uid, _| !gone(uid));
        self.evicted.retain(|uid| !gone(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::FactsCache;
    use crate::fixtures::gated_pod;
    use crate::snapshot::PendingPod;
    use gpufair_core::mutation::DEFAULT_GATE;

    fn release(name: &str) -> PodRelease {
        let pod = gated_pod("ml", name, "team", 1, 0);
        let facts = FactsCache::default().facts(&pod, DEFAULT_GATE);
        PodRelease::new(PendingPod::new(facts, 0), "gpu-1", DEFAULT_GATE.into())
    }

    /// A model in which `pod` was submitted for release onto gpu-1.
    fn submitted(pod: &PodRelease) -> Model {
        let mut model = Model::default();
        model
            .memory
            .released
            .insert(pod.pod().uid.to_string(), "gpu-1".into());
        model
    }

    #[test]
    fn a_released_pod_stays_released_and_its_time_is_kept() {
        let pod = release("a");
        let mut model = submitted(&pod);
        assert!(model.settle_release(&pod, ReleaseSettled::Released { at: 12.5 }));
        let uid = pod.pod().uid.to_string();
        assert_eq!(
            model.memory.released.get(&uid).map(String::as_str),
            Some("gpu-1")
        );
        assert_eq!(model.released_at.get(&uid), Some(&12.5));
    }

    #[test]
    fn a_changed_pod_is_pending_again_and_skipped_until_re_read() {
        let pod = release("a");
        let mut model = submitted(&pod);
        assert!(model.settle_release(&pod, ReleaseSettled::Changed));
        let uid = pod.pod().uid.to_string();
        assert!(model.memory.released.is_empty());
        assert_eq!(
            model.memory.stale.get(&uid).map(String::as_str),
            Some(pod.resource_version())
        );
        assert!(model.released_at.is_empty());
    }

    #[test]
    fn a_failed_release_is_pending_again_and_a_lost_lease_says_so() {
        let pod = release("a");
        let mut model = submitted(&pod);
        assert!(model.settle_release(&pod, ReleaseSettled::NotReleased));
        assert!(model.memory.released.is_empty() && model.memory.stale.is_empty());
        let mut model = submitted(&pod);
        assert!(!model.settle_release(&pod, ReleaseSettled::NotLeader));
        assert!(model.memory.released.is_empty());
    }

    fn eviction(pods: &[&str]) -> Eviction {
        Eviction {
            workload: "ml/gang".into(),
            victim_queue: "batch".into(),
            pods: pods.iter().map(|p| PodRef::new("ml", p, p)).collect(),
            preemptor_workload: "uid-p".into(),
            preemptor_queue: "team".into(),
            preemptor_pods: vec![PodRef::new("ml", "p", "uid-p")],
            reason: "below its guarantee".into(),
            backfill: false,
        }
    }

    #[test]
    fn an_eviction_marks_every_pod_and_a_partial_one_is_retried() {
        let gang = eviction(&["g0", "g1"]);
        let mut model = Model::default();
        let remaining = vec![PodRef::new("ml", "g1", "g1")];
        model.settle_eviction(
            &gang,
            100.0,
            EvictionSettled::Partial {
                remaining: remaining.clone(),
            },
        );
        assert!(model.evicted.contains("g0") && model.evicted.contains("g1"));
        assert_eq!(
            model.unfinished_evictions,
            vec![("ml/gang".to_string(), remaining.clone())]
        );
        // The retry: still refused, then through.
        let (workload, pods) = model.unfinished_evictions.pop().unwrap();
        model.settle_unfinished_eviction(workload.clone(), pods.clone(), EvictionSettled::Blocked);
        assert_eq!(model.unfinished_evictions, vec![(workload, pods)]);
        let (workload, pods) = model.unfinished_evictions.pop().unwrap();
        model.settle_unfinished_eviction(workload, pods, EvictionSettled::Evicted);
        assert!(model.unfinished_evictions.is_empty());
    }

    #[test]
    fn a_refused_eviction_is_passed_over_and_a_failed_one_forgotten() {
        let gang = eviction(&["g0", "g1"]);
        let mut model = Model::default();
        model.settle_eviction(&gang, 100.0, EvictionSettled::Blocked);
        assert_eq!(model.memory.refused_evictions.get("ml/gang"), Some(&100.0));
        assert!(model.evicted.is_empty() && model.unfinished_evictions.is_empty());
        let mut model = Model::default();
        model.settle_eviction(&gang, 100.0, EvictionSettled::Failed);
        assert!(model.evicted.is_empty() && model.memory.refused_evictions.is_empty());
    }

    #[test]
    fn a_cycle_begins_at_its_time_and_passes_over_refused_victims_for_a_while() {
        let mut model = Model::default();
        model.memory.refused_evictions.insert("old".into(), 0.0);
        model.memory.refused_evictions.insert("recent".into(), 50.0);
        model.begin_cycle(REFUSED_EVICTION_BACKOFF_S + 10.0);
        assert_eq!(model.memory.now, REFUSED_EVICTION_BACKOFF_S + 10.0);
        assert_eq!(
            model.memory.refused_evictions.keys().collect::<Vec<_>>(),
            ["recent"]
        );
        assert!(
            model.memory.usage_spans,
            "a new leader's first cycle lists spans"
        );
    }

    #[test]
    fn deciding_adopts_the_queues_fills_in_their_shares_and_remembers_the_cycle() {
        use crate::snapshot::{GpuKinds, Objects, build};
        use gpufair_core::admission::DecideOptions;
        use gpufair_core::mutation::ResourcePattern;
        use gpufair_core::units::ResourceTable;

        let world = crate::fixtures::cluster(2, 4, 2);
        let gpus = GpuKinds {
            patterns: vec![ResourcePattern::parse("nvidia.com/gpu")],
            table: ResourceTable::default(),
        };
        let now = 1_700_000_000.0;
        let mut model = Model::default();
        model.begin_cycle(now);
        let objects = Objects {
            pods: &world.pods,
            nodes: &world.nodes,
            queues: &world.queues,
            reports: &[],
        };
        let built = build(&objects, &model.memory, DEFAULT_GATE, &gpus);
        let options = DecideOptions::default();
        let decided = model.decide(built.clone(), &world.queues, &options, now);
        // The decisions are core's on the build with the ledgers' shares filled in.
        let mut expected = built;
        for queue in &mut expected.snapshot.queues {
            queue.shares = model.memory.shares[&queue.name];
        }
        assert_eq!(decided.decisions, decide(&expected.snapshot, &options));
        assert_eq!(model.memory.shares.len(), world.queues.len());
        assert!(
            !decided.decisions.releases.is_empty(),
            "free GPUs are given out"
        );
    }

    #[test]
    fn pods_gone_from_the_cache_are_forgotten() {
        let mut model = Model::default();
        for uid in ["kept", "gone"] {
            model.memory.stale.insert(uid.into(), "1".into());
            model.memory.expired.insert(uid.into());
            model.memory.released.insert(uid.into(), "gpu-1".into());
            model.evicted.insert(uid.into());
        }
        model.forget(|uid| uid == "gone");
        assert_eq!(model.memory.stale.keys().collect::<Vec<_>>(), ["kept"]);
        assert_eq!(model.memory.expired.iter().collect::<Vec<_>>(), ["kept"]);
        assert_eq!(model.memory.released.keys().collect::<Vec<_>>(), ["kept"]);
        assert_eq!(model.evicted.iter().collect::<Vec<_>>(), ["kept"]);
    }
}
