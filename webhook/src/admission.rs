//! One AdmissionReview in, one out.
//!
//! Errors in the review itself (not JSON, not an AdmissionReview v1, no request) are the
//! caller's bug and get HTTP 400. Everything about the pod is answered inside an
//! AdmissionReview: allowed, allowed with a patch and warnings, or denied with a reason.

use std::borrow::Cow;

use gpufair_core::mutation::{
    AdmissionPolicy, Decision, Plan, PodFacts, QueueFacts, QueueLookup, plan,
};
use gpufair_core::rightsize::right_size;
use serde_json::value::RawValue;

use crate::envelope::{RequestIn, ReviewIn};

use crate::facts::pod_facts;
use crate::families::FamilyIndex;
use crate::metrics::Outcome;
use crate::patch::build_patch;
use crate::pod::{Pod, PodShape, Text};
use crate::response::ReviewResponse;
use crate::state::AppState;

pub use crate::envelope::API_VERSION;
use crate::envelope::KIND;

/// A review that cannot be answered with an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    /// JSON is UTF-8 (RFC 8259). The JSON parser checks only the strings it decodes, so a
    /// broken byte inside a field the webhook skips would otherwise pass unnoticed.
    #[error(
        "body is not a valid AdmissionReview: not UTF-8 (invalid byte at offset {valid_up_to})"
    )]
    NotUtf8 { valid_up_to: usize },
    #[error("body is not a valid AdmissionReview: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "expected apiVersion {API_VERSION} and kind AdmissionReview, got {api_version:?} {kind:?}"
    )]
    Version { api_version: String, kind: String },
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// The response review, serialized, and how it ended.
pub struct Answer {
    pub body: Vec<u8>,
    pub outcome: Outcome,
}

/// Answers one review at time `now_unix_s`.
///
/// The common case, a well-formed review whose object reads as a Pod, is read in one pass:
/// envelope and pod fields together, strings borrowed from the body. Anything that does not read
/// that way (a malformed review, an unreadable pod, an object that is not a Pod at all) is read
/// again by [`review_in_two_passes`], so its error or denial is exactly the one that reading
/// gives: an unreadable pod's message, for one, gives line and column within the object.
/// Whatever reads in one pass reads the same in two (same bytes, same types, and no deeper
/// nesting), so both ways answer alike.
pub fn review(body: &[u8], state: &AppState, now_unix_s: i64) -> Result<Answer, BadReview> {
    match read_in_one_pass(body) {
        Some(envelope) => answer(envelope, Ok, state, now_unix_s),
        None => review_in_two_passes(body, state, now_unix_s),
    }
}

/// The review and its object as a pod, or `None` if the body does not read that way.
///
/// The body is checked as UTF-8 once, whole, and then read as text: read as bytes, serde_json
/// checks each string on its own, skipped ones included, which cost a fifth of the reading.
/// Valid UTF-8 reads the same either way (the positions in errors count bytes in both), and a
/// body that is not is left to [`review_in_two_passes`], which refuses it.
pub fn read_in_one_pass(body: &[u8]) -> Option<ReviewIn<'_, Pod<'_>>> {
    let text = std::str::from_utf8(body).ok()?;
    serde_json::from_str(text).ok()
}

/// Answers one review reading the envelope first, with the object kept as raw JSON, and the
/// object as a Pod only when the review is a Pod CREATE. Everything else is allowed unchanged.
/// A body that is not UTF-8 is refused before any of it is read.
pub fn review_in_two_passes(
    body: &[u8],
    state: &AppState,
    now_unix_s: i64,
) -> Result<Answer, BadReview> {
    let body = std::str::from_utf8(body).map_err(|err| BadReview::NotUtf8 {
        valid_up_to: err.valid_up_to(),
    })?;
    let envelope: ReviewIn<'_, &RawValue> = serde_json::from_str(body)?;
    answer(
        envelope,
        |raw| serde_json::from_str::<Pod<'_>>(raw.get()),
        state,
        now_unix_s,
    )
}

/// Answers a decoded review; `read_pod` turns its object into the pod when the review is a Pod
/// CREATE.
fn answer<'a, O>(
    envelope: ReviewIn<'a, O>,
    read_pod: impl FnOnce(O) -> Result<Pod<'a>, serde_json::Error>,
    state: &AppState,
    now_unix_s: i64,
) -> Result<Answer, BadReview> {
    if envelope.api_version != API_VERSION || envelope.kind != KIND {
        return Err(BadReview::Version {
            api_version: envelope.api_version.into_owned(),
            kind: envelope.kind.into_owned(),
        });
    }
    let request = envelope.request.ok_or(BadReview::NoRequest)?;
    let pod_create = request.is_pod_create();
    let RequestIn {
        uid,
        namespace,
        object,
        ..
    } = request;
    let response = ReviewResponse::allowed(&uid);
    let (response, outcome) = if !pod_create {
        (response, Outcome::Ignored)
    } else {
        match object.map(read_pod) {
            None => (
                response.deny("a Pod CREATE review must carry the pod in request.object"),
                Outcome::Denied,
            ),
            // Valid review, but the object is not a Pod we can read: answer with a denial
            // that says why, so the user sees it instead of a webhook call failure.
            Some(Err(pod_error)) => (
                response.deny(format!("request.object is not a readable Pod: {pod_error}")),
                Outcome::Denied,
            ),
            Some(Ok(pod)) => respond_pod(response, pod, namespace, state, now_unix_s),
        }
    };
    let body = response.encode()?;
    Ok(Answer { body, outcome })
}

fn respond_pod<'a>(
    response: ReviewResponse<'a>,
    mut pod: Pod<'_>,
    request_namespace: Option<Text<'_>>,
    state: &AppState,
    now_unix_s: i64,
) -> (ReviewResponse<'a>, Outcome) {
    let namespace = request_namespace
        .or_else(|| pod.metadata.as_mut().and_then(|m| m.namespace.take()))
        .unwrap_or(Text(Cow::Borrowed("default")));
    let namespace = namespace.as_str();
    let shape = PodShape::of(&pod);
    let name = pod
        .metadata
        .as_mut()
        .and_then(|m| m.name.take().or_else(|| m.generate_name.take()));
    let facts = pod_facts(pod, namespace);
    let policy = state.policy.load();
    let decision = state.queues.read(|queues| {
        let decision = plan(&facts, queues, &policy, now_unix_s);
        match decision {
            Decision::Admit(plan) => match queues.by_name(&plan.queue) {
                Some(queue) => state
                    .families
                    .read(|families| add_right_sizing(plan, &facts, queue, &policy, families)),
                None => Decision::Admit(plan),
            },
            other => other,
        }
    });
    match decision {
        Decision::Unmanaged => (response, Outcome::Unmanaged),
        Decision::Deny(reason) => {
            let pod = name.as_ref().map_or("", Text::as_str);
            tracing::info!(namespace, pod, %reason, "pod denied");
            (response.deny(reason), Outcome::Denied)
        }
        Decision::Admit(plan) => {
            let mut response = response;
            response.warnings = plan.warnings;
            if plan.mutations.is_empty() {
                return (response, Outcome::Unchanged);
            }
            response.patch = Some(build_patch(&shape, &plan.mutations).to_json());
            (response, Outcome::Patched)
        }
    }
}

/// Adds right-sizing to an admitted pod's plan: the resource change and the annotation, and
/// the same sentence as a warning, whether it rewrote or declined. A bad family or opt-in label
/// denies the pod.
fn add_right_sizing(
    mut plan: Plan,
    facts: &PodFacts,
    queue: &QueueFacts,
    policy: &AdmissionPolicy,
    families: &FamilyIndex,
) -> Decision {
    match right_size(facts, queue, policy, &policy.right_sizing, families) {
        Err(err) => Decision::Deny(err.to_string()),
        Ok(outcome) => {
            plan.mutations.extend(outcome.mutations(facts));
            plan.warnings.extend(outcome.message());
            Decision::Admit(plan)
        }
    }
}

#[cfg(test)]
mod one_pass_tests;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arc_swap::ArcSwap;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use gpufair_core::mutation::QueueFacts;
    use serde_json::{Value, json};

    use super::*;
    use crate::metrics::Metrics;
    use crate::queues::{QueueIndex, QueueStore};
    use crate::shutdown::Shutdown;

    fn state() -> AppState {
        let queues = QueueStore::default();
        queues.replace(QueueIndex::from_queues([QueueFacts {
            name: "research".into(),
            namespaces: vec!["ml".into()],
            ..QueueFacts::default()
        }]));
        AppState {
            policy: ArcSwap::from_pointee(
                gpufair_api::config::AdmissionConfig::default()
                    .to_policy()
                    .unwrap(),
            ),
            queues: Arc::new(queues),
            families: Arc::default(),
            metrics: Arc::new(Metrics::new()),
            shutdown: Shutdown::new(),
        }
    }

    fn review_of(kind: &str, operation: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ml",
                "operation": operation,
                "userInfo": {"username": "alice"},
                "object": object,
                "oldObject": null,
                "dryRun": false
            }
        }))
        .unwrap()
    }

    fn gpu_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}],
                "priority": 0, "preemptionPolicy": "PreemptLowerPriority"}
        })
    }

    fn response(answer: &Answer) -> Value {
        let review: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(review["apiVersion"], API_VERSION);
        assert_eq!(review["response"]["uid"], "u-1");
        review["response"].clone()
    }

    #[test]
    fn a_body_that_is_not_utf8_is_refused_even_in_a_skipped_field() {
        let mut body = review_of("Pod", "CREATE", gpu_pod());
        // Break one byte inside a `version` key: the parser would skip it unchecked.
        let at = body
            .windows(9)
            .position(|w| w == b"\"version\"")
            .expect("the review names a version")
            + 2;
        body[at] = 0xff;
        let Err(err) = review(&body, &state(), 0) else {
            panic!("a body that is not UTF-8 was answered");
        };
        assert_eq!(
            err.to_string(),
            format!("body is not a valid AdmissionReview: not UTF-8 (invalid byte at offset {at})")
        );
    }

    #[test]
    fn gpu_pod_create_is_patched() {
        let answer = review(&review_of("Pod", "CREATE", gpu_pod()), &state(), 0).unwrap();
        assert_eq!(answer.outcome, Outcome::Patched);
        let response = response(&answer);
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        // The patch travels as base64, as the API server reads a `[]byte`, and applies to the
        // pod that was sent.
        let patch = BASE64
            .decode(
                response["patch"]
                    .as_str()
                    .expect("patch is a base64 string"),
            )
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut pod = gpu_pod();
        json_patch::patch(&mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["labels"]["gpufair.io/queue"], "research");
        assert!(pod["spec"].get("priority").is_none());
        let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
        assert!(typed.spec.unwrap().scheduling_gates.is_some());
    }

    fn right_sizing_state() -> AppState {
        let config = gpufair_api::config::AdmissionConfig {
            right_sizing: serde_json::from_value(json!({
                "minSamples": 2,
                "pools": [{"slices": [
                    {"resource": "nvidia.com/mig-1g.10gb", "memoryMiB": 9856},
                    {"resource": "nvidia.com/mig-3g.40gb", "memoryMiB": 40192}
                ]}]
            }))
            .unwrap(),
            ..Default::default()
        };
        let state = AppState {
            policy: ArcSwap::from_pointee(config.to_policy().unwrap()),
            ..state()
        };
        let mut family = gpufair_api::WorkloadFamily::new("job.finetune", Default::default());
        family.metadata.namespace = Some("ml".into());
        family.status = Some(gpufair_api::WorkloadFamilyStatus {
            smoothed_peak_bytes: 12 << 30,
            samples: 4,
            ..Default::default()
        });
        state.families.write(|index| index.upsert(&family));
        state
    }

    fn opted_in_pod(labels: Value) -> Value {
        let mut pod = gpu_pod();
        pod["metadata"]["labels"] = labels;
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
            "name": "finetune-42", "uid": "j", "controller": true}]);
        pod
    }

    #[test]
    fn an_opted_in_pod_is_right_sized_and_told_so() {
        let state = right_sizing_state();
        let pod = opted_in_pod(json!({"gpufair.io/right-size": "true"}));
        let answer = review(&review_of("Pod", "CREATE", pod.clone()), &state, 0).unwrap();
        let response = response(&answer);
        let warnings = response["warnings"].as_array().unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().unwrap().contains("nvidia.com/mig-3g.40gb")),
            "{warnings:?}"
        );
        let patch = BASE64.decode(response["patch"].as_str().unwrap()).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched = pod;
        json_patch::patch(&mut patched, &patch).unwrap();
        let resources = &patched["spec"]["containers"][0]["resources"];
        assert_eq!(resources["limits"]["nvidia.com/mig-3g.40gb"], "1");
        assert_eq!(resources["requests"]["nvidia.com/mig-3g.40gb"], "1");
        assert!(resources["limits"].get("nvidia.com/gpu").is_none());
        assert!(
            patched["metadata"]["annotations"]["gpufair.io/right-size-result"]
                .as_str()
                .unwrap()
                .starts_with("right-sized:")
        );
        // Reinvoked on its own result, the webhook changes nothing more.
        let again = review(&review_of("Pod", "CREATE", patched), &state, 0).unwrap();
        assert_eq!(again.outcome, Outcome::Unchanged);
    }

    #[test]
    fn declines_are_explained_and_bad_labels_denied() {
        let state = right_sizing_state();
        let pod =
            opted_in_pod(json!({"gpufair.io/right-size": "true", "gpufair.io/family": "new"}));
        let answer = review(&review_of("Pod", "CREATE", pod), &state, 0).unwrap();
        let declined = response(&answer);
        assert!(
            declined["warnings"][0]
                .as_str()
                .unwrap()
                .contains("family new has 0 of the 2 pods of history"),
            "{declined}"
        );
        for labels in [
            json!({"gpufair.io/right-size": "yes"}),
            json!({"gpufair.io/family": "Upper"}),
        ] {
            let answer =
                review(&review_of("Pod", "CREATE", opted_in_pod(labels)), &state, 0).unwrap();
            assert_eq!(answer.outcome, Outcome::Denied);
            let message = response(&answer)["status"]["message"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(message.contains("expected"), "{message}");
        }
    }

    /// A workload controller creates pods under its own identity (the ReplicaSet or Job
    /// controller's ServiceAccount), and the pod may run as any ServiceAccount: neither changes
    /// what admission decides, which reads only the pod and its namespace.
    #[test]
    fn the_requesting_user_and_the_pods_service_account_change_nothing() {
        let by_user = review(&review_of("Pod", "CREATE", gpu_pod()), &state(), 0).unwrap();
        let mut body: Value =
            serde_json::from_slice(&review_of("Pod", "CREATE", gpu_pod())).unwrap();
        body["request"]["userInfo"] = json!({
            "username": "system:serviceaccount:kube-system:replicaset-controller",
            "groups": ["system:serviceaccounts", "system:authenticated"]
        });
        body["request"]["object"]["spec"]["serviceAccountName"] = json!("privileged-runner");
        let by_controller = review(&serde_json::to_vec(&body).unwrap(), &state(), 0).unwrap();
        assert_eq!(by_controller.outcome, Outcome::Patched);
        assert_eq!(response(&by_controller), response(&by_user));
    }

    /// The API server always sends metadata, but a pod object without any still gets a patch
    /// that applies (the labels and annotations need `/metadata` created first).
    #[test]
    fn a_pod_without_metadata_gets_a_patch_that_applies() {
        let mut pod = gpu_pod();
        pod.as_object_mut().unwrap().remove("metadata");
        let answer = review(&review_of("Pod", "CREATE", pod.clone()), &state(), 0).unwrap();
        assert_eq!(answer.outcome, Outcome::Patched);
        let patch = BASE64
            .decode(response(&answer)["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["labels"]["gpufair.io/managed"], "true");
    }

    #[test]
    fn pod_create_without_object_is_denied() {
        let mut body: Value =
            serde_json::from_slice(&review_of("Pod", "CREATE", gpu_pod())).unwrap();
        body["request"]["object"] = Value::Null;
        let answer = review(&serde_json::to_vec(&body).unwrap(), &state(), 0).unwrap();
        assert_eq!(answer.outcome, Outcome::Denied);
        assert_eq!(response(&answer)["allowed"], false);
    }

    #[test]
    fn other_kinds_and_operations_pass_unchanged() {
        for (kind, operation) in [
            ("Pod", "UPDATE"),
            ("Pod", "DELETE"),
            ("Deployment", "CREATE"),
        ] {
            let answer = review(&review_of(kind, operation, gpu_pod()), &state(), 0).unwrap();
            assert_eq!(answer.outcome, Outcome::Ignored);
            let response = response(&answer);
            assert_eq!(response["allowed"], true);
            assert!(response.get("patch").is_none());
        }
    }

    #[test]
    fn unreadable_pods_are_denied_and_bad_reviews_refused() {
        let broken = json!({"metadata": {"name": "p"}, "spec": {"containers": "nope"}});
        let answer = review(&review_of("Pod", "CREATE", broken), &state(), 0).unwrap();
        assert_eq!(answer.outcome, Outcome::Denied);
        assert!(
            response(&answer)["status"]["message"]
                .as_str()
                .unwrap()
                .contains("not a readable Pod")
        );
        for body in [
            &b"{"[..],
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":null}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            b"[]",
        ] {
            assert!(review(body, &state(), 0).is_err());
        }
    }
}
