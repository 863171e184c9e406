//! One leader cycle as plain functions: [`step`] reads the caches' view and the model and says
//! every request the cycle makes ([`Actions`]); the driver sends them and hands back what became
//! of each ([`Outcomes`]), which [`Model::settle`] folds in. Nothing here waits or talks to the
//! API server, so a whole cycle is tested without one.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use gpufair_api::{CarriedStatus, QueueStatus};
use gpufair_core::admission::{DecideOptions, QueueOutcome};

use crate::facts::FactsCache;
use crate::families::{FamilyKey, TrackedFamily};
use crate::leader_model::{Decided, EvictionSettled, Model};
use crate::ledger::queue_status;
use crate::plan::{Eviction, Explanation, WorkloadRelease, explanation_turns, plan_explaining};
use crate::queue_figures::QueueFigures;
use crate::snapshot::{Built, Cluster, GpuKinds, PodRef, build_from_facts};
use crate::waiting_status::{QueueWaiting, waiting_view};

/// Where a cycle reads the pods from. The controller's store is shared with its watch, which
/// waits while it is read: the cycle reads it only to build and to fold in reports, never while
/// it decides.
pub trait PodSource {
    fn read_pods<R>(&self, read: impl FnOnce(&FactsCache) -> R) -> R;
}

impl PodSource for FactsCache {
    fn read_pods<R>(&self, read: impl FnOnce(&FactsCache) -> R) -> R {
        read(self)
    }
}

/// What one cycle reads: the caches and the policy's options as of its start.
pub struct View<'a, P> {
    pub pods: &'a P,
    pub cluster: Cluster<'a>,
    pub options: &'a DecideOptions,
}

/// How the cycle behaves; fixed for the controller's life (the options above are reloaded).
#[derive(Debug, Clone)]
pub struct CycleSettings {
    /// The scheduling gate the webhook adds (only this gate is ever removed).
    pub gate: String,
    pub gpus: GpuKinds,
    /// A released pod that has not bound after this long is given up on.
    pub unbound_timeout: Duration,
    /// Least time between two explanation Events on one waiting pod.
    pub explain_interval: Duration,
    /// Most explanation Events one cycle sends; the pods left out stay due.
    pub explanations_per_cycle: usize,
    /// Weight of a finished pod's peak in its family's smoothed peak (right-sizing).
    pub family_alpha: f64,
}

/// A released pod that did not bind in time: it is told why, and deleted when an owner will
/// recreate it (gated again). Either way it stops holding capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Expiry {
    pub pod: PodRef,
    pub note: String,
    pub delete: bool,
}

/// One Queue's status, to be written at the resourceVersion it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    pub queue: String,
    pub resource_version: Option<String>,
    pub status: QueueStatus,
}

/// Every request one cycle makes, in the order the driver sends them.
#[derive(Debug, Default)]
pub struct Actions {
    /// Problems worth a log line.
    pub warnings: Vec<String>,
    /// Each queue's figures, for the gauges.
    pub figures: Vec<QueueFigures>,
    pub expiries: Vec<Expiry>,
    /// Evictions an earlier cycle left half done: the workload and the pods still standing.
    pub retried_evictions: Vec<(String, Vec<PodRef>)>,
    pub evictions: Vec<Eviction>,
    /// Already counted as released in the model: the next cycle never plans them again while
    /// they are in flight, and [`Model::settle_release`] takes back those that fail.
    pub releases: Vec<WorkloadRelease>,
    pub explanations: Vec<Explanation>,
    /// Empty unless the cycle was told status is due.
    pub statuses: Vec<StatusWrite>,
    /// Workload families changed since their last write; empty unless status is due.
    pub families: Vec<(FamilyKey, TrackedFamily)>,
}

/// What became of a cycle's requests, as far as the model cares.
#[derive(Debug, Default)]
pub struct Outcomes {
    /// UIDs of expired pods that were told (and deleted, when they were to be).
    pub expired: Vec<String>,
    pub retried_evictions: Vec<(String, Vec<PodRef>, EvictionSettled)>,
    pub evictions: Vec<(Eviction, EvictionSettled)>,
    pub families_written: Vec<FamilyKey>,
}

/// One cycle at `now`: fold in the nodes' reports, build, decide, record the ledgers' charge,
/// and plan every request. Queue status and families are planned only when `status_due`.
pub fn step<P: PodSource>(
    model: &mut Model,
    view: &View<'_, P>,
    settings: &CycleSettings,
    now: f64,
    status_due: bool,
) -> Actions {
    observe_families(model, view, settings.family_alpha, now);
    let restore_warnings = model.restore_carried(view.cluster.queues);
    model.begin_cycle(now);
    // Which unbound pods have an owner is read with the build, under the same read.
    let (built, owned) = view.pods.read_pods(|pods| {
        let built = build_from_facts(pods, &view.cluster, &model.memory, &settings.gpus);
        let owned: HashSet<String> = built
            .unbound
            .iter()
            .filter(|(pod, _)| pods.get(&pod.uid).is_some_and(|f| f.owned))
            .map(|(pod, _)| pod.uid.to_string())
            .collect();
        (built, owned)
    });
    let mut decided = model.decide(built, view.cluster.queues, view.options, now);
    let mut actions = Actions {
        warnings: restore_warnings,
        figures: model.record_cycle(&decided, view.options, now),
        ..Actions::default()
    };
    actions.warnings.append(&mut decided.built.warnings);

    // Explanations, at most one per pod per interval and `explanations_per_cycle` per cycle:
    // each pod's facts keep when it was last told, and only the pods due one get a message
    // formatted. Pods are offered nearest to release first; those past the cap stay due.
    let explain = explanation_turns(
        now,
        settings.explain_interval.as_secs_f64(),
        settings.explanations_per_cycle,
    );
    let plan = plan_explaining(&decided.built, &decided.decisions, &settings.gate, explain);
    actions.expiries = expiries(model, &decided.built, &owned, settings, now);
    actions.retried_evictions = std::mem::take(&mut model.unfinished_evictions);
    actions.evictions = not_yet_evicted(model, plan.evictions);
    for workload in &plan.releases {
        for pod in &workload.pods {
            model
                .memory
                .released
                .insert(pod.pod().uid.to_string(), pod.node.clone());
        }
    }
    actions.releases = plan.releases;
    actions.explanations = plan.explanations;
    if status_due {
        actions.statuses = status_writes(model, &decided, view, now);
        actions.families = model.families.changed();
    }
    actions
}

impl Model {
    /// Folds in what became of a cycle's requests, sent at `now`.
    pub fn settle(&mut self, outcomes: Outcomes, now: f64) {
        self.memory.expired.extend(outcomes.expired);
        for (workload, pods, settled) in outcomes.retried_evictions {
            self.settle_unfinished_eviction(workload, pods, settled);
        }
        for (eviction, settled) in outcomes.evictions {
            self.settle_eviction(&eviction, now, settled);
        }
        for key in &outcomes.families_written {
            self.families.written(key);
        }
    }
}

/// Folds the nodes' reports of finished pods into their families' peaks. Reports name pods by
/// UID; one without a UID is found by namespace and name.
fn observe_families<P: PodSource>(model: &mut Model, view: &View<'_, P>, alpha: f64, now: f64) {
    let reports = view.cluster.reports;
    let by_uid_only = reports
        .iter()
        .all(|r| r.spec.pods.iter().all(|p| !p.uid.is_empty()));
    view.pods.read_pods(|pods| {
        let by_name: HashMap<(&str, &str), &(FamilyKey, _)> = if by_uid_only {
            HashMap::new()
        } else {
            pods.pods()
                .filter_map(|f| {
                    let family = f.family.as_ref()?;
                    Some(((&*f.reference.namespace, &*f.reference.name), family))
                })
                .collect()
        };
        model.families.observe_by(
            reports,
            |uid, namespace, name| {
                if uid.is_empty() {
                    by_name.get(&(namespace, name)).map(|f| (*f).clone())
                } else {
                    pods.get(uid).and_then(|f| f.family.clone())
                }
            },
            alpha,
            now,
        );
    });
}

/// The released pods still unbound past the timeout. Each one's release time is kept from the
/// first cycle that saw it unbound (or from its release), and forgotten once it binds or goes.
fn expiries(
    model: &mut Model,
    built: &Built,
    owned: &HashSet<String>,
    settings: &CycleSettings,
    now: f64,
) -> Vec<Expiry> {
    let present: HashSet<&str> = built.unbound.iter().map(|(p, _)| &*p.uid).collect();
    model
        .released_at
        .retain(|uid, _| present.contains(uid.as_str()));
    let timeout = settings.unbound_timeout.as_secs_f64();
    let mut expired = Vec::new();
    for (pod, node) in &built.unbound {
        let at = *model.released_at.entry(pod.uid.to_string()).or_insert(now);
        if now - at < timeout {
            continue;
        }
        let delete = owned.contains(&*pod.uid);
        let note = format!(
            "Released onto node {node} but not scheduled within {}; {}",
            gpufair_core::time_text::duration(timeout),
            if delete {
                "deleting it so its owner recreates it (gated again)"
            } else {
                "it has no owner to recreate it, so it is left pending and no longer holds capacity"
            }
        );
        expired.push(Expiry {
            pod: pod.clone(),
            note,
            delete,
        });
    }
    expired
}

/// The planned evictions that still have a pod to evict: a victim is never evicted twice.
fn not_yet_evicted(model: &Model, planned: Vec<Eviction>) -> Vec<Eviction> {
    let mut taken: HashSet<String> = HashSet::new();
    planned
        .into_iter()
        .filter(|eviction| {
            let fresh = eviction
                .pods
                .iter()
                .any(|p| !model.evicted.contains(&*p.uid) && !taken.contains(&*p.uid));
            if fresh {
                taken.extend(eviction.pods.iter().map(|p| p.uid.to_string()));
            }
            fresh
        })
        .collect()
}

/// Every Queue's status after this cycle: its ledger, its shares and what the cycle decided
/// for it. Queues without a ledger (not yet adopted) are left as they are.
fn status_writes<P>(
    model: &Model,
    decided: &Decided,
    view: &View<'_, P>,
    now: f64,
) -> Vec<StatusWrite> {
    let Decided {
        built, decisions, ..
    } = decided;
    let outcomes: HashMap<&str, &QueueOutcome> = decisions
        .queues
        .iter()
        .map(|o| (built.snapshot.queues[o.queue].name.as_str(), o))
        .collect();
    let waiting: HashMap<&str, QueueWaiting> = built
        .snapshot
        .queues
        .iter()
        .map(|q| q.name.as_str())
        .zip(waiting_view(built, decisions))
        .collect();
    view.cluster
        .queues
        .iter()
        .filter_map(|queue| {
            let name = queue.metadata.name.as_deref()?;
            let entry = model.book.get(name)?;
            Some(StatusWrite {
                queue: name.to_string(),
                resource_version: queue.metadata.resource_version.clone(),
                status: queue_status(
                    queue.status.as_ref(),
                    entry,
                    decided.params_of(view.options, name),
                    now,
                    outcomes.get(name).copied(),
                    waiting.get(name),
                    CarriedStatus::from(&model.memory.carried.of_queue(name)),
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpufair_api::Queue;
    use gpufair_core::mutation::{DEFAULT_GATE, ResourcePattern};
    use gpufair_core::units::ResourceTable;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::fixtures::{bound_pod, gated_pod, node, queue};

    const NOW: f64 = 1_700_000_000.0;

    fn settings() -> CycleSettings {
        CycleSettings {
            gate: DEFAULT_GATE.into(),
            gpus: GpuKinds {
                patterns: vec![ResourcePattern::parse("nvidia.com/gpu")],
                table: ResourceTable::default(),
            },
            unbound_timeout: Duration::from_secs(600),
            explain_interval: Duration::from_secs(300),
            explanations_per_cycle: 10,
            family_alpha: 0.3,
        }
    }

    /// The caches of a cluster with one 8-GPU node and queues `a` and `b`.
    struct World {
        pods: FactsCache,
        nodes: Vec<Arc<Node>>,
        queues: Vec<Arc<Queue>>,
        options: DecideOptions,
    }

    impl World {
        fn new(pods: Vec<Pod>) -> Self {
            let mut cache = FactsCache::default();
            let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
            cache.refresh(&pods, DEFAULT_GATE);
            Self {
                pods: cache,
                nodes: vec![Arc::new(node("n1", 8, json!({})))],
                queues: ["a", "b"]
                    .map(|q| Arc::new(queue(q, json!({"weight": 1, "namespaces": ["ml"]}))))
                    .to_vec(),
                options: DecideOptions::default(),
            }
        }

        fn step(&self, model: &mut Model, now: f64, status_due: bool) -> Actions {
            let view = View {
                pods: &self.pods,
                cluster: Cluster {
                    nodes: &self.nodes,
                    queues: &self.queues,
                    reports: &[],
                },
                options: &self.options,
            };
            step(model, &view, &settings(), now, status_due)
        }
    }

    /// `pod` after its release onto `node`: gate gone, pinned, not yet bound.
    fn released(mut pod: Pod, node: &str) -> Pod {
        let spec = pod.spec.as_mut().expect("fixture pods have a spec");
        spec.scheduling_gates = None;
        spec.affinity = Some(
            serde_json::from_value(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}))
            .expect("a valid affinity"),
        );
        pod
    }

    fn owned_by_a_job(mut pod: Pod) -> Pod {
        pod.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
                "name": "train", "uid": "job-uid", "controller": true}))
            .expect("a valid owner"),
        ]);
        pod
    }

    fn released_uids(actions: &Actions) -> Vec<String> {
        actions
            .releases
            .iter()
            .flat_map(|w| w.pods.iter().map(|p| p.pod().uid.to_string()))
            .collect()
    }

    #[test]
    fn a_fitting_pod_is_released_once_and_counts_as_released_while_in_flight() {
        let world = World::new(vec![gated_pod("ml", "p", "a", 2, NOW as i64)]);
        let mut model = Model::default();
        let actions = world.step(&mut model, NOW, false);
        assert_eq!(released_uids(&actions), ["uid-ml-p"]);
        assert_eq!(actions.releases[0].pods[0].node, "n1");
        assert_eq!(
            model.memory.released.get("uid-ml-p").map(String::as_str),
            Some("n1")
        );
        assert_eq!(actions.figures.len(), 2, "one set of figures per queue");
        // The cache still shows the gate a cycle later: the pod is in flight, not planned again.
        let again = world.step(&mut model, NOW + 1.0, false);
        assert!(released_uids(&again).is_empty(), "{:?}", again.releases);
    }

    #[test]
    fn queue_status_and_families_are_planned_only_when_due() {
        let world = World::new(vec![gated_pod("ml", "p", "a", 2, NOW as i64)]);
        let mut model = Model::default();
        let quiet = world.step(&mut model, NOW, false);
        assert!(quiet.statuses.is_empty());
        let due = world.step(&mut model, NOW + 10.0, true);
        let queues: Vec<&str> = due.statuses.iter().map(|s| s.queue.as_str()).collect();
        assert_eq!(queues, ["a", "b"]);
        assert_eq!(due.statuses[0].resource_version.as_deref(), Some("1"));
        assert!(
            due.statuses[0].status.ledger.is_some(),
            "the status carries the queue's ledger"
        );
    }

    #[test]
    fn a_released_pod_that_never_binds_expires_and_frees_its_node() {
        let world = World::new(vec![
            released(gated_pod("ml", "stuck", "a", 8, NOW as i64 - 30), "n1"),
            gated_pod("ml", "next", "b", 8, NOW as i64),
        ]);
        let mut model = Model::default();
        let first = world.step(&mut model, NOW, false);
        assert!(first.expiries.is_empty());
        assert!(released_uids(&first).is_empty(), "the node is held");
        let before = world.step(&mut model, NOW + 599.0, false);
        assert!(before.expiries.is_empty());
        let due = world.step(&mut model, NOW + 600.0, false);
        assert_eq!(due.expiries.len(), 1);
        let expiry = &due.expiries[0];
        assert_eq!(&*expiry.pod.uid, "uid-ml-stuck");
        assert!(
            !expiry.delete,
            "no owner recreates it, so it is not deleted"
        );
        assert!(expiry.note.contains("node n1"), "{}", expiry.note);
        assert!(
            expiry.note.contains("no longer holds capacity"),
            "{}",
            expiry.note
        );
        model.settle(
            Outcomes {
                expired: vec!["uid-ml-stuck".into()],
                ..Outcomes::default()
            },
            NOW + 600.0,
        );
        let after = world.step(&mut model, NOW + 601.0, false);
        assert!(after.expiries.is_empty());
        assert_eq!(released_uids(&after), ["uid-ml-next"]);
    }

    #[test]
    fn an_owned_pod_that_never_binds_is_deleted_and_stays_until_the_delete_goes() {
        let world = World::new(vec![released(
            owned_by_a_job(gated_pod("ml", "stuck", "a", 8, NOW as i64 - 30)),
            "n1",
        )]);
        let mut model = Model::default();
        world.step(&mut model, NOW, false);
        let due = world.step(&mut model, NOW + 600.0, false);
        assert_eq!(due.expiries.len(), 1);
        assert!(due.expiries[0].delete);
        assert!(due.expiries[0].note.contains("deleting it"));
        // The delete failed: nothing is settled, so the next cycle tries again.
        model.settle(Outcomes::default(), NOW + 600.0);
        let retry = world.step(&mut model, NOW + 601.0, false);
        assert_eq!(retry.expiries.len(), 1);
    }

    fn eviction(workload: &str, pods: &[&str]) -> Eviction {
        Eviction {
            workload: workload.into(),
            victim_queue: "b".into(),
            pods: pods.iter().map(|p| PodRef::new("ml", p, p)).collect(),
            preemptor_workload: "big".into(),
            preemptor_queue: "a".into(),
            preemptor_pods: vec![PodRef::new("ml", "big", "big")],
            reason: "owed".into(),
            backfill: false,
        }
    }

    #[test]
    fn a_victim_is_never_evicted_twice() {
        let mut model = Model::default();
        model.evicted.insert("v1".into());
        let kept = not_yet_evicted(
            &model,
            vec![
                eviction("done", &["v1"]),
                eviction("half", &["v1", "v2"]),
                eviction("again", &["v2"]),
                eviction("fresh", &["v3"]),
            ],
        );
        let names: Vec<&str> = kept.iter().map(|e| e.workload.as_str()).collect();
        assert_eq!(names, ["half", "fresh"]);
    }

    #[test]
    fn settling_evictions_remembers_victims_and_keeps_what_was_refused() {
        let mut model = Model::default();
        let partial = eviction("gang", &["g1", "g2"]);
        model.settle(
            Outcomes {
                evictions: vec![
                    (
                        partial,
                        EvictionSettled::Partial {
                            remaining: vec![PodRef::new("ml", "g2", "g2")],
                        },
                    ),
                    (eviction("refused", &["r1"]), EvictionSettled::Blocked),
                ],
                retried_evictions: vec![(
                    "older".into(),
                    vec![PodRef::new("ml", "o1", "o1")],
                    EvictionSettled::Blocked,
                )],
                ..Outcomes::default()
            },
            NOW,
        );
        assert!(model.evicted.contains("g1") && model.evicted.contains("g2"));
        assert!(!model.evicted.contains("r1"));
        let unfinished: Vec<&str> = model
            .unfinished_evictions
            .iter()
            .map(|(w, _)| w.as_str())
            .collect();
        assert_eq!(unfinished, ["older", "gang"]);
        assert_eq!(model.memory.refused_evictions.get("refused"), Some(&NOW));
        // The next cycle retries what is unfinished.
        let world = World::new(Vec::new());
        let actions = world.step(&mut model, NOW + 1.0, false);
        let retried: Vec<&str> = actions
            .retried_evictions
            .iter()
            .map(|(w, _)| w.as_str())
            .collect();
        assert_eq!(retried, ["older", "gang"]);
        assert!(model.unfinished_evictions.is_empty());
    }

    /// A cluster where queue `a` (guaranteed the whole node) waits for an 8-GPU pod while `b`'s
    /// 2-GPU pod, started just now, runs on the node: `a` holds the node while it drains.
    fn held_world() -> World {
        let mut world = World::new(vec![
            gated_pod("ml", "big", "a", 8, NOW as i64),
            bound_pod("ml", "small", "b", 2, "n1", NOW as i64),
        ]);
        world.queues[0] = Arc::new(queue(
            "a",
            json!({"weight": 1, "namespaces": ["ml"], "guaranteed": 8}),
        ));
        world
    }

    /// `world`'s queues as a new leader reads them: with the statuses `written`.
    fn with_statuses(world: &mut World, written: &[StatusWrite]) {
        for write in written {
            let queue = world
                .queues
                .iter_mut()
                .find(|q| q.metadata.name.as_deref() == Some(&*write.queue))
                .expect("a written queue exists");
            Arc::make_mut(queue).status = Some(write.status.clone());
        }
    }

    #[test]
    fn a_new_leader_carries_on_the_holds_and_evictions_its_predecessor_stored() {
        let mut world = held_world();
        let mut first = Model::default();
        world.step(&mut first, NOW, false);
        first.settle(
            Outcomes {
                evictions: vec![(eviction("old", &["v1"]), EvictionSettled::Evicted)],
                ..Outcomes::default()
            },
            NOW,
        );
        let written = world.step(&mut first, NOW + 100.0, true).statuses;
        let carried = |queue: &str| {
            written
                .iter()
                .find(|w| w.queue == queue)
                .and_then(|w| w.status.carried.clone())
                .expect("every status write carries the queue's part")
        };
        let held = carried("a");
        assert_eq!(held.holds.len(), 1, "{held:?}");
        assert_eq!(held.holds[0].nodes, ["n1"]);
        assert!(held.holds[0].idle_gpu_seconds > 0.0, "{held:?}");
        assert_eq!(held.last_preemption, Some(NOW));
        assert_eq!(carried("b").evictions, [NOW]);

        // The leader dies; the next one reads the statuses and goes on counting the hold's idle
        // budget from where it stood, with the eviction still in the hour the cap counts.
        with_statuses(&mut world, &written);
        let mut next = Model::default();
        let actions = world.step(&mut next, NOW + 200.0, false);
        assert!(actions.warnings.is_empty(), "{:?}", actions.warnings);
        let memory = &next.memory.carried;
        assert_eq!(memory.holds().len(), 1);
        assert!(
            memory.holds()[0].cost.idle_gpu_s > held.holds[0].idle_gpu_seconds,
            "the budget went on from {} GPU-s, not from zero: {:?}",
            held.holds[0].idle_gpu_seconds,
            memory.holds()
        );
        assert_eq!(memory.of_queue("b").evicted_at, [NOW]);
        assert_eq!(memory.of_queue("a").last_preemption_at, Some(NOW));
    }

    #[test]
    fn a_stored_part_that_does_not_hold_together_is_named_and_left_out() {
        let mut world = held_world();
        let mut first = Model::default();
        world.step(&mut first, NOW, false);
        let mut written = world.step(&mut first, NOW + 100.0, true).statuses;
        let status = &mut written[0].status;
        status.carried.as_mut().expect("carried is written").holds[0].idle_gpu_seconds = -1.0;
        with_statuses(&mut world, &written);
        let mut next = Model::default();
        let actions = world.step(&mut next, NOW + 200.0, false);
        assert_eq!(
            actions.warnings,
            [
                "Queue \"a\": status.carried.holds[0].idleGpuSeconds = -1 is invalid: expected a \
              number >= 0; its holds and preemption history start afresh"
            ]
        );
        // The queue is not left without a hold: this cycle holds afresh, from a zero budget.
        assert_eq!(next.memory.carried.holds().len(), 1);
        assert_eq!(next.memory.carried.holds()[0].cost.idle_gpu_s, 0.0);
    }
}
