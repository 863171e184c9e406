//! The AdmissionReview the webhook answers with, written into one buffer sized up front.
//!
//! Written by hand rather than through a serde struct for the patch's sake: the JSON patch is
//! base64-encoded (the API server decodes `[]byte` from a base64 string) straight into the
//! output, where serde would build the base64 text as its own string and then scan all of it
//! again for characters to escape, which base64 never contains. The fields and their order are
//! those `admission.k8s.io/v1` names, as `#[derive(Serialize)]` would write them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::envelope::API_VERSION;

/// The `response` of an AdmissionReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewResponse<'a> {
    pub uid: &'a str,
    pub allowed: bool,
    /// `status.message`: why the pod was denied.
    pub status_message: Option<String>,
    /// The JSON patch, as JSON (encoded to base64 on the way out).
    pub patch: Option<Vec<u8>>,
    /// Shown to the user by kubectl.
    pub warnings: Vec<String>,
}

impl<'a> ReviewResponse<'a> {
    pub fn allowed(uid: &'a str) -> Self {
        Self {
            uid,
            allowed: true,
            status_message: None,
            patch: None,
            warnings: Vec::new(),
        }
    }

    pub fn deny(mut self, message: impl Into<String>) -> Self {
        self.allowed = false;
        self.status_message = Some(message.into());
        self.patch = None;
        self
    }

    /// The whole AdmissionReview, as the API server reads it.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        let strings = self.uid.len()
            + self.status_message.as_ref().map_or(0, String::len)
            + self.warnings.iter().map(|w| w.len() + 3).sum::<usize>();
        let patch = self.patch.as_ref().map_or(0, |p| p.len().div_ceil(3) * 4);
        // Room for the fixed text and a little escaping; a longer answer only reallocates.
        let mut out = Vec::with_capacity(160 + strings + strings / 8 + patch);
        out.extend_from_slice(br#"{"apiVersion":"#);
        serde_json::to_writer(&mut out, API_VERSION)?;
        out.extend_from_slice(br#","kind":"AdmissionReview","response":{"uid":"#);
        serde_json::to_writer(&mut out, self.uid)?;
        out.extend_from_slice(if self.allowed {
            br#","allowed":true"#
        } else {
            br#","allowed":false"#
        });
        if let Some(message) = &self.status_message {
            out.extend_from_slice(br#","status":{"message":"#);
            serde_json::to_writer(&mut out, message)?;
            out.push(b'}');
        }
        if let Some(patch) = &self.patch {
            out.extend_from_slice(br#","patch":""#);
            push_base64(&mut out, patch);
            out.extend_from_slice(br#"","patchType":"JSONPatch""#);
        }
        if !self.warnings.is_empty() {
            out.extend_from_slice(br#","warnings":"#);
            serde_json::to_writer(&mut out, &self.warnings)?;
        }
        out.extend_from_slice(b"}}");
        Ok(out)
    }
}

/// Appends `bytes` in standard, padded base64.
fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + bytes.len().div_ceil(3) * 4, 0);
    if let Err(err) = BASE64.encode_slice(bytes, &mut out[start..]) {
        // The slice is sized for padded output, so this does not happen; if it did, the
        // allocating encoder still gives the right text.
        tracing::warn!(error = %err, "base64 output size misjudged");
        out.truncate(start);
        out.extend_from_slice(BASE64.encode(bytes).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    /// The response as a serde struct, the way it was written before: the reference for the
    /// hand-written bytes.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ReviewOut<'a> {
        api_version: &'static str,
        kind: &'static str,
        response: ResponseOut<'a>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ResponseOut<'a> {
        uid: &'a str,
        allowed: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<StatusOut>,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch_type: Option<&'static str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    }

    #[derive(Serialize)]
    struct StatusOut {
        message: String,
    }

    fn reference(response: &ReviewResponse<'_>) -> Vec<u8> {
        serde_json::to_vec(&ReviewOut {
            api_version: API_VERSION,
            kind: "AdmissionReview",
            response: ResponseOut {
                uid: response.uid,
                allowed: response.allowed,
                status: response
                    .status_message
                    .clone()
                    .map(|message| StatusOut { message }),
                patch: response.patch.as_ref().map(|p| BASE64.encode(p)),
                patch_type: response.patch.as_ref().map(|_| "JSONPatch"),
                warnings: response.warnings.clone(),
            },
        })
        .unwrap()
    }

    #[test]
    fn writes_the_same_bytes_as_the_serde_struct() {
        let odd = "u\"i\\d\n\t\u{1}é🚀</script>";
        let mut cases = vec![
            ReviewResponse::allowed("u-1"),
            ReviewResponse::allowed(odd),
            ReviewResponse::allowed("").deny(odd),
            ReviewResponse::allowed("u").deny(""),
        ];
        // Patches of every length modulo 3, so every padding case is written.
        for len in [0, 1, 2, 3, 4, 5, 1000, 1001, 1002] {
            let patch: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            let mut response = ReviewResponse::allowed(odd);
            response.patch = Some(patch);
            cases.push(response.clone());
            response.warnings = vec![odd.to_string(), String::new(), "plain".into()];
            cases.push(response);
        }
        let mut warned = ReviewResponse::allowed("u");
        warned.warnings = vec!["only a warning".into()];
        cases.push(warned.clone());
        cases.push(warned.deny("denied with warnings"));
        for case in &cases {
            let written = String::from_utf8(case.encode().unwrap()).unwrap();
            let expected = String::from_utf8(reference(case)).unwrap();
            assert_eq!(written, expected, "for {case:?}");
        }
    }

    #[test]
    fn a_denial_drops_the_patch() {
        let mut response = ReviewResponse::allowed("u");
        response.patch = Some(b"[]".to_vec());
        let denied = response.deny("no");
        assert!(denied.patch.is_none() && !denied.allowed);
        let review: serde_json::Value = serde_json::from_slice(&denied.encode().unwrap()).unwrap();
        assert_eq!(review["response"]["status"]["message"], "no");
        assert!(review["response"].get("patchType").is_none());
    }
}
