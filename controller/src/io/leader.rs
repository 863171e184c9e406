//! Leader election on a `coordination.k8s.io/v1` Lease, built on kube's primitives (get, create
//! and replace with the resourceVersion as precondition), the same protocol as client-go's.
//!
//! Timing (defaults; see [`LeaseTiming`]): the lease lasts 10 s, the leader renews every 2 s
//! (the retry period) and stops writing 7 s (the renew deadline) after the start of its last
//! successful renewal. Expiry is judged on the candidate's own monotonic clock from when it last
//! saw the lease record change, so clock skew between replicas does not matter:
//! - a candidate that polls every retry period sees the old leader's last renewal at most one
//!   period late and takes over at most `duration + 2 × retry` after it (`10 + 2 + 2 = 14 s` by
//!   default, ≤ 15 s);
//! - the old leader's writes stop `renew deadline` after its last renewal began, which
//!   [`LeaseTiming::new`] requires to be shorter than the duration, so they stop before anyone
//!   may take over (3 s before, by default) and two leaders never write at once. The Lease
//!   records the duration in whole seconds, rounded up, so a candidate never waits less than
//!   the configured duration;
//! - the retry period is shorter than the renew deadline, so a leader tries to renew at least
//!   once before its deadline and keeps the lease while the API server answers;
//! - on SIGTERM the leader stops writing, then clears the holder so a successor need not wait.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::kube_api::{KubeLeaseApi, LeaseApi};

/// Lease timing that keeps the safety argument above: `retry < renew deadline < duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a candidate waits, after it last saw the record change, before taking over.
    pub duration: Duration,
    /// How long after a renewal began the leader may still write.
    pub renew_deadline: Duration,
    /// How often every replica tries to acquire or renew.
    pub retry_period: Duration,
}

/// Lease timing that would let two leaders write at once, or a leader lose its lease while
/// the API server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTimingError {
    #[error("the retry period must be longer than zero (got {0:?})")]
    ZeroRetry(Duration),
    #[error(
        "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration \
         ({duration:?}): the leader must stop writing before another replica may take over"
    )]
    RenewNotBeforeExpiry {
        renew_deadline: Duration,
        duration: Duration,
    },
    #[error(
        "the retry period ({retry_period:?}) must be shorter than the renew deadline \
         ({renew_deadline:?}): the leader must try to renew before it has to stop writing"
    )]
    RetryNotBeforeDeadline {
        retry_period: Duration,
        renew_deadline: Duration,
    },
}

impl LeaseTiming {
    /// kube-controller-manager's defaults are 15 s / 10 s / 2 s; gpufair's are shorter so a
    /// killed leader is replaced within 15 s.
    pub const DEFAULT: LeaseTiming = LeaseTiming {
        duration: Duration::from_secs(10),
        renew_deadline: Duration::from_secs(7),
        retry_period: Duration::from_secs(2),
    };

    /// Checks `0 < retry period < renew deadline < duration`.
    pub fn new(
        duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, LeaseTimingError> {
        if retry_period.is_zero() {
            return Err(LeaseTimingError::ZeroRetry(retry_period));
        }
        if renew_deadline >= duration {
            return Err(LeaseTimingError::RenewNotBeforeExpiry {
                renew_deadline,
                duration,
            });
        }
        if retry_period >= renew_deadline {
            return Err(LeaseTimingError::RetryNotBeforeDeadline {
                retry_period,
                renew_deadline,
            });
        }
        Ok(Self {
            duration,
            renew_deadline,
            retry_period,
        })
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self::DEFAULT
    }
}

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
    /// A config with the default timing.
    pub fn new(name: String, namespace: String, identity: String) -> Self {
        Self::with_timing(name, namespace, identity, LeaseTiming::DEFAULT)
    }

    pub fn with_timing(
        name: String,
        namespace: String,
        identity: String,
        timing: LeaseTiming,
    ) -> Self {
        Self {
            name,
            namespace,
            identity,
            lease_duration: timing.duration,
            renew_deadline: timing.renew_deadline,
            retry_period: timing.retry_period,
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

/// The lease duration as the Lease records it: whole seconds, rounded *up*, so a candidate
/// reading the record never waits less than the holder's renew deadline allows (a 1.5 s lease
/// recorded as 1 s would let a candidate take over while a holder with a 1.2 s deadline still
/// writes).
fn seconds(d: Duration) -> i32 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(whole).unwrap_or(i32::MAX).max(1)
}

/// One attempt to acquire or renew. `Ok(true)`: we hold the lease now.
async fn try_acquire_or_renew(
    api: &impl LeaseApi,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let Some(lease) = api.lease(&config.name).await? else {
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
        return match api.create_lease(&lease).await {
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
    match api.replace_lease(&config.name, &renewed).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}

/// Gives the lease up if we hold it: the holder is cleared so the next candidate takes over on
/// its next poll.
async fn release(api: &impl LeaseApi, config: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(lease) = api.lease(&config.name).await? else {
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
    api.replace_lease(&config.name, &released).await
}

/// Campaigns for and keeps the lease until `stop` resolves; then stops writes and gives the
/// lease up.
pub async fn run_elector(
    client: kube::Client,
    config: LeaseConfig,
    leadership: Leadership,
    stop: impl std::future::Future<Output = ()>,
) {
    let api = KubeLeaseApi::new(client, &config.namespace);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn timing_must_stop_writes_before_takeover_and_renew_before_the_deadline() {
        assert_eq!(
            LeaseTiming::new(ms(10_000), ms(7_000), ms(2_000)),
            Ok(LeaseTiming::DEFAULT)
        );
        assert!(LeaseTiming::new(ms(1_000), ms(700), ms(200)).is_ok());
        assert_eq!(
            LeaseTiming::new(ms(5_000), ms(5_000), ms(2_000)),
            Err(LeaseTimingError::RenewNotBeforeExpiry {
                renew_deadline: ms(5_000),
                duration: ms(5_000)
            })
        );
        assert!(matches!(
            LeaseTiming::new(ms(5_000), ms(7_000), ms(2_000)),
            Err(LeaseTimingError::RenewNotBeforeExpiry { .. })
        ));
        assert_eq!(
            LeaseTiming::new(ms(10_000), ms(2_000), ms(2_000)),
            Err(LeaseTimingError::RetryNotBeforeDeadline {
                retry_period: ms(2_000),
                renew_deadline: ms(2_000)
            })
        );
        assert_eq!(
            LeaseTiming::new(ms(10_000), ms(7_000), ms(0)),
            Err(LeaseTimingError::ZeroRetry(ms(0)))
        );
    }

    #[test]
    fn recorded_duration_is_never_shorter_than_the_configured_one() {
        assert_eq!(seconds(ms(10_000)), 10);
        assert_eq!(seconds(ms(1_500)), 2);
        assert_eq!(seconds(ms(1_000)), 1);
        assert_eq!(seconds(ms(200)), 1);
        assert_eq!(seconds(Duration::from_secs(u64::MAX)), i32::MAX);
    }

    #[test]
    fn config_takes_the_timing() {
        let timing = LeaseTiming::new(ms(1_000), ms(700), ms(200)).unwrap();
        let config = LeaseConfig::with_timing("l".into(), "ns".into(), "me_1".into(), timing);
        assert_eq!(config.lease_duration, ms(1_000));
        assert_eq!(config.renew_deadline, ms(700));
        assert_eq!(config.retry_period, ms(200));
        let default = LeaseConfig::new("l".into(), "ns".into(), "me_1".into());
        assert_eq!(default.lease_duration, LeaseTiming::DEFAULT.duration);
    }
}
