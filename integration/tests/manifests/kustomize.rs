//! A renderer for the subset of kustomize that `deploy/` uses, so CI renders every overlay
//! without kubectl: `resources` (files and directories), `patches` (strategic merge by file
//! or inline, including `$patch: delete` of a whole object, and JSON 6902 with a target),
//! `labels` (pairs on metadata only) and `configMapGenerator` (files, without a name hash).
//! Anything else in a kustomization is refused by name, so the renderer cannot silently drift
//! from kustomize; where kubectl is installed, a test compares the two.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

/// Fields a kustomization here may use.
const SUPPORTED: &[&str] = &[
    "apiVersion",
    "kind",
    "resources",
    "patches",
    "labels",
    "configMapGenerator",
];

/// Lists merged element by element in a strategic merge patch, and the key that matches them
/// (from the Kubernetes API's patchMergeKey); every other list is replaced.
const MERGE_KEYS: &[(&str, &str)] = &[
    ("containers", "name"),
    ("initContainers", "name"),
    ("volumes", "name"),
    ("env", "name"),
    ("volumeMounts", "mountPath"),
    ("webhooks", "name"),
];

pub fn yaml_documents(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    yaml_text_documents(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn yaml_text_documents(text: &str) -> Result<Vec<Value>, String> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let value = serde_yaml::Value::deserialize(doc).map_err(|e| e.to_string())?;
            serde_json::to_value(value).map_err(|e| e.to_string())
        })
        .filter(|v| !matches!(v, Ok(Value::Null)))
        .collect()
}

/// `kind/namespace/name`, the identity kustomize matches patches by.
pub fn id(object: &Value) -> String {
    format!(
        "{}/{}/{}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// Renders the kustomization in `dir`.
pub fn render(dir: &Path) -> Result<Vec<Value>, String> {
    let file = dir.join("kustomization.yaml");
    let kustomization = yaml_documents(&file)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: empty", file.display()))?;
    let fields = kustomization
        .as_object()
        .ok_or_else(|| format!("{}: not a mapping", file.display()))?;
    for key in fields.keys() {
        if !SUPPORTED.contains(&key.as_str()) {
            return Err(format!(
                "{}: field {key} is not supported by this renderer (supported: {})",
                file.display(),
                SUPPORTED.join(", ")
            ));
        }
    }
    let mut objects = Vec::new();
    for resource in strings(&kustomization["resources"], &file, "resources")? {
        let path = dir.join(&resource);
        if path.is_dir() {
            objects.extend(render(&path)?);
        } else {
            objects.extend(yaml_documents(&path)?);
        }
    }
    for generator in list(&kustomization["configMapGenerator"]) {
        objects.push(generate_config_map(dir, generator, &file)?);
    }
    for patch in list(&kustomization["patches"]) {
        apply_patch(dir, patch, &file, &mut objects)?;
    }
    for label in list(&kustomization["labels"]) {
        for flag in ["includeSelectors", "includeTemplates"] {
            if label[flag].as_bool() == Some(true) {
                return Err(format!(
                    "{}: labels.{flag} is not supported",
                    file.display()
                ));
            }
        }
        let pairs = label["pairs"]
            .as_object()
            .ok_or_else(|| format!("{}: labels entry without pairs", file.display()))?;
        for object in &mut objects {
            let labels = object["metadata"]
                .as_object_mut()
                .ok_or_else(|| format!("{}: an object without metadata", file.display()))?
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            for (key, value) in pairs {
                labels[key] = value.clone();
            }
        }
    }
    let mut seen = BTreeSet::new();
    for object in &objects {
        if !seen.insert(id(object)) {
            return Err(format!(
                "{}: {} is defined twice",
                file.display(),
                id(object)
            ));
        }
    }
    Ok(objects)
}

fn list(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

fn strings(value: &Value, file: &Path, field: &str) -> Result<Vec<String>, String> {
    list(value)
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{}: {field} holds a non-string", file.display()))
        })
        .collect()
}

fn generate_config_map(dir: &Path, generator: &Value, file: &Path) -> Result<Value, String> {
    let name = generator["name"]
        .as_str()
        .ok_or_else(|| format!("{}: configMapGenerator without a name", file.display()))?;
    if generator["options"]["disableNameSuffixHash"].as_bool() != Some(true) {
        return Err(format!(
            "{}: configMapGenerator {name}: only options.disableNameSuffixHash: true is supported",
            file.display()
        ));
    }
    let mut data = Map::new();
    for source in strings(&generator["files"], file, "configMapGenerator.files")? {
        let path: PathBuf = dir.join(&source);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        data.insert(source, Value::String(text));
    }
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::String(name.into()));
    if let Some(namespace) = generator["namespace"].as_str() {
        metadata.insert("namespace".into(), Value::String(namespace.into()));
    }
    if let Some(labels) = generator["options"]["labels"].as_object() {
        metadata.insert("labels".into(), Value::Object(labels.clone()));
    }
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": data,
    }))
}

fn apply_patch(
    dir: &Path,
    entry: &Value,
    file: &Path,
    objects: &mut Vec<Value>,
) -> Result<(), String> {
    let documents = match (entry["path"].as_str(), entry["patch"].as_str()) {
        (Some(path), None) => yaml_documents(&dir.join(path))?,
        (None, Some(text)) => {
            yaml_text_documents(text).map_err(|e| format!("{}: {e}", file.display()))?
        }
        _ => {
            return Err(format!(
                "{}: a patch needs exactly one of path and patch",
                file.display()
            ));
        }
    };
    let [patch] = documents.as_slice() else {
        return Err(format!(
            "{}: a patch holds one document (kustomize refuses several)",
            file.display()
        ));
    };
    if patch.is_array() {
        let target = &entry["target"];
        let wanted = format!(
            "{}/{}/{}",
            target["kind"].as_str().unwrap_or("?"),
            target["namespace"].as_str().unwrap_or(""),
            target["name"].as_str().unwrap_or("?")
        );
        let object = objects
            .iter_mut()
            .find(|o| id(o) == wanted)
            .ok_or_else(|| format!("{}: JSON patch target {wanted} not found", file.display()))?;
        let operations: json_patch::Patch = serde_json::from_value(patch.clone())
            .map_err(|e| format!("{}: not a JSON patch: {e}", file.display()))?;
        return json_patch::patch(object, &operations)
            .map_err(|e| format!("{}: JSON patch on {wanted}: {e}", file.display()));
    }
    let wanted = id(patch);
    let index = objects
        .iter()
        .position(|o| id(o) == wanted && o["apiVersion"] == patch["apiVersion"])
        .ok_or_else(|| {
            format!(
                "{}: no resource matches the patch for {wanted}",
                file.display()
            )
        })?;
    if patch["$patch"].as_str() == Some("delete") {
        objects.remove(index);
        return Ok(());
    }
    strategic_merge(&mut objects[index], patch, "")
        .map_err(|e| format!("{}: patch for {wanted}: {e}", file.display()))
}

fn strategic_merge(target: &mut Value, patch: &Value, field: &str) -> Result<(), String> {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if key.starts_with('$') {
                    return Err(format!("directive {key} under {field:?} is not supported"));
                }
                if value.is_null() {
                    target.remove(key);
                } else if let Some(existing) = target.get_mut(key) {
                    strategic_merge(existing, value, key)?;
                } else {
                    target.insert(key.clone(), value.clone());
                }
            }
            Ok(())
        }
        (Value::Array(target), Value::Array(patch)) => {
            match MERGE_KEYS.iter().find(|(list, _)| *list == field) {
                Some((_, key)) => {
                    // Elements new to the list go first, in the patch's order, as kustomize
                    // places them.
                    let mut added = Vec::new();
                    for element in patch {
                        let wanted = &element[*key];
                        if wanted.is_null() {
                            return Err(format!("an element of {field} has no {key}"));
                        }
                        match target.iter_mut().find(|e| &e[*key] == wanted) {
                            Some(existing) => strategic_merge(existing, element, "")?,
                            None => added.push(element.clone()),
                        }
                    }
                    target.splice(0..0, added);
                }
                None => *target = patch.clone(),
            }
            Ok(())
        }
        (target, patch) => {
            *target = patch.clone();
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_follows_merge_keys_and_null_deletes() {
        let mut object = json!({"spec": {"nodeSelector": {"a": "1", "b": "2"},
            "containers": [{"name": "c", "args": ["x"], "env": [{"name": "E", "value": "1"}]}],
            "tolerations": [{"key": "t"}]}});
        let patch = json!({"spec": {"nodeSelector": {"a": null, "c": "3"},
            "containers": [{"name": "c", "args": ["y"], "env": [{"name": "F", "value": "2"}]},
                           {"name": "d"}],
            "tolerations": [{"key": "u"}]}});
        strategic_merge(&mut object, &patch, "").unwrap();
        assert_eq!(
            object,
            json!({"spec": {"nodeSelector": {"b": "2", "c": "3"},
                "containers": [{"name": "d"},
                               {"name": "c", "args": ["y"],
                                "env": [{"name": "F", "value": "2"}, {"name": "E", "value": "1"}]}],
                "tolerations": [{"key": "u"}]}})
        );
        let bad = json!({"spec": {"containers": [{"$patch": "replace", "name": "c"}]}});
        assert!(strategic_merge(&mut object, &bad, "").is_err());
    }
}
