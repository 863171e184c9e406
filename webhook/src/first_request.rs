//! Whether a connection has sent its first request yet, and how many it has sent, shared
//! between the connection's service (which marks each) and the task serving the connection
//! (which waits for the first and then watches for idleness).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct FirstRequest(Arc<Inner>);

#[derive(Default)]
struct Inner {
    seen: AtomicBool,
    count: AtomicU64,
    notify: Notify,
}

impl FirstRequest {
    pub fn new() -> Self {
        Self::default()
    }

    /// Called for every request; only the first one wakes the waiter.
    pub fn mark(&self) {
        self.0.count.fetch_add(1, Ordering::Relaxed);
        // A plain load first keeps later requests to a read of a shared cache line.
        if !self.0.seen.load(Ordering::Relaxed) && !self.0.seen.swap(true, Ordering::AcqRel) {
            // `notify_one` stores a permit when nobody waits yet, so the wake-up is not lost.
            self.0.notify.notify_one();
        }
    }

    /// How many requests the connection has sent so far.
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }

    /// Resolves once a request has been seen on the connection.
    pub async fn seen(&self) {
        if self.0.seen.load(Ordering::Acquire) {
            return;
        }
        self.0.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_mark_before_or_after_waiting_is_seen() {
        let early = FirstRequest::new();
        assert_eq!(early.count(), 0);
        early.mark();
        early.mark();
        assert_eq!(early.count(), 2);
        tokio::time::timeout(std::time::Duration::from_secs(1), early.seen())
            .await
            .expect("marked before waiting");
        let late = FirstRequest::new();
        let marker = late.clone();
        let waiter = tokio::spawn(async move { late.seen().await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        marker.mark();
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("woken")
            .expect("task");
    }
}
