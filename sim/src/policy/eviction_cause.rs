//! Why a policy evicted a job: the report splits the work lost to preemption by cause, so that
//! an admin can see which rule's evictions cost what before tuning it.

use gpufair_core::admission::PreemptionReason;

/// The rule an eviction followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionCause {
    /// gpufair: for a queue below its guarantee.
    Guarantee,
    /// gpufair: for a queue far below its fair share.
    FairShare,
    /// gpufair: a drain ended early, its idle time outweighing what the eviction loses.
    DrainEndedEarly,
    /// gpufair: a drain ended past its idle budget.
    StalledDrain,
    /// gpufair: backfill leaving the hold it ran in.
    Backfill,
    /// KAI: reclaim for a queue below its fair share.
    Reclaim,
    /// KAI: a queue's higher-priority job evicting its own lower-priority ones.
    Priority,
}

impl EvictionCause {
    /// Every cause, in report order.
    pub const ALL: [EvictionCause; 7] = [
        EvictionCause::Guarantee,
        EvictionCause::FairShare,
        EvictionCause::DrainEndedEarly,
        EvictionCause::StalledDrain,
        EvictionCause::Backfill,
        EvictionCause::Reclaim,
        EvictionCause::Priority,
    ];

    /// The name the JSON report keys it by.
    pub fn key(self) -> &'static str {
        match self {
            EvictionCause::Guarantee => "guarantee",
            EvictionCause::FairShare => "fair_share",
            EvictionCause::DrainEndedEarly => "drain_ended_early",
            EvictionCause::StalledDrain => "stalled_drain",
            EvictionCause::Backfill => "backfill",
            EvictionCause::Reclaim => "reclaim",
            EvictionCause::Priority => "priority",
        }
    }

    /// How the side-by-side table names it.
    pub fn label(self) -> &'static str {
        match self {
            EvictionCause::Guarantee => "for a guarantee",
            EvictionCause::FairShare => "for a fair share",
            EvictionCause::DrainEndedEarly => "ending a drain early",
            EvictionCause::StalledDrain => "ending a stalled drain",
            EvictionCause::Backfill => "backfill leaving a hold",
            EvictionCause::Reclaim => "reclaim (KAI)",
            EvictionCause::Priority => "own lower priority (KAI)",
        }
    }

    /// Where it stands in [`EvictionCause::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl From<&PreemptionReason> for EvictionCause {
    fn from(reason: &PreemptionReason) -> Self {
        match reason {
            PreemptionReason::BelowGuarantee { .. } => EvictionCause::Guarantee,
            PreemptionReason::FarBelowFairShare { .. } => EvictionCause::FairShare,
            PreemptionReason::IdleOutweighsLoss { .. } => EvictionCause::DrainEndedEarly,
            PreemptionReason::StalledDrain { .. } => EvictionCause::StalledDrain,
            PreemptionReason::Backfill => EvictionCause::Backfill,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_stands_at_its_index_with_its_own_key() {
        for (i, cause) in EvictionCause::ALL.iter().enumerate() {
            assert_eq!(cause.index(), i);
        }
        let mut keys: Vec<&str> = EvictionCause::ALL.iter().map(|c| c.key()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), EvictionCause::ALL.len());
    }
}
