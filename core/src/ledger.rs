//! The usage ledger: per queue, decayed GPU-seconds over a sliding window, bucketed.
//!
//! Each bucket stores the integral of a rate over the bucket's span, decayed to the bucket's end.
//! Recording integrates a piecewise-constant rate *exactly* (`∫ a·e^{-r(T−t)} dt`), splitting at
//! bucket edges, so the result does not depend on how often samples arrive: one sample an hour and
//! one a minute give the same ledger. The window edge moves a whole bucket at a time, so a restart
//! that restores the buckets reproduces the numbers exactly.
//!
//! Besides what a queue was charged, the ledger integrates what it was *entitled* to (the K = 0
//! division of its pool given everyone's demand) and the pool's capacity. Fair share and usage
//! are both shares of decayed capacity, so `fairShare − usage` is the queue's decayed deficit:
//! entitlement accrues only while the queue has demand, which is why an idle queue cannot bank
//! credit, and the deficit can never exceed the fair share itself.

use std::cmp::Ordering;
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::params::{ChargeBasis, FairShareParams, MIN_BUCKET_S};
use crate::snapshot::LedgerShares;
use crate::units::non_negative;

/// Rates in GPU-equivalents, constant over the interval being recorded.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UsageSample {
    /// GPU-equivalents allocated to the queue's running pods.
    pub allocated: f64,
    /// GPU-equivalents its pods actually used (measured by the device plugin).
    pub utilized: f64,
    /// What the K = 0 division entitled it to.
    pub entitled: f64,
    /// The capacity of the queue's pool.
    pub capacity: f64,
}

/// One bucket: integrals over `[start, start + bucket)`, each decayed to the bucket's end.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LedgerBucket {
    pub start: f64,
    pub charged: f64,
    pub entitled: f64,
    pub utilized: f64,
    pub capacity: f64,
}

/// A queue's history. Serialisable so it can live in `Queue.status` and survive restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueLedger {
    bucket_s: f64,
    last_sample: f64,
    buckets: VecDeque<LedgerBucket>,
}

/// A ledger restored from storage that does not hold together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger bucket length {0} s must be a finite number of seconds >= {MIN_BUCKET_S}")]
    BadBucket(f64),
    #[error("ledger lastSample {0} must be a finite time")]
    BadLastSample(f64),
    #[error("ledger bucket starting at {start} holds a negative or non-finite value")]
    BadValue { start: f64 },
    #[error("ledger buckets must be in increasing order of start, aligned to the bucket length")]
    Misordered,
    #[error("ledger bucket starting at {start} is after the ledger's lastSample {last_sample}")]
    AfterLastSample { start: f64, last_sample: f64 },
}

impl QueueLedger {
    /// An empty ledger whose clock starts at `now`.
    pub fn new(now: f64, params: &FairShareParams) -> Self {
        Self {
            bucket_s: params.bucket_s,
            last_sample: now,
            buckets: VecDeque::new(),
        }
    }

    /// A new queue's ledger: a full window of history at the current capacity, in which the queue
    /// used `initial_usage` of it and was entitled to none. With the default `initial_usage = 0`
    /// this is neutral, and it makes a new queue's shares move at the same pace as everyone
    /// else's instead of swinging on its first minutes of history.
    pub fn seeded(now: f64, params: &FairShareParams, capacity: f64, initial_usage: f64) -> Self {
        let start = now - params.window_s;
        let mut ledger = Self::new(start, params);
        let capacity = non_negative(capacity);
        let initial_usage = non_negative(initial_usage).min(1.0);
        let allocated = initial_usage * capacity;
        let sample = UsageSample {
            allocated,
            utilized: allocated,
            entitled: 0.0,
            capacity,
        };
        ledger.record(
            &FairShareParams {
                charge_basis: ChargeBasis::Allocated,
                ..params.clone()
            },
            now,
            sample,
        );
        ledger
    }

    /// Rebuilds a ledger from stored parts, checking they make sense.
    pub fn from_parts(
        bucket_s: f64,
        last_sample: f64,
        buckets: Vec<LedgerBucket>,
    ) -> Result<Self, LedgerError> {
        // A stored ledger is read back from Queue status, which anyone allowed to write it
        // could fill with anything: a bucket of a microsecond would have `record` walk billions
        // of buckets.
        if !(bucket_s.is_finite() && bucket_s >= MIN_BUCKET_S) {
            return Err(LedgerError::BadBucket(bucket_s));
        }
        if !last_sample.is_finite() {
            return Err(LedgerError::BadLastSample(last_sample));
        }
        for bucket in &buckets {
            let values = [
                bucket.charged,
                bucket.entitled,
                bucket.utilized,
                bucket.capacity,
            ];
            if !bucket.start.is_finite() || values.iter().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(LedgerError::BadValue {
                    start: bucket.start,
                });
            }
        }
        if buckets
            .windows(2)
            .any(|pair| pair[1].start <= pair[0].start)
        {
            return Err(LedgerError::Misordered);
        }
        // `record` only fills buckets before the time it records up to.
        if let Some(last) = buckets.last()
            && last.start > last_sample
        {
            return Err(LedgerError::AfterLastSample {
                start: last.start,
                last_sample,
            });
        }
        Ok(Self {
            bucket_s,
            last_sample,
            buckets: buckets.into(),
        })
    }

    pub fn bucket_s(&self) -> f64 {
        self.bucket_s
    }

    pub fn last_sample(&self) -> f64 {
        self.last_sample
    }

    pub fn buckets(&self) -> impl Iterator<Item = &LedgerBucket> {
        self.buckets.iter()
    }

    /// Folds in `sample`, constant from the last recorded time until `until`. Time never runs
    /// backwards: an `until` at or before the last sample records nothing.
    pub fn record(&mut self, params: &FairShareParams, until: f64, sample: UsageSample) {
        if !until.is_finite() || until <= self.last_sample {
            return;
        }
        let allocated = non_negative(sample.allocated);
        let utilized = non_negative(sample.utilized);
        let charged = match params.charge_basis {
            ChargeBasis::Allocated => allocated,
            ChargeBasis::Utilized => utilized
                .min(allocated)
                .max(params.utilization_floor * allocated),
        };
        let rates = [
            charged,
            non_negative(sample.entitled),
            utilized,
            non_negative(sample.capacity),
        ];
        let rate = params.decay_rate_per_s();
        // Buckets that end before the window starts are dropped below, so time before the
        // window's first bucket is skipped rather than walked: a ledger last sampled long ago
        // (a stale stored one, a clock jump) costs one window of buckets, not its whole gap.
        let window_first_bucket =
            ((until - params.window_s) / self.bucket_s).floor() * self.bucket_s;
        let mut t = self.last_sample.max(window_first_bucket);
        while t < until {
            let index = (t / self.bucket_s).floor();
            let bucket_start = index * self.bucket_s;
            let bucket_end = bucket_start + self.bucket_s;
            let segment_end = until.min(bucket_end);
            let weight = decayed_length(rate, bucket_end - segment_end, bucket_end - t);
            let bucket = self.bucket_at(bucket_start);
            bucket.charged += rates[0] * weight;
            bucket.entitled += rates[1] * weight;
            bucket.utilized += rates[2] * weight;
            bucket.capacity += rates[3] * weight;
            // Guard against a bucket edge that floating point cannot step past.
            t = if segment_end > t {
                segment_end
            } else {
                bucket_end
            };
        }
        self.last_sample = until;
        let oldest_kept_end = until - params.window_s;
        while self
            .buckets
            .front()
            .is_some_and(|b| b.start + self.bucket_s <= oldest_kept_end)
        {
            self.buckets.pop_front();
        }
    }

    fn bucket_at(&mut self, start: f64) -> &mut LedgerBucket {
        let needs_new = self.buckets.back().is_none_or(|last| last.start < start);
        if needs_new {
            self.buckets.push_back(LedgerBucket {
                start,
                ..LedgerBucket::default()
            });
        }
        let position = self
            .buckets
            .iter()
            .rposition(|b| b.start == start)
            .unwrap_or(self.buckets.len() - 1);
        &mut self.buckets[position]
    }

    /// Decayed totals at `now` over the window: (charged, entitled, utilized, capacity).
    pub fn decayed_totals(&self, params: &FairShareParams, now: f64) -> [f64; 4] {
        self.decayed(params, now, |b| {
            [b.charged, b.entitled, b.utilized, b.capacity]
        })
    }

    /// The decayed totals at `now` over the window of what `fields` reads from each bucket.
    /// Each total is summed on its own, newest bucket first, so asking for fewer of them
    /// changes none of the others by a bit.
    fn decayed<const N: usize>(
        &self,
        params: &FairShareParams,
        now: f64,
        fields: impl Fn(&LedgerBucket) -> [f64; N],
    ) -> [f64; N] {
        let rate = params.decay_rate_per_s();
        let window_start = now - params.window_s;
        let mut totals = [0.0; N];
        // Consecutive buckets are one bucket length apart, so each older bucket's factor is the
        // previous one times a constant step: one `exp` per call instead of one per bucket.
        let step = (-rate * self.bucket_s).exp();
        let mut previous: Option<(f64, f64)> = None;
        for bucket in self.buckets.iter().rev() {
            let end = bucket.start + self.bucket_s;
            if end <= window_start {
                break;
            }
            let factor = match previous {
                Some((previous_end, previous_factor))
                    if ((previous_end - end) - self.bucket_s).abs() <= 1e-9 * self.bucket_s =>
                {
                    previous_factor * step
                }
                // A bucket that ends after `now` (a leader whose clock is behind the one that
                // wrote it) counts in full: decaying it "backwards" would grow it without bound.
                _ => (-rate * (now - end).max(0.0)).exp(),
            };
            previous = Some((end, factor));
            for (total, value) in totals.iter_mut().zip(fields(bucket)) {
                *total += value * factor;
            }
        }
        totals
    }

    /// The queue's entitlement, GPU-equivalents, averaged over the last complete bucket before
    /// the last sample: a rate that moves with the hour rather than with every arrival.
    pub fn recent_entitled(&self) -> f64 {
        self.buckets
            .iter()
            .rev()
            .find(|b| b.start + self.bucket_s <= self.last_sample + 1e-9)
            .map_or(0.0, |b| b.entitled / self.bucket_s)
    }

    /// Fair share and usage share at `now`. Without any capacity history both are 0 (neutral).
    pub fn shares(&self, params: &FairShareParams, now: f64) -> LedgerShares {
        // Utilization is not asked: summing it on every cycle for every queue was a quarter of
        // the ledger's work for nothing.
        let [charged, entitled, capacity] =
            self.decayed(params, now, |b| [b.charged, b.entitled, b.capacity]);
        if capacity > 0.0 {
            LedgerShares {
                fair_share: entitled / capacity,
                usage_share: charged / capacity,
                decayed_capacity: capacity,
                recent_entitled: self.recent_entitled(),
            }
        } else {
            LedgerShares::NEUTRAL
        }
    }
}

/// One pod's use of GPUs over time, for charging a stretch no cycle watched (the time between a
/// leader's last status write and its successor's first cycle). It held `allocated`
/// GPU-equivalents, of which it used `utilized`, from `start` until `end`, or to the end of the
/// stretch while it still runs. An unknown start is `f64::NEG_INFINITY`: held all along.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSpan {
    pub start: f64,
    pub end: Option<f64>,
    pub allocated: f64,
    pub utilized: f64,
}

/// The stretch from `from` to `until` as samples to record in order: each `(t, sample)` holds
/// from the previous `t` (the first from `from`) until `t`, so
/// [`QueueLedger::record`] integrates it exactly. Allocation and use follow the spans: a pod
/// that finished in the stretch is charged up to its end, one that started in it from its
/// start. Entitlement and capacity are the given ones, as nothing recorded them meanwhile.
pub fn stretch_samples(
    from: f64,
    until: f64,
    spans: &[UsageSpan],
    entitled: f64,
    capacity: f64,
) -> Vec<(f64, UsageSample)> {
    // Also empty when either end is NaN.
    if until.partial_cmp(&from) != Some(Ordering::Greater) {
        return Vec::new();
    }
    let sample = |allocated: f64, utilized: f64| UsageSample {
        allocated,
        utilized,
        entitled,
        capacity,
    };
    // Each span's rates at `from`, and its changes inside the stretch.
    let (mut allocated, mut utilized) = (0.0, 0.0);
    let mut changes: Vec<(f64, f64, f64)> = Vec::new();
    for span in spans {
        // `max` and `min` drop a NaN end of the comparison: such a bound is the stretch's own.
        let start = span.start.max(from);
        let end = span.end.map_or(until, |end| end.min(until));
        let (a, u) = (non_negative(span.allocated), non_negative(span.utilized));
        if end.partial_cmp(&start) != Some(Ordering::Greater) || (a == 0.0 && u == 0.0) {
            continue;
        }
        if start <= from {
            allocated += a;
            utilized += u;
        } else {
            changes.push((start, a, u));
        }
        if end < until {
            changes.push((end, -a, -u));
        }
    }
    changes.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut samples = Vec::with_capacity(changes.len() + 1);
    let mut at = from;
    for (time, a, u) in changes {
        if time > at {
            samples.push((time, sample(allocated, utilized)));
            at = time;
        }
        allocated += a;
        utilized += u;
    }
    samples.push((until, sample(allocated, utilized)));
    samples
}

/// `∫ e^{-rate·s} ds` for `s` from `near` to `far` (ages relative to the bucket end), computed
/// with `exp_m1` so tiny rates and short segments keep full precision.
fn decayed_length(rate: f64, near: f64, far: f64) -> f64 {
    if rate == 0.0 {
        return far - near;
    }
    (-rate * near).exp() * -(-rate * (far - near)).exp_m1() / rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretch_charges_each_pod_for_its_own_part_of_it() {
        let spans = [
            // Held all along.
            UsageSpan {
                start: f64::NEG_INFINITY,
                end: None,
                allocated: 2.0,
                utilized: 1.0,
            },
            // Finished inside the stretch.
            UsageSpan {
                start: 50.0,
                end: Some(104.0),
                allocated: 4.0,
                utilized: 4.0,
            },
            // Started inside it.
            UsageSpan {
                start: 106.0,
                end: None,
                allocated: 1.0,
                utilized: 0.5,
            },
            // Finished before it: no part.
            UsageSpan {
                start: 10.0,
                end: Some(90.0),
                allocated: 8.0,
                utilized: 8.0,
            },
        ];
        let samples = stretch_samples(100.0, 110.0, &spans, 3.0, 16.0);
        let rates: Vec<(f64, f64, f64)> = samples
            .iter()
            .map(|(t, s)| (*t, s.allocated, s.utilized))
            .collect();
        assert_eq!(
            rates,
            [(104.0, 6.0, 5.0), (106.0, 2.0, 1.0), (110.0, 3.0, 1.5)]
        );
        assert!(
            samples
                .iter()
                .all(|(_, s)| s.entitled == 3.0 && s.capacity == 16.0)
        );
        // GPU-seconds: 2 × 10 + 4 × 4 + 1 × 4.
        let mut at = 100.0;
        let charged: f64 = samples
            .iter()
            .map(|(t, s)| {
                let part = s.allocated * (t - at);
                at = *t;
                part
            })
            .sum();
        assert_eq!(charged, 40.0);
    }

    #[test]
    fn an_empty_or_backward_stretch_records_nothing_to_invent() {
        assert!(stretch_samples(100.0, 100.0, &[], 1.0, 1.0).is_empty());
        assert!(stretch_samples(100.0, 90.0, &[], 1.0, 1.0).is_empty());
        let idle = stretch_samples(100.0, 110.0, &[], 1.0, 8.0);
        assert_eq!(idle.len(), 1);
        assert_eq!((idle[0].0, idle[0].1.allocated), (110.0, 0.0));
    }

    fn params() -> FairShareParams {
        FairShareParams::default()
    }

    fn busy(allocated: f64) -> UsageSample {
        UsageSample {
            allocated,
            utilized: allocated,
            entitled: allocated / 2.0,
            capacity: 100.0,
        }
    }

    #[test]
    fn constant_full_use_gives_share_one() {
        let p = params();
        let mut ledger = QueueLedger::new(0.0, &p);
        ledger.record(&p, 86400.0 * 10.0, busy(100.0));
        let shares = ledger.shares(&p, 86400.0 * 10.0);
        assert!((shares.usage_share - 1.0).abs() < 1e-12);
        assert!((shares.fair_share - 0.5).abs() < 1e-12);
        assert_eq!(ledger.buckets().count(), 168);
    }

    #[test]
    fn recent_usage_weighs_more_than_old_usage() {
        let p = params();
        let mut old = QueueLedger::new(0.0, &p);
        old.record(&p, 86400.0, busy(100.0));
        old.record(&p, 3.0 * 86400.0, busy(0.0));
        let mut recent = QueueLedger::new(0.0, &p);
        recent.record(&p, 2.0 * 86400.0, busy(0.0));
        recent.record(&p, 3.0 * 86400.0, busy(100.0));
        let now = 3.0 * 86400.0;
        // Same GPU-seconds, two days apart: the recent day counts 1/0.9² more.
        let ratio = recent.decayed_totals(&p, now)[0] / old.decayed_totals(&p, now)[0];
        assert!((ratio - 1.0 / 0.81).abs() < 1e-6, "{ratio}");
    }

    #[test]
    fn sampling_interval_does_not_change_the_result() {
        let p = params();
        let usage = |t: f64| ((t / 5400.0).floor() as i64 % 7) as f64 * 10.0;
        let horizon = 10.0 * 86400.0;
        let mut by_minute = QueueLedger::new(0.0, &p);
        let mut by_two_hours = QueueLedger::new(0.0, &p);
        let mut t = 0.0;
        while t < horizon {
            by_minute.record(&p, t + 60.0, busy(usage(t)));
            t += 60.0;
        }
        // Piecewise-constant over 90-minute steps: recording at each change point is exact even
        // when samples are two hours apart only if we record at change points, which is what
        // the controller does (a sample whenever allocation changes).
        let mut t = 0.0;
        while t < horizon {
            let next = (t + 7200.0).min(((t / 5400.0).floor() + 1.0) * 5400.0);
            by_two_hours.record(&p, next, busy(usage(t)));
            t = next;
        }
        let a = by_minute.decayed_totals(&p, horizon);
        let b = by_two_hours.decayed_totals(&p, horizon);
        for (x, y) in a.iter().zip(&b) {
            assert!(((x - y) / x).abs() < 1e-9, "{x} vs {y}");
        }
    }

    #[test]
    fn window_drops_old_buckets_whole() {
        let p = FairShareParams {
            decay: 1.0,
            ..params()
        };
        let mut ledger = QueueLedger::new(0.0, &p);
        ledger.record(&p, 3600.0, busy(100.0));
        ledger.record(&p, p.window_s, busy(0.0));
        assert!(ledger.decayed_totals(&p, p.window_s)[0] > 0.0);
        ledger.record(&p, p.window_s + 3600.0, busy(0.0));
        assert_eq!(ledger.decayed_totals(&p, p.window_s + 3600.0)[0], 0.0);
    }

    #[test]
    fn seeding_is_neutral_by_default_and_penalises_with_initial_usage() {
        let p = params();
        let fresh = QueueLedger::seeded(1000.0, &p, 100.0, 0.0);
        let shares = fresh.shares(&p, 1000.0);
        assert_eq!((shares.fair_share, shares.usage_share), (0.0, 0.0));
        let cautious = QueueLedger::seeded(1000.0, &p, 100.0, 0.5);
        let shares = cautious.shares(&p, 1000.0);
        assert!((shares.usage_share - 0.5).abs() < 1e-9);
    }

    #[test]
    fn time_never_runs_backwards_and_garbage_rates_are_ignored() {
        let p = params();
        let mut ledger = QueueLedger::new(100.0, &p);
        ledger.record(&p, 50.0, busy(100.0));
        assert_eq!(ledger.buckets().count(), 0);
        ledger.record(
            &p,
            200.0,
            UsageSample {
                allocated: f64::NAN,
                utilized: -1.0,
                entitled: f64::INFINITY,
                capacity: 10.0,
            },
        );
        let totals = ledger.decayed_totals(&p, 200.0);
        assert_eq!(&totals[..3], &[0.0, 0.0, 0.0]);
        assert!(totals[3] > 0.0);
    }

    #[test]
    fn utilized_basis_charges_at_least_the_floor() {
        let p = FairShareParams {
            charge_basis: ChargeBasis::Utilized,
            decay: 1.0,
            ..params()
        };
        let mut ledger = QueueLedger::new(0.0, &p);
        ledger.record(
            &p,
            3600.0,
            UsageSample {
                allocated: 8.0,
                utilized: 0.0,
                entitled: 8.0,
                capacity: 8.0,
            },
        );
        let shares = ledger.shares(&p, 3600.0);
        assert!((shares.usage_share - 0.25).abs() < 1e-12);
    }

    #[test]
    fn round_trips_through_parts_and_json() {
        let p = params();
        let mut ledger = QueueLedger::new(0.0, &p);
        ledger.record(&p, 5000.0, busy(10.0));
        let restored = QueueLedger::from_parts(
            ledger.bucket_s(),
            ledger.last_sample(),
            ledger.buckets().copied().collect(),
        )
        .unwrap();
        assert_eq!(restored, ledger);
        let json = serde_json::to_string(&ledger).unwrap();
        assert_eq!(serde_json::from_str::<QueueLedger>(&json).unwrap(), ledger);
        assert!(QueueLedger::from_parts(0.0, 0.0, vec![]).is_err());
        let bad = LedgerBucket {
            start: 0.0,
            charged: -1.0,
            ..LedgerBucket::default()
        };
        assert!(QueueLedger::from_parts(3600.0, 0.0, vec![bad]).is_err());
    }

    #[test]
    fn stored_ledgers_with_tiny_buckets_or_no_clock_are_refused() {
        assert_eq!(
            QueueLedger::from_parts(1e-6, 0.0, vec![]),
            Err(LedgerError::BadBucket(1e-6))
        );
        assert!(QueueLedger::from_parts(f64::NAN, 0.0, vec![]).is_err());
        assert!(matches!(
            QueueLedger::from_parts(3600.0, f64::NEG_INFINITY, vec![]),
            Err(LedgerError::BadLastSample(_))
        ));
        assert!(QueueLedger::from_parts(MIN_BUCKET_S, 0.0, vec![]).is_ok());
    }

    #[test]
    fn a_long_gap_costs_one_window_not_the_whole_gap() {
        let p = params();
        // A stored ledger last sampled at time 0, restored now: walking every hour since would
        // be hundreds of millions of buckets.
        let mut ledger = QueueLedger::from_parts(3600.0, 0.0, vec![]).unwrap();
        let now = 1e12;
        ledger.record(&p, now, busy(10.0));
        let kept = ledger.buckets().count() as f64;
        assert!(kept <= p.window_s / p.bucket_s + 1.0, "{kept} buckets");
        // The same as a ledger that started one window ago.
        let mut fresh = QueueLedger::from_parts(3600.0, now - 2.0 * p.window_s, vec![]).unwrap();
        fresh.record(&p, now, busy(10.0));
        assert_eq!(ledger.shares(&p, now), fresh.shares(&p, now));
    }

    #[test]
    fn buckets_after_the_last_sample_are_refused_and_future_ones_never_grow() {
        let bucket = |start| LedgerBucket {
            start,
            charged: 10.0,
            entitled: 9.0,
            utilized: 8.0,
            capacity: 200.0,
        };
        // Found by fuzzing: a stored bucket far in the future made every share NaN.
        assert!(matches!(
            QueueLedger::from_parts(3600.0, 1_699_999_000.0, vec![bucket(9_699_995_600.0)]),
            Err(LedgerError::AfterLastSample { .. })
        ));
        // A ledger written by a leader whose clock ran ahead of this one's.
        let p = params();
        let ahead = QueueLedger::from_parts(3600.0, 2e9, vec![bucket(1.9e9)]).unwrap();
        let totals = ahead.decayed_totals(&p, 1.9e9 - 100.0);
        assert_eq!(totals, [10.0, 9.0, 8.0, 200.0]);
        let shares = ahead.shares(&p, 1.7e9);
        assert!(shares.usage_share.is_finite() && shares.fair_share.is_finite());
    }
}
