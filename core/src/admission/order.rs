//! Orders: which workload inside a queue goes first, and which queue is served first.
//!
//! Both are total orders built from values snapshotted once per cycle, so a sort can never see a
//! comparator contradict itself (the failure behind several of Kueue's ordering bugs).

use std::cmp::Ordering;

use super::score::ReleaseScore;
use crate::snapshot::PendingWorkload;

/// Inside a queue: tier first (realtime, elastic, backfill), then the release score (highest
/// first), then creation time (oldest first), then UID. Scores are computed once per cycle
/// ([`ReleaseScore::of`]), so this is a total order.
pub fn compare_workloads(
    a: &PendingWorkload,
    a_score: &ReleaseScore,
    b: &PendingWorkload,
    b_score: &ReleaseScore,
) -> Ordering {
    a.tier
        .cmp(&b.tier)
        .then_with(|| b_score.total().total_cmp(&a_score.total()))
        .then_with(|| a.created_at.total_cmp(&b.created_at))
        .then_with(|| a.uid.cmp(&b.uid))
}

/// How far a queue is from its fair share: allocated ÷ fair share; lower is more deserving.
/// A queue with no fair share ranks after every queue that has one.
pub fn share_ratio(allocated: f64, fair_share: f64) -> f64 {
    if fair_share > 0.0 {
        allocated / fair_share
    } else if allocated > 0.0 {
        f64::MAX
    } else {
        f64::MAX / 2.0
    }
}

/// `value`'s bits as an integer that orders as `f64::total_cmp` orders the values: every bit of
/// a negative number flipped, only the sign of any other.
pub fn total_order(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// Whether a queue that has `allocated` of its `guaranteed` GPU-equivalents can be given a
/// workload of `size` through its guarantee: it is below the guarantee and the workload fits in
/// what is left of it. Only such work is served ahead of other queues on the guarantee's account.
pub fn covered_by_guarantee(guaranteed: f64, allocated: f64, size: f64) -> bool {
    const EPSILON: f64 = 1e-9;
    allocated + EPSILON < guaranteed && allocated + size <= guaranteed + EPSILON
}

/// A queue's place in the serving order: (below its guarantee?, ratio, canonical rank). Lower is
/// served first. Queues whose next workload fits in what is left of their guarantee come before
/// all others, so capacity a queue is guaranteed never goes to a queue already past its own
/// guarantee while it waits; among them the ratio is allocated ÷ guarantee, otherwise allocated
/// ÷ fair share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueTurn {
    pub below_guarantee: bool,
    pub ratio: f64,
    pub rank: usize,
}

impl QueueTurn {
    /// Bits of the rank in [`QueueTurn::key`].
    const RANK_BITS: u32 = 63;

    /// The turn as one integer that orders as the turn does: the guarantee flag (set when not
    /// below), the ratio's bits in `f64::total_cmp` order, then the rank. A heap of queues
    /// compares turns at every step, and one integer comparison is cheaper than three chained
    /// ones. Ranks count queues, so they stay far below 2^63 and never overlap the ratio.
    pub fn key(&self) -> u128 {
        debug_assert!((self.rank as u128) >> Self::RANK_BITS == 0);
        let ratio = total_order(self.ratio);
        u128::from(!self.below_guarantee) << 127
            | u128::from(ratio) << Self::RANK_BITS
            | self.rank as u128
    }

    /// Whether the queue of turn `key` is below its guarantee, and its rank.
    pub fn key_parts(key: u128) -> (bool, usize) {
        let rank = key & ((1 << Self::RANK_BITS) - 1);
        (key >> 127 == 0, rank as usize)
    }
}

impl Eq for QueueTurn {}

impl PartialOrd for QueueTurn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for QueueTurn {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .below_guarantee
            .cmp(&self.below_guarantee)
            .then(self.ratio.total_cmp(&other.ratio))
            .then(self.rank.cmp(&other.rank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{Tier, Urgency, UserTier};
    use crate::params::ReleaseScoreParams;
    use crate::snapshot::QueueId;

    fn workload(
        uid: &str,
        tier: Tier,
        deadline: Option<f64>,
        urgency: Urgency,
        created_at: f64,
    ) -> PendingWorkload {
        PendingWorkload {
            uid: uid.into(),
            queue: QueueId::new(0),
            tier,
            deadline,
            urgency,
            user_tier: UserTier::Standard,
            created_at,
            min_member: 1,
            pods: vec![],
        }
    }

    fn sorted(list: &[PendingWorkload], now: f64, params: &ReleaseScoreParams) -> Vec<String> {
        let scores: Vec<ReleaseScore> = list
            .iter()
            .map(|w| ReleaseScore::of(w, now, params))
            .collect();
        let mut order: Vec<usize> = (0..list.len()).collect();
        order.sort_by(|&a, &b| compare_workloads(&list[a], &scores[a], &list[b], &scores[b]));
        order.into_iter().map(|i| list[i].uid.clone()).collect()
    }

    #[test]
    fn tier_then_score_then_age_then_uid() {
        let list = [
            workload("f", Tier::Elastic, None, Urgency::Medium, 1.0),
            workload("e", Tier::Elastic, None, Urgency::Medium, 1.0),
            workload("d", Tier::Elastic, None, Urgency::Medium, 0.5),
            workload("c", Tier::Elastic, None, Urgency::High, 9.0),
            // Deadline passed: the full deadline part (4) beats high urgency (2).
            workload("b", Tier::Elastic, Some(5.0), Urgency::Low, 9.0),
            workload("a", Tier::Realtime, None, Urgency::Low, 9.0),
            workload("g", Tier::Backfill, Some(1.0), Urgency::High, 0.0),
        ];
        // Time waited switched off, so d, e and f tie on score and fall to age, then UID.
        let params = ReleaseScoreParams {
            waited: 0.0,
            ..ReleaseScoreParams::default()
        };
        assert_eq!(
            sorted(&list, 10.0, &params),
            ["a", "b", "c", "d", "e", "f", "g"]
        );
    }

    #[test]
    fn each_weight_can_lift_its_part_over_the_others() {
        let mut premium = workload("premium", Tier::Elastic, None, Urgency::Low, 100.0);
        premium.user_tier = UserTier::Premium;
        let urgent = workload("urgent", Tier::Elastic, None, Urgency::High, 100.0);
        let old = workload("old", Tier::Elastic, None, Urgency::Low, 0.0);
        let list = [premium, urgent, old];
        let only = |urgency, user_tier, waited| ReleaseScoreParams {
            urgency,
            user_tier,
            deadline: 0.0,
            waited,
            ..ReleaseScoreParams::default()
        };
        assert_eq!(sorted(&list, 3_700.0, &only(1.0, 0.0, 0.0))[0], "urgent");
        assert_eq!(sorted(&list, 3_700.0, &only(0.0, 1.0, 0.0))[0], "premium");
        assert_eq!(sorted(&list, 3_700.0, &only(0.0, 0.0, 1.0))[0], "old");
        // Urgency worth twice the user tier: urgent (1.0 + 0.25) beats premium (0.0 + 0.5).
        assert_eq!(sorted(&list, 3_700.0, &only(1.0, 0.5, 0.0))[0], "urgent");
    }

    #[test]
    fn queue_turns_prefer_the_most_below_share() {
        let mut turns = [
            QueueTurn {
                below_guarantee: false,
                ratio: share_ratio(5.0, 10.0),
                rank: 0,
            },
            QueueTurn {
                below_guarantee: false,
                ratio: share_ratio(0.0, 10.0),
                rank: 1,
            },
            QueueTurn {
                below_guarantee: false,
                ratio: share_ratio(0.0, 0.0),
                rank: 2,
            },
            QueueTurn {
                below_guarantee: false,
                ratio: share_ratio(1.0, 0.0),
                rank: 3,
            },
            QueueTurn {
                below_guarantee: true,
                ratio: share_ratio(3.0, 4.0),
                rank: 4,
            },
        ];
        turns.sort();
        assert_eq!(turns.map(|t| t.rank), [4, 1, 0, 2, 3]);
    }

    #[test]
    fn queue_turn_keys_order_as_the_turns_do() {
        let ratios = [
            f64::NEG_INFINITY,
            -f64::MAX,
            -1.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            0.25,
            1.0,
            1.0 + f64::EPSILON,
            f64::MAX / 2.0,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        let mut turns = Vec::new();
        for below_guarantee in [false, true] {
            for &ratio in &ratios {
                for rank in [0, 1, 7, 4_000, usize::MAX >> 1] {
                    turns.push(QueueTurn {
                        below_guarantee,
                        ratio,
                        rank,
                    });
                }
            }
        }
        for a in &turns {
            assert_eq!(QueueTurn::key_parts(a.key()), (a.below_guarantee, a.rank));
            for b in &turns {
                assert_eq!(a.key().cmp(&b.key()), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }
}
