//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`, `/version`),
//! enough for clients that resolve resources by name.

use serde_json::{Value, json};

use super::resources::Registry;

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": "v1.34.0-gpufair-standin",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "",
        "platform": "linux/amd64"
    })
}

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]
    })
}

pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The resource list of one group/version, or `None` when nothing is served there.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for kind in registry
        .kinds()
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        resources.push(json!({
            "name": kind.plural,
            "singularName": kind.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }));
        for sub in kind.subresources() {
            let (sub_kind, verbs, sub_group, sub_version) = match sub {
                "status" => (
                    kind.kind.as_str(),
                    vec!["get", "patch", "update"],
                    None,
                    None,
                ),
                "eviction" => ("Eviction", vec!["create"], Some("policy"), Some("v1")),
                _ => ("Binding", vec!["create"], None, None),
            };
            let mut entry = json!({
                "name": format!("{}/{sub}", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": sub_kind,
                "verbs": verbs,
            });
            if let (Some(g), Some(v)) = (sub_group, sub_version) {
                entry["group"] = json!(g);
                entry["version"] = json!(v);
            }
            resources.push(entry);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}
