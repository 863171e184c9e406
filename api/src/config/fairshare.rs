use std::collections::BTreeMap;

use gpufair_core::params::{
    ChargeBasis, DeficitNormalisation, FairShareParams, MAX_WINDOW_BUCKETS, MIN_BUCKET_S,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ConfigError, duration_key, ranged};
use super::pools::PoolFairShareConfig;

/// `chargeBasis`: what a queue's ledger is charged for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ChargeBasisConfig {
    #[default]
    Allocated,
    Utilized,
}

/// `deficit`: how δ in the effective weight is normalised.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DeficitConfig {
    /// `(entitled − charged) / max(entitled, charged)` of the queue's own decayed history.
    #[default]
    Relative,
    /// `fairShare − actualUsage`, both shares of decayed capacity (Run:ai's form).
    Capacity,
}

/// The `fairshare` section.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FairShareConfig {
    /// History kept, e.g. `168h`.
    pub window: String,
    /// Factor old usage keeps per `decayPeriod`, in (0, 1]; 1 means no decay.
    pub decay: f64,
    pub decay_period: String,
    /// Correction strength K, >= 0; 0 is classic stateless fair share.
    pub k: f64,
    /// Floor of the effective weight as a fraction of the base weight, in [0, 1].
    pub min_weight: f64,
    /// Ledger bucket length; the window edge moves a bucket at a time.
    pub bucket: String,
    pub charge_basis: ChargeBasisConfig,
    /// With `chargeBasis: utilized`, the least fraction of the allocation charged, in [0, 1].
    pub utilization_floor: f64,
    /// How δ is normalised: `relative` (default) or `capacity`.
    pub deficit: DeficitConfig,
    /// How fast a queue may draw what it is owed when capacity is held for a large workload,
    /// e.g. `8h`; `0s` switches catch-up off.
    pub catch_up_period: String,
    /// How long a hold may leave its capacity idle, counted at the held workload's size, e.g.
    /// `2h`: a hold for an S-GPU workload is given up once its held capacity has stood idle
    /// (used neither by it nor by backfill) for S × 2 GPU-hours. `0s` gives a hold up as soon
    /// as it leaves anything idle.
    pub hold_idle_limit: String,
    /// Time-aware sharing; `false` is stateless fair share everywhere a pool does not say
    /// otherwise.
    pub enabled: bool,
    /// Per node pool (`default`, or a Queue's nodePool selector as kubectl prints it): the keys
    /// `enabled`, `k`, `window`, `decay`, `decayPeriod`, `minWeight`, `catchUpPeriod` and
    /// `holdIdleLimit` overridden there.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, PoolFairShareConfig>,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        Self {
            window: "168h".into(),
            decay: 0.9,
            decay_period: "24h".into(),
            k: 1.0,
            min_weight: 0.1,
            bucket: "1h".into(),
            charge_basis: ChargeBasisConfig::Allocated,
            utilization_floor: 0.25,
            deficit: DeficitConfig::Relative,
            catch_up_period: "8h".into(),
            hold_idle_limit: "2h".into(),
            enabled: true,
            pools: BTreeMap::new(),
        }
    }
}

impl FairShareConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.to_params()?;
        self.pool_params().map(|_| ())
    }

    /// The parameters of each pool named under `pools`, by pool name.
    pub fn pool_params(&self) -> Result<BTreeMap<String, FairShareParams>, ConfigError> {
        pool_params(self)
    }

    /// The validated parameters in seconds and ratios.
    pub fn to_params(&self) -> Result<FairShareParams, ConfigError> {
        let window_s = duration_key("fairshare.window", &self.window)?;
        if window_s <= 0.0 {
            return Err(ConfigError::out_of_range(
                "fairshare.window",
                &self.window,
                "a duration > 0, e.g. 168h",
            ));
        }
        let bucket_s = duration_key("fairshare.bucket", &self.bucket)?;
        if bucket_s < MIN_BUCKET_S
            || bucket_s > window_s
            || window_s / bucket_s > MAX_WINDOW_BUCKETS
        {
            return Err(ConfigError::out_of_range(
                "fairshare.bucket",
                &self.bucket,
                "a duration of at least 1m, no longer than fairshare.window and at least \
                 fairshare.window / 100000, e.g. 1h",
            ));
        }
        let decay_period_s = duration_key("fairshare.decayPeriod", &self.decay_period)?;
        if decay_period_s <= 0.0 {
            return Err(ConfigError::out_of_range(
                "fairshare.decayPeriod",
                &self.decay_period,
                "a duration > 0, e.g. 24h",
            ));
        }
        if !(self.decay.is_finite() && self.decay > 0.0 && self.decay <= 1.0) {
            return Err(ConfigError::out_of_range(
                "fairshare.decay",
                self.decay,
                "a factor in (0, 1], e.g. 0.9",
            ));
        }
        let k = ranged(
            "fairshare.k",
            self.k,
            0.0,
            f64::MAX,
            "a finite number >= 0, e.g. 1.0",
        )?;
        let min_weight = ranged(
            "fairshare.minWeight",
            self.min_weight,
            0.0,
            1.0,
            "a fraction of the base weight in [0, 1], e.g. 0.1",
        )?;
        let utilization_floor = ranged(
            "fairshare.utilizationFloor",
            self.utilization_floor,
            0.0,
            1.0,
            "a fraction in [0, 1], e.g. 0.25",
        )?;
        let catch_up_s = duration_key("fairshare.catchUpPeriod", &self.catch_up_period)?;
        if catch_up_s < 0.0 {
            return Err(ConfigError::out_of_range(
                "fairshare.catchUpPeriod",
                &self.catch_up_period,
                "a duration >= 0, e.g. 8h (0s switches catch-up off)",
            ));
        }
        let hold_idle_limit_s = duration_key("fairshare.holdIdleLimit", &self.hold_idle_limit)?;
        if !(hold_idle_limit_s.is_finite() && hold_idle_limit_s >= 0.0) {
            return Err(ConfigError::out_of_range(
                "fairshare.holdIdleLimit",
                &self.hold_idle_limit,
                "a duration >= 0, e.g. 2h (0s gives a hold up as soon as it leaves a GPU idle)",
            ));
        }
        Ok(FairShareParams {
            window_s,
            decay: self.decay,
            decay_period_s,
            k,
            min_weight,
            bucket_s,
            charge_basis: match self.charge_basis {
                ChargeBasisConfig::Allocated => ChargeBasis::Allocated,
                ChargeBasisConfig::Utilized => ChargeBasis::Utilized,
            },
            utilization_floor,
            deficit: match self.deficit {
                DeficitConfig::Relative => DeficitNormalisation::Relative,
                DeficitConfig::Capacity => DeficitNormalisation::Capacity,
            },
            catch_up_s,
            hold_idle_limit_s,
            time_aware: self.enabled,
        })
    }
}

const POOL_NAME_FORMS: &str = "`default` or a Queue's nodePool selector as kubectl prints it, \
                               e.g. gpu-type=a100 or gpu-type in (a100,h100)";

impl PoolFairShareConfig {
    /// The shared section with this pool's keys put in.
    fn over(&self, shared: &FairShareConfig) -> FairShareConfig {
        let mut merged = shared.clone();
        merged.pools.clear();
        if let Some(v) = self.enabled {
            merged.enabled = v;
        }
        if let Some(v) = self.k {
            merged.k = v;
        }
        if let Some(v) = &self.window {
            merged.window.clone_from(v);
        }
        if let Some(v) = self.decay {
            merged.decay = v;
        }
        if let Some(v) = &self.decay_period {
            merged.decay_period.clone_from(v);
        }
        if let Some(v) = self.min_weight {
            merged.min_weight = v;
        }
        if let Some(v) = &self.catch_up_period {
            merged.catch_up_period.clone_from(v);
        }
        if let Some(v) = &self.hold_idle_limit {
            merged.hold_idle_limit.clone_from(v);
        }
        merged
    }
}

/// Every pool's parameters, by pool name. `shared` must be valid already; errors name the key
/// under `fairshare.pools.<pool>`.
pub fn pool_params(
    shared: &FairShareConfig,
) -> Result<BTreeMap<String, FairShareParams>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, pool) in &shared.pools {
        if name.trim().is_empty() || name.trim() != name {
            return Err(ConfigError::BadPoolName {
                name: name.clone(),
                expected: POOL_NAME_FORMS,
            });
        }
        let merged = pool.over(shared);
        let params = merged.to_params().map_err(|err| match err {
            // The bucket is shared; it can only be out of range here because this pool's
            // window is shorter than it.
            ConfigError::OutOfRange {
                key: "fairshare.bucket",
                ..
            } => ConfigError::PoolOutOfRange {
                pool: name.clone(),
                key: "window",
                value: format!("{:?}", merged.window),
                expected: "a duration > 0 and no shorter than fairshare.bucket, e.g. 24h",
            },
            ConfigError::OutOfRange {
                key,
                value,
                expected,
            } => ConfigError::PoolOutOfRange {
                pool: name.clone(),
                key: key.strip_prefix("fairshare.").unwrap_or(key),
                value,
                expected,
            },
            other => other,
        })?;
        out.insert(name.clone(), params);
    }
    Ok(out)
}
