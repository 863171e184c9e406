//! Which resources the stand-in serves: the built-in kinds gpufair's components touch, plus
//! CustomResourceDefinitions read from YAML (`deploy/crds`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

/// One served resource (one group/version/plural).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceKind {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    /// Plural name in URLs (`pods`).
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    /// Writes to the main resource leave `.status` alone; `/status` writes only `.status`.
    pub status_subresource: bool,
    /// Field selector labels this resource accepts, beyond `metadata.name` and
    /// `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    /// Served from a CustomResourceDefinition (no strategic merge patch, as in Kubernetes).
    pub custom: bool,
}

impl ResourceKind {
    /// `v1` or `group/version`, the objects' `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Key naming the resource's storage: `pods`, `leases.coordination.k8s.io`.
    pub fn key(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }

    /// The subresources the stand-in serves for this resource.
    pub fn subresources(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.status_subresource {
            out.push("status");
        }
        if self.is("", "pods") {
            out.extend(["eviction", "binding"]);
        }
        out
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.restartPolicy",
    "status.phase",
    "status.nominatedNodeName",
];
const NODE_FIELDS: &[&str] = &["spec.unschedulable"];
const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const EVENT_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "reportingController",
    "type",
];

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    singular: &str,
    kind: &str,
    namespaced: bool,
    status_subresource: bool,
    field_labels: &'static [&'static str],
) -> ResourceKind {
    ResourceKind {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: singular.into(),
        kind: kind.into(),
        namespaced,
        status_subresource,
        field_labels,
        custom: false,
    }
}

/// Why a CRD file could not be served.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("could not read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid YAML: {source}")]
    Yaml {
        path: String,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("{path}: CustomResourceDefinition field {field} is missing or not a {expected}")]
    Field {
        path: String,
        field: &'static str,
        expected: &'static str,
    },
}

/// Every served resource, looked up by group and plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    kinds: Vec<Arc<ResourceKind>>,
}

impl Registry {
    /// The built-in resources gpufair's components use.
    pub fn builtin() -> Self {
        let kinds = vec![
            builtin("", "v1", "pods", "pod", "Pod", true, true, POD_FIELDS),
            builtin("", "v1", "nodes", "node", "Node", false, true, NODE_FIELDS),
            builtin(
                "",
                "v1",
                "namespaces",
                "namespace",
                "Namespace",
                false,
                true,
                &[],
            ),
            builtin(
                "",
                "v1",
                "events",
                "event",
                "Event",
                true,
                false,
                CORE_EVENT_FIELDS,
            ),
            builtin(
                "events.k8s.io",
                "v1",
                "events",
                "event",
                "Event",
                true,
                false,
                EVENT_FIELDS,
            ),
            builtin(
                "coordination.k8s.io",
                "v1",
                "leases",
                "lease",
                "Lease",
                true,
                false,
                &[],
            ),
            builtin(
                "policy",
                "v1",
                "poddisruptionbudgets",
                "poddisruptionbudget",
                "PodDisruptionBudget",
                true,
                true,
                &[],
            ),
            builtin(
                "scheduling.k8s.io",
                "v1",
                "priorityclasses",
                "priorityclass",
                "PriorityClass",
                false,
                false,
                &[],
            ),
            builtin(
                "admissionregistration.k8s.io",
                "v1",
                "mutatingwebhookconfigurations",
                "mutatingwebhookconfiguration",
                "MutatingWebhookConfiguration",
                false,
                false,
                &[],
            ),
        ];
        Self {
            kinds: kinds.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn kinds(&self) -> &[Arc<ResourceKind>] {
        &self.kinds
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceKind>> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .cloned()
    }

    /// The resource of objects with this `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceKind>> {
        self.kinds
            .iter()
            .find(|k| k.api_version() == api_version && k.kind == kind)
            .cloned()
    }

    /// Group → versions served, for discovery.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for kind in &self.kinds {
            let versions = groups.entry(kind.group.clone()).or_default();
            if !versions.contains(&kind.version) {
                versions.push(kind.version.clone());
            }
        }
        groups
    }

    /// Adds the served versions of one CustomResourceDefinition object.
    pub fn add_crd(&mut self, crd: &Value, origin: &str) -> Result<(), CrdError> {
        let field = |field: &'static str, expected: &'static str| CrdError::Field {
            path: origin.to_string(),
            field,
            expected,
        };
        let spec = &crd["spec"];
        let text = |value: &Value, name: &'static str| {
            value
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| field(name, "string"))
        };
        let group = text(&spec["group"], "spec.group")?;
        let plural = text(&spec["names"]["plural"], "spec.names.plural")?;
        let kind = text(&spec["names"]["kind"], "spec.names.kind")?;
        let singular = spec["names"]["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase());
        let namespaced = match spec["scope"].as_str() {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            _ => return Err(field("spec.scope", "\"Namespaced\" or \"Cluster\"")),
        };
        let versions = spec["versions"]
            .as_array()
            .ok_or_else(|| field("spec.versions", "list"))?;
        for version in versions {
            if version["served"].as_bool() != Some(true) {
                continue;
            }
            let name = text(&version["name"], "spec.versions[].name")?;
            let status = version["subresources"].get("status").is_some();
            self.kinds.push(Arc::new(ResourceKind {
                group: group.clone(),
                version: name,
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                status_subresource: status,
                field_labels: &[],
                custom: true,
            }));
        }
        Ok(())
    }

    /// Adds every CustomResourceDefinition in the `.yaml` files of `dir` (a kustomization file
    /// is skipped: it is not a CRD).
    pub fn add_crd_dir(&mut self, dir: &Path) -> Result<(), CrdError> {
        let read_err = |source| CrdError::Read {
            path: dir.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        paths.sort();
        for path in paths {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|source| CrdError::Read {
                path: origin.clone(),
                source,
            })?;
            for document in serde_yaml::Deserializer::from_str(&text) {
                let value: Value =
                    serde::Deserialize::deserialize(document).map_err(|source| CrdError::Yaml {
                        path: origin.clone(),
                        source,
                    })?;
                if value["kind"] == "CustomResourceDefinition" {
                    self.add_crd(&value, &origin)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_from_deploy_are_served_with_their_status_subresource() {
        let mut registry = Registry::builtin();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
        registry.add_crd_dir(&dir).unwrap();
        let queues = registry.find("gpufair.io", "v1alpha1", "queues").unwrap();
        assert!(queues.status_subresource);
        assert!(!queues.namespaced);
        assert!(
            registry
                .find("gpufair.io", "v1alpha1", "gpunodereports")
                .is_some()
        );
        assert_eq!(registry.by_kind("v1", "Pod").unwrap().plural, "pods");
    }

    #[test]
    fn a_crd_without_scope_is_refused_by_field() {
        let crd = serde_json::json!({"spec": {"group": "g", "names": {"plural": "xs", "kind": "X"}, "versions": []}});
        let err = Registry::default().add_crd(&crd, "x.yaml").unwrap_err();
        assert!(err.to_string().contains("spec.scope"), "{err}");
    }
}
