//! Where waiting workloads stand, for people: each queue's place in its pool's order of service
//! and, per waiting workload, what would release it. Read from a cycle's snapshot and decisions
//! after the fact; nothing here changes a decision.

use std::fmt;

use super::decision::{Decisions, WaitReason, Waiting};
use super::order::{QueueTurn, covered_by_guarantee, share_ratio};
use crate::index::IndexVec;
use crate::snapshot::{QueueId, Snapshot};

/// Each queue's 1-based place in its pool's order of service at the start of the cycle, among
/// the pool's queues with waiting workloads (`None` for a queue with none): queues whose first
/// waiting workload fits in what is left of their guarantee first (by allocated ÷ guarantee),
/// then the others by allocated ÷ fair share, as the cycle serves them. The cycle itself also
/// counts each queue's next workload in the ratio and what the queue has earned by waiting, so
/// this is the order a new cycle starts from, not every turn it takes.
pub fn service_order(snapshot: &Snapshot, decisions: &Decisions) -> IndexVec<QueueId, Option<u32>> {
    let queues = snapshot.queues.len();
    // Per queue: the GPU-equivalents of its first waiting workload, if it has one.
    let mut waiting: IndexVec<QueueId, Option<(usize, f64)>> = IndexVec::from_elem(None, queues);
    for w in &decisions.waiting {
        if let Some(workload) = snapshot.pending.get(w.workload)
            && let Some(slot) = waiting.get_mut(workload.queue)
            && slot.is_none_or(|(position, _)| w.position < position)
        {
            *slot = Some((w.position, snapshot.workload_gpu_equivalents(workload)));
        }
    }
    let turn = |q: QueueId| {
        let queue = &snapshot.queues[q];
        let (allocated, fair_share) = decisions
            .queues
            .get(q)
            .map_or((0.0, 0.0), |o| (o.allocated, o.fair_share));
        let next = waiting[q].map_or(0.0, |(_, size)| size);
        let below_guarantee = covered_by_guarantee(queue.guaranteed, allocated, next);
        QueueTurn {
            below_guarantee,
            ratio: if below_guarantee {
                allocated / queue.guaranteed
            } else {
                share_ratio(allocated, fair_share)
            },
            rank: q.get(),
        }
    };
    let mut order = IndexVec::from_elem(None, queues);
    for pool in snapshot.pools.indices() {
        let mut members: Vec<(QueueTurn, QueueId)> = snapshot
            .queues
            .indices()
            .filter(|&q| waiting[q].is_some() && snapshot.queues[q].pool == pool)
            .map(|q| (turn(q), q))
            .collect();
        members.sort_by_key(|m| m.0);
        for (place, (_, q)) in members.into_iter().enumerate() {
            order[q] = u32::try_from(place + 1).ok();
        }
    }
    order
}

/// Room for a workload's pods: the largest pod's request, by resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Room {
    /// (resource name, count) of the largest pod.
    pub per_pod: Vec<(String, u32)>,
    /// Pods to place.
    pub pods: usize,
    pub pool: String,
}

impl fmt::Display for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let request = self
            .per_pod
            .iter()
            .map(|(name, count)| resource_text(name, *count))
            .collect::<Vec<_>>()
            .join(" and ");
        let request = if request.is_empty() {
            "its request".to_string()
        } else {
            request
        };
        if self.pods <= 1 {
            write!(f, "{request} free on a node of pool {}", self.pool)
        } else {
            write!(
                f,
                "{request} free for each of its {} pods on nodes of pool {}",
                self.pods, self.pool
            )
        }
    }
}

/// "2 GPUs", "1 GPU", or "3 × nvidia.com/mig-1g.10gb" for any other resource.
fn resource_text(name: &str, count: u32) -> String {
    match (name, count) {
        ("nvidia.com/gpu", 1) => "1 GPU".to_string(),
        ("nvidia.com/gpu", n) => format!("{n} GPUs"),
        (other, n) => format!("{n} × {other}"),
    }
}

/// What would release a waiting workload.
#[derive(Debug, Clone, PartialEq)]
pub enum ReleaseCondition {
    /// The gang's missing members being created.
    GangMembers { missing: u32 },
    /// Free capacity where its pods fit.
    Room(Room),
    /// Nothing as it is: it asks more than its pool has.
    Never { pool: String },
    /// The preemption cooldown ending.
    Cooldown { resumes_in_s: f64 },
    /// Its queue's running work falling to `limit − size`.
    Limit {
        limit: f64,
        size: f64,
        allocated: f64,
    },
    /// Its queue's time-aware share growing to what it would hold (it grows while the queue
    /// gets less than it is entitled to), or room for it.
    Share {
        needed: f64,
        earned: f64,
        /// Seconds until capacity is held for it at the share's present pace (once the share
        /// is within `holdLead` of covering `needed`), if it grows.
        eta_s: Option<f64>,
        room: Room,
    },
    /// What other queues' guarantees leave growing: its own queue's running work finishing, or
    /// their guaranteed demand falling.
    Guarantees { needed: f64, available: f64 },
    /// The nodes held for it draining.
    Drain { missing: f64, pool: String },
    /// The workload capacity is held for starting, or room outside the hold.
    HeldForAnother { room: Room },
    /// The running workloads its last hold was given up waiting for ending (they are held
    /// around while they run), or room for it.
    BlockersEnding { blockers: Vec<String>, room: Room },
    /// Time catching up with the idle time its given-up holds spent (it is held again then), or
    /// room for it.
    HoldsRepaid { resumes_in_s: f64, room: Room },
}

/// How many blockers a release condition names before it counts the rest.
const BLOCKERS_NAMED: usize = 3;

impl fmt::Display for ReleaseCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GangMembers { missing } => write!(
                f,
                "{missing} more pod{} of its gang being created",
                if *missing == 1 { "" } else { "s" }
            ),
            Self::Room(room) => write!(f, "{room}"),
            Self::Never { pool } => write!(
                f,
                "nothing as it stands: it asks more than pool {pool} has even when empty; lower its request"
            ),
            Self::Cooldown { resumes_in_s } => write!(
                f,
                "the preemption cooldown ending {}",
                crate::time_text::from_now(*resumes_in_s)
            ),
            Self::Limit {
                limit,
                size,
                allocated,
            } => write!(
                f,
                "its queue's running work falling from {allocated:.2} to {:.2} GPU-equivalents (its limit {limit:.2} less this workload's {size:.2})",
                (limit - size).max(0.0)
            ),
            Self::Share {
                needed,
                earned,
                eta_s,
                room,
            } => {
                write!(
                    f,
                    "{room}, or its queue's time-aware share growing from {earned:.2} toward {needed:.2} GPU-equivalents, when capacity is held for it ("
                )?;
                match eta_s {
                    Some(eta) => write!(
                        f,
                        "in ~{} at the pace it grows now, while the queue gets less than it is entitled to)",
                        crate::time_text::duration(*eta)
                    ),
                    None => f.write_str(
                        "it grows only while the queue gets less than it is entitled to, which it does not now)",
                    ),
                }
            }
            Self::Guarantees { needed, available } => write!(
                f,
                "{:.2} GPU-equivalents more left beside other queues' guarantees: its own queue's running work finishing, or other queues' guaranteed demand falling",
                (needed - available).max(0.0)
            ),
            Self::Drain { missing, pool } => write!(
                f,
                "the nodes of pool {pool} held for it draining: {missing:.2} GPU-equivalents there still run other work"
            ),
            Self::HeldForAnother { room } => write!(
                f,
                "the workload the capacity is held for starting, or {room} outside the hold"
            ),
            Self::BlockersEnding { blockers, room } => {
                let named = blockers
                    .iter()
                    .take(BLOCKERS_NAMED)
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                let rest = blockers.len().saturating_sub(BLOCKERS_NAMED);
                write!(f, "{room}, or {named}")?;
                if rest > 0 {
                    write!(f, " and {rest} more")?;
                }
                f.write_str(
                    " ending: its last hold was given up waiting for them, and it is held again once they end or other nodes can be drained",
                )
            }
            Self::HoldsRepaid { resumes_in_s, room } => write!(
                f,
                "{room}, or capacity held for it again {}, once the idle time its given-up holds spent is within what its pool allows",
                crate::time_text::from_now(*resumes_in_s)
            ),
        }
    }
}

/// What would release `waiting`, from the cycle's `snapshot` and `decisions`.
pub fn release_condition(
    snapshot: &Snapshot,
    decisions: &Decisions,
    waiting: &Waiting,
) -> ReleaseCondition {
    let workload = &snapshot.pending[waiting.workload];
    let pool = snapshot
        .queues
        .get(workload.queue)
        .and_then(|q| snapshot.pools.get(q.pool))
        .map_or_else(String::new, |p| p.name.clone());
    let size = snapshot.workload_gpu_equivalents(workload);
    let room = || {
        let largest = workload.pods.iter().max_by(|a, b| {
            snapshot
                .gpu_equivalents(&a.requests)
                .total_cmp(&snapshot.gpu_equivalents(&b.requests))
        });
        Room {
            per_pod: largest
                .map(|p| {
                    p.requests
                        .iter()
                        .zip(&snapshot.resources)
                        .filter(|(count, _)| **count > 0)
                        .map(|(count, kind)| (kind.name.clone(), *count))
                        .collect()
                })
                .unwrap_or_default(),
            pods: workload.pods.len(),
            pool: pool.clone(),
        }
    };
    match waiting.reason {
        WaitReason::GangIncomplete {
            present,
            min_member,
        } => ReleaseCondition::GangMembers {
            missing: min_member.saturating_sub(present).max(1),
        },
        WaitReason::NoFit => ReleaseCondition::Room(room()),
        WaitReason::NeverFits => ReleaseCondition::Never { pool },
        WaitReason::RecentlyPreempted { resumes_in_s, .. } => {
            ReleaseCondition::Cooldown { resumes_in_s }
        }
        WaitReason::QueueLimit { limit } => ReleaseCondition::Limit {
            limit,
            size,
            allocated: decisions
                .queues
                .get(workload.queue)
                .map_or(0.0, |o| o.allocated_after),
        },
        WaitReason::NotEarned {
            needed,
            earned,
            eta_s,
        } => ReleaseCondition::Share {
            needed,
            earned,
            eta_s,
            room: room(),
        },
        WaitReason::BeyondGuarantees { needed, available } => {
            ReleaseCondition::Guarantees { needed, available }
        }
        WaitReason::Holding => ReleaseCondition::Drain {
            missing: decisions
                .holds
                .iter()
                .find(|h| h.workload == waiting.workload)
                .map_or(0.0, |h| h.missing_gpu_equivalents),
            pool,
        },
        WaitReason::CapacityHeld { .. } => ReleaseCondition::HeldForAnother { room: room() },
        WaitReason::GivenUpTooOften { resumes_in_s, .. } => ReleaseCondition::HoldsRepaid {
            resumes_in_s,
            room: room(),
        },
        WaitReason::HoldGivenUp { .. } => ReleaseCondition::BlockersEnding {
            blockers: snapshot
                .given_up_holds
                .iter()
                .find(|g| g.workload == workload.uid)
                .map(|g| g.blockers.clone())
                .unwrap_or_default(),
            room: room(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Hold, HoldCost, QueueOutcome, ReleaseScore};
    use crate::snapshot::{PendingWorkload, Pool, PoolId, QueueState, ResourceKind};

    fn queue(name: &str, pool: usize, guaranteed: f64) -> QueueState {
        QueueState {
            pool: PoolId::new(pool),
            ..crate::fixtures::queue(name, 1.0, guaranteed)
        }
    }

    fn workload(queue: usize, pods: &[&[u32]]) -> PendingWorkload {
        PendingWorkload {
            min_member: 1,
            ..crate::fixtures::pending_of(&format!("w{queue}"), queue, pods)
        }
    }

    fn outcome(queue: usize, allocated: f64, fair_share: f64) -> QueueOutcome {
        QueueOutcome {
            queue: QueueId::new(queue),
            allocated,
            allocated_after: allocated,
            fair_share,
            ..QueueOutcome::default()
        }
    }

    fn waiting(workload: usize, reason: WaitReason) -> Waiting {
        Waiting {
            workload,
            reason,
            score: ReleaseScore::default(),
            position: 1,
            queue_length: 1,
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            resources: vec![
                ResourceKind {
                    name: "nvidia.com/gpu".into(),
                    gpu_equivalents: 1.0,
                },
                ResourceKind {
                    name: "nvidia.com/mig-1g.10gb".into(),
                    gpu_equivalents: 1.0 / 7.0,
                },
            ],
            pools: vec![
                Pool {
                    name: "a100".into(),
                },
                Pool {
                    name: "h100".into(),
                },
            ]
            .into(),
            // q0 below its guarantee; q1 at half its fair share; q2 over its fair share; q3
            // in another pool; q4 waits for nothing.
            queues: vec![
                queue("q0", 0, 4.0),
                queue("q1", 0, 0.0),
                queue("q2", 0, 0.0),
                queue("q3", 1, 0.0),
                queue("q4", 0, 0.0),
            ]
            .into(),
            pending: vec![
                workload(2, &[&[2, 0]]),
                workload(1, &[&[0, 3], &[0, 3]]),
                workload(0, &[&[1, 0]]),
                workload(3, &[&[8, 0]]),
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn queues_are_ordered_per_pool_guarantee_first_then_by_share() {
        let snapshot = snapshot();
        let decisions = Decisions {
            waiting: (0..4).map(|w| waiting(w, WaitReason::NoFit)).collect(),
            queues: vec![
                outcome(0, 3.0, 2.0),
                outcome(1, 2.0, 4.0),
                outcome(2, 6.0, 4.0),
                outcome(3, 0.0, 8.0),
                outcome(4, 0.0, 1.0),
            ]
            .into(),
            ..Decisions::default()
        };
        assert_eq!(
            service_order(&snapshot, &decisions).as_slice(),
            [Some(1), Some(2), Some(3), Some(1), None]
        );
        // Waiting with 2 GPUs, more than the 1 its guarantee has left, q0 is ordered by its
        // share like the others: 3 of a fair share of 2, behind q1 and, on rank, ahead of q2.
        let mut bigger = snapshot.clone();
        bigger.pending[2] = workload(0, &[&[2, 0]]);
        assert_eq!(
            service_order(&bigger, &decisions).as_slice(),
            [Some(2), Some(1), Some(3), Some(1), None]
        );
    }

    #[test]
    fn release_conditions_name_the_room_the_cooldown_and_the_share() {
        let snapshot = snapshot();
        let decisions = Decisions {
            queues: (0..5).map(|q| outcome(q, 1.0, 2.0)).collect(),
            holds: vec![Hold {
                workload: 3,
                pool: PoolId::new(1),
                nodes: vec![],
                missing_gpu_equivalents: 6.0,
                missing: vec![],
                cost: HoldCost::default(),
            }],
            ..Decisions::default()
        };
        let text =
            |w, reason| release_condition(&snapshot, &decisions, &waiting(w, reason)).to_string();
        assert_eq!(
            text(0, WaitReason::NoFit),
            "2 GPUs free on a node of pool a100"
        );
        assert_eq!(
            text(1, WaitReason::NoFit),
            "3 × nvidia.com/mig-1g.10gb free for each of its 2 pods on nodes of pool a100"
        );
        assert_eq!(
            text(
                0,
                WaitReason::RecentlyPreempted {
                    at: 0.0,
                    ago_s: 60.0,
                    resumes_in_s: 240.0
                }
            ),
            "the preemption cooldown ending in 4 min"
        );
        assert_eq!(
            text(
                2,
                WaitReason::NotEarned {
                    needed: 6.0,
                    earned: 4.5,
                    eta_s: Some(2400.0)
                }
            ),
            "1 GPU free on a node of pool a100, or its queue's time-aware share growing from 4.50 toward 6.00 GPU-equivalents, when capacity is held for it (in ~40 min at the pace it grows now, while the queue gets less than it is entitled to)"
        );
        assert_eq!(
            text(
                2,
                WaitReason::NotEarned {
                    needed: 6.0,
                    earned: 4.5,
                    eta_s: None
                }
            ),
            "1 GPU free on a node of pool a100, or its queue's time-aware share growing from 4.50 toward 6.00 GPU-equivalents, when capacity is held for it (it grows only while the queue gets less than it is entitled to, which it does not now)"
        );
        assert_eq!(
            text(3, WaitReason::Holding),
            "the nodes of pool h100 held for it draining: 6.00 GPU-equivalents there still run other work"
        );
        assert_eq!(
            text(
                1,
                WaitReason::GangIncomplete {
                    present: 2,
                    min_member: 4
                }
            ),
            "2 more pods of its gang being created"
        );
        assert_eq!(
            text(0, WaitReason::QueueLimit { limit: 2.0 }),
            "its queue's running work falling from 1.00 to 0.00 GPU-equivalents (its limit 2.00 less this workload's 2.00)"
        );
        assert!(text(3, WaitReason::NeverFits).contains("pool h100"));
    }

    #[test]
    fn a_workload_held_around_its_blockers_names_them() {
        let mut snapshot = snapshot();
        let decisions = Decisions {
            queues: (0..5).map(|q| outcome(q, 1.0, 2.0)).collect(),
            ..Decisions::default()
        };
        let blockers = |n: usize| (1..=n).map(|i| format!("team/job-{i}")).collect::<Vec<_>>();
        let mut text = |n: usize| {
            snapshot.given_up_holds = vec![crate::snapshot::GivenUpHold {
                workload: "w2".into(),
                blockers: blockers(n),
                ..crate::snapshot::GivenUpHold::default()
            }];
            let reason = WaitReason::HoldGivenUp {
                blockers: u32::try_from(n).unwrap(),
            };
            release_condition(&snapshot, &decisions, &waiting(0, reason)).to_string()
        };
        let tail = " ending: its last hold was given up waiting for them, and it is held again once they end or other nodes can be drained";
        assert_eq!(
            text(2),
            format!("2 GPUs free on a node of pool a100, or team/job-1, team/job-2{tail}")
        );
        assert_eq!(
            text(5),
            format!(
                "2 GPUs free on a node of pool a100, or team/job-1, team/job-2, team/job-3 and 2 more{tail}"
            )
        );
    }
}
