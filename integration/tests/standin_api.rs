//! The API-server stand-in through an unchanged kube-rs client: CRUD, selectors, watches
//! (resume, bookmarks, 410), optimistic concurrency, patches, the pod rules the real server
//! enforces, eviction with PodDisruptionBudgets, the scheduler and kubelet stand-ins, and
//! injected faults.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gpufair_integration::standin::{Fault, FaultRule, NodeSpec, StandIn, StandInOptions, Verb};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::Status;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn api_status(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn standin() -> StandIn {
    StandIn::start(StandInOptions {
        bookmark_interval: Duration::from_millis(100),
        ..StandInOptions::for_tests()
    })
    .await
    .expect("stand-in starts")
}

fn lease(name: &str, app: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    }))
    .unwrap()
}

fn pod(name: &str, gpus: u32, extra: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}, "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
    });
    json_patch::merge(&mut pod, &extra);
    pod
}

fn typed(pod: Value) -> Pod {
    serde_json::from_value(pod).unwrap()
}

fn node_of(pod: Option<&Value>) -> Option<String> {
    pod.and_then(|p| p["spec"]["nodeName"].as_str())
        .map(str::to_string)
}

fn phase(pod: Option<&Value>) -> Option<String> {
    pod.and_then(|p| p["status"]["phase"].as_str())
        .map(str::to_string)
}

#[tokio::test]
async fn crud_selectors_and_optimistic_concurrency() {
    let standin = standin().await;
    let client = standin.client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let a = leases
        .create(&PostParams::default(), &lease("a", "x"))
        .await
        .unwrap();
    leases
        .create(&PostParams::default(), &lease("b", "y"))
        .await
        .unwrap();
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());

    let selected = leases
        .list(&ListParams::default().labels("app=x"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let by_name = leases
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(by_name.items[0].metadata.name.as_deref(), Some("b"));
    let status = api_status(
        leases
            .list(&ListParams::default().fields("spec.holderIdentity=a"))
            .await,
    );
    assert_eq!(
        (status.code, status.message.as_str()),
        (400, "field label not supported: spec.holderIdentity")
    );
    let paged = leases.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(paged.items.len(), 1);
    let token = paged.metadata.continue_.clone().expect("a continue token");
    let rest = leases
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items[0].metadata.name.as_deref(), Some("b"));

    // A replace from a stale read is refused; from a fresh one it goes through.
    let mut stale = a.clone();
    let mut fresh = leases.get("a").await.unwrap();
    fresh.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let updated = leases
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        a.metadata.resource_version
    );
    stale.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let status = api_status(leases.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );

    let status = api_status(
        leases
            .create(&PostParams::default(), &lease("a", "x"))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
    leases.delete("b", &DeleteParams::default()).await.unwrap();
    let status = api_status(leases.get("b").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    let status = api_status(
        Api::<Lease>::namespaced(client, "absent")
            .create(&PostParams::default(), &lease("c", "x"))
            .await,
    );
    assert_eq!(status.code, 404);
}

#[tokio::test]
async fn watches_resume_send_bookmarks_and_expire() {
    let standin = standin().await;
    let client = standin.client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let created = leases
        .create(&PostParams::default(), &lease("a", "x"))
        .await
        .unwrap();
    let from = created.metadata.resource_version.clone().unwrap();

    let params = WatchParams::default().labels("app=x");
    let mut stream = leases.watch(&params, "0").await.unwrap().boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(l)) => assert_eq!(l.metadata.name.as_deref(), Some("a")),
        other => panic!("expected the initial ADDED, got {other:?}"),
    }
    leases
        .create(&PostParams::default(), &lease("b", "y"))
        .await
        .unwrap();
    leases
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
        )
        .await
        .unwrap();
    let mut saw_delete = false;
    let mut saw_bookmark = false;
    while !(saw_delete && saw_bookmark) {
        match tokio::time::timeout(WAIT, stream.try_next())
            .await
            .expect("watch event")
            .unwrap()
        {
            // Leaving the label selection is a DELETED for this watch; `b` never matched.
            Some(WatchEvent::Deleted(l)) => {
                assert_eq!(l.metadata.name.as_deref(), Some("a"));
                saw_delete = true;
            }
            Some(WatchEvent::Bookmark(_)) => saw_bookmark = true,
            other => panic!("unexpected {other:?}"),
        }
    }

    // Resuming from a version replays what came after it.
    let mut resumed = leases
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    match resumed.try_next().await.unwrap() {
        Some(WatchEvent::Added(l)) => assert_eq!(l.metadata.name.as_deref(), Some("b")),
        other => panic!("expected b's ADDED, got {other:?}"),
    }
    match resumed.try_next().await.unwrap() {
        Some(WatchEvent::Modified(l)) => assert_eq!(l.metadata.name.as_deref(), Some("a")),
        other => panic!("expected a's MODIFIED, got {other:?}"),
    }

    // Once the history is gone, the same version is 410 Expired.
    standin.compact_history();
    let mut expired = leases
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    match expired.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }

    // kube-rs's watcher recovers from dropped watches and 410 by listing again.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let names = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = names.clone();
    let watcher = tokio::spawn(async move {
        use kube::runtime::WatchStreamExt;
        let stream = kube::runtime::watcher(pods, kube::runtime::watcher::Config::default())
            .default_backoff();
        let mut stream = std::pin::pin!(stream.applied_objects());
        // Errors (the 410) are yielded and then recovered from by relisting.
        while let Some(item) = stream.next().await {
            if let Ok(pod) = item {
                sink.lock()
                    .unwrap()
                    .push(pod.metadata.name.unwrap_or_default());
            }
        }
    });
    standin.create(pod("p1", 0, json!({}))).await.unwrap();
    let seen = |name: &str| names.lock().unwrap().iter().any(|n| n == name);
    standin
        .wait_until("watcher sees p1", WAIT, || seen("p1").then_some(()))
        .await
        .unwrap();
    standin.compact_history();
    standin.faults().arm(FaultRule::new(
        Some("pods"),
        Some(Verb::Watch),
        Fault::Gone,
        1,
    ));
    standin.faults().drop_all_watches();
    standin.create(pod("p2", 0, json!({}))).await.unwrap();
    standin
        .wait_until("watcher sees p2 after 410", WAIT, || {
            seen("p2").then_some(())
        })
        .await
        .unwrap();
    watcher.abort();
}

#[tokio::test]
async fn patches_json_test_merge_strategic_and_apply() {
    let standin = standin().await;
    let client = standin.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &typed(pod(
            "p",
            1,
            json!({"spec": {"schedulingGates": [{"name": "gpufair.io/admission"}]}}),
        )),
    )
    .await
    .unwrap();

    // A failed `test` leaves the object alone and is 422, as from the real server.
    let wrong = json_patch::Patch(
        serde_json::from_value(json!([
            {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "other"},
            {"op": "remove", "path": "/spec/schedulingGates/0"}
        ]))
        .unwrap(),
    );
    let status = api_status(
        pods.patch("p", &PatchParams::default(), &Patch::Json::<()>(wrong))
            .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        pods.get("p")
            .await
            .unwrap()
            .spec
            .unwrap()
            .scheduling_gates
            .unwrap()
            .len(),
        1
    );

    let merged = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "llm"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.metadata.labels.unwrap()["team"], "llm");
    let strategic = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}),
            ),
        )
        .await
        .unwrap();
    let containers = strategic.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("busybox:2"));
    assert!(
        containers[0].resources.is_some(),
        "merged by name, not replaced"
    );

    let status = api_status(
        pods.patch(
            "p",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod"})),
        )
        .await,
    );
    assert_eq!(status.code, 415);
    assert!(
        status.message.contains("server-side apply"),
        "{}",
        status.message
    );

    // Custom resources take no strategic merge patch; their status goes through /status only.
    let queues: Api<gpufair_api::Queue> = Api::all(client);
    standin
        .create_queue("llm", json!({"weight": 2}))
        .await
        .unwrap();
    let status = api_status(
        queues
            .patch(
                "llm",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"weight": 3}})),
            )
            .await,
    );
    assert_eq!(status.code, 415);
    let main = queues
        .patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocated": 5.0}})),
        )
        .await
        .unwrap();
    assert!(main.status.is_none(), "the main resource ignores status");
    let with_status = queues
        .patch_status(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocated": 5.0}})),
        )
        .await
        .unwrap();
    assert_eq!(with_status.status.unwrap().allocated, Some(5.0));
}

#[tokio::test]
async fn pod_rules_gates_immutability_kep_3838_and_priority() {
    let standin = standin().await;
    let client = standin.client().await.unwrap();
    standin
        .create_yaml(
            &std::fs::read_to_string(
                gpufair_integration::workspace_root().join("deploy/base/priorityclasses.yaml"),
            )
            .unwrap(),
            "priorityclasses.yaml",
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let gated = json!({"spec": {"schedulingGates": [{"name": "gpufair.io/admission"}], "priorityClassName": "gpufair-elastic",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpufair.io/pool", "operator": "In", "values": ["a100"]}]}]}}}}});
    let created = pods
        .create(&PostParams::default(), &typed(pod("p", 1, gated)))
        .await
        .unwrap();
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(100_000));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    let conditions = created.status.unwrap().conditions.unwrap();
    assert_eq!(conditions[0].reason.as_deref(), Some("SchedulingGated"));

    let json = |value: Value| Patch::Json::<()>(serde_json::from_value(value).unwrap());
    // Gates cannot be added after creation.
    let status = api_status(
        pods.patch(
            "p",
            &PatchParams::default(),
            &json(json!([
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "another"}}])),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("only deletion is allowed"),
        "{}",
        status.message
    );

    // While gated: a nodeSelector entry and a narrower required term (KEP-3838) are accepted.
    pods.patch("p", &PatchParams::default(), &json(json!([
        {"op": "add", "path": "/spec/nodeSelector", "value": {"gpufair.io/rack": "r1"}},
        {"op": "add", "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields",
         "value": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]))).await.unwrap();
    // Widening is refused, and so is any other spec change.
    let status = api_status(pods.patch("p", &PatchParams::default(), &json(json!([
        {"op": "remove", "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0"}]))).await);
    assert_eq!(status.code, 422);
    let status = api_status(
        pods.patch(
            "p",
            &PatchParams::default(),
            &json(json!([
        {"op": "replace", "path": "/spec/containers/0/resources/requests/cpu", "value": "2"}])),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("pod updates may not change fields"),
        "{}",
        status.message
    );
    let status = api_status(
        pods.patch(
            "p",
            &PatchParams::default(),
            &json(json!([
        {"op": "replace", "path": "/spec/priority", "value": 5}])),
        )
        .await,
    );
    assert_eq!(status.code, 422);

    // Removing the gate is allowed; afterwards scheduling directives are frozen.
    pods.patch(
        "p",
        &PatchParams::default(),
        &json(json!([
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "gpufair.io/admission"},
        {"op": "remove", "path": "/spec/schedulingGates/0"}])),
    )
    .await
    .unwrap();
    let status = api_status(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeSelector": {"more": "x"}}})),
        )
        .await,
    );
    assert_eq!(status.code, 422);

    // Priority: a class resolves; a disagreeing value or a missing class is refused (403).
    let status = api_status(
        pods.create(
            &PostParams::default(),
            &typed(pod(
                "q",
                0,
                json!({"spec": {"priorityClassName": "gpufair-backfill", "priority": 7}}),
            )),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert!(
        status.message.contains("computed 1000"),
        "{}",
        status.message
    );
    let status = api_status(
        pods.create(
            &PostParams::default(),
            &typed(pod("r", 0, json!({"spec": {"priorityClassName": "nope"}}))),
        )
        .await,
    );
    assert_eq!(status.code, 403);
    let backfill = pods
        .create(
            &PostParams::default(),
            &typed(pod(
                "s",
                0,
                json!({"spec": {"priorityClassName": "gpufair-backfill"}}),
            )),
        )
        .await
        .unwrap();
    assert_eq!(backfill.spec.as_ref().unwrap().priority, Some(1000));
    assert_eq!(
        backfill.spec.unwrap().preemption_policy.as_deref(),
        Some("Never")
    );
    // Gates and a node name together are refused at creation.
    let status = api_status(
        pods.create(
            &PostParams::default(),
            &typed(pod(
                "t",
                0,
                json!({"spec": {"nodeName": "n", "schedulingGates": [{"name": "g"}]}}),
            )),
        )
        .await,
    );
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn scheduler_and_kubelet_stand_ins() {
    let standin = standin().await;
    standin
        .add_node(NodeSpec::new("gpu-1").gpus(2).label("pool", "a"))
        .await
        .unwrap();
    standin
        .add_node(NodeSpec::new("gpu-2").gpus(8).label("pool", "b").taint(
            "dedicated",
            "infer",
            "NoSchedule",
        ))
        .await
        .unwrap();
    standin.create_yaml(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n",
        "inline",
    ).await.unwrap();

    // Gated: never bound. Ungated: bound where it fits, runs, and finishes after its run time.
    standin
        .submit_pod(
            pod(
                "gated",
                1,
                json!({"spec": {"schedulingGates": [{"name": "g"}]}}),
            ),
            None,
        )
        .await
        .unwrap();
    standin
        .submit_pod(pod("short", 1, json!({})), Some(0.3))
        .await
        .unwrap();
    let running = standin
        .wait_for("v1", "Pod", "default", "short", WAIT, |p| {
            phase(p).as_deref() == Some("Running")
        })
        .await
        .unwrap();
    assert_eq!(node_of(running.as_ref()).as_deref(), Some("gpu-1"));
    standin
        .wait_for("v1", "Pod", "default", "short", WAIT, |p| {
            phase(p).as_deref() == Some("Succeeded")
        })
        .await
        .unwrap();
    let gated = standin.get("v1", "Pod", "default", "gated").unwrap();
    assert_eq!(node_of(Some(&gated)), None);

    // Only the taint-tolerating pod may use gpu-2; nodeSelector and affinity are honoured.
    standin
        .submit_pod(pod("big", 4, json!({})), None)
        .await
        .unwrap();
    standin.submit_pod(pod("tolerant", 4, json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-2"]}]}]}}}}})), None).await.unwrap();
    let tolerant = standin
        .wait_for("v1", "Pod", "default", "tolerant", WAIT, |p| {
            node_of(p).is_some()
        })
        .await
        .unwrap();
    assert_eq!(node_of(tolerant.as_ref()).as_deref(), Some("gpu-2"));
    let big = standin
        .wait_for("v1", "Pod", "default", "big", WAIT, |p| {
            p.is_some_and(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["reason"] == "Unschedulable")
            })
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(node_of(Some(&big)), None);
    let message = big["status"]["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("Insufficient nvidia.com/gpu") && message.contains("untolerated taint"),
        "{message}"
    );

    // With one GPU free on gpu-1, the higher-priority pod goes first.
    standin
        .submit_pod(
            pod(
                "filler",
                1,
                json!({"spec": {"nodeSelector": {"pool": "a"}}}),
            ),
            None,
        )
        .await
        .unwrap();
    standin
        .wait_for("v1", "Pod", "default", "filler", WAIT, |p| {
            phase(p).as_deref() == Some("Running")
        })
        .await
        .unwrap();
    let client = standin.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.delete(
        "filler",
        &DeleteParams {
            grace_period_seconds: Some(1),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    standin
        .submit_pod(
            pod("low", 1, json!({"spec": {"nodeSelector": {"pool": "a"}}})),
            None,
        )
        .await
        .unwrap();
    standin
        .submit_pod(
            pod(
                "high",
                1,
                json!({"spec": {"nodeSelector": {"pool": "a"}, "priorityClassName": "high"}}),
            ),
            None,
        )
        .await
        .unwrap();
    // The deleted pod holds its GPU for its grace period, then goes away.
    standin
        .wait_for("v1", "Pod", "default", "filler", WAIT, |p| p.is_none())
        .await
        .unwrap();
    standin
        .wait_for("v1", "Pod", "default", "high", WAIT, |p| {
            node_of(p).as_deref() == Some("gpu-1")
        })
        .await
        .unwrap();
    assert_eq!(
        node_of(Some(&standin.get("v1", "Pod", "default", "low").unwrap())),
        None
    );

    // pods/binding refuses a gated pod and a bound one.
    let status = api_status(pods.create_subresource::<Value, Value>("binding", "gated", &PostParams::default(),
        &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "gated"}, "target": {"kind": "Node", "name": "gpu-1"}})).await);
    assert_eq!(status.code, 409);
    assert!(
        status.message.contains("non-empty .spec.schedulingGates"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn eviction_honours_disruption_budgets() {
    let standin = standin().await;
    standin
        .add_node(NodeSpec::new("gpu-1").gpus(8))
        .await
        .unwrap();
    for name in ["w0", "w1"] {
        standin.submit_pod(pod(name, 1, json!({"metadata": {"labels": {"job": "train"}}, "spec": {"terminationGracePeriodSeconds": 1}})), None).await.unwrap();
        standin
            .wait_for("v1", "Pod", "default", name, WAIT, |p| {
                phase(p).as_deref() == Some("Running")
            })
            .await
            .unwrap();
    }
    // kube-rs retries 429s by default; the budget's refusal is what is checked here.
    let client = standin.client_without_retries().await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let budget: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "train"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"job": "train"}}}}))
    .unwrap();
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");

    let status = api_status(pods.evict("w0", &EvictParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    let cause = &status.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(
        cause.message,
        "The disruption budget train needs 2 healthy pods and has 2 currently"
    );

    budgets
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
        )
        .await
        .unwrap();
    // A dry run answers as the eviction would and changes nothing, so the controller can check
    // every pod of a gang before evicting any.
    let dry_run = EvictParams {
        post_options: PostParams {
            dry_run: true,
            field_manager: None,
        },
        ..EvictParams::default()
    };
    for _ in 0..2 {
        let done = pods.evict("w0", &dry_run).await.unwrap();
        assert_eq!(done.code, 201);
    }
    let untouched = pods.get("w0").await.unwrap();
    assert!(
        untouched.metadata.deletion_timestamp.is_none(),
        "a dry run deletes nothing"
    );
    let status = api_status(
        pods.patch(
            "w0",
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await,
    );
    assert_eq!(
        status.code, 400,
        "dry runs elsewhere are refused, not applied"
    );
    let done = pods.evict("w0", &EvictParams::default()).await.unwrap();
    assert_eq!(done.code, 201);
    let evicted = pods.get("w0").await.unwrap();
    assert!(
        evicted.metadata.deletion_timestamp.is_some(),
        "graceful deletion"
    );
    // The budget is now spent: the other pod stays.
    let status = api_status(pods.evict("w1", &EvictParams::default()).await);
    assert_eq!(status.code, 429);
    standin
        .wait_for("v1", "Pod", "default", "w0", WAIT, |p| p.is_none())
        .await
        .unwrap();
    let budget = budgets.get_status("train").await.unwrap().status.unwrap();
    assert_eq!(
        (
            budget.current_healthy,
            budget.desired_healthy,
            budget.disruptions_allowed
        ),
        (1, 1, 0)
    );
}

#[tokio::test]
async fn faults_on_demand() {
    let standin = standin().await;
    let client = standin.client_without_retries().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    leases
        .create(&PostParams::default(), &lease("a", "x"))
        .await
        .unwrap();
    let faults = standin.faults();

    faults.arm(FaultRule::new(
        Some("leases"),
        Some(Verb::Get),
        Fault::ServerError,
        2,
    ));
    assert_eq!(api_status(leases.get("a").await).code, 500);
    assert_eq!(api_status(leases.get("a").await).code, 500);
    leases.get("a").await.unwrap();

    faults.arm(FaultRule::new(
        Some("leases"),
        Some(Verb::List),
        Fault::TooManyRequests {
            retry_after_seconds: 1,
        },
        1,
    ));
    let status = api_status(leases.list(&ListParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    // A client with kube-rs's default retries waits out the Retry-After and succeeds.
    faults.arm(FaultRule::new(
        Some("leases"),
        Some(Verb::List),
        Fault::TooManyRequests {
            retry_after_seconds: 1,
        },
        1,
    ));
    let retrying: Api<Lease> = Api::namespaced(standin.client().await.unwrap(), "default");
    let started = std::time::Instant::now();
    retrying.list(&ListParams::default()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried after the server's Retry-After"
    );

    faults.arm(FaultRule::new(
        Some("leases"),
        Some(Verb::Patch),
        Fault::Conflict,
        1,
    ));
    let patch = Patch::Merge(json!({"spec": {"holderIdentity": "b"}}));
    assert_eq!(
        api_status(leases.patch("a", &PatchParams::default(), &patch).await).code,
        409
    );
    leases
        .patch("a", &PatchParams::default(), &patch)
        .await
        .unwrap();

    faults.arm(FaultRule::new(
        Some("leases"),
        None,
        Fault::Delay(Duration::from_millis(400)),
        1,
    ));
    let started = std::time::Instant::now();
    leases.get("a").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));

    faults.arm(FaultRule::new(
        Some("leases"),
        Some(Verb::List),
        Fault::Gone,
        1,
    ));
    assert_eq!(
        api_status(leases.list(&ListParams::default()).await).code,
        410
    );

    faults.arm(FaultRule::new(
        Some("leases"),
        Some(Verb::Watch),
        Fault::DropWatch,
        1,
    ));
    let mut dropped = leases
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        dropped.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));
    assert!(
        dropped.try_next().await.unwrap().is_none(),
        "the stream ends after the initial events"
    );

    // A wrong token is 401 Unauthorized.
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(standin.kubeconfig_path()).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info.token = Some("wrong".to_string().into());
    let intruder: Api<Lease> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    assert_eq!(api_status(intruder.get("a").await).code, 401);

    // Discovery finds the CRDs.
    let discovery = kube::discovery::Discovery::new(client)
        .filter(&["gpufair.io"])
        .run()
        .await
        .unwrap();
    let group = discovery.groups().next().expect("gpufair.io is served");
    let kinds: Vec<String> = group
        .recommended_resources()
        .into_iter()
        .map(|(r, _)| r.kind)
        .collect();
    assert!(
        kinds.contains(&"Queue".to_string()) && kinds.contains(&"GpuNodeReport".to_string()),
        "{kinds:?}"
    );
}
