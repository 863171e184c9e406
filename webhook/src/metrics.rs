//! Prometheus metrics of the webhook, served on `--metrics-listen`.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use gpufair_core::params::ReleaseScoreParams;

/// How one `/mutate` request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A GPU pod admitted with a patch.
    Patched,
    /// A GPU pod admitted without changes (already mutated: a reinvocation).
    Unchanged,
    /// A pod that requests no GPU, passed through.
    Unmanaged,
    /// Not a Pod CREATE, passed through.
    Ignored,
    Denied,
    /// Malformed body: HTTP 400.
    BadRequest,
    /// Body over the limit: HTTP 413.
    TooLarge,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Patched => "patched",
            Self::Unchanged => "unchanged",
            Self::Unmanaged => "unmanaged",
            Self::Ignored => "ignored",
            Self::Denied => "denied",
            Self::BadRequest => "bad_request",
            Self::TooLarge => "too_large",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: Outcome,
}

/// Result of reloading a file (config, certificate pair, queues file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReloadOutcome {
    Success,
    Error,
}

impl EncodeLabelValue for ReloadOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        let text = match self {
            Self::Success => "success",
            Self::Error => "error",
        };
        EncodeLabelValue::encode(&text, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReloadLabels {
    pub outcome: ReloadOutcome,
}

/// Where a client was too slow and its connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeoutPhase {
    /// The TLS handshake did not finish in time.
    Handshake,
    /// A request's headers did not arrive in time (also an idle HTTP/1.1 keep-alive connection).
    RequestHeaders,
    /// An HTTP/2 connection sent no request for a whole header read timeout.
    Idle,
}

impl EncodeLabelValue for TimeoutPhase {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        let text = match self {
            Self::Handshake => "handshake",
            Self::RequestHeaders => "request_headers",
            Self::Idle => "idle",
        };
        EncodeLabelValue::encode(&text, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TimeoutLabels {
    pub phase: TimeoutPhase,
}

/// One part of the release score, for its weight's gauge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ScorePartLabels {
    pub part: &'static str,
}

pub struct Metrics {
    pub registry: Registry,
    score_weights: Family<ScorePartLabels, Gauge<f64, AtomicU64>>,
    requests: Family<OutcomeLabels, Counter>,
    duration: Histogram,
    config_reloads: Family<ReloadLabels, Counter>,
    tls_reloads: Family<ReloadLabels, Counter>,
    queue_reloads: Family<ReloadLabels, Counter>,
    queues: Gauge,
    connections: Gauge,
    timeouts: Family<TimeoutLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        // One registry for the process: the webhook's metrics under `gpufair_webhook_`, the
        // controller's (registered by `serve`) directly under `gpufair_`.
        let mut registry = Registry::with_prefix("gpufair");
        // Policy, not admission: the weights the controller's release order uses now, as the
        // config file last loaded set them.
        let score_weights = Family::<ScorePartLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "release_score_weight",
            "Weight of each part of the release score inside a queue (urgency, user_tier, deadline, waited)",
            score_weights.clone(),
        );
        let webhook = registry.sub_registry_with_prefix("webhook");
        let requests = Family::<OutcomeLabels, Counter>::default();
        webhook.register(
            "admission_requests",
            "AdmissionReview requests by outcome",
            requests.clone(),
        );
        // 25 µs .. ~0.8 s: admission should take tens of microseconds, a slow one stands out.
        let duration = Histogram::new(exponential_buckets(25e-6, 2.0, 16));
        webhook.register(
            "admission_duration_seconds",
            "Time from the request body read to the response built",
            duration.clone(),
        );
        let config_reloads = Family::<ReloadLabels, Counter>::default();
        webhook.register(
            "config_reloads",
            "Config file loads after a change, by outcome (an error keeps the old config)",
            config_reloads.clone(),
        );
        let tls_reloads = Family::<ReloadLabels, Counter>::default();
        webhook.register(
            "tls_reloads",
            "Certificate and key reloads after a change, by outcome (an error keeps the old pair)",
            tls_reloads.clone(),
        );
        let queue_reloads = Family::<ReloadLabels, Counter>::default();
        webhook.register(
            "queue_reloads",
            "Queues file loads after a change, by outcome (an error keeps the old queues)",
            queue_reloads.clone(),
        );
        let queues = Gauge::default();
        webhook.register("queues", "Queues known to the webhook", queues.clone());
        let connections = Gauge::default();
        webhook.register(
            "open_connections",
            "TLS connections open on the admission port",
            connections.clone(),
        );
        let timeouts = Family::<TimeoutLabels, Counter>::default();
        webhook.register(
            "connection_timeouts",
            "Connections closed because the client was too slow, by phase",
            timeouts.clone(),
        );
        Self {
            registry,
            score_weights,
            requests,
            duration,
            config_reloads,
            tls_reloads,
            queue_reloads,
            queues,
            connections,
            timeouts,
        }
    }

    /// Counts a connection as open until the returned guard is dropped.
    pub fn connection_opened(&self) -> OpenConnection {
        self.connections.inc();
        OpenConnection(self.connections.clone())
    }

    pub fn connection_timeout(&self, phase: TimeoutPhase) {
        self.timeouts.get_or_create(&TimeoutLabels { phase }).inc();
    }

    pub fn request(&self, outcome: Outcome, seconds: f64) {
        self.requests
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.duration.observe(seconds);
    }

    pub fn config_reload(&self, outcome: ReloadOutcome) {
        self.config_reloads
            .get_or_create(&ReloadLabels { outcome })
            .inc();
    }

    pub fn tls_reload(&self, outcome: ReloadOutcome) {
        self.tls_reloads
            .get_or_create(&ReloadLabels { outcome })
            .inc();
    }

    pub fn queue_reload(&self, outcome: ReloadOutcome) {
        self.queue_reloads
            .get_or_create(&ReloadLabels { outcome })
            .inc();
    }

    /// Shows the release score's weights from the config just loaded.
    pub fn set_score_weights(&self, params: &ReleaseScoreParams) {
        for (part, weight) in [
            ("urgency", params.urgency),
            ("user_tier", params.user_tier),
            ("deadline", params.deadline),
            ("waited", params.waited),
        ] {
            self.score_weights
                .get_or_create(&ScorePartLabels { part })
                .set(weight);
        }
    }

    pub fn set_queue_count(&self, count: usize) {
        self.queues.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an error here would mean a broken metric name.
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %err, "could not encode metrics");
        }
        out
    }
}

/// One open connection in `gpufair_webhook_open_connections`; closing is dropping it.
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_by_outcome() {
        let metrics = Metrics::new();
        metrics.request(Outcome::Denied, 0.0001);
        metrics.tls_reload(ReloadOutcome::Error);
        let text = metrics.encode();
        assert!(
            text.contains("gpufair_webhook_admission_requests_total{outcome=\"denied\"} 1"),
            "{text}"
        );
        assert!(text.contains("gpufair_webhook_tls_reloads_total{outcome=\"error\"} 1"));
        assert!(text.contains("gpufair_webhook_admission_duration_seconds_bucket"));
    }

    #[test]
    fn exports_the_release_score_weights() {
        let metrics = Metrics::new();
        metrics.set_score_weights(&ReleaseScoreParams {
            urgency: 3.5,
            ..ReleaseScoreParams::default()
        });
        let text = metrics.encode();
        for line in [
            "gpufair_release_score_weight{part=\"urgency\"} 3.5",
            "gpufair_release_score_weight{part=\"user_tier\"} 1.0",
            "gpufair_release_score_weight{part=\"deadline\"} 4.0",
            "gpufair_release_score_weight{part=\"waited\"} 1.0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
