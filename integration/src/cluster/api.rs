//! The end-to-end tests' hands on the API server: untyped objects (`serde_json::Value`) by
//! apiVersion and kind, through kube-rs's dynamic API and the server's discovery, so a case
//! reads like the manifests it applies. Every call is a real request to kube-apiserver.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::controlplane::kwok::{NODE_ANNOTATION, RUN_FOR};

/// The API version of gpufair's Queue, as the tests read and write it.
pub const QUEUE_API_VERSION: &str = "gpufair.io/v1alpha1";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
}

impl ApiError {
    /// The HTTP status of a refused request, if that is what this is.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Kube {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// The server's message for a refused request.
    pub fn message(&self) -> String {
        match self {
            ApiError::Kube {
                source: kube::Error::Api(status),
                ..
            } => status.message.clone(),
            other => other.to_string(),
        }
    }
}

/// A client with the resources it has looked up.
#[derive(Clone)]
pub struct KubeApi {
    pub client: Client,
    resources: Arc<Mutex<Discovered>>,
}

/// Resources looked up so far, by (apiVersion, kind): the resource and whether it is namespaced.
type Discovered = HashMap<(String, String), (ApiResource, bool)>;

fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiError {
    let what = what.into();
    move |source| ApiError::Kube { what, source }
}

fn split(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

fn metadata_text<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or_default()
}

/// An object's `metadata.resourceVersion` as a number (0 when absent).
pub fn resource_version_of(object: &Value) -> u64 {
    metadata_text(object, "resourceVersion")
        .parse()
        .unwrap_or(0)
}

impl KubeApi {
    pub fn new(client: Client) -> KubeApi {
        KubeApi {
            client,
            resources: Arc::default(),
        }
    }

    /// The resource for `api_version`/`kind`, and whether it is namespaced (discovery, once).
    pub async fn resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), ApiError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(found.clone());
        }
        let (group, version) = split(api_version);
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(kube(format!("discovery of {api_version} {kind}")))?;
        let found = (resource, capabilities.scope == Scope::Namespaced);
        self.resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, found.clone());
        Ok(found)
    }

    async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Api<DynamicObject>, ApiError> {
        let (resource, namespaced) = self.resource(api_version, kind).await?;
        Ok(if namespaced && !namespace.is_empty() {
            Api::namespaced_with(self.client.clone(), namespace, &resource)
        } else {
            Api::all_with(self.client.clone(), &resource)
        })
    }

    fn to_value(object: DynamicObject) -> Value {
        serde_json::to_value(object).unwrap_or(Value::Null)
    }

    fn from_value(object: &Value) -> Result<DynamicObject, ApiError> {
        serde_json::from_value(object.clone())
            .map_err(|e| ApiError::Invalid(format!("not a Kubernetes object ({e}): {object}")))
    }

    /// The object, or `None` if it does not exist.
    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let api = self.api(api_version, kind, namespace).await?;
        let found = api
            .get_opt(name)
            .await
            .map_err(kube(format!("get {kind} {namespace}/{name}")))?;
        Ok(found.map(Self::to_value))
    }

    /// Every object of the kind in `namespace` (all namespaces for "").
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let api = self.api(api_version, kind, namespace).await?;
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(kube(format!("list {kind} in {namespace:?}")))?;
        // A list's items carry no apiVersion or kind of their own; give them back, so an item
        // reads like the object a get returns.
        let (resource, _) = self.resource(api_version, kind).await?;
        Ok(list
            .items
            .into_iter()
            .map(|item| {
                let mut value = Self::to_value(item);
                value["apiVersion"] = json!(resource.api_version);
                value["kind"] = json!(resource.kind);
                value
            })
            .collect())
    }

    /// Creates `object` (its apiVersion, kind and namespace say where), through admission.
    pub async fn create(&self, object: Value) -> Result<Value, ApiError> {
        self.create_with(object, &PostParams::default()).await
    }

    /// Sends `object` through validation and admission without storing it (`dryRun=All`).
    pub async fn create_dry_run(&self, object: Value) -> Result<Value, ApiError> {
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.create_with(object, &params).await
    }

    async fn create_with(&self, object: Value, params: &PostParams) -> Result<Value, ApiError> {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_string();
        let kind = object["kind"]
            .as_str()
            .ok_or_else(|| ApiError::Invalid(format!("object without a kind: {object}")))?
            .to_string();
        let namespace = metadata_text(&object, "namespace").to_string();
        let api = self.api(&api_version, &kind, &namespace).await?;
        let created = api
            .create(params, &Self::from_value(&object)?)
            .await
            .map_err(kube(format!(
                "create {kind} {namespace}/{}",
                metadata_text(&object, "name")
            )))?;
        Ok(Self::to_value(created))
    }

    /// Every object of a multi-document YAML text, in order.
    pub async fn create_yaml(&self, text: &str) -> Result<Vec<Value>, ApiError> {
        let mut created = Vec::new();
        for document in serde_yaml::Deserializer::from_str(text) {
            let object: Value = serde::Deserialize::deserialize(document)
                .map_err(|e| ApiError::Invalid(format!("YAML: {e}")))?;
            if object.is_null() {
                continue;
            }
            created.push(self.create(object).await?);
        }
        Ok(created)
    }

    /// A JSON merge patch of the object (or of its `status` with `subresource = "status"`).
    pub async fn merge(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        subresource: Option<&str>,
        patch: Value,
    ) -> Result<Value, ApiError> {
        let target = (api_version, kind, namespace, name);
        self.merge_with(target, subresource, patch, &PatchParams::default())
            .await
    }

    /// The same patch sent through validation and admission without storing it (`dryRun=All`).
    pub async fn merge_dry_run(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> Result<Value, ApiError> {
        let params = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let target = (api_version, kind, namespace, name);
        self.merge_with(target, None, patch, &params).await
    }

    async fn merge_with(
        &self,
        (api_version, kind, namespace, name): (&str, &str, &str, &str),
        subresource: Option<&str>,
        patch: Value,
        params: &PatchParams,
    ) -> Result<Value, ApiError> {
        let api = self.api(api_version, kind, namespace).await?;
        let what = format!("patch {kind} {namespace}/{name}");
        let patched = match subresource {
            Some("status") => api.patch_status(name, params, &Patch::Merge(patch)).await,
            Some(other) => {
                return Err(ApiError::Invalid(format!(
                    "subresource {other} is not patched here"
                )));
            }
            None => api.patch(name, params, &Patch::Merge(patch)).await,
        }
        .map_err(kube(what))?;
        Ok(Self::to_value(patched))
    }

    /// Read, change with `change`, write back (PUT); again on a 409 Conflict.
    pub async fn modify(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl Fn(&mut Value),
    ) -> Result<Value, ApiError> {
        let api = self.api(api_version, kind, namespace).await?;
        for _ in 0..20 {
            let current = api
                .get(name)
                .await
                .map_err(kube(format!("get {kind} {namespace}/{name}")))?;
            let mut value = Self::to_value(current);
            change(&mut value);
            match api
                .replace(name, &PostParams::default(), &Self::from_value(&value)?)
                .await
            {
                Ok(written) => return Ok(Self::to_value(written)),
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(error) => return Err(kube(format!("update {kind} {namespace}/{name}"))(error)),
            }
        }
        Err(ApiError::Invalid(format!(
            "{kind} {namespace}/{name}: 20 conflicts in a row"
        )))
    }

    /// Deletes the object (a grace period of 0 with `now`).
    pub async fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        now: bool,
    ) -> Result<(), ApiError> {
        let api = self.api(api_version, kind, namespace).await?;
        let params = if now {
            DeleteParams::default().grace_period(0)
        } else {
            DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(kube(format!("delete {kind} {namespace}/{name}"))(error)),
        }
    }

    /// Polls the object every 50 ms until `check` holds on it (`None`: absent); returns it.
    pub async fn wait_for(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        timeout: Duration,
        check: impl Fn(Option<&Value>) -> bool,
    ) -> Result<Option<Value>, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found = self.get(api_version, kind, namespace, name).await?;
            if check(found.as_ref()) {
                return Ok(found);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ApiError::Timeout {
                    what: format!("{kind} {namespace}/{name}: last seen {found:?}"),
                    timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates the namespace (with `labels`) unless it exists, and waits for its `default`
    /// ServiceAccount, without which the ServiceAccount admission plugin refuses pods.
    pub async fn ensure_namespace(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Result<(), ApiError> {
        if self.get("v1", "Namespace", "", name).await?.is_none() {
            let labels: serde_json::Map<String, Value> = labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), json!(v)))
                .collect();
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}});
            match self.create(namespace).await {
                Ok(_) => {}
                Err(error) if error.code() == Some(409) => {}
                Err(error) => return Err(error),
            }
        }
        self.wait_for(
            "v1",
            "ServiceAccount",
            name,
            "default",
            Duration::from_secs(30),
            |a| a.is_some(),
        )
        .await?;
        Ok(())
    }

    /// Creates PriorityClass `name` and waits until pods in `namespace` may name it: the API
    /// server's Priority admission plugin reads classes from an informer cache, so a pod
    /// created right after its class can be refused with "no PriorityClass with name".
    pub async fn create_priority_class(
        &self,
        namespace: &str,
        name: &str,
        value: i32,
        preemption_policy: &str,
    ) -> Result<(), ApiError> {
        self.create(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value,
            "preemptionPolicy": preemption_policy}),
        )
        .await?;
        let probe = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "priority-class-probe", "namespace": namespace},
            "spec": {"priorityClassName": name,
                "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}});
        let timeout = Duration::from_secs(15);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.create_dry_run(probe.clone()).await {
                Ok(_) => return Ok(()),
                Err(error)
                    if error.code() == Some(403)
                        && error.message().contains("no PriorityClass") =>
                {
                    if tokio::time::Instant::now() > deadline {
                        return Err(ApiError::Timeout {
                            what: format!(
                                "PriorityClass {name} to be admitted: {}",
                                error.message()
                            ),
                            timeout,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Creates Queue `name` with `spec`.
    pub async fn create_queue(&self, name: &str, spec: Value) -> Result<Value, ApiError> {
        self.create(json!({"apiVersion": QUEUE_API_VERSION, "kind": "Queue",
            "metadata": {"name": name}, "spec": spec}))
            .await
    }

    /// Submits a pod through admission; with `run_seconds`, kwok completes it that long after
    /// it starts running.
    pub async fn submit_pod(
        &self,
        mut pod: Value,
        run_seconds: Option<f64>,
    ) -> Result<Value, ApiError> {
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        if let Some(seconds) = run_seconds {
            pod["metadata"]["annotations"][RUN_FOR] = json!(format!("{seconds}s"));
        }
        self.create(pod).await
    }

    /// Creates a kwok Node and gives it `resources` as capacity and allocatable (kwok's node
    /// stage keeps status it finds; the Node's own create drops status, hence the patch).
    pub async fn add_node(&self, node: &NodeSpec) -> Result<(), ApiError> {
        let labels: serde_json::Map<String, Value> = node
            .labels
            .iter()
            .chain(std::iter::once(&(
                "kubernetes.io/hostname".to_string(),
                node.name.clone(),
            )))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let taints: Vec<Value> = node
            .taints
            .iter()
            .map(|(key, value, effect)| json!({"key": key, "value": value, "effect": effect}))
            .collect();
        self.create(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": labels,
                "annotations": {NODE_ANNOTATION.0: NODE_ANNOTATION.1}},
            "spec": {"taints": taints},
        }))
        .await?;
        let mut resources = serde_json::Map::new();
        resources.insert("cpu".into(), json!("64"));
        resources.insert("memory".into(), json!("512Gi"));
        resources.insert("pods".into(), json!("500"));
        for (resource, quantity) in &node.resources {
            resources.insert(resource.clone(), json!(quantity));
        }
        self.merge(
            "v1",
            "Node",
            "",
            &node.name,
            Some("status"),
            json!({"status": {"capacity": resources, "allocatable": resources}}),
        )
        .await?;
        Ok(())
    }

    /// Sets one resource of a node's capacity and allocatable, as kubelet's device manager does
    /// from a device plugin's ListAndWatch.
    pub async fn set_node_resource(
        &self,
        node: &str,
        resource: &str,
        capacity: usize,
        allocatable: usize,
    ) -> Result<(), ApiError> {
        self.merge(
            "v1",
            "Node",
            "",
            node,
            Some("status"),
            json!({"status": {"capacity": {resource: capacity.to_string()},
                "allocatable": {resource: allocatable.to_string()}}}),
        )
        .await?;
        Ok(())
    }

    /// Core v1 and events.k8s.io/v1 Events of `namespace` (all for `None`), oldest first.
    pub async fn events(&self, namespace: Option<&str>) -> Result<Vec<Value>, ApiError> {
        let namespace = namespace.unwrap_or_default();
        let mut events = self.list("events.k8s.io/v1", "Event", namespace).await?;
        let mut core = self.list("v1", "Event", namespace).await?;
        let uids: std::collections::HashSet<String> = events
            .iter()
            .map(|e| metadata_text(e, "uid").to_string())
            .collect();
        // Both APIs serve the same stored Events; keep each once.
        core.retain(|e| !uids.contains(metadata_text(e, "uid")));
        events.extend(core);
        events.sort_by_key(resource_version_of);
        Ok(events)
    }
}

/// A Node for kwok to run: name, labels, taints and extended resources.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub labels: Vec<(String, String)>,
    /// (key, value, effect)
    pub taints: Vec<(String, String, String)>,
    /// (resource, quantity), beside cpu, memory and pods.
    pub resources: Vec<(String, String)>,
}

impl NodeSpec {
    pub fn new(name: &str) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            labels: Vec::new(),
            taints: Vec::new(),
            resources: Vec::new(),
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> NodeSpec {
        self.labels.push((key.into(), value.into()));
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> NodeSpec {
        self.taints.push((key.into(), value.into(), effect.into()));
        self
    }

    pub fn resource(mut self, resource: &str, quantity: &str) -> NodeSpec {
        self.resources.push((resource.into(), quantity.into()));
        self
    }

    /// `gpus` whole GPUs (`nvidia.com/gpu`).
    pub fn gpus(self, gpus: u32) -> NodeSpec {
        self.resource(gpufair_core::units::WHOLE_GPU_RESOURCE, &gpus.to_string())
    }
}
