//! What deploy/ grants each of gpufair's ServiceAccounts, read from the rendered manifests
//! (Roles, ClusterRoles and their bindings), to compare with what the audit log shows each one
//! did.

use std::collections::BTreeSet;

use serde_json::Value;

/// (verb, apiGroup, resource[/subresource]).
pub type Grant = (String, String, String);

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Whether `binding` names ServiceAccount `namespace/name` among its subjects.
fn binds(binding: &Value, namespace: &str, name: &str) -> bool {
    binding["subjects"].as_array().is_some_and(|subjects| {
        subjects.iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == name && s["namespace"] == namespace
        })
    })
}

/// Every (verb, group, resource) the objects grant ServiceAccount `namespace/name`.
pub fn granted(objects: &[Value], namespace: &str, name: &str) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .filter(|b| binds(b, namespace, name))
    {
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let role_namespace = binding["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let role = objects.iter().find(|o| {
            o["kind"] == role_kind
                && o["metadata"]["name"] == role_name
                && (role_kind == "ClusterRole" || o["metadata"]["namespace"] == role_namespace)
        });
        let Some(role) = role else { continue };
        for rule in role["rules"].as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        grants.insert((verb, group.clone(), resource.clone()));
                    }
                }
            }
        }
    }
    grants
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bound_role_grants_each_verb_on_each_resource() {
        let objects = vec![
            json!({"kind": "ClusterRole", "metadata": {"name": "r"},
                "rules": [{"apiGroups": [""], "resources": ["pods", "pods/eviction"], "verbs": ["list", "create"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                "roleRef": {"kind": "ClusterRole", "name": "r"},
                "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]}),
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "other"},
                "rules": [{"apiGroups": ["x"], "resources": ["y"], "verbs": ["get"]}]}),
        ];
        let grants = granted(&objects, "ns", "sa");
        assert_eq!(grants.len(), 4);
        assert!(grants.contains(&("create".into(), "".into(), "pods/eviction".into())));
        assert!(granted(&objects, "ns", "someone-else").is_empty());
    }
}
