//! Every call the controller makes to the API server, and the grants they need. No other
//! module of this crate names kube's `Api`, its Event `Recorder` or `kube::runtime`: the rest
//! of the crate reads what these calls return, and the plain types it needs for that (watch
//! events, the reflector's in-memory store, the Event a write carries) are re-exported here.
//!
//! Two traits, because two parts of the process call with different lives:
//! - [`ControllerApi`], the Lease holder's calls: the watches its caches are built from, the
//!   release patch, evictions, deletions, Queue and WorkloadFamily status, Events;
//! - [`LeaseApi`], the elector's calls on the Lease, made by every replica whether it leads or
//!   not, in the install namespace only.
//!
//! A watch is one method returning a stream (list, then watch, retried with backoff) rather
//! than an async call: the stream is the request, and the caches consume it.

use std::future::Future;

use futures::Stream;
use gpufair_api::access::ApiCall;
use gpufair_api::{GpuNodeReport, Queue, WorkloadFamily};
use gpufair_core::labels::MANAGED_LABEL;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;

pub use kube::runtime::events::{Event, EventType};
pub use kube::runtime::reflector::store::{Writer, WriterDropped};
pub use kube::runtime::reflector::{Store, store};
pub use kube::runtime::watcher::{Error as WatchError, Event as WatchEvent};

/// The field manager of the controller's server-side applies.
const FIELD_MANAGER: &str = "gpufair-controller";

/// What the Lease holder asks of the API server, one method per request.
pub trait ControllerApi {
    /// Lists, then watches, the pods gpufair manages (labelled `gpufair.io/managed=true`).
    fn watch_managed_pods(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<Pod>, WatchError>> + Send + 'static;
    /// Lists, then watches, every Node.
    fn watch_nodes(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<Node>, WatchError>> + Send + 'static;
    /// Lists, then watches, every GpuNodeReport.
    fn watch_gpu_node_reports(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<GpuNodeReport>, WatchError>> + Send + 'static;
    /// Applies a JSON patch to the pod `namespace/name` (the release).
    fn patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: json_patch::Patch,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// POSTs `eviction` to the pod's eviction subresource, as a dry run when asked.
    fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        eviction: &Value,
        dry_run: bool,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// The managed pods of `namespace`, as they are now.
    fn managed_pods(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<Pod>, kube::Error>> + Send;
    /// The disruption budgets of `namespace`.
    fn disruption_budgets(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<PodDisruptionBudget>, kube::Error>> + Send;
    /// Deletes the pod `namespace/name` if its UID is still `uid`.
    fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Merge-patches the Queue `name`'s status subresource with `body`.
    fn patch_queue_status(
        &self,
        name: &str,
        body: &Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// The Queue `name` as its status subresource returns it.
    fn queue_status(&self, name: &str) -> impl Future<Output = Result<Queue, kube::Error>> + Send;
    /// Publishes `event` about the object `regarding` (kube's recorder creates an Event, or
    /// patches the series of one it published before).
    fn publish_event(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Every WorkloadFamily.
    fn workload_families(
        &self,
    ) -> impl Future<Output = Result<Vec<WorkloadFamily>, kube::Error>> + Send;
    /// Writes a WorkloadFamily's spec by server-side apply, which creates it the first time.
    fn apply_workload_family(
        &self,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Writes a WorkloadFamily's status by server-side apply.
    fn apply_workload_family_status(
        &self,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// What the elector asks of the API server, one method per request, on Leases in its
/// namespace.
pub trait LeaseApi {
    /// The Lease `name`, if it exists.
    fn lease(&self, name: &str) -> impl Future<Output = Result<Option<Lease>, kube::Error>> + Send;
    fn create_lease(&self, lease: &Lease) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Replaces the Lease at the resourceVersion it carries (a conflict when it changed).
    fn replace_lease(
        &self,
        name: &str,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// The requests [`ControllerApi`]'s and [`LeaseApi`]'s methods make, in their order.
pub const CALLS: &[ApiCall] = &[
    // The watches: each lists, then watches.
    ApiCall::cluster("", "pods", "list"),
    ApiCall::cluster("", "pods", "watch"),
    ApiCall::cluster("", "nodes", "list"),
    ApiCall::cluster("", "nodes", "watch"),
    ApiCall::cluster("gpufair.io", "gpunodereports", "list"),
    ApiCall::cluster("gpufair.io", "gpunodereports", "watch"),
    // The release.
    ApiCall::cluster("", "pods", "patch"),
    ApiCall::cluster("", "pods/eviction", "create"),
    // The budget check before evicting a workload of several pods (the pod list is granted
    // above).
    ApiCall::cluster("policy", "poddisruptionbudgets", "list"),
    ApiCall::cluster("", "pods", "delete"),
    ApiCall::cluster("gpufair.io", "queues/status", "patch"),
    ApiCall::cluster("gpufair.io", "queues/status", "get"),
    ApiCall::cluster("events.k8s.io", "events", "create"),
    ApiCall::cluster("events.k8s.io", "events", "patch"),
    ApiCall::cluster("gpufair.io", "workloadfamilies", "list"),
    ApiCall::cluster("gpufair.io", "workloadfamilies", "patch"),
    // Server-side apply of an object that does not exist yet is a create.
    ApiCall::cluster("gpufair.io", "workloadfamilies", "create"),
    ApiCall::cluster("gpufair.io", "workloadfamilies/status", "patch"),
    // The Lease, in the install namespace. A create cannot be limited by name: the name is in
    // the body.
    ApiCall::install_namespace("coordination.k8s.io", "leases", "get"),
    ApiCall::install_namespace("coordination.k8s.io", "leases", "create"),
    ApiCall::install_namespace("coordination.k8s.io", "leases", "update"),
];

/// [`ControllerApi`] through a kube client; Events name `instance` as the reporting instance.
#[derive(Clone)]
pub struct KubeControllerApi {
    client: Client,
    recorder: Recorder,
}

impl KubeControllerApi {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "gpufair-controller".into(),
                instance,
            },
        );
        KubeControllerApi { client, recorder }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn families(&self, namespace: &str) -> Api<WorkloadFamily> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

/// Lists, then watches, every `K` matching `config`, retried with kube's default backoff.
fn watch_all<K>(
    client: Client,
    config: watcher::Config,
) -> impl Stream<Item = Result<WatchEvent<K>, WatchError>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    watcher(Api::<K>::all(client), config).default_backoff()
}

impl ControllerApi for KubeControllerApi {
    fn watch_managed_pods(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<Pod>, WatchError>> + Send + 'static {
        let managed = watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true"));
        watch_all(self.client.clone(), managed)
    }

    fn watch_nodes(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<Node>, WatchError>> + Send + 'static {
        watch_all(self.client.clone(), watcher::Config::default())
    }

    fn watch_gpu_node_reports(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<GpuNodeReport>, WatchError>> + Send + 'static {
        watch_all(self.client.clone(), watcher::Config::default())
    }

    async fn patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: json_patch::Patch,
    ) -> Result<(), kube::Error> {
        self.pods(namespace)
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await?;
        Ok(())
    }

    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        eviction: &Value,
        dry_run: bool,
    ) -> Result<(), kube::Error> {
        let params = PostParams {
            dry_run,
            field_manager: None,
        };
        self.pods(namespace)
            .create_subresource::<_, Value>("eviction", name, &params, eviction)
            .await?;
        Ok(())
    }

    async fn managed_pods(&self, namespace: &str) -> Result<Vec<Pod>, kube::Error> {
        let params = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
        Ok(self.pods(namespace).list(&params).await?.items)
    }

    async fn disruption_budgets(
        &self,
        namespace: &str,
    ) -> Result<Vec<PodDisruptionBudget>, kube::Error> {
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), namespace);
        Ok(budgets.list(&ListParams::default()).await?.items)
    }

    async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), kube::Error> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.pods(namespace).delete(name, &params).await?;
        Ok(())
    }

    async fn patch_queue_status(&self, name: &str, body: &Value) -> Result<(), kube::Error> {
        Api::<Queue>::all(self.client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
            .await?;
        Ok(())
    }

    async fn queue_status(&self, name: &str) -> Result<Queue, kube::Error> {
        Api::<Queue>::all(self.client.clone())
            .get_status(name)
            .await
    }

    async fn publish_event(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        self.recorder.publish(event, regarding).await
    }

    async fn workload_families(&self) -> Result<Vec<WorkloadFamily>, kube::Error> {
        Ok(Api::<WorkloadFamily>::all(self.client.clone())
            .list(&ListParams::default())
            .await?
            .items)
    }

    async fn apply_workload_family(
        &self,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<(), kube::Error> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.families(namespace)
            .patch(name, &params, &Patch::Apply(object))
            .await?;
        Ok(())
    }

    async fn apply_workload_family_status(
        &self,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<(), kube::Error> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.families(namespace)
            .patch_status(name, &params, &Patch::Apply(object))
            .await?;
        Ok(())
    }
}

/// [`LeaseApi`] through a kube client, on Leases in one namespace.
pub struct KubeLeaseApi {
    leases: Api<Lease>,
}

impl KubeLeaseApi {
    pub fn new(client: Client, namespace: &str) -> Self {
        KubeLeaseApi {
            leases: Api::namespaced(client, namespace),
        }
    }
}

impl LeaseApi for KubeLeaseApi {
    async fn lease(&self, name: &str) -> Result<Option<Lease>, kube::Error> {
        self.leases.get_opt(name).await
    }

    async fn create_lease(&self, lease: &Lease) -> Result<(), kube::Error> {
        self.leases.create(&PostParams::default(), lease).await?;
        Ok(())
    }

    async fn replace_lease(&self, name: &str, lease: &Lease) -> Result<(), kube::Error> {
        self.leases
            .replace(name, &PostParams::default(), lease)
            .await?;
        Ok(())
    }
}
