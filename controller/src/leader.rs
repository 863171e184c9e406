//! Leader election on a `coordination.k8s.io/v1` Lease, built on kube's primitives (get, create
//! and replace with the resourceVersion as precondition), the same protocol as client-go's.
//!
//! Timing (defaults): the lease lasts 10 s, the leader renews every 2 s and stops writing 7 s
//! after the start of its last successful renewal. Expiry is judged on the candidate's own
//! monotonic clock from when it last saw the lease record change, so clock skew between
//! replicas does not matter:
//! - a candidate that polls every 2 s sees the old leader's last renewal at most 2 s late and
//!   takes over at most `10 + 2 + 2 = 14 s` after it (≤ 15 s);
//! - the old leader's writes stop 7 s after its last renewal began, 3 s before anyone may take
//!   over, so two leaders never write at once;
//! - on SIGTERM the leader stops writing, then clears the holder so a successor need not wait.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// Lease timing and identity.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// Unique per replica (pod name plus process id).
    pub identity: String,
    pub lease_duration: Duration,
    /// How long after a renewal began the leader may still write.
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn new(name: String, namespace: String, identity: String) -> Self {
        Self {
            name,
            namespace,
            identity,
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(7),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A write was refused because this replica does not hold the lease (or may no longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the leader: writes are stopped")]
pub struct NotLeader;

/// Whether this replica may write now. Every write checks it first.
#[derive(Clone)]
pub struct Leadership {
    valid_until: Arc<Mutex<Option<Instant>>>,
    leading: watch::Sender<bool>,
}

impl Default for Leadership {
    fn default() -> Self {
        Self::new()
    }
}

impl Leadership {
    pub fn new() -> Self {
        Self {
            valid_until: Arc::new(Mutex::new(None)),
            leading: watch::channel(false).0,
        }
    }

    fn deadline(&self) -> Option<Instant> {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Ok` while the lease is held and its renewal deadline has not passed.
    pub fn check(&self) -> Result<(), NotLeader> {
        match self.deadline() {
            Some(until) if Instant::now() < until => Ok(()),
            _ => {
                self.revoke();
                Err(NotLeader)
            }
        }
    }

    pub fn is_leader(&self) -> bool {
        self.check().is_ok()
    }

    /// Holds leadership until `until` (a renewal extends it).
    pub fn extend(&self, until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
        self.leading
            .send_if_modified(|leading| !std::mem::replace(leading, true));
    }

    /// Stops writes at once.
    pub fn revoke(&self) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.leading
            .send_if_modified(|leading| std::mem::replace(leading, false));
    }

    /// Resolves once this replica leads.
    pub async fn leading(&self) {
        let mut rx = self.leading.subscribe();
        let _ = rx.wait_for(|l| *l).await;
    }

    /// Resolves once leadership is lost (or its deadline passes).
    pub async fn lost(&self) {
        let mut rx = self.leading.subscribe();
        loop {
            if !*rx.borrow_and_update() {
                return;
            }
            match self.deadline() {
                Some(until) => {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        _ = tokio::time::sleep_until(until) => {
                            if self.check().is_err() {
                                return;
                            }
                        }
                    }
                }
                None => return,
            }
        }
    }
}

/// What the candidate last saw of the lease, and when (on its own clock).
struct Observed {
    record: (Option<String>, Option<String>),
    at: Instant,
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

/// One attempt to acquire or renew. `Ok(true)`: we hold the lease now.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let Some(lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(seconds(config.lease_duration)),
                acquire_time: Some(now_micro()),
                renew_time: Some(now_micro()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(err),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let record = (
        holder.clone(),
        spec.renew_time.as_ref().map(|t| t.0.to_string()),
    );
    if observed.as_ref().is_none_or(|o| o.record != record) {
        *observed = Some(Observed {
            record,
            at: Instant::now(),
        });
    }
    let mine = holder.as_deref() == Some(config.identity.as_str());
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(config.lease_duration, Duration::from_secs);
    let expired = holder.is_none()
        || observed
            .as_ref()
            .is_some_and(|o| o.at + duration <= Instant::now());
    if !mine && !expired {
        return Ok(false);
    }
    let renewed = Lease {
        metadata: lease.metadata.clone(),
        spec: Some(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: Some(seconds(config.lease_duration)),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now_micro())
            },
            renew_time: Some(now_micro()),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + if mine { 0 } else { 1 }),
            ..spec
        }),
    };
    match api
        .replace(&config.name, &PostParams::default(), &renewed)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}

/// Gives the lease up if we hold it: the holder is cleared so the next candidate takes over on
/// its next poll.
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(lease) = api.get_opt(&config.name).await? else {
        return Ok(());
    };
    let spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    let released = Lease {
        metadata: lease.metadata.clone(),
        spec: Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now_micro()),
            ..spec
        }),
    };
    api.replace(&config.name, &PostParams::default(), &released)
        .await
        .map(|_| ())
}

/// Campaigns for and keeps the lease until `stop` resolves; then stops writes and gives the
/// lease up.
pub async fn run_elector(
    client: kube::Client,
    config: LeaseConfig,
    leadership: Leadership,
    stop: impl std::future::Future<Output = ()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed = None;
    tokio::pin!(stop);
    loop {
        let started = Instant::now();
        match try_acquire_or_renew(&api, &config, &mut observed).await {
            Ok(true) => {
                if !leadership.is_leader() {
                    tracing::info!(lease = %config.name, identity = %config.identity, "leading");
                }
                leadership.extend(started + config.renew_deadline);
            }
            Ok(false) => {
                if leadership.is_leader() {
                    tracing::warn!(lease = %config.name, "lease taken by another replica");
                }
                leadership.revoke();
            }
            Err(err) => {
                tracing::warn!(error = %err, lease = %config.name, "lease renewal failed");
                // Leadership stays only until its deadline; `check` enforces it.
                let _ = leadership.check();
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.retry_period) => {}
            _ = &mut stop => break,
        }
    }
    let was_leader = leadership.is_leader();
    leadership.revoke();
    if was_leader {
        match release(&api, &config).await {
            Ok(()) => tracing::info!(lease = %config.name, "lease released"),
            Err(err) => tracing::warn!(error = %err, "could not release the lease; it expires"),
        }
    }
}
