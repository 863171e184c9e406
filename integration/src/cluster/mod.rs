//! A whole gpufair installation on the API-server stand-in, every component a real process:
//! `gpufair-webhook serve` replicas (admission and the gate-release controller, electing a
//! leader on a Lease), one `gpufair-device-plugin` with fake GPUs per node giving the node its
//! allocatable, the MutatingWebhookConfiguration and PriorityClasses from `deploy/base`. The
//! end-to-end tests and `gpufair-try` start one of these.

pub mod events;
pub mod monitor;
pub mod pods;
pub mod replica;

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use gpufair_certs::{CertificateAuthority, write_bundle};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::standin::devices::DevicePluginNode;
use crate::standin::{NodeSpec, StandIn, StandInError, StandInOptions};
pub use monitor::Monitor;
pub use replica::{LeaseFlags, Replica, ReplicaSettings};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster setup: {0}")]
    Setup(String),
    #[error(transparent)]
    StandIn(#[from] StandInError),
    #[error(transparent)]
    Device(#[from] crate::standin::devices::DeviceError),
}

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
}

impl NodeOptions {
    pub fn new(name: &str, gpus: u32) -> Self {
        Self {
            name: name.into(),
            gpus,
            labels: Vec::new(),
            device_plugin: true,
        }
    }

    /// The same node with its GPUs set directly, without a device plugin process.
    pub fn without_device_plugin(mut self) -> Self {
        self.device_plugin = false;
        self
    }
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
        }
    }
}

/// A running cluster. Dropping it stops every process and the stand-in.
pub struct Cluster {
    pub standin: StandIn,
    pub monitor: Monitor,
    pub replicas: Vec<Replica>,
    pub settings: ReplicaSettings,
    /// Kept only to keep the plugin processes alive (dropping one kills it).
    _plugins: Vec<DevicePluginNode>,
    ca: CertificateAuthority,
    monitor_task: JoinHandle<()>,
    _dir: tempfile::TempDir,
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

impl Cluster {
    /// Starts the stand-in, the device plugins (waiting until every node shows its GPUs), the
    /// replicas (waiting until each is ready), and registers admission with the first replica.
    pub async fn start(options: ClusterOptions) -> Result<Cluster, ClusterError> {
        let standin = StandIn::start(StandInOptions::for_tests()).await?;
        let root = crate::workspace_root();
        let classes = std::fs::read_to_string(root.join("deploy/base/priorityclasses.yaml"))
            .map_err(|e| ClusterError::Setup(format!("deploy/base/priorityclasses.yaml: {e}")))?;
        standin
            .create_yaml(&classes, "priorityclasses.yaml")
            .await?;
        let (monitor, monitor_task) = Monitor::start(std::sync::Arc::clone(standin.state()));

        let plugin_binary = crate::binary("gpufair-device-plugin", "gpufair-device-plugin");
        let mut plugins = Vec::new();
        for node in &options.nodes {
            let mut spec = NodeSpec::new(&node.name);
            for (key, value) in &node.labels {
                spec = spec.label(key, value);
            }
            if !node.device_plugin {
                standin.add_node(spec.gpus(node.gpus)).await?;
                continue;
            }
            standin.add_node(spec).await?;
            plugins.push(
                DevicePluginNode::start(
                    &standin,
                    &plugin_binary,
                    &node.name,
                    &fake_gpus_yaml(&node.name, node.gpus),
                    None,
                )
                .await?,
            );
        }
        for node in &options.nodes {
            let want = node.gpus.to_string();
            standin
                .wait_for("v1", "Node", "", &node.name, Duration::from_secs(30), |n| {
                    n.is_some_and(|n| n["status"]["allocatable"][monitor::GPU] == want.as_str())
                })
                .await?;
        }

        let dir = tempfile::tempdir()
            .map_err(|e| ClusterError::Setup(format!("temporary directory: {e}")))?;
        let ca = CertificateAuthority::generate("gpufair end-to-end CA", 2)
            .map_err(|e| ClusterError::Setup(format!("CA: {e}")))?;
        let serving = ca
            .issue_serving(&["127.0.0.1".into(), "localhost".into()], 2)
            .map_err(|e| ClusterError::Setup(format!("serving certificate: {e}")))?;
        let (tls_cert, tls_key) = write_bundle(dir.path(), &ca, &serving)
            .map_err(|e| ClusterError::Setup(format!("certificate files: {e}")))?;
        let settings = ReplicaSettings {
            binary: crate::binary("gpufair-webhook", "gpufair-webhook"),
            kubeconfig: standin.kubeconfig_path().to_path_buf(),
            tls_cert,
            tls_key,
            config: replica::write_config(dir.path(), &options.config_yaml)?,
            cycle_interval: options.cycle_interval.clone(),
            debounce: options.debounce.clone(),
            status_interval: options.status_interval.clone(),
            release_rate: options.release_rate,
            release_burst: options.release_burst,
            log_filter: options.log_filter.clone(),
            lease: options.lease.clone(),
        };
        let mut cluster = Cluster {
            standin,
            monitor,
            replicas: Vec::new(),
            settings,
            _plugins: plugins,
            ca,
            monitor_task,
            _dir: dir,
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

    /// Points the MutatingWebhookConfiguration (deploy/base's) at replica `replica`.
    pub async fn admit_through(&self, replica: usize) -> Result<(), ClusterError> {
        let url = format!("https://{}/mutate", self.replicas[replica].listen);
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(self.ca.cert_pem());
        let client_config = json!({"url": url, "caBundle": ca_bundle});
        if self
            .standin
            .get(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                "",
                "gpufair",
            )
            .is_ok()
        {
            self.standin.modify(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                "",
                "gpufair",
                |c| c["webhooks"][0]["clientConfig"] = client_config.clone(),
            )?;
            return Ok(());
        }
        let path = crate::workspace_root().join("deploy/base/mutatingwebhook.yaml");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ClusterError::Setup(format!("{}: {e}", path.display())))?;
        let mut configuration: Value = serde_yaml::from_str(&text)
            .map_err(|e| ClusterError::Setup(format!("{}: {e}", path.display())))?;
        configuration["webhooks"][0]["clientConfig"] = client_config;
        self.standin.create(configuration).await?;
        Ok(())
    }

    /// The Lease holder's identity, if any replica holds it.
    pub fn leader_identity(&self) -> Option<String> {
        self.standin
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                "gpufair-system",
                "gpufair-controller",
            )
            .ok()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .filter(|h| !h.is_empty())
    }

    /// Index of the replica holding the Lease.
    pub fn leader(&self) -> Option<usize> {
        let holder = self.leader_identity()?;
        self.replicas
            .iter()
            .position(|r| r.lease_identity() == holder)
    }

    /// Waits until a replica holds the Lease; returns its index.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<usize, ClusterError> {
        Ok(self
            .standin
            .wait_until("a controller leader", timeout, || self.leader())
            .await?)
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
        mut spec: Value,
    ) -> Result<(), ClusterError> {
        self.standin.ensure_namespace(namespace, &[]).await?;
        spec["namespaces"] = json!([namespace]);
        self.standin.create_queue(name, spec).await?;
        Ok(())
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
    pub fn pod_events(&self) -> Vec<events::PodEvent> {
        events::pod_events(&self.standin.events(None))
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.standin.kubeconfig_path().to_path_buf()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.monitor_task.abort();
    }
}
