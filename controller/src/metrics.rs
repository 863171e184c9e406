//! The controller's Prometheus metrics, registered on the process's registry (the webhook's) so
//! one `/metrics` serves both.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::queue_figures::QueueFigures;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PreemptionLabels {
    /// The queue whose workload was evicted.
    pub victim_queue: String,
    /// The queue it made room for.
    pub preemptor_queue: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Builds each queue's wait histogram: 1 s .. ~4.5 days, waits are minutes to days.
pub type WaitHistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 19))
}

/// Every controller metric; cheap to clone (handles share their values).
#[derive(Clone)]
pub struct ControllerMetrics {
    pub usage_share: Family<QueueLabels, FloatGauge>,
    pub effective_weight: Family<QueueLabels, FloatGauge>,
    pub fair_share_gpus: Family<QueueLabels, FloatGauge>,
    pub allocated_gpus: Family<QueueLabels, FloatGauge>,
    pub pending_pods: Family<QueueLabels, Gauge>,
    pub release_latency: Histogram,
    pub preemptions: Family<PreemptionLabels, Counter>,
    pub cycle_seconds: Histogram,
    pub leader: Gauge,
    /// Per queue, time from a pod's creation to its release: the queue wait.
    pub queue_wait: WaitHistogramFamily,
    /// Per queue, how long its longest-waiting workload has waited so far (0 when none waits).
    /// The wait histogram sees a wait only once it ends; a starved queue's never does.
    pub oldest_wait: Family<QueueLabels, FloatGauge>,
    /// 1 while a queue's effective weight is at its floor.
    pub at_min_weight: Family<QueueLabels, Gauge>,
    /// From the cycle that decided a release to the gate's removal (rate limiting, API calls).
    pub release_apply: Histogram,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            usage_share: Family::default(),
            effective_weight: Family::default(),
            fair_share_gpus: Family::default(),
            allocated_gpus: Family::default(),
            pending_pods: Family::default(),
            // 10 ms .. ~5.8 h: a fitting pod should go in well under a second, a waiting one
            // may wait hours.
            release_latency: Histogram::new(exponential_buckets(0.01, 2.0, 21)),
            preemptions: Family::default(),
            // 1 ms .. ~16 s.
            cycle_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            leader: Gauge::default(),
            queue_wait: Family::new_with_constructor(wait_histogram),
            oldest_wait: Family::default(),
            at_min_weight: Family::default(),
            // 1 ms .. ~65 s.
            release_apply: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
        }
    }
}

impl ControllerMetrics {
    /// Registers under `registry`, whose prefix should be `gpufair`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "queue_usage_share",
            "Decayed charged GPU-seconds / decayed capacity over the window",
            self.usage_share.clone(),
        );
        registry.register(
            "queue_effective_weight",
            "History-corrected weight used to divide capacity",
            self.effective_weight.clone(),
        );
        registry.register(
            "queue_fair_share_gpus",
            "This cycle's fair share in GPU-equivalents",
            self.fair_share_gpus.clone(),
        );
        registry.register(
            "queue_allocated_gpus",
            "GPU-equivalents held by the queue's running and released pods",
            self.allocated_gpus.clone(),
        );
        registry.register(
            "queue_pending_pods",
            "Pods of the queue still gated",
            self.pending_pods.clone(),
        );
        registry.register(
            "gate_release_latency_seconds",
            "Time from a pod's creation to gpufair removing its gate",
            self.release_latency.clone(),
        );
        registry.register(
            "preemptions",
            "Workloads evicted to make room, by victim and preemptor queue",
            self.preemptions.clone(),
        );
        registry.register(
            "controller_cycle_seconds",
            "Time to step one cycle: build the snapshot, decide and plan its requests (not send them)",
            self.cycle_seconds.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the controller lease",
            self.leader.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Per queue, time from a pod's creation to gpufair removing its gate",
            self.queue_wait.clone(),
        );
        registry.register(
            "queue_oldest_wait_seconds",
            "Per queue, how long its longest-waiting gated workload has waited so far (0 when none waits)",
            self.oldest_wait.clone(),
        );
        registry.register(
            "queue_at_min_weight",
            "1 while the queue's effective weight is at its floor (minWeight x weight)",
            self.at_min_weight.clone(),
        );
        registry.register(
            "gate_release_apply_seconds",
            "Time from the cycle that decided a release to the gate's removal",
            self.release_apply.clone(),
        );
    }

    /// Drops per-queue series so deleted queues do not linger.
    /// Sets one queue's gauges to a cycle's figures.
    pub fn observe_queue(&self, figures: &QueueFigures) {
        let labels = QueueLabels {
            queue: figures.queue.clone(),
        };
        self.usage_share
            .get_or_create(&labels)
            .set(figures.usage_share);
        self.effective_weight
            .get_or_create(&labels)
            .set(figures.effective_weight);
        self.at_min_weight
            .get_or_create(&labels)
            .set(i64::from(figures.at_min_weight));
        self.fair_share_gpus
            .get_or_create(&labels)
            .set(figures.fair_share);
        self.allocated_gpus
            .get_or_create(&labels)
            .set(figures.allocated);
        self.pending_pods
            .get_or_create(&labels)
            .set(i64::try_from(figures.pending_pods).unwrap_or(i64::MAX));
        self.oldest_wait
            .get_or_create(&labels)
            .set(figures.oldest_wait_s);
    }

    pub fn clear_queues(&self) {
        self.usage_share.clear();
        self.effective_weight.clear();
        self.fair_share_gpus.clear();
        self.allocated_gpus.clear();
        self.pending_pods.clear();
        self.oldest_wait.clear();
        self.at_min_weight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_documented_ones() {
        let metrics = ControllerMetrics::default();
        let mut registry = Registry::with_prefix("gpufair");
        metrics.register(&mut registry);
        let q = QueueLabels { queue: "a".into() };
        metrics.usage_share.get_or_create(&q).set(0.5);
        metrics.pending_pods.get_or_create(&q).set(3);
        metrics
            .preemptions
            .get_or_create(&PreemptionLabels {
                victim_queue: "b".into(),
                preemptor_queue: "a".into(),
            })
            .inc();
        metrics.leader.set(1);
        metrics.queue_wait.get_or_create(&q).observe(5.0);
        metrics.at_min_weight.get_or_create(&q).set(1);
        metrics.oldest_wait.get_or_create(&q).set(90.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "gpufair_queue_usage_share{queue=\"a\"} 0.5",
            "gpufair_queue_pending_pods{queue=\"a\"} 3",
            "gpufair_preemptions_total{victim_queue=\"b\",preemptor_queue=\"a\"} 1",
            "gpufair_leader 1",
            "gpufair_gate_release_latency_seconds_bucket",
            "gpufair_controller_cycle_seconds_bucket",
            "gpufair_queue_wait_seconds_bucket{le=\"8.0\",queue=\"a\"} 1",
            "gpufair_queue_at_min_weight{queue=\"a\"} 1",
            "gpufair_queue_oldest_wait_seconds{queue=\"a\"} 90.0",
            "gpufair_gate_release_apply_seconds_bucket",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
