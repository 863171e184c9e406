//! The snapshot builder and the plan, end to end as pure code: objects in, requests out.

use std::sync::Arc;

use gpufair_api::GpuNodeReport;
use gpufair_core::admission::{DecideOptions, DescribeWorkloads, WaitReason, decide};
use gpufair_core::index::IndexVec;
use gpufair_core::mutation::{DEFAULT_GATE, ResourcePattern};
use gpufair_core::snapshot::{NodeId, QueueId};
use gpufair_core::units::ResourceTable;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use crate::fixtures::{bound_pod, gated_pod, in_gang, node, queue};
use crate::plan::plan;
use crate::snapshot::{Built, GpuKinds, Memory, Objects, REFUSED_EVICTION_BACKOFF_S, build};
use crate::workload_name::workload_name;

const NOW: f64 = 1_700_000_000.0;

fn gpus() -> GpuKinds {
    GpuKinds {
        patterns: vec![
            ResourcePattern::parse("nvidia.com/gpu"),
            ResourcePattern::parse("nvidia.com/mig-*"),
        ],
        table: ResourceTable::default(),
    }
}

fn memory() -> Memory {
    Memory {
        now: NOW,
        ..Memory::default()
    }
}

struct World {
    pods: Vec<Arc<Pod>>,
    nodes: Vec<Arc<Node>>,
    queues: Vec<Arc<gpufair_api::Queue>>,
    reports: Vec<Arc<GpuNodeReport>>,
}

impl World {
    fn new(pods: Vec<Pod>, nodes: Vec<Node>) -> Self {
        Self {
            pods: pods.into_iter().map(Arc::new).collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            queues: vec![
                Arc::new(queue("a", json!({"weight": 1}))),
                Arc::new(queue("b", json!({"weight": 1}))),
            ],
            reports: Vec::new(),
        }
    }

    fn build(&self, memory: &Memory) -> Built {
        build(
            &Objects {
                pods: &self.pods,
                nodes: &self.nodes,
                queues: &self.queues,
                reports: &self.reports,
            },
            memory,
            DEFAULT_GATE,
            &gpus(),
        )
    }
}

fn released_nodes(world: &World, memory: &Memory) -> Vec<(String, String)> {
    let built = world.build(memory);
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    let actions = plan(&built, &decisions, DEFAULT_GATE);
    let mut out: Vec<(String, String)> = actions
        .releases
        .iter()
        .flat_map(|r| {
            r.pods
                .iter()
                .map(|p| (p.pod().name.to_string(), p.node.clone()))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn running_pods_take_capacity_and_a_fitting_pod_is_pinned_and_released() {
    let world = World::new(
        vec![
            bound_pod("ml", "run", "a", 6, "n1", NOW as i64 - 60),
            gated_pod("ml", "small", "a", 2, NOW as i64 - 10),
            gated_pod("ml", "big", "b", 4, NOW as i64 - 5),
        ],
        vec![node("n1", 8, json!({})), node("n2", 4, json!({}))],
    );
    let built = world.build(&memory());
    let gpu = built
        .snapshot
        .resources
        .iter()
        .position(|r| r.name == "nvidia.com/gpu")
        .unwrap();
    assert_eq!(built.snapshot.resources[gpu].gpu_equivalents, 1.0);
    let cpu = built
        .snapshot
        .resources
        .iter()
        .position(|r| r.name == "cpu")
        .unwrap();
    assert_eq!(built.snapshot.resources[cpu].gpu_equivalents, 0.0);
    assert_eq!(
        built.snapshot.nodes[NodeId::new(0)].free[gpu],
        2,
        "n1 has 6 of 8 GPUs taken"
    );
    assert_eq!(built.snapshot.nodes[NodeId::new(0)].free[cpu], 63_000);
    assert_eq!(built.usage[QueueId::new(0)].allocated, 6.0);
    assert_eq!(built.usage[QueueId::new(0)].pending_pods, 1);
    assert_eq!(
        released_nodes(&world, &memory()),
        [
            ("big".to_string(), "n2".to_string()),
            ("small".to_string(), "n1".to_string())
        ]
    );
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    let actions = plan(&built, &decisions, DEFAULT_GATE);
    let small = actions
        .releases
        .iter()
        .flat_map(|r| &r.pods)
        .find(|p| &*p.pod().name == "small")
        .unwrap();
    assert_eq!(
        small.json_patch(),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "test", "path": "/spec/schedulingGates/0/name", "value": DEFAULT_GATE},
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]}}}},
            {"op": "remove", "path": "/spec/schedulingGates/0"}
        ])
    );
}

#[test]
fn cpu_and_memory_count_too() {
    // The GPU fits on n1 but its CPUs are taken: the pod goes to n2.
    let mut hungry = bound_pod("ml", "cpu-hog", "a", 0, "n1", NOW as i64 - 60);
    hungry.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("64".into()),
        );
    let world = World::new(
        vec![hungry, gated_pod("ml", "p", "a", 1, NOW as i64)],
        vec![node("n1", 1, json!({})), node("n2", 8, json!({}))],
    );
    assert_eq!(
        released_nodes(&world, &memory()),
        [("p".to_string(), "n2".to_string())]
    );
}

#[test]
fn node_selectors_and_taints_limit_placement() {
    let mut picky = gated_pod("ml", "picky", "a", 1, NOW as i64);
    picky.spec.as_mut().unwrap().node_selector =
        Some([("gpu-type".to_string(), "a100".to_string())].into());
    let mut tainted = node("n0-tainted", 8, json!({"gpu-type": "a100"}));
    tainted.spec = Some(
        serde_json::from_value(json!({"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}))
            .unwrap(),
    );
    let world = World::new(
        vec![picky, gated_pod("ml", "any", "b", 1, NOW as i64)],
        vec![
            tainted,
            node("n1-h100", 1, json!({"gpu-type": "h100"})),
            node("n2-a100", 8, json!({"gpu-type": "a100"})),
        ],
    );
    assert_eq!(
        released_nodes(&world, &memory()),
        [
            ("any".to_string(), "n1-h100".to_string()),
            ("picky".to_string(), "n2-a100".to_string())
        ]
    );
}

#[test]
fn released_pods_hold_their_capacity_until_bound() {
    // A pod released onto n1 (pinned, gate gone, not bound yet) holds n1's 8 GPUs.
    let mut released = gated_pod("ml", "released", "a", 8, NOW as i64 - 30);
    let spec = released.spec.as_mut().unwrap();
    spec.scheduling_gates = None;
    spec.affinity = Some(
        serde_json::from_value(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}))
        .unwrap(),
    );
    let world = World::new(
        vec![released, gated_pod("ml", "next", "b", 8, NOW as i64)],
        vec![node("n1", 8, json!({}))],
    );
    let built = world.build(&memory());
    assert_eq!(built.unbound.len(), 1);
    assert_eq!(built.unbound[0].1, "n1");
    assert!(released_nodes(&world, &memory()).is_empty());
    // Once it timed out it stops holding the node.
    let mut expired = memory();
    expired.expired.insert("uid-ml-released".into());
    assert_eq!(
        released_nodes(&world, &expired),
        [("next".to_string(), "n1".to_string())]
    );
}

#[test]
fn a_pod_just_released_is_never_released_twice() {
    // The cache still shows the gate, but this leader released it onto n1 a moment ago.
    let world = World::new(
        vec![
            gated_pod("ml", "p", "a", 8, NOW as i64),
            gated_pod("ml", "q", "b", 8, NOW as i64),
        ],
        vec![node("n1", 8, json!({}))],
    );
    let mut memory = memory();
    memory.released.insert("uid-ml-p".into(), "n1".into());
    assert!(released_nodes(&world, &memory).is_empty());
    // A pod whose release patch failed its test waits for a newer version.
    let mut stale = self::memory();
    stale.stale.insert("uid-ml-p".into(), "7".into());
    assert_eq!(
        released_nodes(&world, &stale),
        [("q".to_string(), "n1".to_string())]
    );
}

#[test]
fn gangs_are_released_together_and_started_members_count() {
    let world = World::new(
        vec![
            in_gang(gated_pod("ml", "g-0", "a", 4, NOW as i64), "g", 2),
            in_gang(gated_pod("ml", "g-1", "a", 4, NOW as i64), "g", 2),
            in_gang(gated_pod("ml", "h-1", "b", 4, NOW as i64), "h", 3),
        ],
        vec![node("n1", 8, json!({})), node("n2", 8, json!({}))],
    );
    let built = world.build(&memory());
    let gang = built
        .snapshot
        .pending
        .iter()
        .find(|w| w.uid == "ml/g")
        .unwrap();
    assert_eq!((gang.pods.len(), gang.min_member), (2, 2));
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    let h = built
        .snapshot
        .pending
        .iter()
        .position(|w| w.uid == "ml/h")
        .unwrap();
    assert!(decisions.waiting.iter().any(|w| w.workload == h
        && matches!(
            w.reason,
            WaitReason::GangIncomplete {
                present: 1,
                min_member: 3
            }
        )));
    // With two of its members already running, the third is released alone.
    let world = World::new(
        vec![
            in_gang(
                bound_pod("ml", "h-0", "b", 4, "n1", NOW as i64 - 99),
                "h",
                3,
            ),
            in_gang(
                bound_pod("ml", "h-2", "b", 4, "n1", NOW as i64 - 99),
                "h",
                3,
            ),
            in_gang(gated_pod("ml", "h-1", "b", 4, NOW as i64), "h", 3),
        ],
        vec![node("n1", 8, json!({})), node("n2", 8, json!({}))],
    );
    assert_eq!(
        released_nodes(&world, &memory()),
        [("h-1".to_string(), "n2".to_string())]
    );
}

#[test]
fn a_running_pod_counts_as_queued_when_it_was_created_as_a_waiting_one_does() {
    // Core lets a hold evict its own queue's work queued after the held workload: both times
    // must be read the same way.
    let created = NOW as i64 - 100;
    let mut running = bound_pod("ml", "run", "a", 4, "n1", NOW as i64 - 60);
    running.metadata.creation_timestamp = gated_pod("ml", "run", "a", 4, created)
        .metadata
        .creation_timestamp;
    let world = World::new(
        vec![running, gated_pod("ml", "wait", "a", 1, created)],
        vec![node("n1", 8, json!({}))],
    );
    let built = world.build(&memory());
    let (running, waiting) = (&built.snapshot.running[0], &built.snapshot.pending[0]);
    assert_eq!(running.queued_at, waiting.created_at);
    assert!(running.queued_at < running.started_at);
}

#[test]
fn unmanaged_finished_and_orphaned_pods_take_no_part() {
    let mut unmanaged = gated_pod("ml", "unmanaged", "a", 1, NOW as i64);
    unmanaged
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("gpufair.io/managed");
    let mut done = bound_pod("ml", "done", "a", 8, "n1", NOW as i64 - 99);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let world = World::new(
        vec![
            unmanaged,
            done,
            gated_pod("ml", "orphan", "no-such-queue", 1, NOW as i64),
        ],
        vec![node("n1", 8, json!({}))],
    );
    let built = world.build(&memory());
    assert!(built.snapshot.pending.is_empty());
    assert!(built.snapshot.running.is_empty());
    assert_eq!(built.skipped.len(), 1);
    assert!(built.skipped[0].1.contains("gpufair.io/queue"));
    assert_eq!(
        built.snapshot.nodes[NodeId::new(0)].free[0],
        built.snapshot.nodes[NodeId::new(0)].allocatable[0]
    );
}

#[test]
fn a_node_that_is_not_ready_offers_nothing() {
    let mut down = node("n1", 8, json!({}));
    down.status.as_mut().unwrap().conditions =
        Some(serde_json::from_value(json!([{"type": "Ready", "status": "False"}])).unwrap());
    let world = World::new(vec![gated_pod("ml", "p", "a", 1, NOW as i64)], vec![down]);
    assert!(released_nodes(&world, &memory()).is_empty());
}

/// One queue's node full with a running pod, and two more of its pods waiting behind it.
fn two_waiting_behind_a_full_node() -> (Built, gpufair_core::admission::Decisions) {
    let world = World::new(
        vec![
            bound_pod("ml", "run", "a", 8, "n1", NOW as i64 - 60),
            gated_pod("ml", "first", "a", 8, NOW as i64 - 20),
            gated_pod("ml", "second", "a", 8, NOW as i64 - 10),
        ],
        vec![node("n1", 8, json!({}))],
    );
    let built = world.build(&memory());
    let decisions = decide(&built.snapshot, &DecideOptions::default());
    (built, decisions)
}

#[test]
fn waiting_pods_are_explained_with_queue_numbers_and_position() {
    let (built, decisions) = two_waiting_behind_a_full_node();
    let actions = plan(&built, &decisions, DEFAULT_GATE);
    assert!(actions.releases.is_empty());
    let second = actions
        .explanations
        .iter()
        .find(|e| &*e.pod.name == "second")
        .unwrap();
    assert!(second.message.contains("queue a"), "{}", second.message);
    assert!(
        second.message.contains("holds 8.00 GPU-equivalents"),
        "{}",
        second.message
    );
    assert!(
        second.message.contains("2 of 2 waiting"),
        "{}",
        second.message
    );
    assert!(
        second.message.contains("effective weight"),
        "{}",
        second.message
    );
}

#[test]
fn the_oldest_wait_is_the_longest_waiting_workloads_age() {
    let (built, decisions) = two_waiting_behind_a_full_node();
    let queues = built.snapshot.queues.len();
    let a = built
        .snapshot
        .queues
        .iter_enumerated()
        .find(|(_, q)| q.name == "a")
        .unwrap()
        .0;
    let waits = crate::waiting_status::oldest_waits(&built.snapshot, &decisions, NOW);
    let mut expected = IndexVec::from_elem(0.0, queues);
    expected[a] = 20.0;
    assert_eq!(waits, expected);
    // A queue with nothing waiting reads 0, not the age of its running work.
    let none = gpufair_core::admission::Decisions {
        waiting: Vec::new(),
        ..decisions
    };
    assert_eq!(
        crate::waiting_status::oldest_waits(&built.snapshot, &none, NOW),
        IndexVec::from_elem(0.0, queues)
    );
}

#[test]
fn explanations_are_capped_per_cycle_and_resume_in_order() {
    use crate::plan::{explanation_turns, plan_explaining};
    let (built, decisions) = two_waiting_behind_a_full_node();
    let names = |actions: &crate::plan::Plan| -> Vec<String> {
        actions
            .explanations
            .iter()
            .map(|e| e.pod.name.to_string())
            .collect()
    };
    let cycle = |now: f64, cap: usize| {
        names(&plan_explaining(
            &built,
            &decisions,
            DEFAULT_GATE,
            explanation_turns(now, 300.0, cap),
        ))
    };
    let first_in_line = names(&plan(&built, &decisions, DEFAULT_GATE))[0].clone();
    assert_eq!(
        cycle(1000.0, 1),
        std::slice::from_ref(&first_in_line),
        "the cap holds"
    );
    let second = cycle(1001.0, 1);
    assert_eq!(second.len(), 1, "the pod left out is next");
    assert_ne!(second[0], first_in_line);
    assert!(cycle(1002.0, 1).is_empty(), "both told within the interval");
    assert!(cycle(1002.0, 0).is_empty(), "a cap of 0 sends none");
    assert_eq!(
        cycle(1300.0, 5),
        std::slice::from_ref(&first_in_line),
        "300 s after its Event, only the first is due again"
    );
    assert_eq!(cycle(1301.0, 5).len(), 1, "then the second");
}

#[test]
fn only_the_waiting_pods_chosen_get_an_explanation() {
    let (built, decisions) = two_waiting_behind_a_full_node();
    let mut asked = Vec::new();
    let actions = crate::plan::plan_explaining(&built, &decisions, DEFAULT_GATE, |pod| {
        asked.push(pod.pod().name.to_string());
        &*pod.pod().name == "second"
    });
    asked.sort();
    assert_eq!(
        asked,
        ["first", "second"],
        "every waiting pod is offered once"
    );
    let explained: Vec<&str> = actions.explanations.iter().map(|e| &*e.pod.name).collect();
    assert_eq!(explained, ["second"]);
    let all = plan(&built, &decisions, DEFAULT_GATE);
    let second = all
        .explanations
        .iter()
        .find(|e| &*e.pod.name == "second")
        .expect("explained by plan too");
    assert_eq!(
        actions.explanations[0], *second,
        "the same message either way"
    );
}

#[test]
fn a_premium_user_goes_first_and_the_event_gives_the_score_by_part() {
    let mut premium = gated_pod("ml", "premium", "a", 8, NOW as i64 - 10);
    premium.metadata.annotations = Some([("user-tier".to_string(), "premium".to_string())].into());
    let world = World::new(
        vec![
            bound_pod("ml", "run", "a", 8, "n1", NOW as i64 - 60),
            gated_pod("ml", "older", "a", 8, NOW as i64 - 20),
            premium,
        ],
        vec![node("n1", 8, json!({}))],
    );
    let built = world.build(&memory());
    let mut options = DecideOptions::default();
    options.score.waited = 0.0;
    let decisions = decide(&built.snapshot, &options);
    let actions = plan(&built, &decisions, DEFAULT_GATE);
    let message = |name: &str| {
        actions
            .explanations
            .iter()
            .find(|e| &*e.pod.name == name)
            .unwrap()
            .message
            .clone()
    };
    let first = message("premium");
    assert!(first.contains("1 of 2 waiting"), "{first}");
    assert!(
        first.contains(
            "release score 2.000 = urgency 1.000 + user tier 1.000 + deadline slack 0.000 + time waited 0.000"
        ),
        "{first}"
    );
    assert!(message("older").contains("2 of 2 waiting"));
    // Without the user-tier weight the older pod is first again: the weight is what moved it.
    options.score.user_tier = 0.0;
    let decisions = decide(&built.snapshot, &options);
    let actions = plan(&built, &decisions, DEFAULT_GATE);
    let older = actions
        .explanations
        .iter()
        .find(|e| &*e.pod.name == "older")
        .unwrap();
    assert!(
        older.message.contains("1 of 2 waiting"),
        "{}",
        older.message
    );
}

#[test]
fn measured_use_comes_from_node_reports() {
    let mut world = World::new(
        vec![bound_pod("ml", "run", "a", 4, "n1", NOW as i64 - 60)],
        vec![node("n1", 8, json!({}))],
    );
    world.reports.push(Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1", "kind": "GpuNodeReport",
            "metadata": {"name": "n1"},
            "spec": {"nodeName": "n1", "timestamp": "2026-01-01T00:00:00Z", "intervalSeconds": 10.0,
                     "deviceCount": 4, "podCount": 1, "pods": [{
                        "namespace": "ml", "name": "run", "uid": "uid-ml-run",
                        "deviceIds": ["a", "b", "c", "d"], "devices": ["a", "b", "c", "d"],
                        "smUtilization": 1.0, "memoryBytes": 0, "perProcess": true}]}
        }))
        .unwrap(),
    ));
    let built = world.build(&memory());
    assert_eq!(built.usage[QueueId::new(0)].allocated, 4.0);
    assert_eq!(
        built.usage[QueueId::new(0)].utilized,
        1.0,
        "one device's worth busy of four"
    );
}

#[test]
fn a_warm_cache_builds_what_a_cold_build_does_as_pods_change() {
    let mut world = World::new(
        vec![
            bound_pod("ml", "run", "a", 4, "n1", NOW as i64 - 60),
            in_gang(gated_pod("ml", "g0", "b", 2, NOW as i64 - 20), "g", 2),
            in_gang(gated_pod("ml", "g1", "b", 2, NOW as i64 - 19), "g", 2),
            gated_pod("ml", "small", "a", 1, NOW as i64 - 10),
        ],
        vec![
            node("n1", 8, json!({})),
            node("n2", 4, json!({"pool": "x"})),
        ],
    );
    let mut cache = crate::facts::FactsCache::default();
    let cached = |world: &World, cache: &mut crate::facts::FactsCache| {
        cache.refresh(&world.pods, DEFAULT_GATE);
        let objects = Objects {
            pods: &world.pods,
            nodes: &world.nodes,
            queues: &world.queues,
            reports: &world.reports,
        };
        crate::snapshot::build_from_facts(cache, &objects.cluster(), &memory(), &gpus())
    };
    let same = |a: &Built, b: &Built| {
        assert_eq!(format!("{:?}", a.snapshot), format!("{:?}", b.snapshot));
        assert_eq!(a.pending, b.pending);
        assert_eq!(a.running, b.running);
        assert_eq!(a.unbound, b.unbound);
        assert_eq!(a.skipped, b.skipped);
    };
    same(&cached(&world, &mut cache), &world.build(&memory()));
    // One gang member binds (a new version) and the small pod goes away.
    let mut bound = bound_pod("ml", "g0", "b", 2, "n1", NOW as i64 - 5);
    bound.metadata.resource_version = Some("8".into());
    bound = in_gang(bound, "g", 2);
    world.pods[1] = Arc::new(bound);
    world.pods.remove(3);
    let warm = cached(&world, &mut cache);
    same(&warm, &world.build(&memory()));
    assert_eq!(warm.snapshot.running.len(), 2);
    assert_eq!(warm.snapshot.pending.len(), 1);
    assert_eq!(
        warm.snapshot.pending[0].min_member, 1,
        "one of two already started"
    );
    assert_eq!(cache.len(), 3, "the small pod is forgotten");
}

#[test]
fn refused_evictions_reach_core_for_a_minute() {
    let world = World::new(Vec::new(), vec![node("n1", 8, json!({}))]);
    let mut memory = memory();
    memory
        .refused_evictions
        .insert("batch/gang-1".into(), NOW - 10.0);
    memory
        .refused_evictions
        .insert("uid-old".into(), NOW - REFUSED_EVICTION_BACKOFF_S);
    assert_eq!(
        world.build(&memory).snapshot.refused_victims,
        ["batch/gang-1"],
        "a refusal lasts less than the backoff"
    );
}

#[test]
fn a_first_cycle_lists_each_queues_spans_of_use_finished_pods_included() {
    let time = |s: i64| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(s).expect("a valid time"),
        )
    };
    let start = NOW as i64 - 600;
    let mut running = bound_pod("ns", "running", "a", 2, "n1", start);
    // Bound 5 s before it started: it holds the GPUs from its binding.
    running.status.as_mut().unwrap().conditions = Some(vec![
        serde_json::from_value(json!({
            "type": "PodScheduled", "status": "True", "lastTransitionTime": time(start - 5)
        }))
        .unwrap(),
    ]);
    let mut finished = bound_pod("ns", "finished", "a", 4, "n1", start);
    let status = finished.status.as_mut().unwrap();
    status.phase = Some("Succeeded".into());
    status.container_statuses = Some(vec![
        serde_json::from_value(json!({
            "name": "main", "ready": false, "restartCount": 0, "image": "x", "imageID": "x",
            "state": {"terminated": {"exitCode": 0, "finishedAt": time(NOW as i64 - 30)}}
        }))
        .unwrap(),
    ]);
    let world = World::new(vec![running, finished], vec![node("n1", 8, json!({}))]);

    let steady = world.build(&memory());
    assert!(
        steady.usage_spans.is_empty(),
        "only asked for on a first cycle"
    );

    let first = world.build(&Memory {
        usage_spans: true,
        ..memory()
    });
    let mut spans = first.usage_spans[QueueId::new(0)].clone();
    spans.sort_by(|x, y| x.allocated.total_cmp(&y.allocated));
    let started = (NOW as i64 - 600) as f64;
    assert_eq!(
        spans,
        [
            // Whole-second timestamps are taken at the middle of their second.
            gpufair_core::ledger::UsageSpan {
                start: started - 4.5,
                end: None,
                allocated: 2.0,
                utilized: 2.0
            },
            gpufair_core::ledger::UsageSpan {
                start: started + 0.5,
                end: Some(NOW - 29.5),
                allocated: 4.0,
                utilized: 4.0
            },
        ]
    );
    assert!(
        first.usage_spans[QueueId::new(1)].is_empty(),
        "queue b ran nothing"
    );
    assert_eq!(
        first.snapshot.running.len(),
        1,
        "a finished pod takes no capacity"
    );
}

#[test]
fn a_reason_names_the_workload_it_mentions_by_pod_or_pod_group() {
    let world = World::new(
        vec![
            gated_pod("ml", "solo", "a", 4, NOW as i64),
            in_gang(gated_pod("ml", "g-0", "b", 4, NOW as i64), "g", 2),
            in_gang(gated_pod("ml", "g-1", "b", 4, NOW as i64), "g", 2),
        ],
        vec![node("n1", 8, json!({}))],
    );
    let built = world.build(&memory());
    let index_of = |uid_ends: &str| {
        built
            .snapshot
            .pending
            .iter()
            .position(|w| w.uid.ends_with(uid_ends))
            .unwrap()
    };
    let solo = built
        .pending
        .iter()
        .position(|pods| pods.len() == 1)
        .unwrap();
    assert_eq!(workload_name(&built, solo), "pod ml/solo");
    assert_eq!(workload_name(&built, index_of("ml/g")), "pod group ml/g");
    assert_eq!(workload_name(&built, 99), "workload #99");
    let held = WaitReason::CapacityHeld {
        for_workload: index_of("ml/g"),
    };
    assert_eq!(
        held.describe(&|w| workload_name(&built, w)),
        "free capacity is held for a more deserving workload (pod group ml/g)"
    );
}
