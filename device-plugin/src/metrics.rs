//! Prometheus metrics, served on `--metrics-listen` at `/metrics`.
//!
//! - `gpufair_gpu_utilization_ratio{device,resource,namespace,pod}`: SM utilization, 0..=1. The
//!   series with empty `namespace`/`pod` is the whole device; the others are each pod's share.
//! - `gpufair_gpu_memory_used_bytes{device,resource,namespace,pod}`: the same split for memory.
//! - `gpufair_device_healthy{device,resource}`: 1 when the device is Healthy.
//! - `gpufair_gpus_skipped`: GPUs left out at startup because the driver could not read them.
//! - `gpufair_utilization_charged_by_allocation{device}`: 1 for a MIG instance whose utilization
//!   cannot be measured (no GPM), so its pod is charged its allocation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::devices::Inventory;
use crate::health::HealthSnapshot;
use crate::usage::Report;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UsageLabels {
    pub device: String,
    pub resource: String,
    pub namespace: String,
    pub pod: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    pub device: String,
    pub resource: String,
}

pub struct Metrics {
    registry: Registry,
    utilization: Family<UsageLabels, Gauge<f64, AtomicU64>>,
    memory_used: Family<UsageLabels, Gauge>,
    healthy: Family<DeviceLabels, Gauge>,
    skipped: Gauge,
    charged_by_allocation: Family<UuidLabel, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UuidLabel {
    pub device: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let utilization = Family::<UsageLabels, Gauge<f64, AtomicU64>>::default();
        let memory_used = Family::<UsageLabels, Gauge>::default();
        let healthy = Family::<DeviceLabels, Gauge>::default();
        let skipped = Gauge::default();
        let charged_by_allocation = Family::<UuidLabel, Gauge>::default();
        registry.register(
            "gpufair_gpu_utilization_ratio",
            "SM utilization over the last interval (0-1), per device and per pod on it",
            utilization.clone(),
        );
        registry.register(
            "gpufair_gpu_memory_used_bytes",
            "GPU memory in use, per device and per pod on it",
            memory_used.clone(),
        );
        registry.register(
            "gpufair_device_healthy",
            "1 if the device is Healthy, 0 if Unhealthy",
            healthy.clone(),
        );
        registry.register(
            "gpufair_gpus_skipped",
            "GPUs not offered because the driver could not read them at startup",
            skipped.clone(),
        );
        registry.register(
            "gpufair_utilization_charged_by_allocation",
            "1 for a MIG instance whose utilization cannot be measured, so its pod is charged its allocation",
            charged_by_allocation.clone(),
        );
        Metrics {
            registry,
            utilization,
            memory_used,
            healthy,
            skipped,
            charged_by_allocation,
        }
    }

    /// How many GPUs were left out at startup.
    pub fn record_skipped(&self, count: usize) {
        self.skipped.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Marks the devices charged by allocation (see [`crate::usage`]).
    pub fn record_charged_by_allocation<'a>(&self, devices: impl Iterator<Item = &'a str>) {
        self.charged_by_allocation.clear();
        for device in devices {
            self.charged_by_allocation
                .get_or_create(&UuidLabel {
                    device: device.to_string(),
                })
                .set(1);
        }
    }

    /// Replaces every usage series with the report's, so pods that left disappear.
    pub fn record_report(&self, report: &Report) {
        self.utilization.clear();
        self.memory_used.clear();
        for device in &report.spec.devices {
            let labels = UsageLabels {
                device: device.uuid.clone(),
                resource: device.resource_name.clone(),
                namespace: String::new(),
                pod: String::new(),
            };
            if let Some(util) = device.utilization {
                self.utilization.get_or_create(&labels).set(util);
            }
            if let Some(used) = device.memory_used_bytes {
                self.memory_used
                    .get_or_create(&labels)
                    .set(i64::try_from(used).unwrap_or(i64::MAX));
            }
        }
        for usage in &report.per_device {
            let resource = report
                .spec
                .devices
                .iter()
                .find(|d| d.uuid == usage.device)
                .map(|d| d.resource_name.clone())
                .unwrap_or_default();
            let labels = UsageLabels {
                device: usage.device.clone(),
                resource,
                namespace: usage.namespace.clone(),
                pod: usage.pod.clone(),
            };
            self.utilization
                .get_or_create(&labels)
                .set(usage.sm_utilization);
            self.memory_used
                .get_or_create(&labels)
                .set(i64::try_from(usage.memory_bytes).unwrap_or(i64::MAX));
        }
    }

    /// Sets the health gauge of every advertised device.
    pub fn record_health(&self, inventory: &Inventory, health: &HealthSnapshot) {
        for resource in &inventory.resources {
            for device in &resource.devices {
                let labels = DeviceLabels {
                    device: device.id.clone(),
                    resource: resource.name.clone(),
                };
                self.healthy
                    .get_or_create(&labels)
                    .set(i64::from(health.is_device_healthy(device)));
            }
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(%err, "cannot encode metrics");
        }
        out
    }
}

/// Binds `addr` and serves `/metrics` until `stop`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(%bound, "serving metrics");
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(err) => {
                        tracing::warn!(%err, "metrics accept failed");
                        continue;
                    }
                },
            };
            let metrics = Arc::clone(&metrics);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let metrics = Arc::clone(&metrics);
                    async move {
                        if request.uri().path() == "/metrics" {
                            Response::builder()
                                .header(
                                    "content-type",
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )
                                .body(Full::new(Bytes::from(metrics.encode())))
                        } else {
                            Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::from_static(b"not found\n")))
                        }
                    }
                });
                if let Err(err) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%err, "metrics connection ended with an error");
                }
            });
        }
    });
    Ok(bound)
}
