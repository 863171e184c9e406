//! The founding document's case, driven minute by minute through the real policy:
//! 100 GPUs; queue `llm` (weight 3, guarantee 30) and queue `vision` (weight 2, guarantee 20).
//! Vision keeps the cluster full with a stream of 1-GPU, 30-minute jobs; at 6h llm submits a
//! 60-GPU gang (15 pods × 4 GPUs). Under gpufair it must start within an hour; under stateless
//! fair share (K = 0, nothing held) it starves behind the stream.

use gpufair_core::admission::{DecideOptions, ReleaseReason, decide};
use gpufair_core::fixtures;
use gpufair_core::index::IndexVec;
use gpufair_core::ledger::{QueueLedger, UsageSample};
use gpufair_core::params::{FairShareParams, PreemptionParams};
use gpufair_core::snapshot::*;

const MINUTE: f64 = 60.0;
const HOUR: f64 = 3600.0;

struct Job {
    uid: String,
    queue: usize,
    pods: Vec<u32>,
    duration: f64,
    submitted: f64,
}

struct Running {
    job: usize,
    started: f64,
    nodes: Vec<NodeId>,
}

/// Returns when llm's gang started (seconds), if it did before `horizon`, and how many pods
/// were preempted.
fn run(options: &DecideOptions, horizon: f64) -> (Option<f64>, usize) {
    let mut nodes: IndexVec<NodeId, Node> = (0..13)
        .map(|i| {
            let gpus = if i < 12 { 8 } else { 4 };
            Node {
                name: format!("node-{i:02}"),
                pool: PoolId::new(0),
                allocatable: vec![gpus],
                free: vec![gpus],
            }
        })
        .collect();
    let params = options.fairshare.clone();
    let mut ledgers = [
        QueueLedger::seeded(0.0, &params, 100.0, 0.0),
        QueueLedger::seeded(0.0, &params, 100.0, 0.0),
    ];
    let mut jobs: Vec<Job> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut running: Vec<Running> = Vec::new();
    let mut last_preemption: [Option<f64>; 2] = [None, None];
    let mut preemption_times: Vec<f64> = Vec::new();
    let mut llm_start = None;
    let mut next_vision = 0;
    // What a caller carries from cycle to cycle: the holds, and the jobs running as backfill
    // in them (with the held job).
    let mut previous_holds: Vec<PreviousHold> = Vec::new();
    let mut backfill: Vec<(String, String)> = Vec::new();
    let mut now = 0.0;
    while now < horizon {
        // Vision keeps a backlog of small jobs so every free GPU can be taken at once.
        while pending.iter().filter(|&&j| jobs[j].queue == 1).count() < 40 {
            jobs.push(Job {
                uid: format!("vision-{next_vision:06}"),
                queue: 1,
                pods: vec![1],
                duration: 30.0 * MINUTE,
                submitted: now,
            });
            next_vision += 1;
            pending.push(jobs.len() - 1);
        }
        if now == 6.0 * HOUR {
            jobs.push(Job {
                uid: "llm-posttrain".into(),
                queue: 0,
                pods: vec![4; 15],
                duration: 12.0 * HOUR,
                submitted: now,
            });
            pending.push(jobs.len() - 1);
        }
        // Finished jobs leave.
        running.retain(|r| {
            let job = &jobs[r.job];
            let done = now - r.started >= job.duration;
            if done {
                for (node, gpus) in r.nodes.iter().zip(&job.pods) {
                    nodes[*node].free[0] += gpus;
                }
            }
            !done
        });
        let mut shares = [LedgerShares::NEUTRAL; 2];
        for (q, ledger) in ledgers.iter().enumerate() {
            shares[q] = ledger.shares(&params, now);
        }
        let queue = |q: usize, name: &str, weight: f64, guaranteed: f64| QueueState {
            shares: shares[q],
            last_preemption_at: last_preemption[q],
            ..fixtures::queue(name, weight, guaranteed)
        };
        let mut running_pods = Vec::new();
        for r in &running {
            let job = &jobs[r.job];
            for (i, (node, gpus)) in r.nodes.iter().zip(&job.pods).enumerate() {
                running_pods.push(RunningPod {
                    workload: job.uid.clone(),
                    ..fixtures::running(
                        &format!("{}-{i}", job.uid),
                        job.queue,
                        node.get(),
                        *gpus,
                        r.started,
                    )
                });
            }
        }
        let running_owner: Vec<usize> = running
            .iter()
            .enumerate()
            .flat_map(|(i, r)| std::iter::repeat_n(i, jobs[r.job].pods.len()))
            .collect();
        let snapshot = Snapshot {
            now,
            queues: vec![queue(0, "llm", 3.0, 30.0), queue(1, "vision", 2.0, 20.0)].into(),
            running: running_pods,
            pending: pending
                .iter()
                .map(|&j| PendingWorkload {
                    created_at: jobs[j].submitted,
                    ..fixtures::pending(&jobs[j].uid, jobs[j].queue, &jobs[j].pods)
                })
                .collect(),
            recent_preemptions: preemption_times
                .iter()
                .copied()
                .filter(|t| now - t < HOUR)
                .collect(),
            previous_holds: previous_holds.clone(),
            refused_victims: Vec::new(),
            backfill: backfill.iter().map(|(job, _)| job.clone()).collect(),
            given_up_holds: Vec::new(),
            ..fixtures::one_gpu_pool("default", nodes.clone())
        };
        let decisions = decide(&snapshot, options);
        previous_holds = decisions
            .holds
            .iter()
            .map(|h| h.carried(snapshot.pending[h.workload].uid.clone(), now))
            .collect();
        backfill.retain(|(job, holder)| {
            previous_holds.iter().any(|h| &h.workload == holder)
                && running.iter().any(|r| &jobs[r.job].uid == job)
        });
        for release in &decisions.releases {
            if let ReleaseReason::Backfill { for_workload, .. } = release.reason {
                backfill.push((
                    snapshot.pending[release.workload].uid.clone(),
                    snapshot.pending[for_workload].uid.clone(),
                ));
            }
        }
        // Preemptions: the victim's whole job stops and goes back to the queue.
        let mut evicted: Vec<usize> = decisions
            .preemptions
            .iter()
            .flat_map(|p| p.pods.iter().map(|&pod| running_owner[pod]))
            .collect();
        evicted.sort_unstable();
        evicted.dedup();
        for p in &decisions.preemptions {
            preemption_times.extend(p.pods.iter().map(|_| now));
            last_preemption[snapshot.pending[p.for_workload].queue.get()] = Some(now);
        }
        for &i in evicted.iter().rev() {
            let r = running.remove(i);
            for (node, gpus) in r.nodes.iter().zip(&jobs[r.job].pods) {
                nodes[*node].free[0] += gpus;
            }
            jobs[r.job].submitted = now;
            pending.push(r.job);
        }
        let mut released = Vec::new();
        for release in &decisions.releases {
            let job = pending[release.workload];
            for (node, gpus) in release.placements.iter().zip(&jobs[job].pods) {
                assert!(
                    nodes[*node].free[0] >= *gpus,
                    "release overcommits {}",
                    nodes[*node].name
                );
                nodes[*node].free[0] -= gpus;
            }
            if jobs[job].queue == 0 && llm_start.is_none() {
                llm_start = Some(now);
            }
            running.push(Running {
                job,
                started: now,
                nodes: release.placements.clone(),
            });
            released.push(release.workload);
        }
        released.sort_unstable();
        for i in released.into_iter().rev() {
            pending.remove(i);
        }
        // Ledger: the allocation is constant until the next cycle.
        let mut allocated = [0.0; 2];
        for r in &running {
            allocated[jobs[r.job].queue] +=
                jobs[r.job].pods.iter().map(|g| f64::from(*g)).sum::<f64>();
        }
        for (q, ledger) in ledgers.iter_mut().enumerate() {
            let sample = UsageSample {
                allocated: allocated[q],
                utilized: allocated[q],
                entitled: decisions.queues[QueueId::new(q)].entitled,
                capacity: 100.0,
            };
            ledger.record(&params, now + MINUTE, sample);
        }
        if llm_start.is_some() && now > 6.0 * HOUR + 2.0 * HOUR {
            break;
        }
        now += MINUTE;
    }
    (llm_start, preemption_times.len())
}

#[test]
fn gpufair_starts_the_60_gpu_job_within_an_hour() {
    let (start, _) = run(&DecideOptions::default(), 24.0 * HOUR);
    let start = start.expect("the 60-GPU job never started");
    assert!(
        start - 6.0 * HOUR <= HOUR,
        "started {} minutes after submission",
        (start - 6.0 * HOUR) / MINUTE
    );
}

#[test]
fn gpufair_starts_it_by_holding_capacity_alone_when_preemption_is_off() {
    let options = DecideOptions {
        preemption: PreemptionParams {
            enabled: false,
            ..PreemptionParams::default()
        },
        ..DecideOptions::default()
    };
    let (start, preemptions) = run(&options, 24.0 * HOUR);
    assert_eq!(preemptions, 0);
    let start = start.expect("the 60-GPU job never started");
    // 30-minute jobs drain the held nodes within 30 minutes.
    assert!(
        start - 6.0 * HOUR <= 31.0 * MINUTE,
        "started {} minutes after submission",
        (start - 6.0 * HOUR) / MINUTE
    );
}

#[test]
fn stateless_fair_share_starves_it() {
    let options = DecideOptions {
        fairshare: FairShareParams::default().stateless(),
        preemption: PreemptionParams {
            enabled: false,
            ..PreemptionParams::default()
        },
        hold_capacity: false,
        ..DecideOptions::default()
    };
    let (start, _) = run(&options, 30.0 * HOUR);
    assert_eq!(
        start, None,
        "stateless fair share is expected to starve the gang behind the stream"
    );
}

#[test]
fn a_pool_with_time_aware_sharing_off_starves_it_like_stateless_fair_share() {
    // Preemption stays on: the pool's switch alone must make it stateless (no hold, so no
    // preemption for a hold either).
    let mut options = DecideOptions::default();
    options.pool_fairshare.insert(
        "default".into(),
        FairShareParams {
            time_aware: false,
            ..FairShareParams::default()
        },
    );
    let (start, preemptions) = run(&options, 30.0 * HOUR);
    assert_eq!(start, None, "the pool was expected to behave as stateless");
    assert_eq!(preemptions, 0);
    // The same settings under another pool's name leave this pool time-aware.
    let mut elsewhere = options.clone();
    let off = elsewhere.pool_fairshare.remove("default").unwrap();
    elsewhere.pool_fairshare.insert("inference".into(), off);
    assert!(run(&elsewhere, 8.0 * HOUR).0.is_some());
}
