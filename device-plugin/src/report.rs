//! Publishing usage reports: as the node's `GpuNodeReport` (in a cluster), as a JSON file, and
//! as metrics, every interval.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpufair_api::node_report::{GpuNodeReport, GpuNodeReportSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backend::GpuBackend;
use crate::devices::Inventory;
use crate::health::HealthSnapshot;
use crate::kube_api::{KubeNodeApi, NodeApi};
use crate::metrics::Metrics;
use crate::peaks::PeakMemory;
use crate::usage::{ReportInputs, build_report, pid_pod_uids, sample_devices};

const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write report file {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serialise the report: {0}")]
    Serialise(#[from] serde_json::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Whether an API server is configured: this process runs in a pod (service host set and a
/// service account token mounted), or `KUBECONFIG` names a kubeconfig (a node agent run outside
/// a pod, as on a host managed by hand).
pub fn has_api_server() -> bool {
    std::env::var_os("KUBECONFIG").is_some_and(|k| !k.is_empty())
        || (std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && Path::new(SERVICE_ACCOUNT_TOKEN).exists())
}

/// The report as a complete object, so the file can also be applied with kubectl.
pub fn report_object(spec: GpuNodeReportSpec) -> GpuNodeReport {
    let name = spec.node_name.clone();
    GpuNodeReport::new(&name, spec)
}

/// Writes the report atomically (temporary file, then rename), so readers never see half a file.
pub fn write_report_file(path: &Path, spec: &GpuNodeReportSpec) -> Result<(), ReportError> {
    let json = serde_json::to_vec_pretty(&report_object(spec.clone()))?;
    let tmp = path.with_extension("tmp");
    let file_err = |source| ReportError::File {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, json).map_err(file_err)?;
    std::fs::rename(&tmp, path).map_err(file_err)
}

/// The node's GpuNodeReport writer and the pod directory, through the API server.
pub struct KubeSink {
    api: KubeNodeApi,
    node_name: String,
    owner: Option<OwnerReference>,
}

impl KubeSink {
    pub async fn connect(node_name: &str) -> Result<KubeSink, ReportError> {
        let api = KubeNodeApi::new(kube::Client::try_default().await?);
        let owner = match api.node(node_name).await {
            Ok(node) => node.metadata.uid.map(|uid| OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_string(),
                uid,
                ..OwnerReference::default()
            }),
            Err(err) => {
                // Without the owner the report outlives a deleted node; publishing still helps.
                tracing::warn!(node = %node_name, %err, "cannot read the Node; the report will have no owner");
                None
            }
        };
        Ok(KubeSink {
            api,
            node_name: node_name.to_string(),
            owner,
        })
    }

    pub async fn publish(&self, spec: &GpuNodeReportSpec) -> Result<(), ReportError> {
        let mut object = report_object(spec.clone());
        object.metadata.owner_references = self.owner.clone().map(|o| vec![o]);
        self.api.apply_report(&object).await?;
        Ok(())
    }

    /// UID → (namespace, name) of the pods bound to this node.
    pub async fn pod_names(&self) -> Result<HashMap<String, (String, String)>, ReportError> {
        let pods = self.api.pods_on_node(&self.node_name).await?;
        Ok(pods
            .into_iter()
            .filter_map(|pod| {
                let meta = pod.metadata;
                Some((meta.uid?, (meta.namespace?, meta.name?)))
            })
            .collect())
    }
}

/// The periodic measurement and its outputs.
pub struct Reporter {
    pub backend: Arc<dyn GpuBackend>,
    pub inventory: Arc<Inventory>,
    pub health: watch::Receiver<HealthSnapshot>,
    pub node_name: String,
    pub interval: Duration,
    pub proc_root: PathBuf,
    pub pod_resources_socket: PathBuf,
    pub report_file: Option<PathBuf>,
    pub metrics: Option<Arc<Metrics>>,
    pub kube: Option<KubeSink>,
}

impl Reporter {
    pub async fn run(self, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = tokio::time::Instant::now();
        let mut pod_resources_failing = false;
        let mut peaks = PeakMemory::default();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let now = tokio::time::Instant::now();
            // The first report covers no time; report the configured interval instead of zero.
            let elapsed = match now.duration_since(last) {
                d if d.is_zero() => self.interval,
                d => d,
            };
            last = now;
            let samples =
                sample_devices(Arc::clone(&self.backend), Arc::clone(&self.inventory)).await;
            let uids = pid_pod_uids(&self.proc_root, &samples);
            let inventory = Arc::clone(&self.inventory);
            let pods = match crate::podresources::list(&self.pod_resources_socket, |name| {
                inventory.resource(name).is_some()
            })
            .await
            {
                Ok(pods) => {
                    if pod_resources_failing {
                        tracing::info!("PodResources API reachable again");
                    }
                    pod_resources_failing = false;
                    pods
                }
                Err(err) => {
                    if !pod_resources_failing {
                        tracing::warn!(%err, "cannot list pod resources; reporting devices without pods");
                    }
                    pod_resources_failing = true;
                    Vec::new()
                }
            };
            let names = match &self.kube {
                Some(kube) => kube.pod_names().await.unwrap_or_else(|err| {
                    tracing::warn!(%err, "cannot list this node's pods");
                    HashMap::new()
                }),
                None => HashMap::new(),
            };
            let health = self.health.borrow().clone();
            let mut report = build_report(&ReportInputs {
                node_name: &self.node_name,
                inventory: &self.inventory,
                health: &health,
                samples: &samples,
                pods: &pods,
                pid_pod_uid: &uids,
                pod_names: &names,
                interval: elapsed,
                timestamp: jiff::Timestamp::now(),
            });
            peaks.apply(&mut report.spec, !pod_resources_failing);
            if report.unattributed_processes > 0 {
                tracing::debug!(
                    processes = report.unattributed_processes,
                    "GPU processes not attributed to any pod"
                );
            }
            if let Some(metrics) = &self.metrics {
                metrics.record_report(&report);
                metrics.record_charged_by_allocation(
                    samples
                        .iter()
                        .filter(|(_, s)| s.usage.charge_allocation)
                        .map(|(uuid, _)| uuid.as_str()),
                );
            }
            if let Some(path) = &self.report_file
                && let Err(err) = write_report_file(path, &report.spec)
            {
                tracing::warn!(%err, "cannot write the report file");
            }
            if let Some(kube) = &self.kube
                && let Err(err) = kube.publish(&report.spec).await
            {
                tracing::warn!(%err, "cannot publish the GpuNodeReport");
            }
        }
    }
}
