//! What the admission library asks of the API server: nothing. The process's watches
//! (gpufair-runtime's `kube_api`) list and watch Queues and WorkloadFamilies and hand each
//! event to admission's indexes; this module only names the event type they hand over. No other
//! module of this crate names kube's `Api`, its Event `Recorder` or `kube::runtime`, so `CALLS`
//! is the whole of this crate's share of the grants.

use gpufair_api::access::ApiCall;

pub use kube::runtime::watcher::Event as WatchEvent;

/// The requests this crate makes.
pub const CALLS: &[ApiCall] = &[];
