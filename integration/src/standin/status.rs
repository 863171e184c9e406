//! Errors as the API server writes them: a `Status` object with `reason`, `code` and `message`,
//! so clients (kube-rs among them) parse them exactly as they would a real server's.

use serde_json::{Value, json};

/// A refused request: HTTP code, `Status.reason`, message and optional cause details.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, kind, causes), when the real server sends one.
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429 and some 500s).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// `<resource> "<name>" not found`, with the details the real server sends.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    pub fn not_found_path(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        Self::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// The optimistic-concurrency refusal, worded as the real server words it.
    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {qualified} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    pub fn conflict_message(message: impl Into<String>) -> Self {
        Self::new(409, "Conflict", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 Invalid: `<Kind> "<name>" is invalid: <field>: <detail>`, with one cause per field.
    pub fn invalid(kind: &str, name: &str, causes: &[(String, String)]) -> Self {
        let text: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let message = if text.len() == 1 {
            format!("{kind} \"{name}\" is invalid: {}", text[0])
        } else {
            format!("{kind} \"{name}\" is invalid: [{}]", text.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, m)| json!({"reason": "FieldValueInvalid", "field": f, "message": m}))
            .collect();
        Self::new(422, "Invalid", message)
            .with_details(json!({"name": name, "kind": kind, "causes": causes}))
    }

    /// 422 for input the server cannot process (a failed JSON-patch `test`, a bad patch path).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn too_many_requests(message: impl Into<String>, retry_after: u64) -> Self {
        let mut error = Self::new(429, "TooManyRequests", message);
        error.retry_after = Some(retry_after);
        error
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `Status` object for the response body (and for watch `ERROR` events).
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(seconds) = self.retry_after {
            let details = status
                .as_object_mut()
                .map(|o| o.entry("details").or_insert_with(|| json!({})));
            if let Some(details) = details {
                details["retryAfterSeconds"] = json!(seconds);
            }
        }
        status
    }
}

/// `pods` or `queues.gpufair.io`, as the real server names a resource in messages.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// The success `Status` some verbs return (eviction, deletes of gone objects).
pub fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_is_a_status_kube_rs_reads() {
        let status = ApiError::conflict("gpufair.io", "queues", "llm").to_status();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 409);
        assert_eq!(status["reason"], "Conflict");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("queues.gpufair.io \"llm\"")
        );
        let parsed: kube::core::Status = serde_json::from_value(status).unwrap();
        assert_eq!(parsed.code, 409);
    }

    #[test]
    fn invalid_lists_each_field() {
        let error = ApiError::invalid(
            "Pod",
            "p",
            &[(
                "spec.schedulingGates".into(),
                "Forbidden: only deletion is allowed".into(),
            )],
        );
        assert_eq!(error.code, 422);
        assert_eq!(
            error.message,
            "Pod \"p\" is invalid: spec.schedulingGates: Forbidden: only deletion is allowed"
        );
    }
}
