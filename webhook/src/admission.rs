//! One AdmissionReview in, one out.
//!
//! Errors in the review itself (not JSON, not an AdmissionReview v1, no request) are the
//! caller's bug and get HTTP 400. Everything about the pod is answered inside an
//! AdmissionReview: allowed, allowed with a patch and warnings, or denied with a reason.

use gpufair_core::mutation::{Decision, plan};
use k8s_openapi::api::core::v1 as core_v1;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};

use crate::facts::pod_facts;
use crate::metrics::Outcome;
use crate::patch::build_patch;
use crate::state::AppState;

pub const API_VERSION: &str = "admission.k8s.io/v1";

/// A review that cannot be answered with an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
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

/// Just enough of a review to route it. Unknown fields (the object itself) are skipped
/// without being built, so routing costs one fast scan of the body.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<EnvelopeRequest>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeRequest {
    kind: EnvelopeKind,
    operation: Operation,
    #[serde(default)]
    sub_resource: Option<String>,
}

#[derive(serde::Deserialize)]
struct EnvelopeKind {
    #[serde(default)]
    group: String,
    kind: String,
}

/// Answers one review at time `now_unix_s`.
///
/// Pod CREATE reviews are parsed straight into kube's `AdmissionReview<Pod>` (one typed pass
/// over the bytes); everything else as `AdmissionReview<DynamicObject>`, which accepts any kind.
pub fn review(body: &[u8], state: &AppState, now_unix_s: i64) -> Result<Answer, BadReview> {
    let envelope: Envelope = serde_json::from_slice(body)?;
    if envelope.api_version != API_VERSION || envelope.kind != "AdmissionReview" {
        return Err(BadReview::Version {
            api_version: envelope.api_version,
            kind: envelope.kind,
        });
    }
    let request = envelope.request.ok_or(BadReview::NoRequest)?;
    let pod_create = request.kind.group.is_empty()
        && request.kind.kind == "Pod"
        && request.operation == Operation::Create
        && request.sub_resource.is_none();
    let (response, outcome) = if pod_create {
        match serde_json::from_slice::<AdmissionReview<core_v1::Pod>>(body) {
            Ok(review) => {
                let request: AdmissionRequest<core_v1::Pod> =
                    review.try_into().map_err(|_| BadReview::NoRequest)?;
                respond_pod(request, state, now_unix_s)
            }
            Err(pod_error) => {
                // Valid review, but the object is not a Pod we can read: answer with a denial
                // that says why, so the user sees it instead of a webhook call failure.
                let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)?;
                let request: AdmissionRequest<DynamicObject> =
                    review.try_into().map_err(|_| BadReview::NoRequest)?;
                let reason = format!("request.object is not a readable Pod: {pod_error}");
                (
                    AdmissionResponse::from(&request).deny(reason),
                    Outcome::Denied,
                )
            }
        }
    } else {
        let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)?;
        let request: AdmissionRequest<DynamicObject> =
            review.try_into().map_err(|_| BadReview::NoRequest)?;
        (AdmissionResponse::from(&request), Outcome::Ignored)
    };
    let body = serde_json::to_vec(&response.into_review())?;
    Ok(Answer { body, outcome })
}

fn respond_pod(
    mut request: AdmissionRequest<core_v1::Pod>,
    state: &AppState,
    now_unix_s: i64,
) -> (AdmissionResponse, Outcome) {
    let response = AdmissionResponse::from(&request);
    let Some(pod) = request.object.take() else {
        return (
            response.deny("a Pod CREATE review must carry the pod in request.object"),
            Outcome::Denied,
        );
    };
    let namespace = request
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or("default");
    let facts = pod_facts(&pod, namespace);
    let policy = state.policy.load();
    let decision = state
        .queues
        .read(|queues| plan(&facts, queues, &policy, now_unix_s));
    match decision {
        Decision::Unmanaged => (response, Outcome::Unmanaged),
        Decision::Deny(reason) => {
            tracing::info!(namespace, pod = pod_name(&pod), %reason, "pod denied");
            (response.deny(reason), Outcome::Denied)
        }
        Decision::Admit(plan) => {
            let mut response = response;
            if !plan.warnings.is_empty() {
                response.warnings = Some(plan.warnings);
            }
            if plan.mutations.is_empty() {
                return (response, Outcome::Unchanged);
            }
            let patch = build_patch(&pod, &plan.mutations);
            match response.clone().with_patch(patch) {
                Ok(patched) => (patched, Outcome::Patched),
                Err(err) => (
                    response.deny(format!("internal error: could not encode the patch: {err}")),
                    Outcome::Denied,
                ),
            }
        }
    }
}

fn pod_name(pod: &core_v1::Pod) -> &str {
    pod.metadata
        .name
        .as_deref()
        .or(pod.metadata.generate_name.as_deref())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arc_swap::ArcSwap;
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
    fn gpu_pod_create_is_patched() {
        let answer = review(&review_of("Pod", "CREATE", gpu_pod()), &state(), 0).unwrap();
        assert_eq!(answer.outcome, Outcome::Patched);
        let response = response(&answer);
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
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
