//! The Events the controller writes, read the same way from both Event APIs (core v1's
//! `involvedObject`/`message` and events.k8s.io/v1's `regarding`/`note`).

use std::collections::HashMap;

use serde_json::Value;

/// One Event, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct PodEvent {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub reason: String,
    pub message: String,
    /// Instance that reported it (the replica's identity).
    pub reporter: String,
    /// Times it happened (series count, at least 1).
    pub count: u64,
    pub resource_version: u64,
}

/// Reads one stored Event.
pub fn pod_event(event: &Value) -> Option<PodEvent> {
    let (object, message) = if event["apiVersion"] == "events.k8s.io/v1" {
        (&event["regarding"], &event["note"])
    } else {
        (&event["involvedObject"], &event["message"])
    };
    if object["kind"] != "Pod" {
        return None;
    }
    let count = event["series"]["count"]
        .as_u64()
        .or_else(|| event["count"].as_u64())
        .unwrap_or(1)
        .max(1);
    let reporter = event["reportingInstance"]
        .as_str()
        .or_else(|| event["source"]["host"].as_str())
        .unwrap_or_default();
    Some(PodEvent {
        namespace: object["namespace"].as_str().unwrap_or_default().to_string(),
        pod: object["name"].as_str().unwrap_or_default().to_string(),
        pod_uid: object["uid"].as_str().unwrap_or_default().to_string(),
        reason: event["reason"].as_str().unwrap_or_default().to_string(),
        message: message.as_str().unwrap_or_default().to_string(),
        reporter: reporter.to_string(),
        count,
        resource_version: super::api::resource_version_of(event),
    })
}

/// Pod Events of all namespaces, oldest first.
pub fn pod_events(events: &[Value]) -> Vec<PodEvent> {
    events.iter().filter_map(pod_event).collect()
}

/// Pods released more than once (counting `Released` Events, across replicas), with counts.
pub fn released_more_than_once(events: &[PodEvent]) -> Vec<(String, u64)> {
    let mut counts: HashMap<String, (String, u64)> = HashMap::new();
    for event in events.iter().filter(|e| e.reason == "Released") {
        let entry = counts
            .entry(event.pod_uid.clone())
            .or_insert_with(|| (format!("{}/{}", event.namespace, event.pod), 0));
        entry.1 += event.count;
    }
    let mut twice: Vec<(String, u64)> = counts.into_values().filter(|(_, n)| *n > 1).collect();
    twice.sort();
    twice
}
