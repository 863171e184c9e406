//! A whole gpufair installation on a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok nodes), every component a real process:
//! deploy/base applied through the API server (CRDs, PriorityClasses, RBAC,
//! ValidatingAdmissionPolicies, the MutatingWebhookConfiguration pointed at a local replica),
//! `gpufair-webhook serve` replicas (admission and the gate-release controller, electing a
//! leader on a Lease) and one `gpufair-device-plugin` with fake GPUs per node giving the node its
//! allocatable, each with a token of its own ServiceAccount from deploy/, so every call they make
//! is checked against the RBAC gpufair ships. The end-to-end tests and `gpufair-try` start one
//! of these.

pub mod api;
pub mod devices;
pub mod events;
pub mod helm;
pub mod install;
pub mod monitor;
pub mod pods;
pub mod rbac;
pub mod replica;

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use gpufair_certs::{CertificateAuthority, write_bundle};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::controlplane::{ControlPlane, ControlPlaneError, ControlPlaneOptions};
use crate::faults::FaultProxy;
pub use api::{ApiError, KubeApi, NodeSpec};
use devices::DevicePluginNode;
pub use monitor::Monitor;
pub use replica::{LeaseFlags, Replica, ReplicaSettings};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster setup: {0}")]
    Setup(String),
    #[error(transparent)]
    ControlPlane(#[from] ControlPlaneError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Device(#[from] devices::DeviceError),
}

/// gpufair's namespace, as deploy/ names it.
pub const NAMESPACE: &str = "gpufair-system";
/// The ServiceAccount of `gpufair-webhook` (admission and controller).
pub const WEBHOOK_ACCOUNT: &str = "gpufair-webhook";
/// The ServiceAccount of `gpufair-device-plugin`.
pub const DEVICE_PLUGIN_ACCOUNT: &str = "gpufair-device-plugin";

/// A node: its name, fake GPU count and labels.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub name: String,
    pub gpus: u32,
    pub labels: Vec<(String, String)>,
    /// Whether a real `gpufair-device-plugin` process gives the node its GPUs. Without one the
    /// node is created with its GPUs already allocatable: benches with a thousand nodes cannot
    /// run a thousand plugin processes on a small machine.
    pub device_plugin: bool,
    /// The device plugin's fake GPUs, when not `gpus` whole H100s: the description and what the
    /// node then offers (resource, count), which start-up waits for.
    pub fake_gpus: Option<(String, Vec<(String, u32)>)>,
}

impl NodeOptions {
    pub fn new(name: &str, gpus: u32) -> Self {
        Self {
            name: name.into(),
            gpus,
            labels: Vec::new(),
            device_plugin: true,
            fake_gpus: None,
        }
    }

    /// A node whose device plugin has the fake GPUs `description` (the fake backend's YAML),
    /// from which the node offers `offers` (resource, count).
    pub fn with_fake_gpus(name: &str, description: &str, offers: &[(&str, u32)]) -> Self {
        Self {
            fake_gpus: Some((
                description.to_string(),
                offers.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            )),
            ..Self::new(name, 0)
        }
    }

    /// What the node offers once its GPUs are up: (resource, count).
    fn offers(&self) -> Vec<(String, u32)> {
        match &self.fake_gpus {
            Some((_, offers)) => offers.clone(),
            None => vec![(monitor::GPU.to_string(), self.gpus)],
        }
    }

    /// The same node with its GPUs set directly, without a device plugin process.
    pub fn without_device_plugin(mut self) -> Self {
        self.device_plugin = false;
        self
    }
}

/// How gpufair's manifests reach the API server.
#[derive(Debug, Clone, Default)]
pub enum Install {
    /// `kubectl kustomize deploy/base`, applied server-side less the workloads
    /// ([`install::install_base`]).
    #[default]
    Kustomize,
    /// `helm install` of deploy/helm/gpufair with this values file's text, everything included
    /// ([`helm::HelmRelease`]); the replicas read the config file from the chart's ConfigMap, and
    /// admission reaches them through the chart's `webhook.url`.
    Helm { values: String },
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub nodes: Vec<NodeOptions>,
    /// `gpufair-webhook serve` processes, each campaigning for the controller Lease.
    pub replicas: usize,
    /// The gpufair config file (the `config.yaml` of deploy/base's ConfigMap).
    pub config_yaml: String,
    pub cycle_interval: String,
    pub debounce: String,
    pub status_interval: String,
    /// Sustained releases per second (`--release-rate`).
    pub release_rate: f64,
    /// Releases at once before the rate applies (`--release-burst`).
    pub release_burst: u32,
    /// `GPUFAIR_LOG` for the replicas.
    pub log_filter: String,
    /// Lease timing flags for the replicas; the binary's defaults (10 s / 7 s / 2 s) without.
    pub lease: Option<LeaseFlags>,
    pub control_plane: ControlPlaneOptions,
    /// Whether the replicas reach the API server through a [`FaultProxy`] (see
    /// [`Cluster::faults`]); everything else talks to it directly.
    pub fault_proxy: bool,
    /// kustomize (the default) or Helm. With Helm, `config_yaml` is not used: the chart's
    /// values carry the config.
    pub install: Install,
}

/// The config tests start from: deploy/base's, with preemption's cooldown shortened so that
/// running pods become eligible victims within seconds, and a 1 s grace period for evicted
/// training pods (300 s by default, for checkpoints).
pub const TEST_CONFIG: &str = "fairshare:
  window: 168h
  decay: 0.9
  decayPeriod: 24h
  k: 1.0
  minWeight: 0.1
  bucket: 1h
  chargeBasis: allocated
preemption:
  enabled: true
  cooldown: 2s
admission:
  trainTerminationGracePeriodSeconds: 1
";

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            nodes: vec![NodeOptions::new("gpu-1", 4), NodeOptions::new("gpu-2", 4)],
            replicas: 1,
            config_yaml: TEST_CONFIG.into(),
            cycle_interval: "1s".into(),
            debounce: "0.05s".into(),
            status_interval: "1s".into(),
            release_rate: 1000.0,
            release_burst: 1000,
            log_filter: "info".into(),
            lease: None,
            control_plane: ControlPlaneOptions::default(),
            fault_proxy: false,
            install: Install::Kustomize,
        }
    }
}

/// A running cluster. Dropping it stops every process and the control plane.
pub struct Cluster {
    /// Declared first so the gpufair processes stop before the control plane they talk to.
    pub replicas: Vec<Replica>,
    /// Between the replicas and the API server, with `ClusterOptions::fault_proxy`.
    faults: Option<FaultProxy>,
    pub monitor: Monitor,
    pub api: KubeApi,
    pub settings: ReplicaSettings,
    /// Kept only to keep the plugin processes alive (dropping one kills it).
    plugins: Vec<DevicePluginNode>,
    /// The chart's release, when installed with Helm.
    helm: Option<helm::HelmRelease>,
    ca: CertificateAuthority,
    monitor_task: JoinHandle<()>,
    dir: tempfile::TempDir,
    pub plane: ControlPlane,
}

/// Fake-GPU description for `gpus` H100s with UUIDs unique to the node.
pub fn fake_gpus_yaml(node: &str, gpus: u32) -> String {
    let tag: u32 = node
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let mut text = String::from("gpus:\n");
    for i in 0..gpus {
        text.push_str(&format!(
            "  - {{ uuid: GPU-{tag:08x}-0000-0000-0000-{i:012x}, model: NVIDIA H100 80GB HBM3, memoryMiB: 81920 }}\n"
        ));
    }
    text
}

fn setup(what: &str) -> impl Fn(String) -> ClusterError + '_ {
    move |e| ClusterError::Setup(format!("{what}: {e}"))
}

impl Cluster {
    /// Starts the control plane, installs deploy/base, starts the device plugins (waiting until
    /// every node shows its GPUs) and the replicas (waiting until each is ready), and registers
    /// admission with the first replica.
    pub async fn start(options: ClusterOptions) -> Result<Cluster, ClusterError> {
        let binaries = crate::gpufair_binaries()?;
        let plane = ControlPlane::start(options.control_plane.clone()).await?;
        let api = KubeApi::new(plane.client().await?);
        let dir = tempfile::tempdir().map_err(|e| setup("temporary directory")(e.to_string()))?;
        let (listen, helm) = match &options.install {
            Install::Kustomize => {
                install::install_base(&plane).await?;
                ("127.0.0.1:0".to_string(), None)
            }
            Install::Helm { values } => {
                let listen = helm::free_listen_address()?;
                let release = helm::HelmRelease::new(&plane, dir.path())?;
                release.install(&helm::values_with_url(values, &listen)?)?;
                (listen, Some(release))
            }
        };
        let (monitor, monitor_task) = Monitor::start(api.client.clone());

        let plugin_kubeconfig = dir.path().join("device-plugin.kubeconfig");
        plane
            .service_account_kubeconfig(NAMESPACE, DEVICE_PLUGIN_ACCOUNT, &plugin_kubeconfig)
            .await?;
        let mut plugins = Vec::new();
        for node in &options.nodes {
            let mut spec = NodeSpec::new(&node.name);
            for (key, value) in &node.labels {
                spec = spec.label(key, value);
            }
            if !node.device_plugin {
                api.add_node(&spec.gpus(node.gpus)).await?;
                continue;
            }
            api.add_node(&spec).await?;
            let description = match &node.fake_gpus {
                Some((description, _)) => description.clone(),
                None => fake_gpus_yaml(&node.name, node.gpus),
            };
            plugins.push(
                DevicePluginNode::start(
                    &api,
                    &binaries.device_plugin,
                    &node.name,
                    &description,
                    None,
                    Some(&plugin_kubeconfig),
                )
                .await?,
            );
        }
        for node in &options.nodes {
            let offers = node.offers();
            api.wait_for("v1", "Node", "", &node.name, Duration::from_secs(30), |n| {
                n.is_some_and(|n| {
                    offers.iter().all(|(resource, count)| {
                        n["status"]["allocatable"][resource.as_str()] == count.to_string().as_str()
                    }) && n["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
            })
            .await?;
        }

        let ca = CertificateAuthority::generate("gpufair end-to-end webhook CA", 2)
            .map_err(|e| setup("CA")(e.to_string()))?;
        let serving = ca
            .issue_serving(&["127.0.0.1".into(), "localhost".into()], 2)
            .map_err(|e| setup("serving certificate")(e.to_string()))?;
        let (tls_cert, tls_key) = write_bundle(dir.path(), &ca, &serving)
            .map_err(|e| setup("certificate files")(e.to_string()))?;
        let kubeconfig = dir.path().join("webhook.kubeconfig");
        let faults = if options.fault_proxy {
            let proxy = FaultProxy::start(&plane.credentials.ca, &plane.server)
                .await
                .map_err(|e| ClusterError::Setup(e.to_string()))?;
            plane
                .service_account_kubeconfig_at(NAMESPACE, WEBHOOK_ACCOUNT, &kubeconfig, &proxy.url)
                .await?;
            Some(proxy)
        } else {
            plane
                .service_account_kubeconfig(NAMESPACE, WEBHOOK_ACCOUNT, &kubeconfig)
                .await?;
            None
        };
        let config_yaml = match &helm {
            None => options.config_yaml.clone(),
            Some(_) => config_map_file(&api).await?,
        };
        let settings = ReplicaSettings {
            binary: binaries.webhook.clone(),
            listen,
            kubeconfig,
            tls_cert,
            tls_key,
            config: replica::write_config(dir.path(), &config_yaml)?,
            cycle_interval: options.cycle_interval.clone(),
            debounce: options.debounce.clone(),
            status_interval: options.status_interval.clone(),
            release_rate: options.release_rate,
            release_burst: options.release_burst,
            log_filter: options.log_filter.clone(),
            lease: options.lease.clone(),
        };
        let mut cluster = Cluster {
            replicas: Vec::new(),
            faults,
            monitor,
            api,
            settings,
            plugins,
            helm,
            ca,
            monitor_task,
            dir,
            plane,
        };
        for i in 0..options.replicas {
            let replica = Replica::start(&cluster.settings, &format!("replica-{i}")).await?;
            cluster.replicas.push(replica);
        }
        for i in 0..cluster.replicas.len() {
            cluster.wait_ready(i).await?;
        }
        cluster.admit_through(0).await?;
        Ok(cluster)
    }

    /// Waits until replica `replica` answers `/readyz` (30 s at most).
    pub async fn wait_ready(&self, replica: usize) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !self.replicas[replica].ready().await {
            if tokio::time::Instant::now() > deadline {
                return Err(ClusterError::Setup(format!(
                    "replica {replica} not ready within 30 s; log:\n{}",
                    self.replicas[replica].log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Points the MutatingWebhookConfiguration (deploy/base's) at replica `replica`, and waits
    /// until the API server calls it (a GPU pod's dry-run create comes back gated) and the
    /// replica knows every Queue stored so far: each replica learns Queues through its own
    /// watch, so one that has just taken over admission may not have seen them yet.
    pub async fn admit_through(&self, replica: usize) -> Result<(), ClusterError> {
        self.point_admission_at(replica).await?;
        let queues = self.api.list(api::QUEUE_API_VERSION, "Queue", "").await?;
        let namespaces: std::collections::BTreeSet<&str> = queues
            .iter()
            .filter_map(|queue| queue["spec"]["namespaces"].as_array())
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        for namespace in namespaces {
            self.wait_until_admission_serves(namespace).await?;
        }
        Ok(())
    }

    async fn point_admission_at(&self, replica: usize) -> Result<(), ClusterError> {
        let url = format!("https://{}/mutate", self.replicas[replica].listen);
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(self.ca.cert_pem());
        let client_config = json!({"url": url, "caBundle": ca_bundle});
        self.api
            .modify(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                "",
                install::WEBHOOK_CONFIGURATION,
                |c| c["webhooks"][0]["clientConfig"] = client_config.clone(),
            )
            .await?;
        install::wait_admission_through(&self.api, &url).await
    }

    /// The Lease holder's identity, if any replica holds it.
    pub async fn leader_identity(&self) -> Option<String> {
        self.api
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                NAMESPACE,
                "gpufair-controller",
            )
            .await
            .ok()
            .flatten()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .filter(|h| !h.is_empty())
    }

    /// Index of the replica holding the Lease.
    pub async fn leader(&self) -> Option<usize> {
        let holder = self.leader_identity().await?;
        self.replicas
            .iter()
            .position(|r| r.lease_identity() == holder)
    }

    /// Waits until a replica holds the Lease; returns its index.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<usize, ClusterError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(leader);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ApiError::Timeout {
                    what: "a controller leader".into(),
                    timeout,
                }
                .into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Restarts replica `replica` gracefully (SIGTERM, then a new process with the same
    /// identity flag) and points admission at it again.
    pub async fn restart(&mut self, replica: usize) -> Result<(), ClusterError> {
        self.replicas[replica]
            .terminate(Duration::from_secs(10))
            .await?;
        let identity = self.replicas[replica].identity.clone();
        self.replicas[replica] = Replica::start(&self.settings, &identity).await?;
        self.wait_ready(replica).await?;
        self.admit_through(replica).await
    }

    /// Creates a namespace and a Queue serving it.
    pub async fn queue(
        &self,
        name: &str,
        namespace: &str,
        mut spec: serde_json::Value,
    ) -> Result<(), ClusterError> {
        self.api.ensure_namespace(namespace, &[]).await?;
        spec["namespaces"] = json!([namespace]);
        self.api.create_queue(name, spec).await?;
        self.wait_until_admission_serves(namespace).await
    }

    /// Waits until admission knows a Queue for `namespace`. The webhook learns Queues through
    /// its watch, a moment after they are stored; a dry-run GPU pod (the webhook has no side
    /// effects) asks it without leaving anything behind.
    async fn wait_until_admission_serves(&self, namespace: &str) -> Result<(), ClusterError> {
        let timeout = Duration::from_secs(15);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut probe = pods::gpu_pod(namespace, "gpufair-queue-probe", 1);
        probe["apiVersion"] = json!("v1");
        probe["kind"] = json!("Pod");
        loop {
            match self.api.create_dry_run(probe.clone()).await {
                Err(refused) if refused.message().contains("no Queue lists namespace") => {
                    if tokio::time::Instant::now() > deadline {
                        return Err(ApiError::Timeout {
                            what: format!("admission to see a Queue for namespace {namespace}"),
                            timeout,
                        }
                        .into());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // Admitted, or refused for a reason of the pod's own: the Queue is known.
                _ => return Ok(()),
            }
        }
    }

    /// The chart's release. Panics unless the cluster was installed with [`Install::Helm`].
    pub fn helm(&self) -> &helm::HelmRelease {
        self.helm
            .as_ref()
            .expect("the cluster was installed without Install::Helm")
    }

    /// Writes the config file of the `gpufair-config` ConfigMap as it is now into the replicas'
    /// config file, as kubelet updates a mounted ConfigMap: a new file swapped in by rename.
    /// Returns its text.
    pub async fn project_config_map(&self) -> Result<String, ClusterError> {
        let text = config_map_file(&self.api).await?;
        let staged = self.dir.path().join("gpufair-config.yaml.new");
        std::fs::write(&staged, &text)
            .and_then(|()| std::fs::rename(&staged, &self.settings.config))
            .map_err(|e| setup("config file")(e.to_string()))?;
        Ok(text)
    }

    /// The fault proxy between the replicas and the API server. Panics unless the cluster was
    /// started with `ClusterOptions::fault_proxy`: a case that injects faults cannot go on
    /// without it.
    pub fn faults(&self) -> &FaultProxy {
        self.faults
            .as_ref()
            .expect("the cluster was started without ClusterOptions::fault_proxy")
    }

    /// Every replica's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for replica in &self.replicas {
            text.push_str(&format!(
                "--- {} ---\n{}\n",
                replica.identity,
                replica.log()
            ));
        }
        text
    }

    /// Pod Events, oldest first.
    pub async fn pod_events(&self) -> Vec<events::PodEvent> {
        events::pod_events(&self.api.events(None).await.unwrap_or_default())
    }

    /// The admin's kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.plane.kubeconfig_path().to_path_buf()
    }

    /// Where each device plugin serves its Prometheus metrics (`host:port`).
    pub fn device_plugin_metrics(&self) -> Vec<String> {
        self.plugins.iter().map(|p| p.metrics.clone()).collect()
    }

    /// The device plugins' logs, for failure messages.
    pub fn plugin_logs(&self) -> String {
        self.plugins
            .iter()
            .map(DevicePluginNode::log)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The directory the harness keeps the replicas' files in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// `config.yaml` of the `gpufair-config` ConfigMap, the file the webhook Deployment mounts.
async fn config_map_file(api: &KubeApi) -> Result<String, ClusterError> {
    let map = api
        .get("v1", "ConfigMap", NAMESPACE, "gpufair-config")
        .await?
        .ok_or_else(|| ClusterError::Setup("no ConfigMap gpufair-config".into()))?;
    map["data"]["config.yaml"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| ClusterError::Setup("ConfigMap gpufair-config has no config.yaml".into()))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.monitor_task.abort();
    }
}
