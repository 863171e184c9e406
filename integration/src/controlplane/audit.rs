//! kube-apiserver's audit log, one JSON event per line at `Metadata` level: who asked for what,
//! and what the server answered. The RBAC case reads it as the ground truth of what gpufair's
//! ServiceAccounts do.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// One request, as the audit log tells it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditEntry {
    pub user: String,
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    pub uri: String,
    /// When the server received the request.
    pub received: Option<jiff::Timestamp>,
    /// The authorizer's reason, for a refused request.
    pub reason: String,
    /// The client's User-Agent (`kube-scheduler/v1.37.2 …`): the control plane's own
    /// components share the admin's identity here, and this tells them apart.
    pub user_agent: String,
}

impl AuditEntry {
    /// `resource` or `resource/subresource`.
    pub fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// Reads one line of the log; `None` for a line that is not a resource request's last stage.
pub fn parse_line(line: &str) -> Option<AuditEntry> {
    let event: Value = serde_json::from_str(line).ok()?;
    if event["stage"] != "ResponseComplete" && event["stage"] != "Panic" {
        return None;
    }
    let object = &event["objectRef"];
    Some(AuditEntry {
        user: text(&event["user"]["username"]),
        verb: text(&event["verb"]),
        api_group: text(&object["apiGroup"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: text(&object["namespace"]),
        name: text(&object["name"]),
        code: event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
        uri: text(&event["requestURI"]),
        received: event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse().ok()),
        reason: text(&event["annotations"]["authorization.k8s.io/reason"]),
        user_agent: text(&event["userAgent"]),
    })
}

/// Every entry in the log at `path` so far.
pub fn read(path: &Path) -> Vec<AuditEntry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse_line)
        .collect()
}

/// The (verb, apiGroup, resource[/subresource]) triples `user` used on resources.
pub fn used_by(entries: &[AuditEntry], user: &str) -> BTreeSet<(String, String, String)> {
    entries
        .iter()
        .filter(|e| e.user == user && !e.resource.is_empty())
        .map(|e| (e.verb.clone(), e.api_group.clone(), e.resource_path()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_line_names_user_verb_resource_and_code() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/ml/pods/p/eviction","verb":"create","user":{"username":"system:serviceaccount:gpufair-system:gpufair-webhook"},"objectRef":{"resource":"pods","namespace":"ml","name":"p","apiVersion":"v1","subresource":"eviction"},"responseStatus":{"code":429}}"#;
        let entry = parse_line(line).expect("parsed");
        assert_eq!(
            entry.user,
            "system:serviceaccount:gpufair-system:gpufair-webhook"
        );
        assert_eq!(entry.verb, "create");
        assert_eq!(entry.resource_path(), "pods/eviction");
        assert_eq!(entry.api_group, "");
        assert_eq!(entry.code, 429);
        assert_eq!(entry.received, None);
    }

    #[test]
    fn a_refusal_carries_its_time_and_the_authorizers_reason() {
        let line = r#"{"stage":"ResponseComplete","verb":"get","requestURI":"/api/v1/nodes","user":{"username":"u"},"objectRef":{"resource":"nodes"},"responseStatus":{"code":403},"requestReceivedTimestamp":"2026-12-01T19:13:42.123456Z","annotations":{"authorization.k8s.io/decision":"forbid","authorization.k8s.io/reason":"no RBAC policy matched"}}"#;
        let entry = parse_line(line).expect("parsed");
        assert_eq!(entry.code, 403);
        assert_eq!(entry.reason, "no RBAC policy matched");
        assert_eq!(
            entry.received,
            Some("2026-12-01T19:13:42.123456Z".parse().expect("timestamp"))
        );
    }

    #[test]
    fn stages_before_the_response_are_skipped() {
        let line = r#"{"stage":"ResponseStarted","verb":"watch","user":{"username":"u"},"objectRef":{"resource":"pods"}}"#;
        assert_eq!(parse_line(line), None);
        assert_eq!(parse_line("not json"), None);
    }
}
