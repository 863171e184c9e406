//! The release score: how workloads of one tier are ordered inside their queue.
//!
//! Four parts, each a number in [0, 1] multiplied by its weight from the config file: urgency,
//! user tier, deadline slack and time waited. Each part is monotone in what it measures, so
//! raising a weight only moves workloads that are better on that part ahead of those that are
//! worse on it. The score is computed once per cycle from the snapshot's clock, so the order a
//! sort sees can never contradict itself.

use std::fmt;

use crate::labels::{Urgency, UserTier};
use crate::params::ReleaseScoreParams;
use crate::snapshot::PendingWorkload;

/// A workload's score, part by part, each part already multiplied by its weight.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReleaseScore {
    pub urgency: f64,
    pub user_tier: f64,
    pub deadline: f64,
    pub waited: f64,
}

/// `urgency-level` as a part: high 1, medium 0.5, low 0.
pub fn urgency_part(urgency: Urgency) -> f64 {
    match urgency {
        Urgency::High => 1.0,
        Urgency::Medium => 0.5,
        Urgency::Low => 0.0,
    }
}

/// `user-tier` as a part: premium 1, standard 0.5, basic 0.
pub fn user_tier_part(tier: UserTier) -> f64 {
    match tier {
        UserTier::Premium => 1.0,
        UserTier::Standard => 0.5,
        UserTier::Basic => 0.0,
    }
}

/// Deadline slack as a part: `scale / (scale + slack)`, 1 at or past the deadline, falling
/// towards 0 as the deadline moves away; 0 without a deadline (or with a non-finite one). The
/// slack is measured against `now`, so a workload's part grows as its deadline approaches.
pub fn deadline_part(deadline: Option<f64>, now: f64, scale_s: f64) -> f64 {
    let Some(deadline) = deadline.filter(|d| d.is_finite()) else {
        return 0.0;
    };
    let slack = (deadline - now).max(0.0);
    if !slack.is_finite() {
        return 0.0;
    }
    if slack == 0.0 {
        return 1.0;
    }
    if !(scale_s.is_finite() && scale_s > 0.0) {
        return 0.0;
    }
    scale_s / (scale_s + slack)
}

/// Time waited as a part: `waited / (waited + scale)`, 0 on arrival, rising towards 1.
pub fn waited_part(created_at: f64, now: f64, scale_s: f64) -> f64 {
    let waited = now - created_at;
    if !(waited.is_finite() && waited > 0.0) {
        return 0.0;
    }
    if !(scale_s.is_finite() && scale_s > 0.0) {
        return 1.0;
    }
    waited / (waited + scale_s)
}

/// A weight as the score uses it: negative or non-finite weights count as 0.
fn weight(w: f64) -> f64 {
    if w.is_finite() && w > 0.0 { w } else { 0.0 }
}

impl ReleaseScore {
    /// The score of `workload` at `now`.
    pub fn of(workload: &PendingWorkload, now: f64, params: &ReleaseScoreParams) -> Self {
        Self {
            urgency: weight(params.urgency) * urgency_part(workload.urgency),
            user_tier: weight(params.user_tier) * user_tier_part(workload.user_tier),
            deadline: weight(params.deadline)
                * deadline_part(workload.deadline, now, params.deadline_scale_s),
            waited: weight(params.waited)
                * waited_part(workload.created_at, now, params.wait_scale_s),
        }
    }

    /// The sum of the parts; higher is released first. Always finite.
    pub fn total(&self) -> f64 {
        let sum = self.urgency + self.user_tier + self.deadline + self.waited;
        // `+ 0.0` turns a negative zero into zero, so `total_cmp` sees equal scores as equal.
        if sum.is_finite() { sum + 0.0 } else { 0.0 }
    }
}

impl fmt::Display for ReleaseScore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "release score {:.3} = urgency {:.3} + user tier {:.3} + deadline slack {:.3} + time waited {:.3}",
            self.total(),
            self.urgency,
            self.user_tier,
            self.deadline,
            self.waited
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Tier;
    use crate::snapshot::QueueId;

    fn workload(urgency: Urgency, user_tier: UserTier, deadline: Option<f64>) -> PendingWorkload {
        PendingWorkload {
            uid: "w".into(),
            queue: QueueId::new(0),
            tier: Tier::Elastic,
            deadline,
            urgency,
            user_tier,
            created_at: 1_000.0,
            min_member: 1,
            pods: vec![],
        }
    }

    #[test]
    fn parts_are_weighted_and_summed() {
        let params = ReleaseScoreParams {
            urgency: 2.0,
            user_tier: 1.0,
            deadline: 4.0,
            waited: 1.0,
            deadline_scale_s: 100.0,
            wait_scale_s: 50.0,
        };
        // Deadline 100 s away (part 0.5), waited 50 s (part 0.5).
        let w = workload(Urgency::High, UserTier::Basic, Some(1_150.0));
        let score = ReleaseScore::of(&w, 1_050.0, &params);
        assert_eq!(
            score,
            ReleaseScore {
                urgency: 2.0,
                user_tier: 0.0,
                deadline: 2.0,
                waited: 0.5
            }
        );
        assert_eq!(score.total(), 4.5);
        assert_eq!(
            score.to_string(),
            "release score 4.500 = urgency 2.000 + user tier 0.000 + deadline slack 2.000 + time waited 0.500"
        );
    }

    #[test]
    fn deadline_part_grows_as_the_deadline_nears_and_is_full_once_passed() {
        let scale = 3_600.0;
        let far = deadline_part(Some(100_000.0), 0.0, scale);
        let near = deadline_part(Some(1_000.0), 0.0, scale);
        assert!(0.0 < far && far < near && near < 1.0);
        assert_eq!(deadline_part(Some(10.0), 20.0, scale), 1.0);
        assert_eq!(deadline_part(None, 0.0, scale), 0.0);
        assert_eq!(deadline_part(Some(f64::NAN), 0.0, scale), 0.0);
    }

    #[test]
    fn waited_part_grows_with_age_and_ignores_bad_clocks() {
        assert_eq!(waited_part(10.0, 10.0, 60.0), 0.0);
        assert_eq!(waited_part(0.0, 60.0, 60.0), 0.5);
        assert!(waited_part(0.0, 600.0, 60.0) > waited_part(0.0, 60.0, 60.0));
        // A creation time in the future (clock skew) or not a number waits for nothing.
        assert_eq!(waited_part(100.0, 10.0, 60.0), 0.0);
        assert_eq!(waited_part(f64::NAN, 10.0, 60.0), 0.0);
        assert_eq!(waited_part(f64::MAX, 10.0, 60.0), 0.0);
    }

    #[test]
    fn bad_weights_count_as_zero() {
        let params = ReleaseScoreParams {
            urgency: f64::NAN,
            user_tier: -1.0,
            deadline: f64::INFINITY,
            waited: 0.0,
            ..ReleaseScoreParams::default()
        };
        let w = workload(Urgency::High, UserTier::Premium, Some(0.0));
        assert_eq!(ReleaseScore::of(&w, 5_000.0, &params).total(), 0.0);
    }
}
