//! Sending one cycle's releases. Each pod waits for a token from the release limiter, then its
//! patch goes out, and its `Released` Event is published beside the next releases. Workloads go side by side, a few at a time: one after
//! another, every release waited two round trips to the API server, so a burst of 1,000 pods
//! took seconds however large the limiter's burst. Inside a workload the pods go in order and
//! the first failure stops the rest (a later cycle releases them from fresh state), as before.

use std::sync::Mutex;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::runtime::events::EventType;

use crate::apply::{Applier, ApplyError, RateLimiter};
use crate::plan::{PodRelease, WorkloadRelease};

/// Workloads whose releases are in flight at once.
pub const WORKLOADS_IN_FLIGHT: usize = 16;

/// How one pod's release ended.
#[derive(Debug)]
pub enum PodOutcome {
    /// The gate is gone; `at` is when the API server answered (seconds since the epoch).
    Released {
        at: f64,
    },
    /// The patch's test failed: the pod changed since it was read.
    Changed,
    /// This replica no longer leads; nothing more is sent.
    NotLeader,
    Failed(ApplyError),
}

/// One pod's outcome, with the workload it belongs to.
pub struct Outcome<'a> {
    pub workload: &'a WorkloadRelease,
    pub pod: &'a PodRelease,
    pub outcome: PodOutcome,
}

/// Releases every workload of `releases`; returns each attempted pod's outcome. Pods after a
/// failure in their workload are not attempted and not returned.
pub async fn release_all<'a>(
    applier: &Applier,
    limiter: &mut RateLimiter,
    releases: &'a [WorkloadRelease],
    unix_now: fn() -> f64,
) -> Vec<Outcome<'a>> {
    // Every future runs on this task and the lock is never held across an await; a Mutex,
    // not a RefCell, only so the cycle's future stays Send.
    let limiter = Mutex::new(limiter);
    let mut waiting = releases.iter();
    let mut in_flight = FuturesUnordered::new();
    let mut outcomes = Vec::new();
    loop {
        while in_flight.len() < WORKLOADS_IN_FLIGHT {
            let Some(workload) = waiting.next() else {
                break;
            };
            in_flight.push(release_workload(applier, &limiter, workload, unix_now));
        }
        match in_flight.next().await {
            Some(done) => outcomes.extend(done),
            None => return outcomes,
        }
    }
}

/// One workload's pods in order, stopping at the first that is not released.
async fn release_workload<'a>(
    applier: &Applier,
    limiter: &Mutex<&mut RateLimiter>,
    workload: &'a WorkloadRelease,
    unix_now: fn() -> f64,
) -> Vec<Outcome<'a>> {
    let mut outcomes = Vec::with_capacity(workload.pods.len());
    for pod in &workload.pods {
        let wait = limiter.lock().unwrap_or_else(|p| p.into_inner()).reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let outcome = match applier.release(pod).await {
            Ok(()) => {
                let at = unix_now();
                // The Event goes out on its own task: the next release need not wait a round
                // trip for it, and an Event is best effort (a failed one is only logged).
                let applier = applier.clone();
                let target = pod.pod.clone();
                let note = format!(
                    "Released from queue {} onto node {}: {}",
                    workload.queue, pod.node, workload.reason
                );
                tokio::spawn(async move {
                    applier
                        .event(
                            &target,
                            EventType::Normal,
                            "Released",
                            "Release",
                            note,
                            None,
                        )
                        .await;
                });
                PodOutcome::Released { at }
            }
            Err(ApplyError::Changed { .. }) => PodOutcome::Changed,
            Err(ApplyError::NotLeader(_)) => PodOutcome::NotLeader,
            Err(err) => PodOutcome::Failed(err),
        };
        let stop = !matches!(outcome, PodOutcome::Released { .. });
        outcomes.push(Outcome {
            workload,
            pod,
            outcome,
        });
        if stop {
            break;
        }
    }
    outcomes
}
