//! The controller's requests against kube's mock service: the exact release patch, evictions and
//! a 429, a status write that meets a conflict, and writes stopping when leadership is lost.
//! Every request any test receives is checked against `kube_api::CALLS` (the grants the
//! deployed manifests are compared with), and one test makes each request of the API once and
//! finds every declared call made.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use gpufair_api::QueueStatus;
use gpufair_api::access::Scope;
use gpufair_controller::apply::{Applier, ApplyError, EvictionOutcome, RateLimiter};
use gpufair_controller::facts::{FactsCache, PodState};
use gpufair_controller::kube_api::{
    CALLS, ControllerApi, Event, EventType, KubeControllerApi, KubeLeaseApi, LeaseApi,
};
use gpufair_controller::leader::{Leadership, LeaseConfig, run_elector};
use gpufair_controller::plan::{PodRelease, WorkloadRelease};
use gpufair_controller::release::{PodOutcome, ReleasePipeline};
use gpufair_controller::snapshot::{AffinityShape, PendingPod, PodRef};
use gpufair_controller::token_bucket::ReleaseLimit;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tower_test::mock::{self, Handle, SendResponse};

/// The test's side of the mock API server. Every request is checked against `CALLS` as it
/// arrives: a request the controller makes without a declared grant fails the test that made
/// it.
struct MockHandle(Handle<Request<Body>, Response<Body>>);

impl MockHandle {
    async fn next_request(&mut self) -> Option<(Request<Body>, SendResponse<Response<Body>>)> {
        let (request, send) = self.0.next_request().await?;
        let call = call_of(request.method(), request.uri());
        assert!(
            call.as_ref().is_some_and(declared),
            "{} {} ({call:?}) is not in kube_api::CALLS",
            request.method(),
            request.uri()
        );
        Some((request, send))
    }
}

fn mock_client() -> (Client, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), MockHandle(handle))
}

/// A request as RBAC sees it: the namespace it is in (if any), its group, resource (with its
/// subresource, as `pods/eviction`) and verb.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    namespace: Option<String>,
    group: String,
    resource: String,
    verb: String,
}

/// Reads a request's method and path the way the API server's authorizer does.
fn call_of(method: &http::Method, uri: &http::Uri) -> Option<Call> {
    let parts: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
            (Some(namespace.to_string()), rest)
        }
        rest => (None, rest),
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, subresource] => (format!("{resource}/{subresource}"), true),
        _ => return None,
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
    let verb = match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        _ => return None,
    };
    Some(Call {
        namespace,
        group: group.to_string(),
        resource,
        verb: verb.to_string(),
    })
}

/// Whether some declared call grants `call`: a cluster-wide one anywhere, an install-namespace
/// one in `gpufair-system` only.
fn declared(call: &Call) -> bool {
    CALLS.iter().any(|c| covers(c, call))
}

fn covers(declared: &gpufair_api::access::ApiCall, call: &Call) -> bool {
    let in_scope = match declared.scope {
        Scope::Cluster => true,
        Scope::InstallNamespace => call.namespace.as_deref() == Some("gpufair-system"),
    };
    in_scope
        && declared.group == call.group
        && declared.resource == call.resource
        && declared.verb == call.verb
        && declared.names.is_empty()
}

#[test]
fn requests_are_read_as_rbac_reads_them() {
    let call = |method: &str, uri: &str| {
        call_of(&method.parse().unwrap(), &uri.parse().unwrap()).map(|c| {
            format!(
                "{} {}/{} {}",
                c.namespace.unwrap_or_default(),
                c.group,
                c.resource,
                c.verb
            )
        })
    };
    assert_eq!(
        call("POST", "/api/v1/namespaces/ml/pods/a/eviction?dryRun=All").as_deref(),
        Some("ml /pods/eviction create")
    );
    assert_eq!(
        call(
            "GET",
            "/api/v1/pods?&labelSelector=x&watch=true&resourceVersion=1"
        )
        .as_deref(),
        Some(" /pods watch")
    );
    assert_eq!(
        call("GET", "/apis/gpufair.io/v1alpha1/queues/q/status").as_deref(),
        Some(" gpufair.io/queues/status get")
    );
    assert_eq!(
        call(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/gpufair-system/leases/l"
        )
        .as_deref(),
        Some("gpufair-system coordination.k8s.io/leases update")
    );
    assert_eq!(call("PUT", "/api/v1/pods"), None);
    let lease_in = |namespace: &str| Call {
        namespace: Some(namespace.into()),
        group: "coordination.k8s.io".into(),
        resource: "leases".into(),
        verb: "get".into(),
    };
    assert!(declared(&lease_in("gpufair-system")));
    assert!(!declared(&lease_in("ml")), "leases only where installed");
}

fn applier(client: &Client, leadership: &Leadership) -> Applier {
    Applier::new(
        KubeControllerApi::new(client.clone(), None),
        leadership.clone(),
    )
}

fn leading() -> Leadership {
    let leadership = Leadership::new();
    leadership.extend(tokio::time::Instant::now() + Duration::from_secs(60));
    leadership
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn failure(code: u16, reason: &str) -> Response<Body> {
    json_response(
        StatusCode::from_u16(code).unwrap(),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": reason, "reason": reason, "code": code}),
    )
}

fn pod_json(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}")}})
}

fn pod_ref(name: &str) -> PodRef {
    PodRef {
        namespace: "ml".into(),
        name: name.into(),
        uid: format!("uid-{name}").into(),
    }
}

/// A running, ready gang member as the pod list returns it.
fn gang_member(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}"),
                        "labels": {"gpufair.io/managed": "true", "gpufair.io/pod-group": "gang"}},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A budget over the gang allowing `allowed` disruptions.
fn gang_budget(allowed: i32) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"namespace": "ml", "name": "gang"},
           "spec": {"maxUnavailable": allowed, "selector": {"matchLabels": {"gpufair.io/pod-group": "gang"}}},
           "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2 - allowed,
                      "expectedPods": 2}})
}

/// Answers the budget check a workload of several pods gets before any eviction: the
/// namespace's managed pods, then its budgets. Returns the two URIs.
async fn answer_budget_check(handle: &mut MockHandle, budgets: Vec<Value>) -> Vec<String> {
    let (request, send) = handle.next_request().await.expect("the pod list");
    let pods_uri = request.uri().to_string();
    send.send_response(json_response(
        StatusCode::OK,
        &json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
                "items": [gang_member("gang-0"), gang_member("gang-1")]}),
    ));
    let (request, send) = handle.next_request().await.expect("the budget list");
    let budgets_uri = request.uri().to_string();
    send.send_response(json_response(
        StatusCode::OK,
        &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList",
                "metadata": {"resourceVersion": "9"}, "items": budgets}),
    ));
    vec![pods_uri, budgets_uri]
}

async fn body_json(request: Request<Body>) -> (String, String, Option<String>, Value) {
    let method = request.method().to_string();
    let uri = request.uri().to_string();
    let content_type = request
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (method, uri, content_type, body)
}

/// A gated pod `name` at resourceVersion 41, with gpufair's gate at `gate_index` and one
/// required node-affinity term without `matchFields`, as the pod store parses it.
fn pending_pod(name: &str, gate_index: usize) -> PendingPod {
    let mut gates: Vec<Value> = (0..gate_index)
        .map(|i| json!({"name": format!("example.com/other-{i}")}))
        .collect();
    gates.push(json!({"name": "gpufair.io/admission"}));
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}"),
                     "resourceVersion": "41", "labels": {"gpufair.io/managed": "true"}},
        "spec": {
            "containers": [{"name": "main"}],
            "schedulingGates": gates,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
        }
    }))
    .unwrap();
    let facts = FactsCache::default().facts(&pod, "gpufair.io/admission");
    assert_eq!(facts.state, PodState::Gated(gate_index));
    assert_eq!(facts.affinity, AffinityShape::Terms(vec![false]));
    PendingPod::new(facts, gate_index)
}

fn release_of(gate_index: usize) -> PodRelease {
    named_release_of("train-0", gate_index)
}

fn named_release_of(name: &str, gate_index: usize) -> PodRelease {
    let pending = pending_pod(name, gate_index);
    assert_eq!(pending.pod(), &pod_ref(name));
    let release = PodRelease::new(pending, "gpu-7", "gpufair.io/admission".into());
    assert_eq!(release.resource_version(), "41");
    release
}

#[tokio::test]
async fn release_sends_one_json_patch_that_removes_only_our_gate() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("a request");
        send.send_response(json_response(StatusCode::OK, &pod_json("train-0")));
        body_json(request).await
    });
    let applier = applier(&client, &leading());
    applier.release(&release_of(1)).await.expect("released");
    let (method, uri, content_type, body) = server.await.unwrap();
    assert_eq!(method, "PATCH");
    assert_eq!(uri, "/api/v1/namespaces/ml/pods/train-0?");
    assert_eq!(content_type.as_deref(), Some("application/json-patch+json"));
    let required = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution";
    assert_eq!(
        body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
            {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "gpufair.io/admission"},
            {"op": "add", "path": format!("{required}/nodeSelectorTerms/0/matchFields"),
             "value": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]},
            {"op": "remove", "path": "/spec/schedulingGates/1"}
        ])
    );
}

#[tokio::test]
async fn a_failed_test_op_is_reported_as_changed_not_retried() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (_, send) = handle.next_request().await.expect("a request");
        send.send_response(failure(422, "Invalid"));
        // No second attempt may follow.
        tokio::time::timeout(Duration::from_millis(200), handle.next_request())
            .await
            .is_err()
    });
    let err = applier(&client, &leading())
        .release(&release_of(0))
        .await
        .unwrap_err();
    assert!(matches!(err, ApplyError::Changed { .. }), "{err:?}");
    assert!(server.await.unwrap(), "the patch was retried blind");
}

fn named_release(name: &str) -> PodRelease {
    named_release_of(name, 0)
}

#[tokio::test]
async fn the_pipeline_stops_a_workload_at_its_first_failure_and_reports_every_pod() {
    let (client, mut handle) = mock_client();
    // Pod `a` changed under us (422); every other patch, and every Event, goes through.
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            if request.method() == "PATCH" && path.ends_with("/pods/a") {
                send.send_response(failure(422, "Invalid"));
            } else if request.method() == "PATCH" {
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                send.send_response(json_response(StatusCode::OK, &pod_json(&name)));
            } else {
                let (_, _, _, body) = body_json(request).await;
                send.send_response(json_response(StatusCode::CREATED, &body));
            }
        }
    });
    let limit = ReleaseLimit::new(50.0, 100).unwrap();
    let mut pipeline = ReleasePipeline::start(
        applier(&client, &leading()),
        RateLimiter::new(limit),
        || 5.0,
    );
    let workload = |name: &str, pods: &[&str]| WorkloadRelease {
        workload: name.into(),
        queue: "team-a".into(),
        reason: "fair share".into(),
        pods: pods.iter().map(|p| named_release(p)).collect(),
    };
    pipeline.submit(workload("gang", &["a", "b"]), 1.0);
    pipeline.submit(workload("solo", &["c"]), 2.0);
    let mut outcomes = Vec::new();
    while outcomes.len() < 3 {
        let outcome = tokio::time::timeout(Duration::from_secs(5), pipeline.next_outcome())
            .await
            .expect("every submitted pod is reported")
            .expect("the pump runs while the pipeline lives");
        outcomes.push(outcome);
    }
    outcomes.sort_by(|x, y| x.pod.pod().name.cmp(&y.pod.pod().name));
    let seen: Vec<_> = outcomes
        .iter()
        .map(|o| {
            (
                o.pod.pod().name.to_string(),
                format!("{:?}", o.outcome),
                o.decided_at,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("a".to_string(), "Changed".to_string(), 1.0),
            ("b".to_string(), "Skipped".to_string(), 1.0),
            ("c".to_string(), "Released { at: 5.0 }".to_string(), 2.0),
        ]
    );
    assert!(matches!(outcomes[2].outcome, PodOutcome::Released { .. }));
    assert!(pipeline.finished().is_empty(), "nothing reported twice");
}

#[tokio::test]
async fn eviction_dry_runs_every_pod_then_evicts_them() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let reads = answer_budget_check(&mut handle, vec![gang_budget(2)]).await;
        assert_eq!(
            reads,
            [
                "/api/v1/namespaces/ml/pods?&labelSelector=gpufair.io%2Fmanaged%3Dtrue",
                "/apis/policy/v1/namespaces/ml/poddisruptionbudgets?",
            ]
        );
        let mut seen = Vec::new();
        for _ in 0..4 {
            let (request, send) = handle.next_request().await.expect("a request");
            send.send_response(json_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
            ));
            seen.push(body_json(request).await);
        }
        seen
    });
    let pods = [pod_ref("gang-0"), pod_ref("gang-1")];
    let outcome = applier(&client, &leading())
        .evict("ml/gang", &pods)
        .await
        .unwrap();
    assert_eq!(outcome, EvictionOutcome::Evicted);
    let seen = server.await.unwrap();
    let uris: Vec<&str> = seen.iter().map(|(_, uri, _, _)| uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "/api/v1/namespaces/ml/pods/gang-0/eviction?&dryRun=All",
            "/api/v1/namespaces/ml/pods/gang-1/eviction?&dryRun=All",
            "/api/v1/namespaces/ml/pods/gang-0/eviction?",
            "/api/v1/namespaces/ml/pods/gang-1/eviction?",
        ]
    );
    for (method, _, _, body) in &seen {
        assert_eq!(method, "POST");
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["apiVersion"], "policy/v1");
    }
    assert_eq!(seen[0].3["metadata"]["name"], "gang-0");
    assert_eq!(
        seen[0].3["deleteOptions"]["preconditions"]["uid"], "uid-gang-0",
        "a recreated pod of the same name is never evicted"
    );
}

#[tokio::test]
async fn a_429_on_the_dry_run_evicts_nothing() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        answer_budget_check(&mut handle, vec![]).await;
        let (_, send) = handle.next_request().await.expect("first dry run");
        send.send_response(json_response(
            StatusCode::CREATED,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        ));
        let (request, send) = handle.next_request().await.expect("second dry run");
        send.send_response(failure(429, "TooManyRequests"));
        let uri = request.uri().to_string();
        let more = tokio::time::timeout(Duration::from_millis(200), handle.next_request())
            .await
            .is_ok();
        (uri, more)
    });
    let err = applier(&client, &leading())
        .evict("ml/gang", &[pod_ref("gang-0"), pod_ref("gang-1")])
        .await
        .unwrap_err();
    assert!(matches!(err, ApplyError::Blocked { .. }), "{err:?}");
    let (uri, more) = server.await.unwrap();
    assert_eq!(
        uri,
        "/api/v1/namespaces/ml/pods/gang-1/eviction?&dryRun=All"
    );
    assert!(!more, "nothing may be evicted after a refusal");
}

#[tokio::test]
async fn a_budget_short_of_the_whole_gang_evicts_nothing() {
    // Each pod's dry run would pass a budget allowing one disruption; the gang needs two.
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        answer_budget_check(&mut handle, vec![gang_budget(1)]).await;
        tokio::time::timeout(Duration::from_millis(200), handle.next_request())
            .await
            .is_ok()
    });
    let err = applier(&client, &leading())
        .evict("ml/gang", &[pod_ref("gang-0"), pod_ref("gang-1")])
        .await
        .unwrap_err();
    let ApplyError::Blocked { why, .. } = &err else {
        panic!("blocked, not {err:?}");
    };
    assert!(why.contains("ml/gang allows 1"), "{why}");
    assert!(!server.await.unwrap(), "no eviction, not even a dry run");
}

#[tokio::test]
async fn a_conflict_on_release_is_a_plain_failure_not_a_change() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (_, send) = handle.next_request().await.expect("a request");
        send.send_response(failure(409, "Conflict"));
    });
    let err = applier(&client, &leading())
        .release(&release_of(0))
        .await
        .unwrap_err();
    // `Changed` would park the pod until its cached copy changes, which a server-side conflict
    // never causes: the pod would wait forever.
    assert!(matches!(err, ApplyError::Kube(_)), "{err:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn status_write_meets_a_conflict_rereads_and_retries() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        let (request, send) = handle.next_request().await.expect("first patch");
        send.send_response(failure(409, "Conflict"));
        seen.push(body_json(request).await);
        let (request, send) = handle.next_request().await.expect("re-read");
        send.send_response(json_response(
            StatusCode::OK,
            &json!({"apiVersion": "gpufair.io/v1alpha1", "kind": "Queue",
                    "metadata": {"name": "llm", "resourceVersion": "8"}, "spec": {}}),
        ));
        seen.push(body_json(request).await);
        let (request, send) = handle.next_request().await.expect("second patch");
        send.send_response(json_response(
            StatusCode::OK,
            &json!({"apiVersion": "gpufair.io/v1alpha1", "kind": "Queue",
                    "metadata": {"name": "llm", "resourceVersion": "9"}, "spec": {}}),
        ));
        seen.push(body_json(request).await);
        seen
    });
    let status = QueueStatus {
        usage_share: Some(0.25),
        ..QueueStatus::default()
    };
    applier(&client, &leading())
        .write_status("llm", Some("7".into()), &status)
        .await
        .unwrap();
    let seen = server.await.unwrap();
    assert_eq!(seen[0].0, "PATCH");
    assert_eq!(seen[0].1, "/apis/gpufair.io/v1alpha1/queues/llm/status?");
    assert_eq!(seen[0].2.as_deref(), Some("application/merge-patch+json"));
    assert_eq!(seen[0].3["metadata"]["resourceVersion"], "7");
    assert_eq!(seen[0].3["status"]["usageShare"], 0.25);
    assert_eq!(seen[1].0, "GET");
    assert_eq!(seen[1].1, "/apis/gpufair.io/v1alpha1/queues/llm/status");
    assert_eq!(seen[2].3["metadata"]["resourceVersion"], "8");
}

/// A lease API stand-in: creates on POST, serves GETs from what it stored, and fails every
/// renewal once `fail_renewals` is set. Records pod writes it sees.
#[derive(Default)]
struct LeaseServer {
    lease: Option<Value>,
    fail_renewals: bool,
    pod_writes: usize,
    released_by: Option<Value>,
}

fn serve_leases(
    mut handle: MockHandle,
    state: Arc<Mutex<LeaseServer>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (method, uri, _, body) = body_json(request).await;
            let mut s = state.lock().unwrap();
            let response = if uri.contains("/pods/") {
                s.pod_writes += 1;
                json_response(StatusCode::OK, &pod_json("train-0"))
            } else if s.fail_renewals {
                failure(500, "InternalError")
            } else {
                match method.as_str() {
                    "GET" => match &s.lease {
                        Some(lease) => json_response(StatusCode::OK, lease),
                        None => failure(404, "NotFound"),
                    },
                    "POST" | "PUT" => {
                        let mut lease = body.clone();
                        lease["metadata"]["resourceVersion"] = json!("1");
                        if method == "PUT" && lease["spec"]["holderIdentity"].is_null() {
                            s.released_by = Some(lease.clone());
                        }
                        s.lease = Some(lease.clone());
                        json_response(StatusCode::OK, &lease)
                    }
                    _ => failure(405, "MethodNotAllowed"),
                }
            };
            send.send_response(response);
        }
    })
}

fn quick_lease() -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(400),
        retry_period: Duration::from_millis(100),
        ..LeaseConfig::new(
            "gpufair-controller".into(),
            "gpufair-system".into(),
            "replica-a".into(),
        )
    }
}

async fn wait_for(mut condition: impl FnMut() -> bool) {
    for _ in 0..100 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition not met in 2 s");
}

#[tokio::test]
async fn losing_the_lease_stops_writes_before_it_expires() {
    let (client, handle) = mock_client();
    let state = Arc::new(Mutex::new(LeaseServer::default()));
    let server = serve_leases(handle, state.clone());
    let leadership = Leadership::new();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let elector = tokio::spawn(run_elector(
        client.clone(),
        quick_lease(),
        leadership.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    wait_for(|| leadership.is_leader()).await;
    let applier = applier(&client, &leadership);
    applier
        .release(&release_of(0))
        .await
        .expect("the leader writes");
    assert_eq!(state.lock().unwrap().pod_writes, 1);

    // The API server stops answering renewals: within the renew deadline writes stop, well
    // before the lease (1 s) could expire for anyone else.
    state.lock().unwrap().fail_renewals = true;
    let lost_at = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(2), leadership.lost())
        .await
        .expect("leadership lost");
    assert!(lost_at.elapsed() < Duration::from_secs(1));
    let err = applier.release(&release_of(0)).await.unwrap_err();
    assert!(matches!(err, ApplyError::NotLeader(_)), "{err:?}");
    assert_eq!(
        state.lock().unwrap().pod_writes,
        1,
        "no write after the loss"
    );
    let _ = stop_tx.send(());
    elector.await.unwrap();
    server.abort();
}

#[tokio::test]
async fn stopping_gives_the_lease_up() {
    let (client, handle) = mock_client();
    let state = Arc::new(Mutex::new(LeaseServer::default()));
    let server = serve_leases(handle, state.clone());
    let leadership = Leadership::new();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let elector = tokio::spawn(run_elector(
        client.clone(),
        quick_lease(),
        leadership.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    wait_for(|| leadership.is_leader()).await;
    let created = state.lock().unwrap().lease.clone().unwrap();
    assert_eq!(created["spec"]["holderIdentity"], "replica-a");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 1);
    let _ = stop_tx.send(());
    elector.await.unwrap();
    assert!(!leadership.is_leader());
    let released = state
        .lock()
        .unwrap()
        .released_by
        .clone()
        .expect("lease released");
    assert!(released["spec"]["holderIdentity"].is_null());
    server.abort();
}

#[tokio::test]
async fn a_lease_held_by_another_replica_is_taken_only_after_it_expires() {
    let (client, handle) = mock_client();
    let state = Arc::new(Mutex::new(LeaseServer {
        lease: Some(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "gpufair-controller", "namespace": "gpufair-system", "resourceVersion": "5"},
            "spec": {"holderIdentity": "replica-b", "leaseDurationSeconds": 1,
                     "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 3}
        })),
        ..LeaseServer::default()
    }));
    let server = serve_leases(handle, state.clone());
    let leadership = Leadership::new();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let started = tokio::time::Instant::now();
    let elector = tokio::spawn(run_elector(
        client,
        quick_lease(),
        leadership.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    wait_for(|| leadership.is_leader()).await;
    // The other holder's 1 s lease is judged from when this replica first saw it.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let lease = state.lock().unwrap().lease.clone().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a");
    assert_eq!(lease["spec"]["leaseTransitions"], 4);
    let _ = stop_tx.send(());
    elector.await.unwrap();
    server.abort();
}

/// A family folded into since its last write is server-side applied, object then status, and
/// is not written again until it changes.
#[tokio::test]
async fn family_history_is_applied_then_its_status() {
    use gpufair_controller::families::FamilyTracker;
    use gpufair_controller::family_status::write;

    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "train-1-x", "namespace": "ml", "uid": "u1",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "train-1", "uid": "j", "controller": true}]}
    }))
    .unwrap();
    let report: gpufair_api::GpuNodeReport = serde_json::from_value(json!({
        "apiVersion": "gpufair.io/v1alpha1", "kind": "GpuNodeReport", "metadata": {"name": "n"},
        "spec": {"nodeName": "n", "timestamp": "2026-01-01T00:00:00Z", "intervalSeconds": 10.0,
                 "deviceCount": 1, "podCount": 1,
                 "pods": [{"namespace": "ml", "name": "train-1-x", "uid": "u1",
                           "deviceIds": ["GPU-1"], "devices": ["GPU-1"], "smUtilization": 0.5,
                           "memoryBytes": 4_294_967_296u64, "perProcess": true}]}
    }))
    .unwrap();
    let mut tracker = FamilyTracker::default();
    let pods = [Arc::new(pod)];
    tracker.observe(&[Arc::new(report)], &pods, 0.3, 1_767_225_600.0);
    tracker.observe(&[], &pods, 0.3, 1_767_225_610.0);

    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (request, send) = handle.next_request().await.expect("apply");
            let seen_request = body_json(request).await;
            // The API server answers with the whole object.
            let mut object = seen_request.3.clone();
            object["spec"] = json!({"ownerKind": "Job", "namePrefix": "train"});
            send.send_response(json_response(StatusCode::OK, &object));
            seen.push(seen_request);
        }
        seen
    });
    let written = write(&applier(&client, &leading()), tracker.changed())
        .await
        .unwrap();
    for key in &written {
        tracker.written(key);
    }
    let seen = server.await.unwrap();
    let base = "/apis/gpufair.io/v1alpha1/namespaces/ml/workloadfamilies/job.train";
    assert_eq!(seen[0].0, "PATCH");
    assert_eq!(
        seen[0].1,
        format!("{base}?&force=true&fieldManager=gpufair-controller")
    );
    assert_eq!(seen[0].2.as_deref(), Some("application/apply-patch+yaml"));
    assert_eq!(
        seen[0].3["spec"],
        json!({"ownerKind": "Job", "namePrefix": "train"})
    );
    assert_eq!(
        seen[1].1,
        format!("{base}/status?&force=true&fieldManager=gpufair-controller")
    );
    assert_eq!(seen[1].3["status"]["smoothedPeakBytes"], 4_294_967_296u64);
    assert_eq!(seen[1].3["status"]["samples"], 1);
    assert_eq!(seen[1].3["status"]["smoothedPeakMiB"], 4096);
    assert!(
        tracker.changed().is_empty(),
        "written families are not written again"
    );
}

/// Answers every request as a bare API server would, well enough for each method to make the
/// requests it makes: an empty list to a list, the end of the stream to a watch, the body back
/// to a create, an update or a server-side apply (and the last Event created to an Event's
/// patch), 404 to the rest. Each request, as RBAC reads it, goes into `seen`; a server-side
/// apply of an object (not a subresource) that does not exist is authorized as a create too.
fn serve_anything(
    mut handle: MockHandle,
    seen: Arc<Mutex<Vec<Call>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_event = Value::Null;
        while let Some((request, send)) = handle.next_request().await {
            let call = call_of(request.method(), request.uri()).expect("checked by the handle");
            let (_, _, content_type, body) = body_json(request).await;
            let apply = content_type.as_deref() == Some("application/apply-patch+yaml");
            if apply && !call.resource.contains('/') {
                seen.lock().unwrap().push(Call {
                    verb: "create".into(),
                    ..call.clone()
                });
            }
            let response = match call.verb.as_str() {
                "list" => json_response(
                    StatusCode::OK,
                    &json!({"apiVersion": "v1", "kind": "List",
                            "metadata": {"resourceVersion": "1"}, "items": []}),
                ),
                "watch" => Response::builder()
                    .status(StatusCode::OK)
                    .body(Body::empty())
                    .unwrap(),
                "create" | "update" => {
                    let mut object = body;
                    object["metadata"]["resourceVersion"] = json!("1");
                    if call.resource == "events" {
                        last_event = object.clone();
                    }
                    json_response(StatusCode::OK, &object)
                }
                "patch" if call.resource == "events" => json_response(StatusCode::OK, &last_event),
                "patch" if apply => json_response(StatusCode::OK, &body),
                _ => failure(404, "NotFound"),
            };
            seen.lock().unwrap().push(call);
            send.send_response(response);
        }
    })
}

/// Drives a watch until it has listed `resource` and started watching it, then drops it.
async fn list_then_watch<T, E>(
    stream: impl futures::Stream<Item = Result<T, E>>,
    resource: &str,
    seen: &Mutex<Vec<Call>>,
) {
    futures::pin_mut!(stream);
    let watching = |verb: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .any(|c| c.resource == resource && c.verb == verb)
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while !(watching("list") && watching("watch")) {
            tokio::select! {
                _ = stream.next() => {}
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the {resource} watch neither listed nor watched"));
}

/// Each method of the controller's API once (an Event twice: the second patches its series)
/// against a server that answers anything: every request is declared (the handle checks), and
/// every declared call is made by some method.
#[tokio::test]
async fn every_request_is_declared_and_every_declared_call_is_made() {
    let (client, handle) = mock_client();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = serve_anything(handle, seen.clone());
    let api = KubeControllerApi::new(client.clone(), Some("replica-a".into()));
    list_then_watch(api.watch_managed_pods(), "pods", &seen).await;
    list_then_watch(api.watch_nodes(), "nodes", &seen).await;
    list_then_watch(api.watch_gpu_node_reports(), "gpunodereports", &seen).await;
    let patch: json_patch::Patch = serde_json::from_value(json!([])).unwrap();
    assert!(api.patch_pod("ml", "train-0", patch).await.is_err());
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": "train-0", "namespace": "ml"}});
    api.evict_pod("ml", "train-0", &eviction, true)
        .await
        .expect("the eviction is accepted");
    assert!(api.managed_pods("ml").await.expect("a list").is_empty());
    assert!(
        api.disruption_budgets("ml")
            .await
            .expect("a list")
            .is_empty()
    );
    assert!(
        api.delete_pod("ml", "train-0", "uid-train-0")
            .await
            .is_err()
    );
    let status = json!({"status": {}});
    assert!(api.patch_queue_status("team", &status).await.is_err());
    assert!(api.queue_status("team").await.is_err());
    let event = Event {
        type_: EventType::Normal,
        reason: "Waiting".into(),
        note: Some("held".into()),
        action: "Hold".into(),
        secondary: None,
    };
    let regarding = gpufair_controller::apply::object_reference(&pod_ref("train-0"));
    api.publish_event(&event, &regarding)
        .await
        .expect("the Event is created");
    api.publish_event(&event, &regarding)
        .await
        .expect("its series is patched");
    assert!(api.workload_families().await.expect("a list").is_empty());
    let family = json!({"apiVersion": "gpufair.io/v1alpha1", "kind": "WorkloadFamily",
                        "metadata": {"name": "job.train", "namespace": "ml"},
                        "spec": {"ownerKind": "Job", "namePrefix": "train"}});
    api.apply_workload_family("ml", "job.train", &family)
        .await
        .expect("applied");
    api.apply_workload_family_status("ml", "job.train", &family)
        .await
        .expect("applied");
    let leases = KubeLeaseApi::new(client.clone(), "gpufair-system");
    let lease: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(json!({
        "metadata": {"name": "gpufair-controller", "namespace": "gpufair-system"},
        "spec": {"holderIdentity": "replica-a"}
    }))
    .unwrap();
    assert!(leases.lease("gpufair-controller").await.unwrap().is_none());
    leases.create_lease(&lease).await.expect("created");
    leases
        .replace_lease("gpufair-controller", &lease)
        .await
        .expect("replaced");
    drop((api, leases, client));
    server.await.expect("every request was declared");

    let seen = seen.lock().unwrap();
    let unused: Vec<String> = CALLS
        .iter()
        .filter(|declared| !seen.iter().any(|call| covers(declared, call)))
        .map(|c| format!("{:?} {}/{} {}", c.scope, c.group, c.resource, c.verb))
        .collect();
    assert!(unused.is_empty(), "declared but never made: {unused:#?}");
}
