//! `WorkloadFamily`: the smoothed peak GPU memory of one family of pods, for right-sizing.
//!
//! The controller creates one per family in the pods' namespace (named by the family key:
//! the `gpufair.io/family` label, or `<owner kind>.<owner name prefix>`) and folds each finished
//! pod's peak into its status; the webhook reads the status when an opted-in pod is created.
//! A CRD rather than a ConfigMap: its status is schema-checked and generated from these types
//! like the other CRDs, RBAC can grant exactly this kind, `kubectl get workloadfamilies` shows
//! the predictions, and no single object grows with the number of families.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the family is recognised.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema,
)]
#[kube(
    group = "gpufair.io",
    version = "v1alpha1",
    kind = "WorkloadFamily",
    plural = "workloadfamilies",
    shortname = "wlf",
    namespaced,
    status = "WorkloadFamilyStatus",
    printcolumn = r#"{"name":"Peak-MiB","type":"integer","jsonPath":".status.smoothedPeakMiB"}"#,
    printcolumn = r#"{"name":"Samples","type":"integer","jsonPath":".status.samples"}"#,
    printcolumn = r#"{"name":"Updated","type":"date","jsonPath":".status.updated"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadFamilySpec {
    /// The `gpufair.io/family` label value, when the family is named by the label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The controlling owner's kind, when the family is named by its owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_kind: Option<String>,
    /// The owner's name without generated suffixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
}

/// The family's history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadFamilyStatus {
    /// Exponentially smoothed peak GPU memory per device, in bytes.
    pub smoothed_peak_bytes: u64,
    /// The same in MiB, for people (a printer column).
    #[serde(rename = "smoothedPeakMiB")]
    pub smoothed_peak_mib: u64,
    /// Pods whose peak was folded in.
    pub samples: u32,
    /// The newest pod's peak, in bytes.
    pub last_peak_bytes: u64,
    /// When the last peak was folded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<Time>,
}

impl WorkloadFamilyStatus {
    /// The history core's right-sizing reads.
    pub fn history(&self) -> gpufair_core::rightsize::FamilyHistory {
        gpufair_core::rightsize::FamilyHistory {
            smoothed_peak_bytes: self.smoothed_peak_bytes as f64,
            samples: self.samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn crd_is_namespaced_with_a_status() {
        let crd = WorkloadFamily::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("workloadfamilies.gpufair.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn status_round_trips() {
        let status = WorkloadFamilyStatus {
            smoothed_peak_bytes: 3 << 30,
            smoothed_peak_mib: 3072,
            samples: 4,
            last_peak_bytes: 2 << 30,
            updated: None,
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["smoothedPeakMiB"], 3072);
        assert_eq!(json["smoothedPeakBytes"], 3u64 << 30);
        let back: WorkloadFamilyStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back.history().samples, 4);
    }
}
