//! Conversions between the stored API types and the policy core's plain types.

use gpufair_core::admission::{
    DecideOptions, HoldCost, KeptHold, QueueMemory, StoredGivenUp, StoredHold,
};
use gpufair_core::ledger::{LedgerBucket, LedgerError, QueueLedger};
use gpufair_core::snapshot::GivenUpHold;

use crate::carried_status::{CarriedStatus, CarriedStatusError, GivenUpStatus, HoldStatus};
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

impl From<&QueueMemory> for CarriedStatus {
    fn from(memory: &QueueMemory) -> Self {
        Self {
            holds: memory
                .holds
                .iter()
                .map(|StoredHold { hold, backfill }| HoldStatus {
                    workload: hold.workload.clone(),
                    nodes: hold.nodes.clone(),
                    idle_gpu_seconds: hold.cost.idle_gpu_s,
                    idle_gpu_equivalents: hold.cost.idle_gpu_equivalents,
                    lent_gpu_equivalents: hold.cost.lent_gpu_equivalents,
                    unwanted_idle_gpu_seconds: hold.cost.unwanted_idle_gpu_s,
                    unwanted_idle_gpu_equivalents: hold.cost.unwanted_idle_gpu_equivalents,
                    at: hold.at,
                    backfill: backfill.clone(),
                })
                .collect(),
            last_preemption: memory.last_preemption_at,
            last_eviction: memory.last_evicted_at,
            evictions: memory.evicted_at.clone(),
            given_up: memory
                .given_up
                .iter()
                .map(|g| GivenUpStatus {
                    workload: g.hold.workload.clone(),
                    blockers: g.hold.blockers.clone(),
                    at: Some(g.at),
                    first_at: Some(g.hold.first_given_up_at),
                    later_idle_gpu_seconds: g.hold.spent_gpu_s,
                })
                .collect(),
        }
    }
}

impl CarriedStatus {
    /// Restores `queue`'s part of what the decision cycles carry, refusing a stored figure that
    /// cannot be one (a negative GPU count or time) rather than reading it as something else.
    pub fn to_memory(&self, queue: &str) -> Result<QueueMemory, CarriedStatusError> {
        let at_least_zero = |field: String, value: f64, expected| {
            if value.is_finite() && value >= 0.0 {
                Ok(value)
            } else {
                Err(CarriedStatusError {
                    field,
                    value: value.to_string(),
                    expected,
                })
            }
        };
        const SECONDS: &str = "seconds since the Unix epoch, >= 0";
        let time = |field: &str, value: f64| at_least_zero(field.to_string(), value, SECONDS);
        let mut holds = Vec::with_capacity(self.holds.len());
        for (i, hold) in self.holds.iter().enumerate() {
            let field = |name: &str| format!("holds[{i}].{name}");
            let figure = |name: &str, value| at_least_zero(field(name), value, "a number >= 0");
            if hold.workload.is_empty() {
                return Err(CarriedStatusError {
                    field: field("workload"),
                    value: "\"\"".into(),
                    expected: "a pod group key or pod UID",
                });
            }
            holds.push(StoredHold {
                hold: KeptHold {
                    workload: hold.workload.clone(),
                    queue: queue.to_string(),
                    nodes: hold.nodes.clone(),
                    cost: HoldCost {
                        idle_gpu_s: figure("idleGpuSeconds", hold.idle_gpu_seconds)?,
                        idle_gpu_equivalents: figure(
                            "idleGpuEquivalents",
                            hold.idle_gpu_equivalents,
                        )?,
                        lent_gpu_equivalents: figure(
                            "lentGpuEquivalents",
                            hold.lent_gpu_equivalents,
                        )?,
                        unwanted_idle_gpu_s: figure(
                            "unwantedIdleGpuSeconds",
                            hold.unwanted_idle_gpu_seconds,
                        )?,
                        unwanted_idle_gpu_equivalents: figure(
                            "unwantedIdleGpuEquivalents",
                            hold.unwanted_idle_gpu_equivalents,
                        )?,
                    },
                    at: at_least_zero(field("at"), hold.at, SECONDS)?,
                },
                backfill: hold.backfill.clone(),
            });
        }
        Ok(QueueMemory {
            holds,
            last_preemption_at: self
                .last_preemption
                .map(|at| time("lastPreemption", at))
                .transpose()?,
            last_evicted_at: self
                .last_eviction
                .map(|at| time("lastEviction", at))
                .transpose()?,
            evicted_at: self
                .evictions
                .iter()
                .enumerate()
                .map(|(i, &at)| time(&format!("evictions[{i}]"), at))
                .collect::<Result<_, _>>()?,
            given_up: self
                .given_up
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    if g.workload.is_empty() {
                        Err(CarriedStatusError {
                            field: format!("givenUp[{i}].workload"),
                            value: "\"\"".into(),
                            expected: "a pod group key or pod UID",
                        })
                    } else {
                        Ok(StoredGivenUp {
                            hold: GivenUpHold {
                                workload: g.workload.clone(),
                                blockers: g.blockers.clone(),
                                spent_gpu_s: at_least_zero(
                                    format!("givenUp[{i}].laterIdleGpuSeconds"),
                                    g.later_idle_gpu_seconds,
                                    "a number >= 0",
                                )?,
                                // Written before it was recorded: no earlier give-up counts.
                                first_given_up_at: g.first_at.map_or(Ok(0.0), |at| {
                                    time(&format!("givenUp[{i}].firstAt"), at)
                                })?,
                            },
                            // Written before the time was recorded: the oldest.
                            at: g
                                .at
                                .map_or(Ok(0.0), |at| time(&format!("givenUp[{i}].at"), at))?,
                        })
                    }
                })
                .collect::<Result<_, _>>()?,
        })
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

    fn stored_memory() -> QueueMemory {
        QueueMemory {
            holds: vec![StoredHold {
                hold: KeptHold {
                    workload: "team/train".into(),
                    queue: "team".into(),
                    nodes: vec!["gpu-1".into(), "gpu-2".into()],
                    cost: HoldCost {
                        idle_gpu_s: 7_200.5,
                        idle_gpu_equivalents: 3.0,
                        lent_gpu_equivalents: 1.0,
                        unwanted_idle_gpu_s: 3_600.25,
                        unwanted_idle_gpu_equivalents: 2.0,
                    },
                    at: 1_700_000_100.0,
                },
                backfill: vec!["0f1e-uid".into()],
            }],
            last_preemption_at: Some(1_699_999_000.0),
            last_evicted_at: None,
            evicted_at: vec![1_699_998_000.0, 1_699_998_000.0],
            given_up: vec![StoredGivenUp {
                hold: GivenUpHold {
                    workload: "team/big".into(),
                    blockers: vec!["team/small".into(), "other/serve".into()],
                    spent_gpu_s: 86_400.0,
                    first_given_up_at: 1_699_990_000.0,
                },
                at: 1_699_999_500.0,
            }],
        }
    }

    #[test]
    fn carried_memory_survives_a_trip_through_queue_status_json() {
        let memory = stored_memory();
        let json = serde_json::to_value(CarriedStatus::from(&memory)).unwrap();
        assert_eq!(json["holds"][0]["idleGpuSeconds"], 7_200.5);
        assert_eq!(json["holds"][0]["unwantedIdleGpuSeconds"], 3_600.25);
        assert_eq!(json["givenUp"][0]["blockers"][1], "other/serve");
        // Absent times are written as null, so a merge patch clears an older one.
        assert!(json["lastEviction"].is_null() && json.get("lastEviction").is_some());
        let back: CarriedStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back.to_memory("team"), Ok(memory));
    }

    #[test]
    fn a_stored_figure_that_cannot_be_one_is_refused_by_field() {
        let mut status = CarriedStatus::from(&stored_memory());
        status.holds[0].idle_gpu_seconds = -5.0;
        let err = status.to_memory("team").unwrap_err();
        assert_eq!(
            err.to_string(),
            "status.carried.holds[0].idleGpuSeconds = -5 is invalid: expected a number >= 0"
        );
        let mut status = CarriedStatus::from(&stored_memory());
        status.holds[0].unwanted_idle_gpu_equivalents = f64::INFINITY;
        assert_eq!(
            status.to_memory("team").unwrap_err().field,
            "holds[0].unwantedIdleGpuEquivalents"
        );
        let mut status = CarriedStatus::from(&stored_memory());
        status.evictions[1] = -1.0;
        let err = status.to_memory("team").unwrap_err();
        assert_eq!(err.field, "evictions[1]");
        let mut status = CarriedStatus::from(&stored_memory());
        status.holds[0].workload.clear();
        assert_eq!(
            status.to_memory("team").unwrap_err().field,
            "holds[0].workload"
        );
        let mut status = CarriedStatus::from(&stored_memory());
        status.given_up[0].workload.clear();
        assert_eq!(
            status.to_memory("team").unwrap_err().field,
            "givenUp[0].workload"
        );
        let mut status = CarriedStatus::from(&stored_memory());
        status.given_up[0].at = Some(f64::NAN);
        assert_eq!(status.to_memory("team").unwrap_err().field, "givenUp[0].at");
        let mut status = CarriedStatus::from(&stored_memory());
        status.given_up[0].later_idle_gpu_seconds = -1.0;
        assert_eq!(
            status.to_memory("team").unwrap_err().to_string(),
            "status.carried.givenUp[0].laterIdleGpuSeconds = -1 is invalid: expected a number >= 0"
        );
        let mut status = CarriedStatus::from(&stored_memory());
        status.given_up[0].first_at = Some(-3.0);
        assert_eq!(
            status.to_memory("team").unwrap_err().field,
            "givenUp[0].firstAt"
        );
    }

    #[test]
    fn a_given_up_hold_stored_without_its_time_reads_as_the_oldest() {
        let mut json = serde_json::to_value(CarriedStatus::from(&stored_memory())).unwrap();
        assert_eq!(json["givenUp"][0]["at"], 1_699_999_500.0);
        json["givenUp"][0].as_object_mut().unwrap().remove("at");
        let status: CarriedStatus = serde_json::from_value(json).unwrap();
        let memory = status.to_memory("team").unwrap();
        assert_eq!(memory.given_up[0].at, 0.0);
        assert_eq!(memory.given_up[0].hold, stored_memory().given_up[0].hold);
    }

    #[test]
    fn a_given_up_hold_stored_before_its_idle_time_was_counts_none() {
        let mut json = serde_json::to_value(CarriedStatus::from(&stored_memory())).unwrap();
        assert_eq!(json["givenUp"][0]["laterIdleGpuSeconds"], 86_400.0);
        assert_eq!(json["givenUp"][0]["firstAt"], 1_699_990_000.0);
        let given_up = json["givenUp"][0].as_object_mut().unwrap();
        given_up.remove("laterIdleGpuSeconds");
        given_up.remove("firstAt");
        let status: CarriedStatus = serde_json::from_value(json).unwrap();
        let hold = &status.to_memory("team").unwrap().given_up[0].hold;
        assert_eq!((hold.spent_gpu_s, hold.first_given_up_at), (0.0, 0.0));
    }
}
