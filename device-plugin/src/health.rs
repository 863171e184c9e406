//! GPU health from driver events, with recovery.
//!
//! A critical XID that is not an application error marks the GPU, and so every device on it
//! (whole, MIG instances, shared slices), Unhealthy. Unlike NVIDIA's plugin, a GPU becomes Healthy
//! again once no further event arrived for the recovery period; each new event restarts it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{HealthEvent, HealthEventKind};

/// Which GPUs are unhealthy right now. Cheap to clone; compared to detect changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthSnapshot {
    unhealthy: Arc<BTreeSet<String>>,
    /// Set when an event could not be attributed to a GPU: then every GPU is unhealthy.
    all: bool,
}

impl HealthSnapshot {
    pub fn is_healthy(&self, gpu: &str) -> bool {
        !self.all && !self.unhealthy.contains(gpu)
    }
}

#[derive(Debug, Clone)]
pub struct HealthPolicy {
    pub ignored_xids: BTreeSet<u64>,
    pub recovery: Duration,
}

/// Pure state machine: feed it events and time, read a snapshot.
#[derive(Debug)]
pub struct HealthTracker {
    policy: HealthPolicy,
    until: BTreeMap<String, Instant>,
    all_until: Option<Instant>,
}

impl HealthTracker {
    pub fn new(policy: HealthPolicy) -> HealthTracker {
        HealthTracker {
            policy,
            until: BTreeMap::new(),
            all_until: None,
        }
    }

    /// Whether an event says something about the GPU (rather than about an application).
    pub fn is_relevant(&self, event: &HealthEvent) -> bool {
        match event.kind {
            HealthEventKind::Xid(Some(xid)) => !self.policy.ignored_xids.contains(&xid),
            HealthEventKind::Xid(None) | HealthEventKind::WatchFailed(_) => true,
        }
    }

    /// Applies an event received at `now`; returns whether health changed.
    pub fn apply(&mut self, event: &HealthEvent, now: Instant) -> bool {
        if !self.is_relevant(event) {
            return false;
        }
        let before = self.snapshot();
        let deadline = now + self.policy.recovery;
        match &event.gpu_uuid {
            Some(gpu) => {
                self.until.insert(gpu.clone(), deadline);
            }
            None => self.all_until = Some(deadline),
        }
        self.snapshot() != before
    }

    /// Drops expired marks; returns whether health changed.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = (self.until.len(), self.all_until.is_some());
        self.until.retain(|_, deadline| *deadline > now);
        if self.all_until.is_some_and(|deadline| deadline <= now) {
            self.all_until = None;
        }
        before != (self.until.len(), self.all_until.is_some())
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.until.values().copied().chain(self.all_until).min()
    }

    pub fn snapshot(&self) -> HealthSnapshot {
        HealthSnapshot {
            unhealthy: Arc::new(self.until.keys().cloned().collect()),
            all: self.all_until.is_some(),
        }
    }
}

/// Runs the tracker: events in, snapshots out (only when they change), until `stop`.
pub async fn run(
    mut events: mpsc::UnboundedReceiver<HealthEvent>,
    policy: HealthPolicy,
    out: watch::Sender<HealthSnapshot>,
    stop: CancellationToken,
) {
    let mut tracker = HealthTracker::new(policy);
    loop {
        let deadline = tracker.next_deadline();
        let changed = tokio::select! {
            () = stop.cancelled() => return,
            event = events.recv() => {
                let Some(event) = event else { return };
                let relevant = tracker.is_relevant(&event);
                tracing::warn!(gpu = ?event.gpu_uuid, kind = ?event.kind, relevant, "GPU health event");
                tracker.apply(&event, Instant::now())
            }
            () = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            } => {
                let changed = tracker.expire(Instant::now());
                if changed {
                    tracing::info!("quiet period over: GPU(s) healthy again");
                }
                changed
            }
        };
        if changed {
            out.send_replace(tracker.snapshot());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(gpu: Option<&str>, xid: u64) -> HealthEvent {
        HealthEvent {
            gpu_uuid: gpu.map(str::to_string),
            kind: HealthEventKind::Xid(Some(xid)),
        }
    }

    fn tracker() -> HealthTracker {
        HealthTracker::new(HealthPolicy {
            ignored_xids: crate::config::DEFAULT_IGNORED_XIDS.into_iter().collect(),
            recovery: Duration::from_secs(60),
        })
    }

    #[test]
    fn application_xids_are_ignored() {
        let mut t = tracker();
        let now = Instant::now();
        for ignored in crate::config::DEFAULT_IGNORED_XIDS {
            assert!(!t.apply(&xid(Some("GPU-a"), ignored), now));
        }
        assert!(t.snapshot().is_healthy("GPU-a"));
    }

    #[test]
    fn critical_xid_marks_then_recovers_after_the_quiet_period() {
        let mut t = tracker();
        let start = Instant::now();
        assert!(t.apply(&xid(Some("GPU-a"), 79), start));
        assert!(!t.snapshot().is_healthy("GPU-a"));
        assert!(t.snapshot().is_healthy("GPU-b"));
        // A second event restarts the quiet period and is not a change by itself.
        assert!(!t.apply(&xid(Some("GPU-a"), 48), start + Duration::from_secs(30)));
        assert!(!t.expire(start + Duration::from_secs(61)));
        assert!(!t.snapshot().is_healthy("GPU-a"));
        assert_eq!(t.next_deadline(), Some(start + Duration::from_secs(90)));
        assert!(t.expire(start + Duration::from_secs(90)));
        assert!(t.snapshot().is_healthy("GPU-a"));
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn unattributed_events_mark_every_gpu() {
        let mut t = tracker();
        let now = Instant::now();
        let failed = HealthEvent {
            gpu_uuid: None,
            kind: HealthEventKind::WatchFailed("boom".into()),
        };
        assert!(t.apply(&failed, now));
        assert!(!t.snapshot().is_healthy("GPU-anything"));
        assert!(t.expire(now + Duration::from_secs(60)));
        assert!(t.snapshot().is_healthy("GPU-anything"));
    }

    #[tokio::test]
    async fn the_task_publishes_changes_and_recovery() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out, mut snapshots) = watch::channel(HealthSnapshot::default());
        let policy = HealthPolicy {
            ignored_xids: BTreeSet::new(),
            recovery: Duration::from_millis(50),
        };
        let stop = CancellationToken::new();
        tokio::spawn(run(rx, policy, out, stop.clone()));
        tx.send(xid(Some("GPU-a"), 79)).expect("send");
        snapshots.changed().await.expect("unhealthy");
        assert!(!snapshots.borrow_and_update().is_healthy("GPU-a"));
        let marked = Instant::now();
        snapshots.changed().await.expect("recovered");
        assert!(snapshots.borrow_and_update().is_healthy("GPU-a"));
        assert!(marked.elapsed() >= Duration::from_millis(40));
        stop.cancel();
    }
}
