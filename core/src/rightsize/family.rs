//! Which workload family a pod belongs to, and whether it opted in to right-sizing.

use std::collections::BTreeMap;

use crate::labels::LabelError;

/// Explicit family label; wins over the owner-derived family.
pub const FAMILY_LABEL: &str = "gpufair.io/family";
/// Opt-in label for right-sizing.
pub const RIGHT_SIZE_LABEL: &str = "gpufair.io/right-size";

pub const FAMILY_FORMS: &str = "1 to 63 lowercase letters, digits or '-', starting and ending \
     with a letter or digit (a DNS-1123 label), e.g. llama-finetune";
pub const RIGHT_SIZE_FORMS: &str = "\"true\" or \"false\"";

/// The pod's controlling owner (`ownerReferences` entry with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerFacts {
    pub kind: String,
    pub name: String,
}

fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// An owner's name without the parts its controller generated: trailing `-`-separated segments
/// that contain a digit (a ReplicaSet's template hash `web-7d9f8c6b5`, a CronJob's schedule time
/// `nightly-eval-28571234`, a run number `train-3`). At least the first segment is kept, so
/// `resnet50` stays `resnet50`.
pub fn name_prefix(name: &str) -> &str {
    let mut prefix = name;
    while let Some((head, last)) = prefix.rsplit_once('-') {
        if head.is_empty() || !last.bytes().any(|b| b.is_ascii_digit()) {
            break;
        }
        prefix = head;
    }
    prefix
}

/// The family key, also the name of its `WorkloadFamily` object in the pod's namespace:
/// the `gpufair.io/family` label's value, else `<owner kind, lowercase>.<owner name prefix>`
/// (the `.` keeps the two kinds of keys apart: a label value cannot contain one). `None` for a
/// pod with neither.
pub fn family_of(
    labels: &BTreeMap<String, String>,
    owner: Option<&OwnerFacts>,
) -> Result<Option<String>, LabelError> {
    if let Some(value) = labels.get(FAMILY_LABEL) {
        if !is_dns_label(value) {
            return Err(LabelError {
                kind: "label",
                key: FAMILY_LABEL,
                value: value.clone(),
                expected: FAMILY_FORMS.to_string(),
            });
        }
        return Ok(Some(value.clone()));
    }
    Ok(owner
        .filter(|o| !o.kind.is_empty() && !o.name.is_empty())
        .map(|o| format!("{}.{}", o.kind.to_ascii_lowercase(), name_prefix(&o.name))))
}

/// Whether the pod opted in to right-sizing: `gpufair.io/right-size` is `"true"` or `"false"`.
pub fn parse_opt_in(labels: &BTreeMap<String, String>) -> Result<bool, LabelError> {
    match labels.get(RIGHT_SIZE_LABEL).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(LabelError {
            kind: "label",
            key: RIGHT_SIZE_LABEL,
            value: other.to_string(),
            expected: RIGHT_SIZE_FORMS.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn owner(kind: &str, name: &str) -> OwnerFacts {
        OwnerFacts {
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn prefixes_drop_generated_segments_only() {
        assert_eq!(name_prefix("web-7d9f8c6b5"), "web");
        assert_eq!(name_prefix("nightly-eval-28571234"), "nightly-eval");
        assert_eq!(name_prefix("train-llama-run-3"), "train-llama-run");
        assert_eq!(name_prefix("resnet50"), "resnet50");
        assert_eq!(name_prefix("bert-base"), "bert-base");
        assert_eq!(name_prefix("-7"), "-7");
    }

    #[test]
    fn label_wins_over_owner() {
        let o = owner("Job", "train-42");
        assert_eq!(
            family_of(&labels(&[]), Some(&o)).unwrap().as_deref(),
            Some("job.train")
        );
        assert_eq!(
            family_of(&labels(&[(FAMILY_LABEL, "llama")]), Some(&o))
                .unwrap()
                .as_deref(),
            Some("llama")
        );
        assert_eq!(family_of(&labels(&[]), None).unwrap(), None);
    }

    #[test]
    fn bad_values_name_the_label_and_the_forms() {
        for bad in ["", "Llama", "a.b", "-x", "x-", &"a".repeat(64)] {
            let err = family_of(&labels(&[(FAMILY_LABEL, bad)]), None).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(FAMILY_LABEL) && text.contains("DNS-1123"),
                "{text}"
            );
        }
        let err = parse_opt_in(&labels(&[(RIGHT_SIZE_LABEL, "yes")])).unwrap_err();
        assert!(err.to_string().contains("\"true\" or \"false\""), "{err}");
        assert!(parse_opt_in(&labels(&[(RIGHT_SIZE_LABEL, "true")])).unwrap());
        assert!(!parse_opt_in(&labels(&[(RIGHT_SIZE_LABEL, "false")])).unwrap());
        assert!(!parse_opt_in(&labels(&[])).unwrap());
    }
}
