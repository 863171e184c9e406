//! What a component may ask of the API server, declared beside the one module of that component
//! that makes the calls. The RBAC check compares each ServiceAccount's grants in the manifests
//! with the union of the declarations of the components that run under it.

/// Where a call's objects live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Any namespace, or a cluster-scoped resource: granted by a ClusterRole.
    Cluster,
    /// The namespace gpufair is installed in: granted by a Role there.
    InstallNamespace,
}

/// One request kind a component makes: `verb` on `group`/`resource` (with its subresource, as
/// `pods/eviction`), limited to `names` when not empty. `group` is `""` for the core group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    pub scope: Scope,
    pub group: &'static str,
    pub resource: &'static str,
    pub names: &'static [&'static str],
    pub verb: &'static str,
}

impl ApiCall {
    /// `verb` on `group`/`resource` anywhere in the cluster.
    pub const fn cluster(group: &'static str, resource: &'static str, verb: &'static str) -> Self {
        ApiCall {
            scope: Scope::Cluster,
            group,
            resource,
            names: &[],
            verb,
        }
    }

    /// `verb` on `group`/`resource` in the install namespace.
    pub const fn install_namespace(
        group: &'static str,
        resource: &'static str,
        verb: &'static str,
    ) -> Self {
        ApiCall {
            scope: Scope::InstallNamespace,
            group,
            resource,
            names: &[],
            verb,
        }
    }

    /// The same call, limited to the objects named `names`.
    pub const fn named(self, names: &'static [&'static str]) -> Self {
        ApiCall { names, ..self }
    }
}
