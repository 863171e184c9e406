//! The patch formats: JSON patch (RFC 6902, `test` included), JSON merge patch (RFC 7386), and
//! the subset of strategic merge patch that gpufair's components and kube-rs send for built-in
//! kinds.
//!
//! Strategic merge patch support: maps merge recursively and `null` deletes a field (as in
//! merge patch); lists whose Kubernetes type declares `patchStrategy: merge` merge by their key
//! (see [`merge_key`]); other lists are replaced. Directives: `$patch: replace` and
//! `$patch: delete` (in maps and in keyed list items), `$deleteFromPrimitiveList/<field>`,
//! `$retainKeys`, and `$setElementOrder/<field>` (accepted; the stand-in keeps the existing order
//! and appends new items). Custom resources refuse strategic merge patch with 415, as the real
//! server does.

use serde_json::{Map, Value};

use super::status::ApiError;

/// The patch content types the stand-in accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
            ))),
        }
    }
}

fn rejected(detail: impl std::fmt::Display) -> ApiError {
    ApiError::unprocessable(format!(
        "the server rejected our request due to an error in our request: {detail}"
    ))
}

/// Applies an RFC 6902 patch. A failed `test` or a missing path is 422, as the real server
/// answers; a body that is not a patch at all is 400.
pub fn apply_json_patch(document: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let patch: json_patch::Patch = serde_json::from_slice(patch).map_err(|err| {
        ApiError::bad_request(format!(
            "the body of the request is not a JSON patch (a list of {{op, path, value}} operations): {err}"
        ))
    })?;
    let mut out = document.clone();
    json_patch::patch(&mut out, &patch).map_err(rejected)?;
    Ok(out)
}

/// Applies an RFC 7386 merge patch.
pub fn apply_merge_patch(document: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(patch).map_err(|err| {
        ApiError::bad_request(format!("the body of the request is not JSON: {err}"))
    })?;
    if !patch.is_object() {
        return Err(ApiError::bad_request("a merge patch must be a JSON object"));
    }
    let mut out = document.clone();
    json_patch::merge(&mut out, &patch);
    Ok(out)
}

/// The key a list at `path` merges by under strategic merge patch, `Some("")` for lists of
/// scalars merged as sets, or `None` for lists that are replaced. Paths skip list indices.
pub fn merge_key(path: &[&str]) -> Option<&'static str> {
    let last = *path.last()?;
    let parent = path.len().checked_sub(2).map(|i| path[i]);
    match (parent, last) {
        (Some("spec"), "containers" | "initContainers" | "ephemeralContainers") => Some("name"),
        (Some("spec"), "volumes" | "schedulingGates" | "imagePullSecrets" | "resourceClaims") => {
            Some("name")
        }
        (Some("spec"), "podCIDRs") => Some(""),
        (Some("containers" | "initContainers" | "ephemeralContainers"), "env") => Some("name"),
        (Some("containers" | "initContainers" | "ephemeralContainers"), "ports") => {
            Some("containerPort")
        }
        (Some("containers" | "initContainers" | "ephemeralContainers"), "volumeMounts") => {
            Some("mountPath")
        }
        (Some("status"), "conditions") => Some("type"),
        (Some("status"), "addresses") => Some("type"),
        (Some("metadata"), "ownerReferences") => Some("uid"),
        (Some("metadata"), "finalizers") => Some(""),
        _ => None,
    }
}

/// Applies a strategic merge patch to a built-in object.
pub fn apply_strategic_patch(document: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(patch).map_err(|err| {
        ApiError::bad_request(format!("the body of the request is not JSON: {err}"))
    })?;
    let Value::Object(patch) = patch else {
        return Err(ApiError::bad_request(
            "a strategic merge patch must be a JSON object",
        ));
    };
    let mut path = Vec::new();
    Ok(merge_map(
        document.as_object().cloned().unwrap_or_default(),
        patch,
        &mut path,
    )?
    .map(Value::Object)
    .unwrap_or(Value::Null))
}

/// Merges `patch` into `base`; `None` when a `$patch: delete` removes the whole map.
fn merge_map(
    mut base: Map<String, Value>,
    mut patch: Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<Option<Map<String, Value>>, ApiError> {
    match patch.remove("$patch") {
        None => {}
        Some(Value::String(d)) if d == "replace" => return Ok(Some(strip_directives(patch))),
        Some(Value::String(d)) if d == "delete" => return Ok(None),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch directive $patch: {other}; accepted: replace, delete"
            )));
        }
    }
    if let Some(retain) = patch.remove("$retainKeys") {
        let keys: Vec<&str> = retain
            .as_array()
            .ok_or_else(|| ApiError::bad_request("$retainKeys must be a list of field names"))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        base.retain(|k, _| keys.contains(&k.as_str()));
    }
    let mut deletions = Vec::new();
    for key in patch.keys() {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            deletions.push((key.clone(), field.to_string()));
        } else if key.starts_with("$setElementOrder/") {
            deletions.push((key.clone(), String::new()));
        } else if key.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "unknown strategic merge patch directive {key:?}; accepted: $patch, $retainKeys, $deleteFromPrimitiveList/<field>, $setElementOrder/<field>"
            )));
        }
    }
    for (key, field) in deletions {
        let values = patch.remove(&key).unwrap_or(Value::Null);
        if field.is_empty() {
            continue;
        }
        let remove: Vec<Value> = values.as_array().cloned().unwrap_or_default();
        if let Some(Value::Array(items)) = base.get_mut(&field) {
            items.retain(|item| !remove.contains(item));
        }
    }
    for (key, value) in patch {
        path.push(key.clone());
        let merged = match (base.remove(&key), value) {
            (_, Value::Null) => None,
            (Some(Value::Object(old)), Value::Object(new)) => {
                merge_map(old, new, path)?.map(Value::Object)
            }
            (_, Value::Object(new)) => merge_map(Map::new(), new, path)?.map(Value::Object),
            (Some(Value::Array(old)), Value::Array(new)) => {
                Some(Value::Array(merge_list(old, new, path)?))
            }
            (_, Value::Array(new)) => Some(Value::Array(merge_list(Vec::new(), new, path)?)),
            (_, other) => Some(other),
        };
        path.pop();
        if let Some(value) = merged {
            base.insert(key, value);
        }
    }
    Ok(Some(base))
}

fn strip_directives(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .collect()
}

fn merge_list(
    base: Vec<Value>,
    patch: Vec<Value>,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, ApiError> {
    if patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(patch
            .into_iter()
            .filter(|item| item.get("$patch").is_none())
            .collect());
    }
    let key = {
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        merge_key(&names)
    };
    let at = path.join(".");
    match key {
        None => Ok(patch),
        Some("") => {
            let mut out = base;
            for item in patch {
                if !out.contains(&item) {
                    out.push(item);
                }
            }
            Ok(out)
        }
        Some(key) => {
            let mut out = base;
            for item in patch {
                let Value::Object(mut item) = item else {
                    return Err(ApiError::bad_request(format!(
                        "{at}: items of a list merged by {key:?} must be objects"
                    )));
                };
                let Some(id) = item.get(key).cloned() else {
                    return Err(ApiError::bad_request(format!(
                        "{at}: an item has no merge key {key:?}"
                    )));
                };
                let position = out.iter().position(|old| old.get(key) == Some(&id));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(at), true) => {
                        out.remove(at);
                    }
                    (None, true) => {}
                    (Some(at), false) => {
                        let old = out[at].as_object().cloned().unwrap_or_default();
                        match merge_map(old, std::mem::take(&mut item), path)? {
                            Some(merged) => out[at] = Value::Object(merged),
                            None => {
                                out.remove(at);
                            }
                        }
                    }
                    (None, false) => out.push(Value::Object(strip_directives(item))),
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failed_test_op_is_422() {
        let pod = json!({"spec": {"schedulingGates": [{"name": "a"}]}});
        let patch = br#"[{"op":"test","path":"/spec/schedulingGates/0/name","value":"b"},{"op":"remove","path":"/spec/schedulingGates/0"}]"#;
        let err = apply_json_patch(&pod, patch).unwrap_err();
        assert_eq!(err.code, 422);
        let patch = br#"[{"op":"test","path":"/spec/schedulingGates/0/name","value":"a"},{"op":"remove","path":"/spec/schedulingGates/0"}]"#;
        let out = apply_json_patch(&pod, patch).unwrap();
        assert_eq!(out["spec"]["schedulingGates"], json!([]));
        assert_eq!(apply_json_patch(&pod, b"{}").unwrap_err().code, 400);
    }

    #[test]
    fn merge_patch_deletes_with_null() {
        let out = apply_merge_patch(
            &json!({"a": 1, "b": {"c": 2}}),
            br#"{"a": null, "b": {"d": 3}}"#,
        )
        .unwrap();
        assert_eq!(out, json!({"b": {"c": 2, "d": 3}}));
    }

    #[test]
    fn strategic_merge_by_key_and_directives() {
        let pod = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"containers": [{"name": "main", "image": "x:1"}, {"name": "side", "image": "y:1"}],
                     "tolerations": [{"key": "t1"}], "schedulingGates": [{"name": "g1"}, {"name": "g2"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        });
        let patch = json!({
            "metadata": {"finalizers": ["b"]},
            "spec": {"containers": [{"name": "main", "image": "x:2"}],
                     "tolerations": [{"key": "t2"}],
                     "schedulingGates": [{"name": "g1", "$patch": "delete"}],
                     "$setElementOrder/schedulingGates": [{"name": "g2"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}
        });
        let out = apply_strategic_patch(&pod, patch.to_string().as_bytes()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(out["spec"]["containers"][0]["image"], "x:2");
        assert_eq!(out["spec"]["containers"][1]["image"], "y:1");
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "t2"}]));
        assert_eq!(out["spec"]["schedulingGates"], json!([{"name": "g2"}]));
        assert_eq!(out["status"]["conditions"][0]["status"], "True");
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
        let replace = json!({"spec": {"$patch": "replace", "containers": []}});
        let out = apply_strategic_patch(&pod, replace.to_string().as_bytes()).unwrap();
        assert_eq!(out["spec"], json!({"containers": []}));
        let bad = json!({"spec": {"$bogus": 1}});
        assert_eq!(
            apply_strategic_patch(&pod, bad.to_string().as_bytes())
                .unwrap_err()
                .code,
            400
        );
        let prim = json!({"$deleteFromPrimitiveList/finalizers": ["a"], "metadata": {}});
        let out = apply_strategic_patch(
            &json!({"finalizers": ["a", "c"]}),
            prim.to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(out["finalizers"], json!(["c"]));
    }
}
