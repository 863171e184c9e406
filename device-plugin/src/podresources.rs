//! Which devices kubelet gave to which pod, from kubelet's PodResources API (`List`).

use std::path::Path;

use crate::proto::podresources::ListPodResourcesRequest;
use crate::proto::podresources::pod_resources_lister_client::PodResourcesListerClient;

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("cannot connect to the PodResources socket {path}: {message}")]
    Connect { path: String, message: String },
    #[error("PodResources List failed: {0}")]
    List(String),
}

/// One pod's devices of the resources we serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDevices {
    pub namespace: String,
    pub name: String,
    /// (resource name, device ID) pairs, in kubelet's order.
    pub devices: Vec<(String, String)>,
}

/// Lists pods holding devices of any resource accepted by `ours`. A fresh connection each
/// time: kubelet re-creates the socket when it restarts.
pub async fn list(
    socket: &Path,
    ours: impl Fn(&str) -> bool,
) -> Result<Vec<PodDevices>, PodResourcesError> {
    let path = socket.display().to_string();
    let mut client = PodResourcesListerClient::connect(format!("unix://{path}"))
        .await
        .map_err(|err| PodResourcesError::Connect {
            path: path.clone(),
            message: err.to_string(),
        })?;
    let response = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|status| PodResourcesError::List(status.to_string()))?
        .into_inner();
    let mut pods = Vec::new();
    for pod in response.pod_resources {
        let devices: Vec<(String, String)> = pod
            .containers
            .iter()
            .flat_map(|c| c.devices.iter())
            .filter(|d| ours(&d.resource_name))
            .flat_map(|d| {
                d.device_ids
                    .iter()
                    .map(|id| (d.resource_name.clone(), id.clone()))
            })
            .collect();
        if !devices.is_empty() {
            pods.push(PodDevices {
                namespace: pod.namespace,
                name: pod.name,
                devices,
            });
        }
    }
    Ok(pods)
}
