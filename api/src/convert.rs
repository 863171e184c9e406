//! Conversions between the stored API types and the policy core's plain types.

use gpufair_core::admission::DecideOptions;
use gpufair_core::ledger::{LedgerBucket, LedgerError, QueueLedger};

use crate::config::{Config, ConfigError};
use crate::ledger_status::{LedgerBucketStatus, LedgerStatus};

impl From<&QueueLedger> for LedgerStatus {
    fn from(ledger: &QueueLedger) -> Self {
        Self {
            bucket_seconds: ledger.bucket_s(),
            last_sample: ledger.last_sample(),
            buckets: ledger
                .buckets()
                .map(|b| LedgerBucketStatus {
                    start: b.start,
                    charged: b.charged,
                    entitled: b.entitled,
                    utilized: b.utilized,
                    capacity: b.capacity,
                })
                .collect(),
        }
    }
}

impl TryFrom<&LedgerStatus> for QueueLedger {
    type Error = LedgerError;

    /// Restores a ledger from `Queue.status.ledger`, refusing one that does not hold together
    /// rather than silently starting from zero.
    fn try_from(status: &LedgerStatus) -> Result<Self, Self::Error> {
        let buckets = status
            .buckets
            .iter()
            .map(|b| LedgerBucket {
                start: b.start,
                charged: b.charged,
                entitled: b.entitled,
                utilized: b.utilized,
                capacity: b.capacity,
            })
            .collect();
        QueueLedger::from_parts(status.bucket_seconds, status.last_sample, buckets)
    }
}

impl Config {
    /// The decision options this configuration asks for.
    pub fn decide_options(&self) -> Result<DecideOptions, ConfigError> {
        Ok(DecideOptions {
            fairshare: self.fairshare.to_params()?,
            pool_fairshare: self.fairshare.pool_params()?,
            preemption: self.preemption.to_params()?,
            hold_capacity: true,
            backfill_held: false,
            score: self.release_score.to_params()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufair_core::ledger::UsageSample;
    use gpufair_core::params::FairShareParams;

    #[test]
    fn ledger_survives_a_trip_through_queue_status_json() {
        let params = FairShareParams::default();
        let mut ledger = QueueLedger::seeded(1_700_000_000.0, &params, 64.0, 0.2);
        let sample = UsageSample {
            allocated: 12.0,
            utilized: 9.5,
            entitled: 16.0,
            capacity: 64.0,
        };
        ledger.record(&params, 1_700_000_000.0 + 5_000.0, sample);
        let status = LedgerStatus::from(&ledger);
        let json = serde_json::to_string(&status).unwrap();
        let back: LedgerStatus = serde_json::from_str(&json).unwrap();
        let restored = QueueLedger::try_from(&back).unwrap();
        assert_eq!(restored, ledger);
        let now = 1_700_000_000.0 + 5_000.0;
        assert_eq!(restored.shares(&params, now), ledger.shares(&params, now));
    }

    #[test]
    fn corrupt_status_is_refused() {
        let status = LedgerStatus {
            bucket_seconds: 0.0,
            last_sample: 0.0,
            buckets: vec![],
        };
        assert!(QueueLedger::try_from(&status).is_err());
    }

    #[test]
    fn config_gives_decide_options() {
        let config = Config::from_yaml(
            "fairshare: {k: 2.5}\npreemption: {enabled: false}\n",
            "c.yaml",
        )
        .unwrap();
        let options = config.decide_options().unwrap();
        assert_eq!(options.fairshare.k, 2.5);
        assert!(!options.preemption.enabled);
    }
}
