//! GPU health from driver events, with recovery.
//!
//! A critical XID that is not an application error marks what it happened on Unhealthy: the
//! whole GPU (and so every device on it: whole, MIG instances, shared slices), or, when the
//! driver names one, a single MIG GPU instance or compute instance. Unlike NVIDIA's plugin, a
//! mark can clear again:
//! - transient XIDs (see [`TRANSIENT_XIDS`]) clear once no further event arrived for the
//!   recovery period;
//! - every other mark (reset-class XIDs such as 48, 63, 64, 79, 92, 95, lost GPUs, failed
//!   watches) clears only when, after the quiet period, a probe of the GPU passes: it answers a
//!   query, and no page retirement or row remapping is waiting for a reset. A failed probe is
//!   retried every recovery period, so a GPU that needs a reset stays Unhealthy until it had one.
//!
//! Each new event restarts the quiet period.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{GpuBackend, HealthEvent, HealthEventKind};
use crate::devices::{MigIds, PluginDevice};

/// XIDs that leave the GPU usable once the faulting context is gone, so they recover after the
/// quiet period without a probe. 94: contained ECC error (only the application whose memory was
/// hit is stopped; NVIDIA's guidance is to restart that application).
pub const TRANSIENT_XIDS: [u64; 1] = [94];

/// What a mark is on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Scope {
    pub gpu: String,
    /// `None`: the whole GPU.
    pub gpu_instance: Option<u32>,
    /// `None`: the whole GPU instance.
    pub compute_instance: Option<u32>,
}

impl Scope {
    fn covers(&self, gpu: &str, mig: Option<MigIds>) -> bool {
        if self.gpu != gpu {
            return false;
        }
        match (mig, self.gpu_instance, self.compute_instance) {
            // A whole-GPU device is hit by anything on its GPU.
            (None, _, _) => true,
            (Some(_), None, _) => true,
            (Some(ids), Some(gi), None) => ids.gpu_instance == gi,
            (Some(ids), Some(gi), Some(ci)) => ids.gpu_instance == gi && ids.compute_instance == ci,
        }
    }
}

/// Which devices are unhealthy right now. Cheap to clone; compared to detect changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthSnapshot {
    unhealthy: Arc<BTreeSet<Scope>>,
    /// Set when an event could not be attributed to a GPU: then every GPU is unhealthy.
    all: bool,
}

impl HealthSnapshot {
    /// Whether a whole GPU (or a slice of it) is healthy: nothing on it is marked.
    pub fn is_healthy(&self, gpu: &str) -> bool {
        self.is_instance_healthy(gpu, None)
    }

    /// Whether a device on `gpu` is healthy; `mig` names its MIG instance, if it is one.
    pub fn is_instance_healthy(&self, gpu: &str, mig: Option<MigIds>) -> bool {
        !self.all && !self.unhealthy.iter().any(|scope| scope.covers(gpu, mig))
    }

    pub fn is_device_healthy(&self, device: &PluginDevice) -> bool {
        self.is_instance_healthy(&device.gpu, device.mig)
    }
}

#[derive(Debug, Clone)]
pub struct HealthPolicy {
    pub ignored_xids: BTreeSet<u64>,
    pub recovery: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    AfterQuiet,
    AfterProbe,
}

fn recovery_for(kind: &HealthEventKind) -> Recovery {
    match kind {
        HealthEventKind::Xid(Some(xid)) if TRANSIENT_XIDS.contains(xid) => Recovery::AfterQuiet,
        _ => Recovery::AfterProbe,
    }
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    deadline: Instant,
    recovery: Recovery,
    /// A probe of this GPU is running; the mark waits for its answer.
    probing: bool,
}

/// Pure state machine: feed it events, time and probe results; read a snapshot.
#[derive(Debug)]
pub struct HealthTracker {
    policy: HealthPolicy,
    marks: BTreeMap<Scope, Mark>,
    all_until: Option<Instant>,
    /// Waiting for events is failing: every GPU stays unhealthy until it works again (then the
    /// quiet period runs), however long the watcher backs off between attempts.
    watch_down: bool,
}

impl HealthTracker {
    pub fn new(policy: HealthPolicy) -> HealthTracker {
        HealthTracker {
            policy,
            marks: BTreeMap::new(),
            all_until: None,
            watch_down: false,
        }
    }

    /// Whether an event says something about the GPU (rather than about an application).
    pub fn is_relevant(&self, event: &HealthEvent) -> bool {
        match event.kind {
            HealthEventKind::Xid(Some(xid)) => !self.policy.ignored_xids.contains(&xid),
            HealthEventKind::Xid(None)
            | HealthEventKind::Lost
            | HealthEventKind::WatchFailed(_)
            | HealthEventKind::WatchRestored => true,
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
                let scope = Scope {
                    gpu: gpu.clone(),
                    gpu_instance: event.gpu_instance,
                    compute_instance: event.gpu_instance.and(event.compute_instance),
                };
                let recovery = recovery_for(&event.kind);
                let mark = self.marks.entry(scope).or_insert(Mark {
                    deadline,
                    recovery,
                    probing: false,
                });
                mark.deadline = deadline;
                // One reset-class event makes the whole mark wait for a probe.
                if recovery == Recovery::AfterProbe {
                    mark.recovery = Recovery::AfterProbe;
                }
            }
            None => {
                match event.kind {
                    HealthEventKind::WatchFailed(_) => self.watch_down = true,
                    HealthEventKind::WatchRestored if !self.watch_down => {
                        return self.snapshot() != before;
                    }
                    HealthEventKind::WatchRestored => self.watch_down = false,
                    _ => {}
                }
                self.all_until = Some(deadline);
            }
        }
        self.snapshot() != before
    }

    /// Clears transient marks whose quiet period is over and returns, with whether health
    /// changed, the GPUs to probe now (each once, even with several marks).
    pub fn expire(&mut self, now: Instant) -> (bool, Vec<String>) {
        let before = self.snapshot();
        self.marks
            .retain(|_, mark| !(mark.recovery == Recovery::AfterQuiet && mark.deadline <= now));
        if !self.watch_down && self.all_until.is_some_and(|deadline| deadline <= now) {
            self.all_until = None;
        }
        let mut probe = BTreeSet::new();
        for (scope, mark) in &mut self.marks {
            if mark.recovery == Recovery::AfterProbe && mark.deadline <= now && !mark.probing {
                probe.insert(scope.gpu.clone());
            }
        }
        for (scope, mark) in &mut self.marks {
            if probe.contains(&scope.gpu) && mark.deadline <= now {
                mark.probing = true;
            }
        }
        (self.snapshot() != before, probe.into_iter().collect())
    }

    /// A probe of `gpu` ended. Passing clears its marks whose quiet period is over; failing
    /// waits another recovery period before the next probe. Returns whether health changed.
    pub fn probe_finished(&mut self, gpu: &str, passed: bool, now: Instant) -> bool {
        let before = self.snapshot();
        let recovery = self.policy.recovery;
        self.marks.retain(|scope, mark| {
            if scope.gpu != gpu || !mark.probing {
                return true;
            }
            mark.probing = false;
            if passed && mark.deadline <= now {
                return false;
            }
            if !passed {
                mark.deadline = mark.deadline.max(now + recovery);
            }
            true
        });
        self.snapshot() != before
    }

    /// When the tracker next needs time to pass (a quiet period ending); marks waiting for a
    /// probe's answer do not count.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.marks
            .values()
            .filter(|mark| !mark.probing)
            .map(|mark| mark.deadline)
            .chain(self.all_until.filter(|_| !self.watch_down))
            .min()
    }

    pub fn snapshot(&self) -> HealthSnapshot {
        HealthSnapshot {
            unhealthy: Arc::new(self.marks.keys().cloned().collect()),
            all: self.watch_down || self.all_until.is_some(),
        }
    }
}

/// Runs the tracker: events in, snapshots out (only when they change), until `stop`. Probes run
/// on blocking threads through `backend`.
pub async fn run(
    mut events: mpsc::UnboundedReceiver<HealthEvent>,
    policy: HealthPolicy,
    backend: Arc<dyn GpuBackend>,
    out: watch::Sender<HealthSnapshot>,
    stop: CancellationToken,
) {
    let mut tracker = HealthTracker::new(policy);
    let (probe_tx, mut probe_rx) = mpsc::unbounded_channel::<(String, Result<(), String>)>();
    loop {
        let deadline = tracker.next_deadline();
        let changed = tokio::select! {
            () = stop.cancelled() => return,
            event = events.recv() => {
                let Some(event) = event else { return };
                let relevant = tracker.is_relevant(&event);
                tracing::warn!(gpu = ?event.gpu_uuid, gpu_instance = ?event.gpu_instance, compute_instance = ?event.compute_instance, kind = ?event.kind, relevant, "GPU health event");
                tracker.apply(&event, Instant::now())
            }
            Some((gpu, outcome)) = probe_rx.recv() => {
                match &outcome {
                    Ok(()) => tracing::info!(%gpu, "probe passed: the GPU is healthy again"),
                    Err(why) => tracing::warn!(%gpu, %why, "probe failed: the GPU stays unhealthy (it may need a reset)"),
                }
                tracker.probe_finished(&gpu, outcome.is_ok(), Instant::now())
            }
            () = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            } => {
                let (changed, probes) = tracker.expire(Instant::now());
                if changed {
                    tracing::info!("quiet period over: GPU(s) healthy again");
                }
                for gpu in probes {
                    let (backend, tx) = (Arc::clone(&backend), probe_tx.clone());
                    // NVML calls block: keep them off the async threads.
                    tokio::task::spawn_blocking(move || {
                        let outcome = backend.probe(&gpu).map_err(|err| err.to_string());
                        let _ = tx.send((gpu, outcome));
                    });
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
    use crate::backend::FakeBackend;

    fn xid(gpu: Option<&str>, xid: u64) -> HealthEvent {
        HealthEvent::gpu(gpu.map(str::to_string), HealthEventKind::Xid(Some(xid)))
    }

    fn tracker() -> HealthTracker {
        HealthTracker::new(HealthPolicy {
            ignored_xids: crate::config::DEFAULT_IGNORED_XIDS.into_iter().collect(),
            recovery: Duration::from_secs(60),
        })
    }

    const MIG_1: Option<MigIds> = Some(MigIds {
        gpu_instance: 1,
        compute_instance: 0,
    });
    const MIG_2: Option<MigIds> = Some(MigIds {
        gpu_instance: 2,
        compute_instance: 0,
    });

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
    fn transient_xid_recovers_after_the_quiet_period() {
        let mut t = tracker();
        let start = Instant::now();
        assert!(t.apply(&xid(Some("GPU-a"), 94), start));
        assert!(!t.snapshot().is_healthy("GPU-a"));
        assert!(t.snapshot().is_healthy("GPU-b"));
        // A second event restarts the quiet period and is not a change by itself.
        assert!(!t.apply(&xid(Some("GPU-a"), 94), start + Duration::from_secs(30)));
        assert_eq!(t.expire(start + Duration::from_secs(61)), (false, vec![]));
        assert_eq!(t.next_deadline(), Some(start + Duration::from_secs(90)));
        assert_eq!(t.expire(start + Duration::from_secs(90)), (true, vec![]));
        assert!(t.snapshot().is_healthy("GPU-a"));
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn reset_class_xids_recover_only_after_a_probe_passes() {
        let mut t = tracker();
        let start = Instant::now();
        t.apply(&xid(Some("GPU-a"), 94), start);
        t.apply(&xid(Some("GPU-a"), 48), start);
        let quiet = start + Duration::from_secs(60);
        // The quiet period alone does not clear a double-bit ECC error: it asks for a probe.
        assert_eq!(t.expire(quiet), (false, vec!["GPU-a".to_string()]));
        assert!(!t.snapshot().is_healthy("GPU-a"));
        assert_eq!(t.next_deadline(), None, "waiting for the probe");
        assert_eq!(t.expire(quiet), (false, vec![]), "one probe at a time");
        // Pages pending retirement: the probe fails and is retried a period later.
        assert!(!t.probe_finished("GPU-a", false, quiet));
        assert!(!t.snapshot().is_healthy("GPU-a"));
        let retry = quiet + Duration::from_secs(60);
        assert_eq!(t.next_deadline(), Some(retry));
        assert_eq!(t.expire(retry), (false, vec!["GPU-a".to_string()]));
        assert!(t.probe_finished("GPU-a", true, retry));
        assert!(t.snapshot().is_healthy("GPU-a"));
    }

    #[test]
    fn a_mig_instance_event_marks_only_that_instance() {
        let mut t = tracker();
        let now = Instant::now();
        let on_instance = HealthEvent {
            gpu_uuid: Some("GPU-a".into()),
            gpu_instance: Some(1),
            compute_instance: Some(0),
            kind: HealthEventKind::Xid(Some(48)),
        };
        assert!(t.apply(&on_instance, now));
        let s = t.snapshot();
        assert!(!s.is_instance_healthy("GPU-a", MIG_1));
        assert!(s.is_instance_healthy("GPU-a", MIG_2));
        // The GPU as a whole (or a slice of it) is not healthy while part of it is marked.
        assert!(!s.is_healthy("GPU-a"));
        let whole = xid(Some("GPU-b"), 79);
        t.apply(&whole, now);
        assert!(!t.snapshot().is_instance_healthy("GPU-b", MIG_2));
    }

    #[test]
    fn unattributed_events_mark_every_gpu() {
        let mut t = tracker();
        let now = Instant::now();
        let failed = HealthEvent::gpu(None, HealthEventKind::WatchFailed("boom".into()));
        assert!(t.apply(&failed, now));
        assert!(!t.snapshot().is_healthy("GPU-anything"));
        // Waiting still fails: however long it takes, every GPU stays unhealthy.
        assert_eq!(t.next_deadline(), None);
        assert!(!t.expire(now + Duration::from_secs(600)).0);
        assert!(!t.snapshot().is_healthy("GPU-anything"));
        let restored = now + Duration::from_secs(600);
        let back = HealthEvent::gpu(None, HealthEventKind::WatchRestored);
        assert!(!t.apply(&back, restored), "still within the quiet period");
        assert!(!t.snapshot().is_healthy("GPU-anything"));
        assert_eq!(t.next_deadline(), Some(restored + Duration::from_secs(60)));
        assert!(t.expire(restored + Duration::from_secs(60)).0);
        assert!(t.snapshot().is_healthy("GPU-anything"));
        // A restore without a failure before it changes nothing.
        assert!(!t.apply(&back, restored + Duration::from_secs(61)));
        assert!(t.snapshot().is_healthy("GPU-anything"));
        // An unattributed XID marks every GPU for the quiet period only.
        assert!(t.apply(&xid(None, 79), restored));
        assert!(t.expire(restored + Duration::from_secs(60)).0);
    }

    #[tokio::test]
    async fn the_task_probes_then_publishes_recovery() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out, mut snapshots) = watch::channel(HealthSnapshot::default());
        let policy = HealthPolicy {
            ignored_xids: BTreeSet::new(),
            recovery: Duration::from_millis(50),
        };
        let backend: Arc<dyn GpuBackend> = Arc::new(
            FakeBackend::parse("gpus: [{uuid: GPU-a, model: m, memoryMiB: 1}]").expect("fake"),
        );
        let stop = CancellationToken::new();
        tokio::spawn(run(rx, policy, backend, out, stop.clone()));
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
