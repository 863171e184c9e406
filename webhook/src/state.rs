//! What request handlers share.

use std::sync::Arc;

use arc_swap::ArcSwap;
use gpufair_core::mutation::AdmissionPolicy;

use crate::families::FamilyStore;
use crate::metrics::Metrics;
use crate::queues::QueueStore;
use crate::shutdown::Shutdown;

pub struct AppState {
    pub policy: ArcSwap<AdmissionPolicy>,
    pub queues: Arc<QueueStore>,
    /// Family histories for right-sizing.
    pub families: Arc<FamilyStore>,
    pub metrics: Arc<Metrics>,
    pub shutdown: Shutdown,
}

impl AppState {
    /// Why the webhook should not get traffic, if it should not.
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        if self.shutdown.is_stopping() {
            Some("shutting down")
        } else if !self.queues.is_synced() {
            Some("queues not loaded yet")
        } else {
            None
        }
    }
}
