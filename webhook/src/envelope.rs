//! The AdmissionReview as far as admission reads it.
//!
//! Strings borrow from the body where they can. The object's type is a parameter: the pod
//! itself when the review is read in one pass, or its raw JSON when the envelope is read first
//! and the pod after (see `admission::review` for when each is used).

use std::borrow::Cow;

use serde::Deserialize;

use crate::pod::Text;

/// The AdmissionReview version and kind gpufair reads and answers.
pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewIn<'a, O> {
    #[serde(default, borrow)]
    pub api_version: Cow<'a, str>,
    #[serde(default, borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    pub request: Option<RequestIn<'a, O>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestIn<'a, O> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: KindIn<'a>,
    #[serde(borrow)]
    pub operation: Cow<'a, str>,
    #[serde(default, borrow)]
    pub sub_resource: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub namespace: Option<Text<'a>>,
    /// Absent reads as `None`, as an `Option` field does without `default` (which would ask
    /// `O: Default`).
    pub object: Option<O>,
}

#[derive(Deserialize)]
pub struct KindIn<'a> {
    #[serde(default, borrow)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
}

impl<O> RequestIn<'_, O> {
    /// Only a Pod CREATE (not a subresource such as a binding) is planned; everything else is
    /// allowed unchanged.
    pub fn is_pod_create(&self) -> bool {
        self.kind.group.is_empty()
            && self.kind.kind == "Pod"
            && self.operation == "CREATE"
            && self.sub_resource.is_none()
    }
}
