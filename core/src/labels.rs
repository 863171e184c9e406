//! What users write on their pods, parsed into what the policy orders by.
//!
//! Every error names the label or annotation, the value found and the forms accepted, because
//! the webhook returns these messages verbatim to `kubectl` users.

use std::collections::BTreeMap;
use std::fmt;

pub const QUEUE_LABEL: &str = "gpufair.io/queue";
pub const TASK_TYPE_LABEL: &str = "ai-task-type";
pub const DEADLINE_LABEL: &str = "deadline";
pub const DEADLINE_ANNOTATION: &str = "gpufair.io/deadline";
pub const URGENCY_LABEL: &str = "urgency-level";
pub const USER_TIER_ANNOTATION: &str = "user-tier";
pub const POD_GROUP_LABEL: &str = "gpufair.io/pod-group";
pub const MIN_MEMBER_ANNOTATION: &str = "gpufair.io/min-member";
pub const MANAGED_LABEL: &str = "gpufair.io/managed";

/// Kind of work a pod does, from the `ai-task-type` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum TaskType {
    /// What a pod without the label is treated as: training, the common case.
    #[default]
    Train,
    Inference,
    Processing,
}

impl TaskType {
    pub const FORMS: &'static str = "train, inference or processing";

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "train" => Some(Self::Train),
            "inference" => Some(Self::Inference),
            "processing" => Some(Self::Processing),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Train => "train",
            Self::Inference => "inference",
            Self::Processing => "processing",
        }
    }

    /// The tier a task type runs in: latency-sensitive inference is realtime, interruptible
    /// training is elastic, development and data processing fill the gaps.
    pub fn tier(self) -> Tier {
        match self {
            Self::Inference => Tier::Realtime,
            Self::Train => Tier::Elastic,
            Self::Processing => Tier::Backfill,
        }
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Scheduling tier; the declaration order is the release order inside a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    Realtime,
    Elastic,
    Backfill,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Realtime => "realtime",
            Self::Elastic => "elastic",
            Self::Backfill => "backfill",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "realtime" => Some(Self::Realtime),
            "elastic" => Some(Self::Elastic),
            "backfill" => Some(Self::Backfill),
            _ => None,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `urgency-level`; the declaration order is the release order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Urgency {
    High,
    /// What a pod without the label gets.
    #[default]
    Medium,
    Low,
}

impl Urgency {
    pub const FORMS: &'static str = "high, medium or low";

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "high" => Some(Self::High),
            "medium" => Some(Self::Medium),
            "low" => Some(Self::Low),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::High => "high",
            Self::Medium => "medium",
            Self::Low => "low",
        }
    }
}

/// `user-tier`: the submitting user's standing, a part of the release score inside a queue.
/// The declaration order is the release order, everything else equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum UserTier {
    Premium,
    /// What a pod without the annotation gets.
    #[default]
    Standard,
    Basic,
}

impl UserTier {
    pub const FORMS: &'static str = "premium, standard or basic";

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "premium" => Some(Self::Premium),
            "standard" => Some(Self::Standard),
            "basic" => Some(Self::Basic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Premium => "premium",
            Self::Standard => "standard",
            Self::Basic => "basic",
        }
    }
}

/// Where a deadline came from; the annotation is more precise and wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineSource {
    Label,
    Annotation,
}

/// A deadline as seconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deadline {
    pub at_unix_seconds: i64,
    pub source: DeadlineSource,
}

impl Deadline {
    /// RFC 3339 text in UTC, as recorded in the pod's annotation.
    pub fn to_rfc3339(&self) -> String {
        match jiff::Timestamp::from_second(self.at_unix_seconds) {
            Ok(ts) => ts.to_string(),
            Err(_) => self.at_unix_seconds.to_string(),
        }
    }
}

/// A gang: pods released together, all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    pub name: String,
    pub min_member: u32,
}

/// Everything the policy reads from a pod's labels and annotations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkloadLabels {
    pub queue: Option<String>,
    pub task_type: Option<TaskType>,
    pub deadline: Option<Deadline>,
    pub urgency: Option<Urgency>,
    pub user_tier: Option<UserTier>,
    pub gang: Option<Gang>,
}

impl WorkloadLabels {
    /// The tier; a pod without `ai-task-type` gets the default task type's.
    pub fn tier(&self) -> Tier {
        self.task_type.unwrap_or_default().tier()
    }
}

/// A label or annotation whose value gpufair cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {key}={value:?} is invalid: expected {expected}")]
pub struct LabelError {
    /// `label` or `annotation`.
    pub kind: &'static str,
    pub key: &'static str,
    pub value: String,
    pub expected: String,
}

impl LabelError {
    fn label(key: &'static str, value: &str, expected: impl Into<String>) -> Self {
        Self {
            kind: "label",
            key,
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    fn annotation(key: &'static str, value: &str, expected: impl Into<String>) -> Self {
        Self {
            kind: "annotation",
            key,
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

const DEADLINE_LABEL_FORMS: &str =
    "a date YYYYMMDD or YYYY-MM-DD (meaning the end of that day, UTC), e.g. 20240515";
const DEADLINE_ANNOTATION_FORMS: &str = "an RFC 3339 time, e.g. 2024-05-15T18:00:00Z";
const MIN_MEMBER_FORMS: &str =
    "a whole number of pods >= 1, set together with the gpufair.io/pod-group label";
const POD_GROUP_FORMS: &str =
    "a non-empty group name, set together with the gpufair.io/min-member annotation";

/// Parses a `deadline` label: the end of that day in UTC (midnight that starts the next day).
pub fn parse_deadline_label(value: &str) -> Result<Deadline, LabelError> {
    let bad = || LabelError::label(DEADLINE_LABEL, value, DEADLINE_LABEL_FORMS);
    let digits: String = match value.len() {
        8 if value.bytes().all(|b| b.is_ascii_digit()) => value.to_string(),
        10 if value.as_bytes()[4] == b'-' && value.as_bytes()[7] == b'-' => {
            let stripped = value.replace('-', "");
            if stripped.len() != 8 || !stripped.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            stripped
        }
        _ => return Err(bad()),
    };
    let year: i16 = digits[0..4].parse().map_err(|_| bad())?;
    let month: i8 = digits[4..6].parse().map_err(|_| bad())?;
    let day: i8 = digits[6..8].parse().map_err(|_| bad())?;
    let date = jiff::civil::Date::new(year, month, day).map_err(|_| bad())?;
    let next_day = date.tomorrow().map_err(|_| bad())?;
    let at = next_day
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map_err(|_| bad())?;
    Ok(Deadline {
        at_unix_seconds: at.timestamp().as_second(),
        source: DeadlineSource::Label,
    })
}

/// Parses a `gpufair.io/deadline` annotation (RFC 3339).
pub fn parse_deadline_annotation(value: &str) -> Result<Deadline, LabelError> {
    let ts: jiff::Timestamp = value.parse().map_err(|_| {
        LabelError::annotation(DEADLINE_ANNOTATION, value, DEADLINE_ANNOTATION_FORMS)
    })?;
    Ok(Deadline {
        at_unix_seconds: ts.as_second(),
        source: DeadlineSource::Annotation,
    })
}

/// Reads all of gpufair's labels and annotations from a pod's metadata.
pub fn parse_workload_labels(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<WorkloadLabels, LabelError> {
    let queue = labels.get(QUEUE_LABEL).cloned();
    if let Some(q) = &queue
        && q.is_empty()
    {
        return Err(LabelError::label(
            QUEUE_LABEL,
            q,
            "the name of an existing Queue",
        ));
    }
    let task_type = labels
        .get(TASK_TYPE_LABEL)
        .map(|v| {
            TaskType::parse(v).ok_or_else(|| LabelError::label(TASK_TYPE_LABEL, v, TaskType::FORMS))
        })
        .transpose()?;
    let label_deadline = labels
        .get(DEADLINE_LABEL)
        .map(|v| parse_deadline_label(v))
        .transpose()?;
    let annotation_deadline = annotations
        .get(DEADLINE_ANNOTATION)
        .map(|v| parse_deadline_annotation(v))
        .transpose()?;
    let urgency = labels
        .get(URGENCY_LABEL)
        .map(|v| {
            Urgency::parse(v).ok_or_else(|| LabelError::label(URGENCY_LABEL, v, Urgency::FORMS))
        })
        .transpose()?;
    let user_tier = annotations
        .get(USER_TIER_ANNOTATION)
        .map(|v| {
            UserTier::parse(v)
                .ok_or_else(|| LabelError::annotation(USER_TIER_ANNOTATION, v, UserTier::FORMS))
        })
        .transpose()?;
    let gang = parse_gang(
        labels.get(POD_GROUP_LABEL),
        annotations.get(MIN_MEMBER_ANNOTATION),
    )?;
    Ok(WorkloadLabels {
        queue,
        task_type,
        deadline: annotation_deadline.or(label_deadline),
        urgency,
        user_tier,
        gang,
    })
}

fn parse_gang(
    group: Option<&String>,
    min_member: Option<&String>,
) -> Result<Option<Gang>, LabelError> {
    match (group, min_member) {
        (None, None) => Ok(None),
        (Some(name), _) if name.is_empty() => {
            Err(LabelError::label(POD_GROUP_LABEL, name, POD_GROUP_FORMS))
        }
        (Some(name), None) => Err(LabelError::annotation(
            MIN_MEMBER_ANNOTATION,
            "",
            format!("{MIN_MEMBER_FORMS} (pod-group {name:?} has no min-member)"),
        )),
        (None, Some(count)) => Err(LabelError::annotation(
            MIN_MEMBER_ANNOTATION,
            count,
            format!("{MIN_MEMBER_FORMS} (the pod has no {POD_GROUP_LABEL} label)"),
        )),
        (Some(name), Some(count)) => Ok(Some(Gang {
            name: name.clone(),
            min_member: parse_min_member(count)?,
        })),
    }
}

/// Parses a `gpufair.io/min-member` annotation: a whole number of pods >= 1.
pub fn parse_min_member(value: &str) -> Result<u32, LabelError> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| LabelError::annotation(MIN_MEMBER_ANNOTATION, value, MIN_MEMBER_FORMS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn deadline_label_means_end_of_day_utc() {
        // 2024-05-16T00:00:00Z
        let expected = 1_715_817_600;
        assert_eq!(
            parse_deadline_label("20240515").unwrap().at_unix_seconds,
            expected
        );
        assert_eq!(
            parse_deadline_label("2024-05-15").unwrap().at_unix_seconds,
            expected
        );
    }

    #[test]
    fn bad_deadlines_name_key_value_and_forms() {
        for bad in [
            "2024515",
            "20240230",
            "2024-13-01",
            "2024/05/15",
            "tomorrow",
            "2024-0515x",
            "",
        ] {
            let err = parse_deadline_label(bad).unwrap_err();
            assert_eq!(err.key, "deadline");
            let text = err.to_string();
            assert!(
                text.contains("YYYYMMDD") && text.contains(&format!("{bad:?}")),
                "{text}"
            );
        }
        let err = parse_deadline_annotation("2024-05-15").unwrap_err();
        assert!(
            err.to_string().contains("gpufair.io/deadline") && err.to_string().contains("RFC 3339")
        );
    }

    #[test]
    fn annotation_deadline_wins_over_label() {
        let parsed = parse_workload_labels(
            &map(&[("deadline", "20240515")]),
            &map(&[("gpufair.io/deadline", "2024-05-15T18:00:00Z")]),
        )
        .unwrap();
        let deadline = parsed.deadline.unwrap();
        assert_eq!(deadline.source, DeadlineSource::Annotation);
        assert_eq!(deadline.to_rfc3339(), "2024-05-15T18:00:00Z");
    }

    #[test]
    fn parses_everything_together() {
        let parsed = parse_workload_labels(
            &map(&[
                ("gpufair.io/queue", "llm"),
                ("ai-task-type", "inference"),
                ("urgency-level", "high"),
                ("gpufair.io/pod-group", "post-train"),
            ]),
            &map(&[("gpufair.io/min-member", "15"), ("user-tier", "premium")]),
        )
        .unwrap();
        assert_eq!(parsed.queue.as_deref(), Some("llm"));
        assert_eq!(parsed.tier(), Tier::Realtime);
        assert_eq!(parsed.urgency, Some(Urgency::High));
        assert_eq!(parsed.user_tier, Some(UserTier::Premium));
        assert_eq!(
            parsed.gang,
            Some(Gang {
                name: "post-train".into(),
                min_member: 15
            })
        );
        assert_eq!(WorkloadLabels::default().tier(), Tier::Elastic);
    }

    #[test]
    fn rejects_unknown_task_type_urgency_and_bad_gangs() {
        let err =
            parse_workload_labels(&map(&[("ai-task-type", "training")]), &map(&[])).unwrap_err();
        assert!(err.to_string().contains("train, inference or processing"));
        let err =
            parse_workload_labels(&map(&[("urgency-level", "urgent")]), &map(&[])).unwrap_err();
        assert!(err.to_string().contains("high, medium or low"));
        let err = parse_workload_labels(&map(&[]), &map(&[("user-tier", "gold")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "annotation user-tier=\"gold\" is invalid: expected premium, standard or basic"
        );
        for (labels, annotations) in [
            (map(&[("gpufair.io/pod-group", "g")]), map(&[])),
            (map(&[]), map(&[("gpufair.io/min-member", "3")])),
            (
                map(&[("gpufair.io/pod-group", "g")]),
                map(&[("gpufair.io/min-member", "0")]),
            ),
            (
                map(&[("gpufair.io/pod-group", "g")]),
                map(&[("gpufair.io/min-member", "three")]),
            ),
            (
                map(&[("gpufair.io/pod-group", "")]),
                map(&[("gpufair.io/min-member", "3")]),
            ),
        ] {
            let err = parse_workload_labels(&labels, &annotations).unwrap_err();
            assert!(err.to_string().contains("gpufair.io/"), "{err}");
        }
    }
}
