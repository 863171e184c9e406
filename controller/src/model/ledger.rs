//! The ledgers of all queues, kept in memory between cycles and stored in `Queue.status`.
//!
//! - On becoming leader each queue's ledger is rebuilt from its status; a queue without one is
//!   seeded from `initialUsage`; a ledger that does not hold together is never overwritten (the
//!   queue runs neutral and its condition says why) — the ledger is never reset.
//! - Each cycle folds in the rates of the previous cycle up to now (the allocation is piecewise
//!   constant between cycles, which the ledger integrates exactly). A gap longer than
//!   [`MAX_GAP_S`] (no leader for a while) is recorded as nothing rather than invented.
//! - Status is written every status interval, so a restart loses at most one interval.

use std::collections::HashMap;

use gpufair_api::{CarriedStatus, LedgerStatus, Queue, QueueStatus};
use gpufair_core::admission::QueueOutcome;
use gpufair_core::ledger::{QueueLedger, UsageSample, UsageSpan, stretch_samples};
use gpufair_core::params::FairShareParams;
use gpufair_core::snapshot::LedgerShares;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::waiting_status::{QueueWaiting, time};

/// Longest stretch without a cycle that is charged at the rates seen on either side of it.
pub const MAX_GAP_S: f64 = 300.0;

/// One queue's ledger, or why it cannot be used.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Valid(QueueLedger),
    Corrupt(String),
}

/// Ledgers by queue name, with the rates last seen.
#[derive(Debug, Clone, Default)]
pub struct LedgerBook {
    entries: HashMap<String, Entry>,
    rates: HashMap<String, UsageSample>,
}

impl LedgerBook {
    pub fn get(&self, queue: &str) -> Option<&Entry> {
        self.entries.get(queue)
    }

    /// Makes sure every queue has an entry: from its status, else seeded. `params` gives each
    /// queue's parameters by name (those of its pool).
    pub fn adopt<'p>(
        &mut self,
        queues: &[std::sync::Arc<Queue>],
        params: impl Fn(&str) -> &'p FairShareParams,
        now: f64,
        capacity_of: impl Fn(&Queue) -> f64,
    ) {
        let present: std::collections::HashSet<&str> = queues
            .iter()
            .filter_map(|q| q.metadata.name.as_deref())
            .collect();
        self.entries
            .retain(|name, _| present.contains(name.as_str()));
        self.rates.retain(|name, _| present.contains(name.as_str()));
        for queue in queues {
            let Some(name) = queue.metadata.name.as_deref() else {
                continue;
            };
            if self.entries.contains_key(name) {
                continue;
            }
            let stored = queue.status.as_ref().and_then(|s| s.ledger.as_ref());
            let entry = match stored {
                Some(status) => match QueueLedger::try_from(status) {
                    Ok(ledger) => Entry::Valid(ledger),
                    Err(err) => Entry::Corrupt(err.to_string()),
                },
                None => Entry::Valid(QueueLedger::seeded(
                    now,
                    params(name),
                    capacity_of(queue),
                    queue.spec.initial_usage,
                )),
            };
            if let Entry::Corrupt(reason) = &entry {
                tracing::error!(
                    queue = name,
                    reason,
                    "Queue status ledger is invalid; left as it is"
                );
            }
            self.entries.insert(name.to_string(), entry);
        }
    }

    /// Shares of every valid ledger at `now`, each with its queue's parameters.
    pub fn shares<'p>(
        &self,
        params: impl Fn(&str) -> &'p FairShareParams,
        now: f64,
    ) -> HashMap<String, LedgerShares> {
        self.entries
            .iter()
            .filter_map(|(name, entry)| match entry {
                Entry::Valid(ledger) => Some((name.clone(), ledger.shares(params(name), now))),
                Entry::Corrupt(_) => None,
            })
            .collect()
    }

    /// Whether no cycle has recorded rates yet: the next is a new leader's first, which
    /// charges the stretch since the last status write and wants the pods' spans for it.
    pub fn is_first_cycle(&self) -> bool {
        self.rates.is_empty()
    }

    /// Folds each queue's rates up to `now`: the previous cycle's rates where known. A queue
    /// without them (a new leader's first cycle) is charged the stretch since its ledger's last
    /// sample from its pods' spans of use (`spans`, by queue name): each pod for its own part of
    /// the stretch, so pods that finished or started meanwhile count for what they ran. Without
    /// spans, the stretch is charged at `current` rates.
    pub fn record<'p, 's>(
        &mut self,
        params: impl Fn(&str) -> &'p FairShareParams,
        now: f64,
        current: &HashMap<String, UsageSample>,
        spans: impl Fn(&str) -> Option<&'s [UsageSpan]>,
    ) {
        for (name, entry) in &mut self.entries {
            let Entry::Valid(ledger) = entry else {
                continue;
            };
            let params = params(name);
            let previous = self.rates.get(name);
            let Some(rate) = previous.or_else(|| current.get(name)).copied() else {
                continue;
            };
            if now - ledger.last_sample() > MAX_GAP_S {
                ledger.record(params, now, UsageSample::default());
                continue;
            }
            if previous.is_none()
                && let Some(spans) = spans(name)
            {
                let stretch = stretch_samples(
                    ledger.last_sample(),
                    now,
                    spans,
                    rate.entitled,
                    rate.capacity,
                );
                for (until, sample) in stretch {
                    ledger.record(params, until, sample);
                }
                continue;
            }
            ledger.record(params, now, rate);
        }
        self.rates.clone_from(current);
    }
}

/// The status to write for one queue.
pub fn queue_status(
    previous: Option<&QueueStatus>,
    entry: &Entry,
    params: &FairShareParams,
    now: f64,
    outcome: Option<&QueueOutcome>,
    waiting: Option<&QueueWaiting>,
    carried: CarriedStatus,
) -> QueueStatus {
    let (ledger, shares, condition) = match entry {
        Entry::Valid(ledger) => (
            Some(LedgerStatus::from(ledger)),
            Some(ledger.shares(params, now)),
            (
                "True",
                "Recorded",
                "usage is recorded in status.ledger".to_string(),
            ),
        ),
        Entry::Corrupt(reason) => (
            // Leaving the field out of a merge patch keeps what is stored.
            None,
            None,
            (
                "False",
                "InvalidLedger",
                format!("status.ledger is invalid and left untouched: {reason}"),
            ),
        ),
    };
    let previous_condition =
        previous.and_then(|s| s.conditions.iter().find(|c| c.type_ == "LedgerRecorded"));
    let transition = previous_condition
        .filter(|c| c.status == condition.0)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    QueueStatus {
        ledger,
        usage_share: shares.map(|s| s.usage_share),
        fair_share: shares.map(|s| s.fair_share),
        fair_share_gpus: outcome.map(|o| o.fair_share),
        effective_weight: outcome.map(|o| o.effective_weight),
        allocated: outcome.map(|o| o.allocated),
        pending: outcome.map(|o| o.pending),
        conditions: vec![Condition {
            type_: "LedgerRecorded".into(),
            status: condition.0.into(),
            reason: condition.1.into(),
            message: condition.2,
            last_transition_time: transition,
            observed_generation: None,
        }],
        waiting_workloads: waiting.map(|w| w.count),
        oldest_waiting_since: waiting.and_then(|w| w.oldest_since).and_then(time),
        pool: waiting.map(|w| w.pool.clone()),
        service_order: waiting.and_then(|w| w.service_order),
        waiting_head: waiting.map(|w| w.head.clone()).unwrap_or_default(),
        observed_at: time(now),
        carried: Some(carried),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn queue(status: Option<serde_json::Value>) -> Arc<Queue> {
        let mut v = serde_json::json!({
            "apiVersion": "gpufair.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": "a"}, "spec": {}
        });
        if let Some(s) = status {
            v["status"] = s;
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn rebuilt_from_status_never_reset() {
        let params = FairShareParams::default();
        let mut original = QueueLedger::seeded(1000.0, &params, 10.0, 0.0);
        original.record(
            &params,
            5000.0,
            UsageSample {
                allocated: 5.0,
                utilized: 5.0,
                entitled: 5.0,
                capacity: 10.0,
            },
        );
        let status = serde_json::to_value(QueueStatus {
            ledger: Some(LedgerStatus::from(&original)),
            ..QueueStatus::default()
        })
        .unwrap();
        let mut book = LedgerBook::default();
        book.adopt(&[queue(Some(status))], |_| &params, 5000.0, |_| 10.0);
        assert_eq!(book.get("a"), Some(&Entry::Valid(original.clone())));

        let corrupt =
            serde_json::json!({"ledger": {"bucketSeconds": 0, "lastSample": 0, "buckets": []}});
        let mut book = LedgerBook::default();
        book.adopt(&[queue(Some(corrupt))], |_| &params, 5000.0, |_| 10.0);
        let entry = book.get("a").unwrap().clone();
        assert!(matches!(entry, Entry::Corrupt(_)));
        let status = queue_status(
            None,
            &entry,
            &params,
            5000.0,
            None,
            None,
            CarriedStatus::default(),
        );
        assert!(
            status.ledger.is_none(),
            "a corrupt ledger is not overwritten"
        );
        assert_eq!(status.conditions[0].status, "False");
        assert!(book.shares(|_| &params, 5000.0).is_empty());
    }

    #[test]
    fn records_previous_rates_and_skips_long_gaps() {
        let params = FairShareParams {
            decay: 1.0,
            ..FairShareParams::default()
        };
        let mut book = LedgerBook::default();
        book.adopt(&[queue(None)], |_| &params, 0.0, |_| 10.0);
        let busy = HashMap::from([(
            "a".to_string(),
            UsageSample {
                allocated: 10.0,
                utilized: 10.0,
                entitled: 10.0,
                capacity: 10.0,
            },
        )]);
        let idle = HashMap::from([(
            "a".to_string(),
            UsageSample {
                capacity: 10.0,
                ..UsageSample::default()
            },
        )]);
        book.record(|_| &params, 100.0, &busy, |_| None); // first cycle: the current rates fill the gap
        book.record(|_| &params, 200.0, &idle, |_| None); // the previous (busy) rates up to 200
        book.record(|_| &params, 300.0, &idle, |_| None);
        let Some(Entry::Valid(ledger)) = book.get("a") else {
            panic!("valid ledger expected")
        };
        let totals = ledger.decayed_totals(&params, 300.0);
        assert!((totals[0] - 2000.0).abs() < 1e-6, "{totals:?}");
        // Ten minutes without a cycle: nothing is charged for them.
        book.record(|_| &params, 900.0, &busy, |_| None);
        let Some(Entry::Valid(ledger)) = book.get("a") else {
            panic!("valid ledger expected")
        };
        assert!((ledger.decayed_totals(&params, 900.0)[0] - 2000.0).abs() < 1e-6);
    }

    #[test]
    fn a_new_leader_charges_the_stretch_by_each_pods_own_span() {
        let params = FairShareParams {
            decay: 1.0,
            ..FairShareParams::default()
        };
        // The predecessor's last sample was at 0; this leader's first cycle is at 100.
        let mut book = LedgerBook::default();
        book.adopt(&[queue(None)], |_| &params, 0.0, |_| 10.0);
        assert!(book.is_first_cycle());
        let current = HashMap::from([(
            "a".to_string(),
            UsageSample {
                allocated: 6.0,
                utilized: 6.0,
                entitled: 10.0,
                capacity: 10.0,
            },
        )]);
        let spans = [
            // Running all along, as the first cycle sees.
            UsageSpan {
                start: f64::NEG_INFINITY,
                end: None,
                allocated: 6.0,
                utilized: 6.0,
            },
            // Finished at 40, gone from the first cycle's rates.
            UsageSpan {
                start: -50.0,
                end: Some(40.0),
                allocated: 4.0,
                utilized: 4.0,
            },
        ];
        book.record(
            |_| &params,
            100.0,
            &current,
            |name| (name == "a").then_some(&spans[..]),
        );
        assert!(!book.is_first_cycle());
        let Some(Entry::Valid(ledger)) = book.get("a") else {
            panic!("valid ledger expected")
        };
        // 6 × 100 + 4 × 40, where the current rates alone gave 6 × 100.
        let totals = ledger.decayed_totals(&params, 100.0);
        assert!((totals[0] - 760.0).abs() < 1e-6, "{totals:?}");
    }
}
