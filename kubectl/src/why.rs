//! `kubectl gpufair why POD`: why a pod waits, in one paragraph. From its Queue's status (the
//! head of the release order, with the reason, the score part by part and what would release
//! it), else from the controller's latest `Waiting` Event on the pod.

use gpufair_api::{Queue, ReleaseScoreParts, WAITING_HEAD_LIMIT, WaitingWorkload};
use gpufair_core::admission::ReleaseScore;
use gpufair_core::labels::{POD_GROUP_LABEL, QUEUE_LABEL};
use gpufair_core::time_text;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::table::ordinal;
use crate::time::{timestamp, unix};

/// What `why` reads from the pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub queue: Option<String>,
    pub pod_group: Option<String>,
    /// gpufair's scheduling gate is still on it.
    pub gated: bool,
    pub node: Option<String>,
    pub phase: Option<String>,
}

impl PodView {
    /// `pod`, whose gpufair gate is named `gate`.
    pub fn of(pod: &Pod, gate: &str) -> Self {
        let labels = pod.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).cloned();
        let spec = pod.spec.as_ref();
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            queue: label(QUEUE_LABEL),
            pod_group: label(POD_GROUP_LABEL),
            gated: spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|gates| gates.iter().any(|g| g.name == gate)),
            node: spec.and_then(|s| s.node_name.clone()),
            phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
        }
    }
}

/// The controller's latest `Waiting` Event on the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    pub message: String,
    /// Unix seconds, when known.
    #[serde(skip)]
    pub at: Option<f64>,
    /// RFC 3339.
    pub time: Option<String>,
}

/// Where the pod stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Gated by gpufair.
    Waiting,
    /// Gate removed, not bound yet: kube-scheduler has it.
    Released,
    /// Bound to a node.
    Bound,
}

/// The answer, as `-o json|yaml` print it; `paragraph` is what the default output prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Why {
    pub namespace: String,
    pub pod: String,
    pub queue: String,
    pub state: State,
    pub node: Option<String>,
    pub pool: Option<String>,
    /// The workload's place in its queue's release order, when the queue's status lists it.
    pub position: Option<u32>,
    pub waiting_in_queue: Option<u64>,
    /// The queue's place in its pool's order of service, and how many queues wait there.
    pub service_order: Option<u32>,
    pub queues_waiting_in_pool: Option<u32>,
    pub reason: Option<String>,
    pub score: Option<ReleaseScoreParts>,
    pub released_by: Option<String>,
    /// RFC 3339: when the workload was created, and when the controller computed the above.
    pub waiting_since: Option<String>,
    pub observed_at: Option<String>,
    pub last_explanation: Option<Explanation>,
    pub paragraph: String,
}

/// Why `pod` could not be explained.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WhyError {
    #[error(
        "pod {namespace}/{name} is not managed by gpufair (it has no {QUEUE_LABEL} label): it asks for no GPU, \
         runs in a namespace gpufair leaves alone, or was created before gpufair was installed"
    )]
    NotManaged { namespace: String, name: String },
}

/// The workload of `pod` in `head`, if listed: its pod group's entry, or its own.
fn find<'h>(head: &'h [WaitingWorkload], pod: &PodView) -> Option<&'h WaitingWorkload> {
    head.iter().find(|w| {
        w.namespace == pod.namespace
            && match (&pod.pod_group, &w.pod_group) {
                (Some(group), Some(listed)) => group == listed,
                (None, None) => w.pod == pod.name,
                _ => false,
            }
    })
}

/// The release score's parts as core prints them.
fn score_text(parts: &ReleaseScoreParts) -> String {
    ReleaseScore {
        urgency: parts.urgency,
        user_tier: parts.user_tier,
        deadline: parts.deadline,
        waited: parts.waited,
    }
    .to_string()
}

/// Explains `pod` from all `queues` and its latest `Waiting` Event, at `now` (Unix seconds).
pub fn why(
    pod: &PodView,
    queues: &[Queue],
    event: Option<Explanation>,
    now: f64,
) -> Result<Why, WhyError> {
    let Some(queue_name) = pod.queue.clone() else {
        return Err(WhyError::NotManaged {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
        });
    };
    let who = format!("Pod {}/{}", pod.namespace, pod.name);
    let queue = queues
        .iter()
        .find(|q| q.metadata.name.as_deref() == Some(queue_name.as_str()));
    let status = queue.and_then(|q| q.status.clone()).unwrap_or_default();
    let state = match (pod.gated, &pod.node) {
        (true, _) => State::Waiting,
        (false, Some(_)) => State::Bound,
        (false, None) => State::Released,
    };
    let queues_waiting_in_pool = status.pool.as_ref().map(|pool| {
        queues
            .iter()
            .filter_map(|q| q.status.as_ref())
            .filter(|s| s.pool.as_ref() == Some(pool) && s.waiting_workloads.unwrap_or(0) > 0)
            .count() as u32
    });
    let listed = find(&status.waiting_head, pod).filter(|_| state == State::Waiting);
    let observed_at = status.observed_at.as_ref().map(timestamp);
    let as_of = status
        .observed_at
        .as_ref()
        .map(|t| format!(" (queue status as of {})", time_text::ago(now - unix(t))))
        .unwrap_or_default();
    let pool_text = status
        .pool
        .as_ref()
        .map(|p| format!(", pool {p}"))
        .unwrap_or_default();
    let service_text = match (status.service_order, queues_waiting_in_pool) {
        (Some(order), Some(of)) => format!(
            "; the queue is {} of {of} queue{} with waiting work in the pool's order of service",
            ordinal(u64::from(order)),
            if of == 1 { "" } else { "s" }
        ),
        _ => String::new(),
    };
    let waiting_count = status.waiting_workloads;
    let paragraph = match state {
        State::Bound => format!(
            "{who} is not waiting: gpufair released it and it is bound to node {} (queue {queue_name}, phase {}).",
            pod.node.as_deref().unwrap_or("-"),
            pod.phase.as_deref().unwrap_or("unknown")
        ),
        State::Released => format!(
            "{who} is not waiting for gpufair: its gate is removed (queue {queue_name}) and kube-scheduler is binding it \
             to the node it was released onto."
        ),
        State::Waiting if queue.is_none() => format!(
            "{who} waits in queue {queue_name}, which does not exist: create the Queue, or move the pod to a queue \
             that exists; nothing releases it until then."
        ),
        State::Waiting => match (listed, &event) {
            (Some(w), _) => {
                let since = unix(&w.since);
                let workload = match &w.pod_group {
                    Some(group) => format!(" as part of gang {group} ({} pods)", w.pods),
                    None => String::new(),
                };
                format!(
                    "{who} waits{workload} in queue {queue_name}{pool_text}: {} of {} waiting in the queue ({} tier){service_text}. \
                     It waits because {}. Its {}. It would be released by {}. Waiting since {} ({}){as_of}.",
                    ordinal(u64::from(w.position)),
                    waiting_count.unwrap_or(u64::from(w.position)),
                    w.tier,
                    w.reason,
                    score_text(&w.score),
                    w.released_by,
                    timestamp(&w.since),
                    time_text::ago(now - since),
                )
            }
            (None, Some(e)) => format!(
                "{who} waits in queue {queue_name}{pool_text}{}{service_text}; its queue's status lists only the first \
                 {WAITING_HEAD_LIMIT}. The controller's latest explanation, {}: {}",
                waiting_count.map_or_else(String::new, |n| format!(", one of {n} waiting")),
                e.at.map_or_else(|| "time unknown".to_string(), |at| time_text::ago(now - at)),
                e.message
            ),
            (None, None) => format!(
                "{who} waits in queue {queue_name}{pool_text}{}{service_text}. The controller has not explained it yet: \
                 it lists the first {WAITING_HEAD_LIMIT} of each queue in Queue status and sends each waiting pod a \
                 Waiting Event at most every few minutes, nearest to release first{as_of}.",
                waiting_count.map_or_else(String::new, |n| format!(", one of {n} waiting")),
            ),
        },
    };
    Ok(Why {
        namespace: pod.namespace.clone(),
        pod: pod.name.clone(),
        queue: queue_name,
        state,
        node: pod.node.clone(),
        pool: status.pool.clone(),
        position: listed.map(|w| w.position),
        waiting_in_queue: waiting_count,
        service_order: status.service_order,
        queues_waiting_in_pool,
        reason: listed.map(|w| w.reason.clone()),
        score: listed.map(|w| w.score),
        released_by: listed.map(|w| w.released_by.clone()),
        waiting_since: listed.map(|w| timestamp(&w.since)),
        observed_at,
        last_explanation: event.filter(|_| state == State::Waiting),
        paragraph,
    })
}

/// `paragraph` wrapped at 100 columns, for the terminal.
pub fn wrap(paragraph: &str) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in paragraph.split_whitespace() {
        let len = word.chars().count();
        if line > 0 && line + 1 + len > 100 {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += len;
    }
    out.push('\n');
    out
}

/// An Event's time as Unix seconds: the series' last, else the event time, else the last
/// timestamp (older clients).
pub fn event_time(event: &k8s_openapi::api::core::v1::Event) -> Option<f64> {
    let micro = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime| {
        t.0.as_millisecond() as f64 / 1000.0
    };
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(micro)
        .or_else(|| event.event_time.as_ref().map(micro))
        .or_else(|| event.last_timestamp.as_ref().map(unix))
}

/// An explanation from an Event's note and time.
pub fn explanation(message: String, at: Option<f64>) -> Explanation {
    Explanation {
        message,
        time: at.and_then(time_text::rfc3339),
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::seconds;
    use serde_json::json;

    fn queue(status: serde_json::Value) -> Queue {
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1", "kind": "Queue", "metadata": {"name": "team"},
            "spec": {}, "status": status
        }))
        .unwrap()
    }

    fn other(name: &str, waiting: u64) -> Queue {
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": {}, "status": {"pool": "default", "waitingWorkloads": waiting, "serviceOrder": 1}
        }))
        .unwrap()
    }

    fn waiting_pod(name: &str) -> PodView {
        PodView {
            namespace: "team".into(),
            name: name.into(),
            queue: Some("team".into()),
            gated: true,
            ..PodView::default()
        }
    }

    fn listed_status() -> serde_json::Value {
        json!({
            "pool": "default", "serviceOrder": 2, "waitingWorkloads": 3,
            "observedAt": "2026-12-02T02:59:58Z",
            "waitingHead": [{
                "position": 2, "namespace": "team", "pod": "big", "pods": 1, "tier": "elastic",
                "gpuEquivalents": 2.0, "since": "2026-12-02T02:48:00Z",
                "reason": "no placement of all its pods exists in free capacity",
                "score": {"total": 1.25, "urgency": 0.5, "userTier": 0.5, "deadline": 0.0, "waited": 0.25},
                "releasedBy": "2 GPUs free on a node of pool default"
            }]
        })
    }

    #[test]
    fn a_listed_pod_is_explained_part_by_part_in_one_paragraph() {
        let now = seconds("2026-12-02T03:00:00Z").unwrap();
        let queues = [queue(listed_status()), other("vision", 4), other("idle", 0)];
        let why = why(&waiting_pod("big"), &queues, None, now).unwrap();
        assert_eq!(
            why.paragraph,
            "Pod team/big waits in queue team, pool default: 2nd of 3 waiting in the queue (elastic tier); \
             the queue is 2nd of 2 queues with waiting work in the pool's order of service. It waits because \
             no placement of all its pods exists in free capacity. Its release score 1.250 = urgency 0.500 + \
             user tier 0.500 + deadline slack 0.000 + time waited 0.250. It would be released by 2 GPUs free \
             on a node of pool default. Waiting since 2026-12-02T02:48:00Z (12 min ago) (queue status as of \
             2 s ago)."
        );
        assert_eq!(why.state, State::Waiting);
        assert_eq!(why.position, Some(2));
        assert_eq!(why.queues_waiting_in_pool, Some(2));
        let wrapped = wrap(&why.paragraph);
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= 100),
            "{wrapped}"
        );
    }

    #[test]
    fn a_pod_beyond_the_head_is_explained_by_its_latest_event() {
        let now = seconds("2026-12-02T03:00:00Z").unwrap();
        let queues = [queue(listed_status())];
        let event = explanation(
            "Waiting in queue team: no placement of all its pods exists in free capacity.".into(),
            Some(now - 125.0),
        );
        let why = why(&waiting_pod("late"), &queues, Some(event), now).unwrap();
        assert!(
            why.paragraph.contains("one of 3 waiting")
                && why.paragraph.contains("lists only the first 20")
                && why
                    .paragraph
                    .contains("latest explanation, 2 min 5 s ago: Waiting in queue team"),
            "{}",
            why.paragraph
        );
        assert_eq!(why.position, None);
        let unexplained = super::why(&waiting_pod("late"), &queues, None, now).unwrap();
        assert!(unexplained.paragraph.contains("has not explained it yet"));
    }

    #[test]
    fn gangs_are_found_by_pod_group_and_other_states_are_said_plainly() {
        let now = seconds("2026-12-02T03:00:00Z").unwrap();
        let mut status = listed_status();
        status["waitingHead"][0]["podGroup"] = json!("train");
        status["waitingHead"][0]["pods"] = json!(4);
        let queues = [queue(status)];
        let member = PodView {
            pod_group: Some("train".into()),
            ..waiting_pod("train-3")
        };
        let why_member = why(&member, &queues, None, now).unwrap();
        assert!(
            why_member
                .paragraph
                .contains("as part of gang train (4 pods)")
        );

        let bound = PodView {
            gated: false,
            node: Some("gpu-1".into()),
            phase: Some("Running".into()),
            ..waiting_pod("big")
        };
        let why_bound = why(&bound, &queues, None, now).unwrap();
        assert_eq!(why_bound.state, State::Bound);
        assert!(why_bound.paragraph.contains("bound to node gpu-1"));
        assert_eq!(why_bound.reason, None);

        let missing_queue = PodView {
            queue: Some("nope".into()),
            ..waiting_pod("big")
        };
        assert!(
            why(&missing_queue, &queues, None, now)
                .unwrap()
                .paragraph
                .contains("queue nope, which does not exist")
        );
        let unmanaged = PodView {
            queue: None,
            ..waiting_pod("cpu")
        };
        let err = why(&unmanaged, &queues, None, now).unwrap_err().to_string();
        assert!(err.contains("not managed by gpufair"), "{err}");
    }
}
