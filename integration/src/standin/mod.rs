//! An API-server stand-in: enough of kube-apiserver, kube-scheduler and the kubelet, in one
//! process, for gpufair's real binaries to run against over HTTPS with an unchanged kube-rs
//! client, where no cluster can be installed.
//!
//! It is strict where the real server is strict (optimistic concurrency, scheduling-gate and
//! pod-immutability rules, priority resolution, PodDisruptionBudgets, admission webhooks) and
//! answers errors as `Status` objects. What it implements and what it leaves out is listed in
//! `integration/README.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use gpufair_integration::standin::{NodeSpec, StandIn, StandInOptions};
//! let standin = StandIn::start(StandInOptions::for_tests()).await?;
//! standin.add_node(NodeSpec::new("gpu-1").gpus(8)).await?;
//! let client = standin.client().await?; // or KUBECONFIG=standin.kubeconfig_path()
//! # Ok(()) }
//! ```

pub mod admission;
pub mod capacity;
pub mod devices;
pub mod discovery;
pub mod eviction;
pub mod faults;
pub mod http;
pub mod journal;
pub mod kubelet;
pub mod patch;
pub mod pending;
pub mod quantity;
pub mod resources;
pub mod rules;
pub mod scheduler;
pub mod selectors;
pub mod status;
pub mod store;
pub mod tls;
pub mod verbs;
pub mod watch;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use admission::ServiceDirectory;
pub use faults::{Fault, FaultRule, Faults, Verb};
pub use kubelet::RUN_SECONDS;
pub use status::ApiError;
pub use store::{DeleteOptions, Store, Target};

use resources::{Registry, ResourceKind};

/// Shared by the HTTP layer, the controller loops and the library API.
pub struct State {
    pub store: Store,
    pub faults: Faults,
    pub services: ServiceDirectory,
    pub token: String,
    pub bookmark_interval: Duration,
    pub shutdown: CancellationToken,
}

/// How to start a stand-in.
#[derive(Debug, Clone)]
pub struct StandInOptions {
    pub listen: SocketAddr,
    /// Directory of CustomResourceDefinition YAML files to serve (`deploy/crds`).
    pub crd_dir: Option<PathBuf>,
    /// Where to write the kubeconfig; a temporary directory when `None`.
    pub kubeconfig: Option<PathBuf>,
    /// Changes kept for watches to resume from; older versions get 410 Gone.
    pub history_limit: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// How often the scheduler and kubelet stand-ins run (they also run on every change).
    pub controller_interval: Duration,
    /// Run the scheduler and kubelet stand-ins.
    pub controllers: bool,
}

impl Default for StandInOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            crd_dir: None,
            kubeconfig: None,
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(1),
            controller_interval: Duration::from_millis(20),
            controllers: true,
        }
    }
}

impl StandInOptions {
    /// Defaults plus this workspace's `deploy/crds`.
    pub fn for_tests() -> Self {
        Self {
            crd_dir: Some(crate::workspace_root().join("deploy/crds")),
            ..Self::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    #[error(transparent)]
    Crd(#[from] resources::CrdError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("could not listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("could not make a temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("kube client: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{0} is not valid YAML: {1}")]
    Yaml(String, serde_yaml::Error),
    #[error("no resource is served for apiVersion {api_version:?} kind {kind:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
}

/// A node for [`StandIn::add_node`]: capacity, labels and taints.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub capacity: Vec<(String, String)>,
    pub labels: Vec<(String, String)>,
    pub taints: Vec<Value>,
}

impl NodeSpec {
    /// A node with 64 CPUs, 512Gi of memory and room for 110 pods.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            capacity: vec![
                ("cpu".into(), "64".into()),
                ("memory".into(), "512Gi".into()),
                ("pods".into(), "110".into()),
            ],
            labels: vec![("kubernetes.io/hostname".into(), name.into())],
            taints: Vec::new(),
        }
    }

    pub fn resource(mut self, name: &str, quantity: &str) -> Self {
        self.capacity.retain(|(n, _)| n != name);
        self.capacity.push((name.into(), quantity.into()));
        self
    }

    pub fn gpus(self, count: u32) -> Self {
        self.resource("nvidia.com/gpu", &count.to_string())
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints
            .push(json!({"key": key, "value": value, "effect": effect}));
        self
    }

    fn to_object(&self) -> Value {
        let capacity: serde_json::Map<String, Value> = self
            .capacity
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let labels: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": self.taints},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            }
        })
    }
}

/// A running stand-in. Dropping it stops the server and its loops.
pub struct StandIn {
    state: Arc<State>,
    address: SocketAddr,
    kubeconfig: PathBuf,
    ca_pem: String,
    tasks: Vec<JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl StandIn {
    /// Starts the HTTPS server (and the scheduler and kubelet loops), creates the `default`,
    /// `kube-system` and `gpufair-system` namespaces, and writes the kubeconfig.
    pub async fn start(options: StandInOptions) -> Result<StandIn, StandInError> {
        let mut registry = Registry::builtin();
        if let Some(dir) = &options.crd_dir {
            registry.add_crd_dir(dir)?;
        }
        let certificates = tls::Certificates::generate()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(certificates.server_config()?));
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| StandInError::Listen {
                    address: options.listen,
                    source,
                })?;
        let address = listener
            .local_addr()
            .map_err(|source| StandInError::Listen {
                address: options.listen,
                source,
            })?;
        let token = format!("{:016x}{:016x}", store::random_u64(), store::random_u64());
        let (dir, kubeconfig) = match &options.kubeconfig {
            Some(path) => (None, path.clone()),
            None => {
                let dir = tempfile::tempdir().map_err(StandInError::TempDir)?;
                let path = dir.path().join("kubeconfig");
                (Some(dir), path)
            }
        };
        let ca_pem = certificates.ca.cert_pem();
        tls::write_kubeconfig(&kubeconfig, &tls::kubeconfig(address, &ca_pem, &token))?;
        let state = Arc::new(State {
            store: Store::new(registry, options.history_limit),
            faults: Faults::default(),
            services: ServiceDirectory::default(),
            token,
            bookmark_interval: options.bookmark_interval,
            shutdown: CancellationToken::new(),
        });
        let mut tasks = vec![tokio::spawn(serve(listener, acceptor, Arc::clone(&state)))];
        if options.controllers {
            tasks.push(tokio::spawn(run_controllers(
                Arc::clone(&state),
                options.controller_interval,
            )));
        }
        let standin = StandIn {
            state,
            address,
            kubeconfig,
            ca_pem,
            tasks,
            _dir: dir,
        };
        for namespace in ["default", "kube-system", "gpufair-system"] {
            standin.ensure_namespace(namespace, &[]).await?;
        }
        Ok(standin)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The kubeconfig to hand to clients (`KUBECONFIG=<path>`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The CA that signed the serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    /// The kube-rs configuration the written kubeconfig gives, as a binary would load it.
    pub async fn config(&self) -> Result<kube::Config, StandInError> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        Ok(kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?)
    }

    /// A kube-rs client built from the written kubeconfig, exactly as a binary would build it
    /// (with kube-rs's default retries of 429, 503 and 504).
    pub async fn client(&self) -> Result<kube::Client, StandInError> {
        Ok(kube::Client::try_from(self.config().await?)?)
    }

    /// A client that returns 429, 503 and 504 at once instead of retrying them. kube-rs's
    /// default policy retries up to 15 times with exponential backoff; a PodDisruptionBudget's
    /// 429 carries no Retry-After, so a blocked eviction would take minutes to come back.
    pub async fn client_without_retries(&self) -> Result<kube::Client, StandInError> {
        let mut config = self.config().await?;
        config.default_retry = false;
        Ok(kube::Client::try_from(config)?)
    }

    /// Makes Service `namespace/name:port` (named by webhook configurations) reachable at
    /// `address`.
    pub fn register_service(&self, namespace: &str, name: &str, port: u16, address: SocketAddr) {
        self.state.services.register(namespace, name, port, address);
    }

    fn kind_of(&self, api_version: &str, kind: &str) -> Result<Arc<ResourceKind>, StandInError> {
        self.state
            .store
            .lock()
            .registry
            .by_kind(api_version, kind)
            .ok_or_else(|| StandInError::UnknownKind {
                api_version: api_version.into(),
                kind: kind.into(),
            })
    }

    /// Creates an object (its `apiVersion` and `kind` pick the resource) through the same
    /// path as an HTTP create: admission, priority, validation.
    pub async fn create(&self, object: Value) -> Result<Value, StandInError> {
        let kind = self.kind_of(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        )?;
        let namespace = store::namespace_of(&object).to_string();
        let namespace = if kind.namespaced && namespace.is_empty() {
            "default".to_string()
        } else {
            namespace
        };
        Ok(verbs::create(&self.state, &kind, &namespace, object).await?)
    }

    /// Creates every document of a multi-document YAML text, in order.
    pub async fn create_yaml(&self, text: &str, origin: &str) -> Result<Vec<Value>, StandInError> {
        // Parsed whole before the first await: the YAML parser is not Send, and callers on a
        // multi-threaded runtime need this future to be.
        let mut documents = Vec::new();
        for document in serde_yaml::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(document)
                .map_err(|e| StandInError::Yaml(origin.to_string(), e))?;
            if !value.is_null() {
                documents.push(value);
            }
        }
        let mut created = Vec::new();
        for value in documents {
            created.push(self.create(value).await?);
        }
        Ok(created)
    }

    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, StandInError> {
        let kind = self.kind_of(api_version, kind)?;
        Ok(self.state.store.lock().get(&kind, namespace, name)?)
    }

    /// Every object of a kind (in `namespace` when given).
    pub fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, StandInError> {
        let kind = self.kind_of(api_version, kind)?;
        Ok(self
            .state
            .store
            .lock()
            .iter(&kind, namespace)
            .cloned()
            .collect())
    }

    /// Changes an object in place (as the system, bypassing client rules) — for tests that
    /// set node allocatable or fake a condition.
    pub fn modify(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, StandInError> {
        let kind = self.kind_of(api_version, kind)?;
        let object =
            self.state
                .store
                .lock()
                .modify(&kind, namespace, name, Target::System, |old| {
                    let mut new = old.clone();
                    change(&mut new);
                    Ok(new)
                })?;
        Ok(object)
    }

    /// Creates a namespace with labels unless it exists.
    pub async fn ensure_namespace(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Result<(), StandInError> {
        if self.get("v1", "Namespace", "", name).is_ok() {
            return Ok(());
        }
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        self.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
            .await?;
        Ok(())
    }

    /// Adds a Ready node with the given capacity (allocatable = capacity).
    pub async fn add_node(&self, node: NodeSpec) -> Result<Value, StandInError> {
        let object = node.to_object();
        let created = self.create(object.clone()).await?;
        // Node status is the kubelet's to write; set it as the kubelet would.
        self.modify("v1", "Node", "", &node.name, |n| {
            n["status"] = object["status"].clone()
        })
        .or(Ok::<_, StandInError>(created))
    }

    /// Sets one allocatable (and capacity) entry of a node.
    pub fn set_node_resource(
        &self,
        node: &str,
        resource: &str,
        quantity: &str,
    ) -> Result<Value, StandInError> {
        self.modify("v1", "Node", "", node, |n| {
            n["status"]["capacity"][resource] = json!(quantity);
            n["status"]["allocatable"][resource] = json!(quantity);
        })
    }

    /// Creates a gpufair `Queue` with this spec.
    pub async fn create_queue(&self, name: &str, spec: Value) -> Result<Value, StandInError> {
        self.create(json!({"apiVersion": "gpufair.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}))
            .await
    }

    /// Submits a pod (admission included). `run_seconds` sets how long the kubelet stand-in
    /// runs it once bound.
    pub async fn submit_pod(
        &self,
        mut pod: Value,
        run_seconds: Option<f64>,
    ) -> Result<Value, StandInError> {
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        if let Some(seconds) = run_seconds {
            pod["metadata"]["annotations"][RUN_SECONDS] = json!(seconds.to_string());
        }
        self.create(pod).await
    }

    /// Waits until `ready` holds for the object (or its absence, `None`), returning it.
    pub async fn wait_for(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        timeout: Duration,
        ready: impl Fn(Option<&Value>) -> bool,
    ) -> Result<Option<Value>, StandInError> {
        let what = format!("{kind} {namespace}/{name}");
        self.wait_until(&what, timeout, || {
            let object = self.get(api_version, kind, namespace, name).ok();
            ready(object.as_ref()).then_some(object)
        })
        .await
    }

    /// Waits until `check` returns `Some`, re-checking on every change to the store.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> Result<T, StandInError> {
        let mut revisions = self.state.store.revisions();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            revisions.mark_unchanged();
            if let Some(value) = check() {
                return Ok(value);
            }
            // Re-check on changes and, for conditions that depend on time alone, every 50 ms.
            let wake = tokio::time::timeout(Duration::from_millis(50), revisions.changed());
            if tokio::time::timeout_at(deadline, wake).await.is_err() {
                return Err(StandInError::Timeout {
                    what: what.to_string(),
                    timeout,
                });
            }
        }
    }

    /// Events from both APIs (core v1 and events.k8s.io/v1), oldest first.
    pub fn events(&self, namespace: Option<&str>) -> Vec<Value> {
        let mut events = Vec::new();
        for api_version in ["v1", "events.k8s.io/v1"] {
            if let Ok(list) = self.list(api_version, "Event", namespace) {
                events.extend(list);
            }
        }
        events.sort_by_key(store::resource_version_of);
        events
    }

    /// Forgets the change history: every watch resuming from an older version gets 410.
    pub fn compact_history(&self) {
        self.state.store.lock().compact();
    }

    pub fn set_history_limit(&self, limit: usize) {
        self.state.store.lock().set_history_limit(limit);
    }

    /// Stops the server and loops and waits for them.
    pub async fn shutdown(mut self) {
        self.state.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
    }
}

async fn serve(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, state: Arc<State>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = state.shutdown.cancelled() => return,
        };
        let Ok((tcp, _)) = accepted else {
            continue;
        };
        let acceptor = acceptor.clone();
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let shutdown = state.shutdown.clone();
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(http::handle(state, request).await) }
            });
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            tokio::select! {
                _ = connection => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

/// The scheduler, kubelet and disruption-controller stand-ins, on every change and every
/// `interval` (the kubelet's timers need the latter). Each pass costs what changed since the
/// last one, not a walk over every pod.
async fn run_controllers(state: Arc<State>, interval: Duration) {
    let (mut scheduler, mut kubelet, mut budgets) = {
        let mut inner = state.store.lock();
        (
            scheduler::Scheduler::new(&mut inner),
            kubelet::Kubelet::new(&mut inner),
            eviction::Budgets::new(&mut inner),
        )
    };
    let mut revisions = state.store.revisions();
    loop {
        {
            let mut inner = state.store.lock();
            if let Err(error) = scheduler.schedule_once(&mut inner) {
                tracing::warn!(%error, "scheduler pass failed");
            }
            if let Err(error) = kubelet.sync_once(&mut inner) {
                tracing::warn!(%error, "kubelet pass failed");
            }
            if let Err(error) = budgets.refresh(&mut inner) {
                tracing::warn!(%error, "disruption budget pass failed");
            }
        }
        revisions.mark_unchanged();
        tokio::select! {
            _ = revisions.changed() => {}
            _ = tokio::time::sleep(interval) => {}
            _ = state.shutdown.cancelled() => return,
        }
    }
}
