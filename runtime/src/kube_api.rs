//! Every call the runtime's own code makes to the API server, and the grants they need: the
//! process's one watch per kind, whose events feed admission and the controller (the
//! controller's and the admission library's calls are declared in their own `kube_api`). No
//! other module of this crate names kube's `Api`, its Event `Recorder` or `kube::runtime`.

use futures::Stream;
use gpufair_api::access::ApiCall;
use gpufair_api::{Queue, WorkloadFamily};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

pub use kube::runtime::watcher::{Error as WatchError, Event as WatchEvent};

/// What the process's watches ask of the API server, one method per request. A watch is a
/// stream (list, then watch, retried with backoff), not an async call: the stream is the
/// request, and its readers consume it.
pub trait WatchApi {
    /// Lists, then watches, every Queue.
    fn watch_queues(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<Queue>, WatchError>> + Send + 'static;
    /// Lists, then watches, every WorkloadFamily.
    fn watch_workload_families(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<WorkloadFamily>, WatchError>> + Send + 'static;
}

/// The requests [`WatchApi`]'s methods make, in their order.
pub const CALLS: &[ApiCall] = &[
    ApiCall::cluster("gpufair.io", "queues", "list"),
    ApiCall::cluster("gpufair.io", "queues", "watch"),
    ApiCall::cluster("gpufair.io", "workloadfamilies", "list"),
    ApiCall::cluster("gpufair.io", "workloadfamilies", "watch"),
];

/// [`WatchApi`] through a kube client.
#[derive(Clone)]
pub struct KubeWatchApi {
    client: Client,
}

impl KubeWatchApi {
    pub fn new(client: Client) -> Self {
        KubeWatchApi { client }
    }
}

impl WatchApi for KubeWatchApi {
    fn watch_queues(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<Queue>, WatchError>> + Send + 'static {
        watcher(Api::all(self.client.clone()), watcher::Config::default()).default_backoff()
    }

    fn watch_workload_families(
        &self,
    ) -> impl Stream<Item = Result<WatchEvent<WorkloadFamily>, WatchError>> + Send + 'static {
        watcher(Api::all(self.client.clone()), watcher::Config::default()).default_backoff()
    }
}
