//! Sending releases. A cycle hands its releases to the [`ReleasePipeline`] and goes on; a
//! pump task owned by the pipeline sends them in the order core decided, a few workloads at a
//! time, each pod after a token from the release limiter. Outcomes come back through a channel
//! that the next cycle drains.
//!
//! Why a pipeline: when a cycle waited for its own releases, a pod created while they were
//! being sent waited for all of them, then for the debounce, then for the next cycle. With
//! 1,000 pods arriving at once that idle gap came once per batch and set the p99. Now the next
//! cycle runs as soon as it is woken, and its releases queue behind the ones still going out.
//!
//! Why that is safe: the cycle records every submitted pod as released (with its node) before
//! handing it over, so a later snapshot counts it as holding that node's capacity and never
//! plans it again while it is in flight. Only an outcome that proves the gate is still there
//! (a failed `test`, an error, a pod skipped after its workload's failure) takes it back.
//!
//! Inside a workload the pods go in order and the first failure stops the rest; a later cycle
//! releases them from fresh state. Each `Released` Event goes out on its own task, beside the
//! next releases: an Event is best effort, and no release should wait a round trip for one.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::apply::{Applier, ApplyError, RateLimiter};
use crate::kube_api::EventType;
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
    /// This replica no longer leads; nothing was sent.
    NotLeader,
    Failed(ApplyError),
    /// Not attempted: an earlier pod of its workload was not released.
    Skipped,
}

/// One pod's outcome, with what the cycle that submitted it knew.
#[derive(Debug)]
pub struct Outcome {
    pub queue: String,
    pub pod: PodRelease,
    /// When the submitting cycle started (seconds since the epoch).
    pub decided_at: f64,
    pub outcome: PodOutcome,
}

/// A workload waiting to be sent.
struct Job {
    workload: WorkloadRelease,
    decided_at: f64,
}

/// The sending side of releases for one term of leadership. Dropping it aborts the pump, so a
/// replica that stops leading sends nothing more (and every write checks leadership anyway).
pub struct ReleasePipeline {
    jobs: mpsc::UnboundedSender<Job>,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    _pump: JoinSet<()>,
}

impl ReleasePipeline {
    pub fn start(applier: Applier, limiter: RateLimiter, unix_now: fn() -> f64) -> Self {
        let (jobs, job_rx) = mpsc::unbounded_channel();
        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let mut pump = JoinSet::new();
        pump.spawn(run_pump(applier, limiter, job_rx, outcome_tx, unix_now));
        Self {
            jobs,
            outcomes,
            _pump: pump,
        }
    }

    /// Queues a workload's releases behind those already submitted.
    pub fn submit(&self, workload: WorkloadRelease, decided_at: f64) {
        // The pump lives as long as `self`, so the channel is open; should it have died, the
        // pods stay recorded as released until the pipeline is rebuilt with a new term.
        if self
            .jobs
            .send(Job {
                workload,
                decided_at,
            })
            .is_err()
        {
            tracing::error!("release pump stopped; releases wait for the next term");
        }
    }

    /// Outcomes that came back since the last call, without waiting.
    pub fn finished(&mut self) -> Vec<Outcome> {
        let mut done = Vec::new();
        while let Ok(outcome) = self.outcomes.try_recv() {
            done.push(outcome);
        }
        done
    }

    /// Waits for the next outcome, for a caller that must see every one (the tests).
    pub async fn next_outcome(&mut self) -> Option<Outcome> {
        self.outcomes.recv().await
    }
}

async fn run_pump(
    applier: Applier,
    mut limiter: RateLimiter,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    unix_now: fn() -> f64,
) {
    // Every future runs on this task and the lock is never held across an await; a Mutex, not
    // a RefCell, only so the pump's future stays Send.
    let limiter = std::sync::Mutex::new(&mut limiter);
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            job = jobs.recv(), if open && in_flight.len() < WORKLOADS_IN_FLIGHT => match job {
                Some(job) => in_flight.push(release_workload(&applier, &limiter, job, unix_now)),
                None => open = false,
            },
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                for outcome in done {
                    // The receiver goes only with the pipeline, which also aborts this task.
                    let _ = outcomes.send(outcome);
                }
            }
            else => return,
        }
    }
}

/// One workload's pods in order, stopping at the first that is not released; the rest are
/// reported as skipped.
async fn release_workload(
    applier: &Applier,
    limiter: &std::sync::Mutex<&mut RateLimiter>,
    job: Job,
    unix_now: fn() -> f64,
) -> Vec<Outcome> {
    let Job {
        workload,
        decided_at,
    } = job;
    let mut outcomes = Vec::with_capacity(workload.pods.len());
    let mut stopped = false;
    for pod in workload.pods {
        let outcome = if stopped {
            PodOutcome::Skipped
        } else {
            let wait = limiter.lock().unwrap_or_else(|p| p.into_inner()).reserve();
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            send_one(applier, &workload.queue, &workload.reason, &pod, unix_now).await
        };
        stopped |= !matches!(outcome, PodOutcome::Released { .. });
        outcomes.push(Outcome {
            queue: workload.queue.clone(),
            pod,
            decided_at,
            outcome,
        });
    }
    outcomes
}

async fn send_one(
    applier: &Applier,
    queue: &str,
    reason: &str,
    pod: &PodRelease,
    unix_now: fn() -> f64,
) -> PodOutcome {
    match applier.release(pod).await {
        Ok(()) => {
            let at = unix_now();
            let applier = applier.clone();
            let target = pod.pod().clone();
            let note = format!(
                "Released from queue {queue} onto node {}: {reason}",
                pod.node
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
    }
}
