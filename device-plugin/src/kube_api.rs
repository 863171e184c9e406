//! Every call the device plugin makes to the API server, and the grants they need. No other
//! module of this crate names kube's `Api`.

use std::future::Future;

use gpufair_api::access::ApiCall;
use gpufair_api::node_report::GpuNodeReport;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

const FIELD_MANAGER: &str = "gpufair-device-plugin";

/// What the device plugin asks of the API server, one method per request.
pub trait NodeApi {
    /// The Node `name` (its UID owns the report).
    fn node(&self, name: &str) -> impl Future<Output = Result<Node, kube::Error>> + Send;
    /// Writes the node's report by server-side apply, which creates it the first time.
    fn apply_report(
        &self,
        report: &GpuNodeReport,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// The pods bound to the Node `name`.
    fn pods_on_node(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<Pod>, kube::Error>> + Send;
}

/// The requests [`NodeApi`]'s methods make, in their order.
pub const CALLS: &[ApiCall] = &[
    ApiCall::cluster("", "nodes", "get"),
    ApiCall::cluster("gpufair.io", "gpunodereports", "patch"),
    // Server-side apply of an object that does not exist yet is a create.
    ApiCall::cluster("gpufair.io", "gpunodereports", "create"),
    ApiCall::cluster("", "pods", "list"),
];

/// [`NodeApi`] through a kube client.
#[derive(Clone)]
pub struct KubeNodeApi {
    client: kube::Client,
}

impl KubeNodeApi {
    pub fn new(client: kube::Client) -> Self {
        KubeNodeApi { client }
    }
}

impl NodeApi for KubeNodeApi {
    async fn node(&self, name: &str) -> Result<Node, kube::Error> {
        Api::<Node>::all(self.client.clone()).get(name).await
    }

    async fn apply_report(&self, report: &GpuNodeReport) -> Result<(), kube::Error> {
        let name = report.name_any();
        Api::<GpuNodeReport>::all(self.client.clone())
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(report),
            )
            .await?;
        Ok(())
    }

    async fn pods_on_node(&self, name: &str) -> Result<Vec<Pod>, kube::Error> {
        let params = ListParams::default().fields(&format!("spec.nodeName={name}"));
        Ok(Api::<Pod>::all(self.client.clone())
            .list(&params)
            .await?
            .items)
    }
}
