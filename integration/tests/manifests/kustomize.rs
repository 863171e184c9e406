//! Every kustomization is rendered by the real `kubectl kustomize` (the kubectl the end-to-end
//! control plane is built with, `gpufair_integration::controlplane::Binaries`), so what these
//! tests check is exactly what `kubectl apply -k` would send; no API server is needed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;
use serde_json::Value;

pub fn yaml_documents(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    yaml_text_documents(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn yaml_text_documents(text: &str) -> Result<Vec<Value>, String> {
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

/// Each directory's rendering (or why it failed), by path.
type Renderings = BTreeMap<String, Result<Vec<Value>, String>>;

/// Renders the kustomization in `dir` with `kubectl kustomize`; each directory once per test
/// process.
pub fn render(dir: &Path) -> Result<Vec<Value>, String> {
    static RENDERED: OnceLock<Mutex<Renderings>> = OnceLock::new();
    let key = dir.display().to_string();
    let cache = RENDERED.get_or_init(Mutex::default);
    if let Some(found) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return found.clone();
    }
    let rendered = render_uncached(dir);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, rendered.clone());
    rendered
}

fn render_uncached(dir: &Path) -> Result<Vec<Value>, String> {
    let binaries =
        gpufair_integration::controlplane::Binaries::locate().map_err(|e| e.to_string())?;
    let output = std::process::Command::new(&binaries.kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| format!("could not run {}: {e}", binaries.kubectl.display()))?;
    if !output.status.success() {
        return Err(format!(
            "kubectl kustomize {}: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let objects = yaml_text_documents(&text)?;
    let mut seen = std::collections::BTreeSet::new();
    for object in &objects {
        if !seen.insert(id(object)) {
            return Err(format!(
                "{}: {} is rendered twice",
                dir.display(),
                id(object)
            ));
        }
    }
    Ok(objects)
}
