//! The DevicePlugin gRPC service for one resource name.

use std::sync::Arc;

use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::allocate::{AllocatePolicy, allocate_container};
use crate::devices::Resource;
use crate::health::HealthSnapshot;
use crate::preferred::{LinkMatrix, preferred};
use crate::proto::deviceplugin::device_plugin_server::DevicePlugin;
use crate::proto::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, HEALTHY, ListAndWatchResponse, NumaNode, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
    TopologyInfo, UNHEALTHY,
};

/// Shared, read-only state every resource's service needs.
#[derive(Clone)]
pub struct PluginShared {
    pub policy: Arc<AllocatePolicy>,
    pub links: Arc<LinkMatrix>,
    pub health: watch::Receiver<HealthSnapshot>,
}

pub struct DevicePluginService {
    resource: Arc<Resource>,
    shared: PluginShared,
    /// Ends every ListAndWatch stream when this server stops, so graceful shutdown completes.
    stop: CancellationToken,
    /// Told when kubelet opens ListAndWatch (see `registration::watch_dial_back`).
    opened: Arc<Notify>,
}

impl DevicePluginService {
    pub fn new(
        resource: Arc<Resource>,
        shared: PluginShared,
        stop: CancellationToken,
        opened: Arc<Notify>,
    ) -> Self {
        DevicePluginService {
            resource,
            shared,
            stop,
            opened,
        }
    }
}

/// The complete device list with the given health, as ListAndWatch sends it.
pub fn device_list(resource: &Resource, health: &HealthSnapshot) -> ListAndWatchResponse {
    ListAndWatchResponse {
        devices: resource
            .devices
            .iter()
            .map(|d| Device {
                id: d.id.clone(),
                health: if health.is_device_healthy(d) {
                    HEALTHY
                } else {
                    UNHEALTHY
                }
                .into(),
                topology: d.numa_node.map(|id| TopologyInfo {
                    nodes: vec![NumaNode { id }],
                }),
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl DevicePlugin for DevicePluginService {
    type ListAndWatchStream = ReceiverStream<Result<ListAndWatchResponse, Status>>;

    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        self.opened.notify_one();
        let (tx, rx) = mpsc::channel(4);
        let resource = Arc::clone(&self.resource);
        let mut health = self.shared.health.clone();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            // Every message is the full list: kubelet rebuilds its view from each one.
            let mut last = device_list(&resource, &health.borrow_and_update());
            if tx.send(Ok(last.clone())).await.is_err() {
                return;
            }
            tracing::debug!(resource = %resource.name, devices = last.devices.len(), "ListAndWatch opened");
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tx.closed() => return,
                    changed = health.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let next = device_list(&resource, &health.borrow_and_update());
                        if next != last {
                            let unhealthy = next.devices.iter().filter(|d| d.health != HEALTHY).count();
                            tracing::info!(resource = %resource.name, unhealthy, "device health changed; sending the full list");
                            if tx.send(Ok(next.clone())).await.is_err() {
                                return;
                            }
                            last = next;
                        }
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for container in request.into_inner().container_requests {
            let size = usize::try_from(container.allocation_size).unwrap_or(0);
            let ids = preferred(
                &self.resource,
                &container.available_device_i_ds,
                &container.must_include_device_i_ds,
                size,
                &self.shared.links,
            )
            .map_err(|err| Status::invalid_argument(err.to_string()))?;
            container_responses.push(ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let mut container_responses = Vec::new();
        for container in request.into_inner().container_requests {
            let response =
                allocate_container(&self.resource, &container.devices_ids, &self.shared.policy)
                    .map_err(|err| {
                        tracing::warn!(resource = %self.resource.name, %err, "Allocate refused");
                        Status::invalid_argument(err.to_string())
                    })?;
            tracing::debug!(resource = %self.resource.name, devices = ?container.devices_ids, "allocated");
            container_responses.push(response);
        }
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        // Not requested in the options; answered anyway so a kubelet that calls it succeeds.
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
