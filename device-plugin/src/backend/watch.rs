//! Watching XID events, written once over an [`EventSource`] so that NVML and the fake backend
//! share the decisions:
//!
//! - a GPU whose registration fails is reported unhealthy (unless it merely cannot report XIDs)
//!   and the set is rebuilt with the others, because NVML frees the whole set on that failure;
//! - GPU_IS_LOST while waiting: find which GPUs answer "lost", report only those, and go on
//!   watching the rest in a new set;
//! - any other wait error: report every GPU once, then rebuild the set after a back-off rather
//!   than failing every second forever;
//! - an event carries the MIG GPU and compute instance it happened on; `0xFFFFFFFF` means none.

use std::time::Duration;

use nvml_wrapper::error::NvmlError;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::{HealthEvent, HealthEventKind};

/// How long one wait blocks, which bounds how late a stop is noticed.
pub const EVENT_WAIT_MS: u32 = 1000;
/// NVML's "no instance" value for an event's GPU or compute instance.
pub const NO_INSTANCE: u32 = u32::MAX;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One event as the driver delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    pub gpu_uuid: Option<String>,
    /// The XID number of a critical XID event; `None` for other event types.
    pub critical_xid: Option<Option<u64>>,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// An event set and the devices it can hold.
pub trait EventSource {
    type Device;
    /// Adds the device for critical XID events. `Ok(false)`: it cannot report them. On `Err`
    /// the set may be gone (NVML frees it), so the caller rebuilds it.
    fn register(&mut self, device: &Self::Device) -> Result<bool, NvmlError>;
    /// Drops the current set and starts an empty one.
    fn reset(&mut self) -> Result<(), NvmlError>;
    /// Waits up to `timeout_ms` for the next event.
    fn wait(&mut self, timeout_ms: u32) -> Result<RawEvent, NvmlError>;
    /// Whether the device now answers GPU_IS_LOST.
    fn is_lost(&self, device: &Self::Device) -> bool;
}

/// A GPU to watch.
pub struct WatchedGpu<D> {
    pub uuid: String,
    pub device: D,
}

/// The health scope of an event's instance IDs (`None`: the whole GPU or GPU instance).
pub fn instance_scope(gpu_instance: u32, compute_instance: u32) -> (Option<u32>, Option<u32>) {
    match (gpu_instance, compute_instance) {
        (NO_INSTANCE, _) => (None, None),
        (gi, NO_INSTANCE) => (Some(gi), None),
        (gi, ci) => (Some(gi), Some(ci)),
    }
}

struct Sender {
    tx: UnboundedSender<HealthEvent>,
}

impl Sender {
    fn send(&self, event: HealthEvent) -> bool {
        self.tx.send(event).is_ok()
    }

    fn gpu(&self, uuid: Option<&str>, kind: HealthEventKind) -> bool {
        self.send(HealthEvent::gpu(uuid.map(str::to_string), kind))
    }
}

/// Registers `candidates` in a fresh set and returns the ones registered. A GPU that fails is
/// dropped (and reported, unless it just cannot report XIDs) and the set rebuilt without it.
fn register_all<S: EventSource>(
    source: &mut S,
    mut candidates: Vec<WatchedGpu<S::Device>>,
    out: &Sender,
) -> Vec<WatchedGpu<S::Device>> {
    'rebuild: loop {
        if let Err(err) = source.reset() {
            tracing::error!(%err, "cannot create an NVML event set; GPU health is not watched");
            for gpu in &candidates {
                out.gpu(
                    Some(&gpu.uuid),
                    HealthEventKind::WatchFailed(err.to_string()),
                );
            }
            return Vec::new();
        }
        let mut unsupported = Vec::new();
        for (i, gpu) in candidates.iter().enumerate() {
            match source.register(&gpu.device) {
                Ok(true) => {}
                Ok(false) => unsupported.push(i),
                Err(err) => {
                    if matches!(err, NvmlError::NotSupported) {
                        tracing::warn!(gpu = %gpu.uuid, "GPU does not report XID events; its health cannot be watched");
                    } else {
                        tracing::warn!(gpu = %gpu.uuid, %err, "XID event registration failed; marking the GPU unhealthy and watching the others");
                        out.gpu(
                            Some(&gpu.uuid),
                            HealthEventKind::WatchFailed(err.to_string()),
                        );
                    }
                    candidates.remove(i);
                    continue 'rebuild;
                }
            }
        }
        for i in unsupported.into_iter().rev() {
            let gpu = candidates.remove(i);
            tracing::warn!(gpu = %gpu.uuid, "GPU does not report XID events; its health cannot be watched");
        }
        return candidates;
    }
}

fn sleep_unless_stopped(stop: &CancellationToken, total: Duration) {
    let step = Duration::from_millis(50);
    let mut left = total;
    while !stop.is_cancelled() && !left.is_zero() {
        let nap = left.min(step);
        std::thread::sleep(nap);
        left = left.saturating_sub(nap);
    }
}

/// Watches `gpus` until `stop`. Blocking: run it on its own thread.
///
/// A lost GPU leaves the set; it is checked again after every wait and, once it answers again
/// (after a reset), it is put back in a new set, so its XIDs are seen again.
pub fn watch_events<S: EventSource>(
    mut source: S,
    gpus: Vec<WatchedGpu<S::Device>>,
    tx: UnboundedSender<HealthEvent>,
    stop: CancellationToken,
) {
    let out = Sender { tx };
    let mut watched = register_all(&mut source, gpus, &out);
    let names: Vec<&str> = watched.iter().map(|gpu| gpu.uuid.as_str()).collect();
    tracing::info!(gpus = ?names, "watching critical XID events");
    let mut lost: Vec<WatchedGpu<S::Device>> = Vec::new();
    let mut backoff = FIRST_BACKOFF;
    // Waiting failed and has not worked since: every GPU is marked until it does.
    let mut failing = false;
    while !stop.is_cancelled() {
        if !lost.is_empty() && lost.iter().any(|gpu| !source.is_lost(&gpu.device)) {
            let (back, still): (Vec<_>, Vec<_>) = lost
                .into_iter()
                .partition(|gpu| !source.is_lost(&gpu.device));
            lost = still;
            for gpu in &back {
                tracing::info!(gpu = %gpu.uuid, "lost GPU answers again; watching its XID events again");
            }
            watched.extend(back);
            watched = register_all(&mut source, watched, &out);
        }
        if watched.is_empty() {
            if lost.is_empty() {
                tracing::warn!("no GPU left whose XID events can be watched");
                return;
            }
            // Only lost GPUs: look again for ones that came back, as often as a wait would.
            sleep_unless_stopped(&stop, Duration::from_millis(u64::from(EVENT_WAIT_MS)));
            continue;
        }
        let waited = source.wait(EVENT_WAIT_MS);
        if failing && matches!(waited, Ok(_) | Err(NvmlError::Timeout)) {
            failing = false;
            tracing::info!("waiting for NVML events works again");
            if !out.gpu(None, HealthEventKind::WatchRestored) {
                return;
            }
        }
        match waited {
            Ok(event) => {
                backoff = FIRST_BACKOFF;
                let Some(xid) = event.critical_xid else {
                    continue;
                };
                let (gpu_instance, compute_instance) =
                    instance_scope(event.gpu_instance, event.compute_instance);
                let sent = out.send(HealthEvent {
                    gpu_uuid: event.gpu_uuid,
                    gpu_instance,
                    compute_instance,
                    kind: HealthEventKind::Xid(xid),
                });
                if !sent {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(NvmlError::GpuLost) => {
                let (newly_lost, alive): (Vec<_>, Vec<_>) = watched
                    .into_iter()
                    .partition(|gpu| source.is_lost(&gpu.device));
                for gpu in &newly_lost {
                    tracing::error!(gpu = %gpu.uuid, "GPU is lost (fallen off the bus); marking it unhealthy until it answers again");
                    if !out.gpu(Some(&gpu.uuid), HealthEventKind::Lost) {
                        return;
                    }
                }
                if newly_lost.is_empty() {
                    tracing::error!(
                        "waiting for events says a GPU is lost, but every GPU answers; marking all unhealthy"
                    );
                    out.gpu(None, HealthEventKind::WatchFailed("GPU_IS_LOST".into()));
                    failing = true;
                    sleep_unless_stopped(&stop, backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                lost.extend(newly_lost);
                watched = register_all(&mut source, alive, &out);
            }
            Err(err) => {
                tracing::error!(%err, retry_in = ?backoff, "waiting for NVML events failed; marking all GPUs unhealthy and rebuilding the event set");
                if !out.gpu(None, HealthEventKind::WatchFailed(err.to_string())) {
                    return;
                }
                failing = true;
                sleep_unless_stopped(&stop, backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                watched = register_all(&mut source, watched, &out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// An event set that behaves as NVML's does: a failed registration frees the set.
    #[derive(Default)]
    struct Script {
        registered: Vec<&'static str>,
        fail_registration: Vec<&'static str>,
        lost: Vec<&'static str>,
        waits: VecDeque<Result<RawEvent, NvmlError>>,
        resets: usize,
    }

    impl EventSource for Script {
        type Device = &'static str;
        fn register(&mut self, device: &&'static str) -> Result<bool, NvmlError> {
            if self.fail_registration.contains(device) {
                self.registered.clear();
                return Err(NvmlError::Unknown);
            }
            self.registered.push(device);
            Ok(true)
        }
        fn reset(&mut self) -> Result<(), NvmlError> {
            self.resets += 1;
            self.registered.clear();
            Ok(())
        }
        fn wait(&mut self, _: u32) -> Result<RawEvent, NvmlError> {
            self.waits.pop_front().unwrap_or(Err(NvmlError::Timeout))
        }
        fn is_lost(&self, device: &&'static str) -> bool {
            self.lost.contains(device)
        }
    }

    fn gpus(names: &[&'static str]) -> Vec<WatchedGpu<&'static str>> {
        names
            .iter()
            .map(|n| WatchedGpu {
                uuid: n.to_string(),
                device: *n,
            })
            .collect()
    }

    #[test]
    fn a_failed_registration_rebuilds_the_set_with_the_others() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut script = Script {
            fail_registration: vec!["b"],
            ..Script::default()
        };
        let watched = register_all(&mut script, gpus(&["a", "b", "c"]), &Sender { tx });
        let names: Vec<_> = watched.iter().map(|g| g.uuid.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(
            script.registered,
            ["a", "c"],
            "a is registered again after b freed the set"
        );
        let event = rx.try_recv().expect("b reported");
        assert_eq!(event.gpu_uuid.as_deref(), Some("b"));
        assert!(matches!(event.kind, HealthEventKind::WatchFailed(_)));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn gpu_is_lost_marks_only_the_lost_gpu_and_keeps_watching() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let xid = |gpu: &str, gi, ci| RawEvent {
            gpu_uuid: Some(gpu.into()),
            critical_xid: Some(Some(48)),
            gpu_instance: gi,
            compute_instance: ci,
        };
        let script = Script {
            lost: vec!["b"],
            waits: VecDeque::from([
                Err(NvmlError::GpuLost),
                Ok(xid("a", 2, NO_INSTANCE)),
                Ok(xid("c", 1, 0)),
            ]),
            ..Script::default()
        };
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        let thread =
            std::thread::spawn(move || watch_events(script, gpus(&["a", "b", "c"]), tx, stop));
        let lost = rx.blocking_recv().expect("lost");
        assert_eq!(
            lost,
            HealthEvent::gpu(Some("b".into()), HealthEventKind::Lost)
        );
        let first = rx.blocking_recv().expect("xid on a");
        assert_eq!(
            (first.gpu_instance, first.compute_instance),
            (Some(2), None)
        );
        let second = rx.blocking_recv().expect("xid on c");
        assert_eq!(second.gpu_uuid.as_deref(), Some("c"));
        assert_eq!(
            (second.gpu_instance, second.compute_instance),
            (Some(1), Some(0))
        );
        stopper.cancel();
        thread.join().expect("watcher ends");
        assert_eq!(instance_scope(NO_INSTANCE, 3), (None, None));
    }
}
