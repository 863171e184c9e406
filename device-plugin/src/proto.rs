//! Generated kubelet gRPC types. The two APIs each define `TopologyInfo`, `NumaNode` and
//! `CdiDevice`, so they live in separate modules.

/// Device plugin API (`v1beta1`): kubelet's Registration service and the DevicePlugin service.
pub mod deviceplugin {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("v1beta1");

    /// The only API version kubelet accepts.
    pub const VERSION: &str = "v1beta1";
    /// Health value kubelet counts as allocatable; any other string is unhealthy.
    pub const HEALTHY: &str = "Healthy";
    pub const UNHEALTHY: &str = "Unhealthy";
    /// The socket kubelet's Registration service listens on, inside the device plugin directory.
    pub const KUBELET_SOCKET: &str = "kubelet.sock";
}

/// PodResources API (`v1`): which devices kubelet gave to which pod.
pub mod podresources {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("v1");
}
