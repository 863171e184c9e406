//! The release score inside a queue: raising one weight never moves a workload behind one it
//! beat on that dimension alone, everything else equal.

use gpufair_core::admission::ReleaseScore;
use gpufair_core::admission::compare_workloads;
use gpufair_core::labels::{Tier, Urgency, UserTier};
use gpufair_core::params::ReleaseScoreParams;
use gpufair_core::snapshot::{PendingWorkload, QueueId};
use proptest::prelude::*;

const NOW: f64 = 1_000_000.0;
const URGENCIES: [Urgency; 3] = [Urgency::High, Urgency::Medium, Urgency::Low];
const USER_TIERS: [UserTier; 3] = [UserTier::Premium, UserTier::Standard, UserTier::Basic];
const TIERS: [Tier; 3] = [Tier::Realtime, Tier::Elastic, Tier::Backfill];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dimension {
    Urgency,
    UserTier,
    Deadline,
    Waited,
}

const DIMENSIONS: [Dimension; 4] = [
    Dimension::Urgency,
    Dimension::UserTier,
    Dimension::Deadline,
    Dimension::Waited,
];

fn weight_of(params: &mut ReleaseScoreParams, d: Dimension) -> &mut f64 {
    match d {
        Dimension::Urgency => &mut params.urgency,
        Dimension::UserTier => &mut params.user_tier,
        Dimension::Deadline => &mut params.deadline,
        Dimension::Waited => &mut params.waited,
    }
}

fn workload() -> impl Strategy<Value = PendingWorkload> {
    (
        0..3usize,
        0..3usize,
        0..3usize,
        // Whole seconds, as Kubernetes timestamps are: deadlines from overdue to weeks away.
        prop::option::of(-86_400i64..1_209_600),
        0i64..604_800,
    )
        .prop_map(
            |(tier, urgency, user_tier, deadline, waited)| PendingWorkload {
                uid: String::new(),
                queue: QueueId::new(0),
                tier: TIERS[tier],
                deadline: deadline.map(|d| NOW + d as f64),
                urgency: URGENCIES[urgency],
                user_tier: USER_TIERS[user_tier],
                created_at: NOW - waited as f64,
                min_member: 1,
                pods: vec![],
            },
        )
}

/// `base` made strictly better on `d` alone, or `None` if it is already the best there.
fn better_on(base: &PendingWorkload, d: Dimension, step: u32) -> Option<PendingWorkload> {
    let mut better = base.clone();
    match d {
        Dimension::Urgency => {
            better.urgency = match base.urgency {
                Urgency::Low => Urgency::Medium,
                Urgency::Medium => Urgency::High,
                Urgency::High => return None,
            }
        }
        Dimension::UserTier => {
            better.user_tier = match base.user_tier {
                UserTier::Basic => UserTier::Standard,
                UserTier::Standard => UserTier::Premium,
                UserTier::Premium => return None,
            }
        }
        Dimension::Deadline => {
            better.deadline = Some(match base.deadline {
                // No deadline is beaten by any deadline.
                None => NOW + 86_400.0,
                Some(d) if d > NOW => NOW.max(d - f64::from(step)),
                Some(_) => return None,
            })
        }
        Dimension::Waited => better.created_at = base.created_at - f64::from(step),
    }
    Some(better)
}

/// Positions of every workload in the release order under `params`.
fn positions(list: &[PendingWorkload], params: &ReleaseScoreParams) -> Vec<usize> {
    let scores: Vec<ReleaseScore> = list
        .iter()
        .map(|w| ReleaseScore::of(w, NOW, params))
        .collect();
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by(|&a, &b| compare_workloads(&list[a], &scores[a], &list[b], &scores[b]));
    let mut position = vec![0; list.len()];
    for (rank, &w) in order.iter().enumerate() {
        position[w] = rank;
    }
    position
}

fn weights() -> impl Strategy<Value = ReleaseScoreParams> {
    (
        0.0..10.0f64,
        0.0..10.0f64,
        0.0..10.0f64,
        0.0..10.0f64,
        60.0..604_800.0f64,
        60.0..604_800.0f64,
    )
        .prop_map(
            |(urgency, user_tier, deadline, waited, deadline_scale_s, wait_scale_s)| {
                ReleaseScoreParams {
                    urgency,
                    user_tier,
                    deadline,
                    waited,
                    deadline_scale_s,
                    wait_scale_s,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn raising_a_weight_never_moves_a_workload_behind_one_it_beat_on_that_dimension_alone(
        others in prop::collection::vec(workload(), 0..12),
        pairs in prop::collection::vec((workload(), 1u32..86_400), 1..6),
        dimension in 0..4usize,
        params in weights(),
        zero_first in any::<bool>(),
        raise in 0.001..20.0f64,
    ) {
        let d = DIMENSIONS[dimension];
        let mut before = params;
        if zero_first {
            // From "this part does not count" to "it does": the strongest move.
            *weight_of(&mut before, d) = 0.0;
        }
        let mut after = before.clone();
        *weight_of(&mut after, d) += raise;

        // The queue: unrelated workloads, plus pairs equal in everything but `d`, where the
        // first of each pair is strictly better on `d`. UIDs make the better one lose the final
        // tie-break, so nothing but the score can put it ahead.
        let mut list = others;
        let mut checked = Vec::new();
        for (base, step) in &pairs {
            if let Some(better) = better_on(base, d, *step) {
                checked.push((list.len(), list.len() + 1));
                list.push(better);
                list.push(base.clone());
            }
        }
        for (i, w) in list.iter_mut().enumerate() {
            w.uid = format!("{:03}", 999 - i);
        }
        prop_assume!(!checked.is_empty());

        let was = positions(&list, &before);
        let now = positions(&list, &after);
        for &(better, worse) in &checked {
            prop_assert!(
                was[better] > was[worse] || now[better] < now[worse],
                "{d:?}: raising its weight moved a workload behind one it beat on it alone"
            );
            // With the weight now positive the better one is ahead, however it stood before.
            prop_assert!(now[better] < now[worse], "{d:?}: the better workload is not ahead");
        }
    }
}

#[test]
fn the_property_is_not_vacuous_a_raise_does_reorder() {
    // An older standard-tier workload beats a younger premium one while the user tier weighs
    // little; raising that weight moves the premium one ahead, as the property allows.
    let older = PendingWorkload {
        uid: "older".into(),
        queue: QueueId::new(0),
        tier: Tier::Elastic,
        deadline: None,
        urgency: Urgency::Medium,
        user_tier: UserTier::Standard,
        created_at: NOW - 7_200.0,
        min_member: 1,
        pods: vec![],
    };
    let premium = PendingWorkload {
        uid: "premium".into(),
        user_tier: UserTier::Premium,
        created_at: NOW - 60.0,
        ..older.clone()
    };
    let list = [older, premium];
    let mut params = ReleaseScoreParams {
        user_tier: 0.1,
        ..ReleaseScoreParams::default()
    };
    assert_eq!(positions(&list, &params), [0, 1]);
    params.user_tier = 5.0;
    assert_eq!(positions(&list, &params), [1, 0]);
}
