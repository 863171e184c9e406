//! The answers a fault gives in place of the API server's: `Status` objects as kube-apiserver
//! writes them (kind, apiVersion, status Failure, message, reason, details, code), and the
//! ERROR event a watch gets.

use serde_json::{Value, json};

use super::request::Target;

/// A failure `Status`.
pub fn failure(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status
}

fn details(target: &Target) -> Value {
    let mut details = json!({"kind": target.resource});
    if !target.group.is_empty() {
        details["group"] = json!(target.group);
    }
    if let Some(name) = &target.name {
        details["name"] = json!(name);
    }
    details
}

/// 500, as for an error the server did not expect.
pub fn internal_error() -> Value {
    failure(
        500,
        "InternalError",
        "Internal error occurred: injected fault",
        Some(json!({"causes": [{"message": "injected fault"}]})),
    )
}

/// 429, as API Priority and Fairness answers a request it sheds.
pub fn too_many_requests(retry_after_seconds: u64) -> Value {
    failure(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        Some(json!({"retryAfterSeconds": retry_after_seconds})),
    )
}

/// 410 `Expired`, as for a list or watch from a compacted resourceVersion.
pub fn gone() -> Value {
    failure(
        410,
        "Expired",
        "too old resource version: injected fault",
        None,
    )
}

/// 409 `Conflict`, as for an update or patch from a stale resourceVersion.
pub fn conflict(target: &Target) -> Value {
    let name = target.name.as_deref().unwrap_or_default();
    failure(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            target.qualified_resource()
        ),
        Some(details(target)),
    )
}

/// One watch event line: `{"type":TYPE,"object":OBJECT}` and a newline.
pub fn watch_event(event_type: &str, object: &Value) -> Vec<u8> {
    let mut line =
        serde_json::to_vec(&json!({"type": event_type, "object": object})).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Whether a chunk of a watch stream carries an ERROR event with a 410 Status (the API
/// server's own, passing through).
pub fn carries_gone(chunk: &[u8]) -> bool {
    let text = String::from_utf8_lossy(chunk);
    text.lines().any(|line| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|event| event["type"] == "ERROR" && event["object"]["code"] == 410)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::request::target;

    /// Each body parses as the Status kube-rs reads errors from.
    fn as_kube_status(value: &Value) -> kube::core::Status {
        serde_json::from_value(value.clone()).unwrap()
    }

    #[test]
    fn status_bodies_are_kubernetes_statuses() {
        let status = as_kube_status(&internal_error());
        assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError")
        );
        assert!(status.is_failure());

        let busy = too_many_requests(2);
        assert_eq!(busy["details"]["retryAfterSeconds"], 2);
        assert_eq!(as_kube_status(&busy).code, 429);

        let expired = as_kube_status(&gone());
        assert_eq!((expired.code, expired.reason.as_str()), (410, "Expired"));
        assert!(expired.message.starts_with("too old resource version"));
    }

    #[test]
    fn conflict_names_the_object_as_the_api_server_does() {
        let pod = target(
            &http::Method::PATCH,
            "/api/v1/namespaces/team/pods/p-1",
            None,
        )
        .unwrap();
        let body = conflict(&pod);
        assert_eq!(body["details"], json!({"kind": "pods", "name": "p-1"}));
        assert!(body["message"].as_str().unwrap().starts_with(
            "Operation cannot be fulfilled on pods \"p-1\": the object has been modified"
        ));
        let queue = target(
            &http::Method::PATCH,
            "/apis/gpufair.io/v1alpha1/queues/team/status",
            None,
        )
        .unwrap();
        let body = conflict(&queue);
        assert_eq!(
            body["details"],
            json!({"kind": "queues", "group": "gpufair.io", "name": "team"})
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("on queues.gpufair.io \"team\"")
        );
        assert_eq!(as_kube_status(&body).code, 409);
    }

    #[test]
    fn watch_error_events_are_recognised() {
        let line = watch_event("ERROR", &gone());
        assert!(line.ends_with(b"\n"));
        let event: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(event["type"], "ERROR");
        assert_eq!(event["object"]["code"], 410);
        // kube-rs reads the same line as a watch error.
        let parsed: kube::core::WatchEvent<k8s_openapi::api::core::v1::Pod> =
            serde_json::from_slice(&line).unwrap();
        assert!(matches!(parsed, kube::core::WatchEvent::Error(e) if e.code == 410));
        assert!(carries_gone(&line));
        let mut two = watch_event("ADDED", &json!({"kind": "Pod"}));
        two.extend(line);
        assert!(carries_gone(&two));
        assert!(!carries_gone(&watch_event("ERROR", &internal_error())));
        assert!(!carries_gone(b"{\"type\":\"ADDED\",\"obj"));
    }
}
