//! What the controller reads back from a pod the webhook admitted: the tier and deadline the
//! plan recorded, and the pod's own urgency, user tier and gang size.
//!
//! The webhook refused bad values at admission, so a value that no longer reads (edited since)
//! counts as its default rather than stopping the pod. Every value is still read by the grammar
//! admission used ([`crate::labels`]); only the fallback is lenient.

use std::collections::BTreeMap;

use super::policy::{ADMITTED_DEADLINE_ANNOTATION, TIER_ANNOTATION};
use crate::labels::{
    MIN_MEMBER_ANNOTATION, TASK_TYPE_LABEL, TaskType, Tier, URGENCY_LABEL, USER_TIER_ANNOTATION,
    Urgency, UserTier, parse_deadline_annotation, parse_min_member,
};

/// An admitted pod's ordering facts, each its default when absent or unreadable.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmittedLabels {
    /// The tier recorded at admission (`gpufair.io/tier`), else the task type's.
    pub tier: Tier,
    /// The deadline recorded at admission (`gpufair.io/admitted-deadline`), Unix seconds.
    pub deadline_s: Option<f64>,
    pub urgency: Urgency,
    pub user_tier: UserTier,
    /// Pods of its gang released together; 1 without a readable `gpufair.io/min-member`.
    pub min_member: u32,
}

/// Reads an admitted pod's labels and annotations.
pub fn read_admitted_labels(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> AdmittedLabels {
    let tier = annotations
        .get(TIER_ANNOTATION)
        .and_then(|t| Tier::parse(t))
        .unwrap_or_else(|| {
            labels
                .get(TASK_TYPE_LABEL)
                .and_then(|t| TaskType::parse(t))
                .unwrap_or_default()
                .tier()
        });
    AdmittedLabels {
        tier,
        deadline_s: annotations
            .get(ADMITTED_DEADLINE_ANNOTATION)
            .and_then(|text| parse_deadline_annotation(text).ok())
            .map(|d| d.at_unix_seconds as f64),
        urgency: labels
            .get(URGENCY_LABEL)
            .and_then(|u| Urgency::parse(u))
            .unwrap_or_default(),
        user_tier: annotations
            .get(USER_TIER_ANNOTATION)
            .and_then(|t| UserTier::parse(t))
            .unwrap_or_default(),
        min_member: annotations
            .get(MIN_MEMBER_ANNOTATION)
            .and_then(|v| parse_min_member(v).ok())
            .unwrap_or(1),
    }
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
    fn a_pod_without_labels_reads_as_every_default() {
        let read = read_admitted_labels(&map(&[]), &map(&[]));
        assert_eq!(
            read,
            AdmittedLabels {
                tier: TaskType::default().tier(),
                deadline_s: None,
                urgency: Urgency::default(),
                user_tier: UserTier::default(),
                min_member: 1,
            }
        );
    }

    #[test]
    fn recorded_values_win_and_each_is_read_by_its_grammar() {
        let read = read_admitted_labels(
            &map(&[(TASK_TYPE_LABEL, "train"), (URGENCY_LABEL, "high")]),
            &map(&[
                (TIER_ANNOTATION, "realtime"),
                (ADMITTED_DEADLINE_ANNOTATION, "2024-05-15T18:00:00Z"),
                (USER_TIER_ANNOTATION, "premium"),
                (MIN_MEMBER_ANNOTATION, " 4 "),
            ]),
        );
        assert_eq!(read.tier, Tier::Realtime);
        assert_eq!(read.deadline_s, Some(1_715_796_000.0));
        assert_eq!(read.urgency, Urgency::High);
        assert_eq!(read.user_tier, UserTier::Premium);
        assert_eq!(read.min_member, 4);
        let by_task = read_admitted_labels(&map(&[(TASK_TYPE_LABEL, "inference")]), &map(&[]));
        assert_eq!(by_task.tier, TaskType::Inference.tier());
    }

    #[test]
    fn values_edited_since_admission_fall_back_to_their_defaults() {
        let read = read_admitted_labels(
            &map(&[(TASK_TYPE_LABEL, "sometimes"), (URGENCY_LABEL, "asap")]),
            &map(&[
                (TIER_ANNOTATION, "gold"),
                (ADMITTED_DEADLINE_ANNOTATION, "tomorrow"),
                (USER_TIER_ANNOTATION, "vip"),
                (MIN_MEMBER_ANNOTATION, "0"),
            ]),
        );
        assert_eq!(read, read_admitted_labels(&map(&[]), &map(&[])));
    }
}
