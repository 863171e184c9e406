//! The `fairshare` block: the ledger, the effective weight and the holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::{SchemaError, duration_key, ranged};
use super::pools::PoolFairShareConfig;
use crate::duration::format_duration;
use crate::params::{
    ChargeBasis, DeficitNormalisation, FairShareParams, MAX_WINDOW_BUCKETS, MIN_BUCKET_S,
};

/// `chargeBasis`: what a queue's ledger is charged for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ChargeBasisConfig {
    #[default]
    Allocated,
    Utilized,
}

/// `deficit`: how δ in the effective weight is normalised.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum DeficitConfig {
    /// `(entitled − charged) / max(entitled, charged)` of the queue's own decayed history.
    #[default]
    Relative,
    /// `fairShare − actualUsage`, both shares of decayed capacity (Run:ai's form).
    Capacity,
}

/// The `fairshare` block. An absent key keeps its default, core's [`FairShareParams`] default.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
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
    /// `2h`: a hold for an S-GPU workload ends its drain by eviction, or is given up, once its
    /// held capacity has stood idle or been lent (to a more deserving queue's work, or to
    /// backfill with `holdBackfill`) for S × 2 GPU-hours. `0s` does so as soon as it leaves
    /// anything idle.
    pub hold_idle_limit: String,
    /// How far ahead of being earned a hold may begin, e.g. `30m`: a workload whose queue's
    /// time-aware share will cover it within that long, at the pace it grows now, is held for
    /// already, so that its nodes drain while the share grows. `0s` (the default) holds only
    /// once earned.
    pub hold_lead: String,
    /// Whether waiting work of any tier may run as preemptible backfill in the capacity a hold
    /// leaves idle, evicted once the held nodes have drained otherwise, if it keeps its queue
    /// within its entitlement and its time-aware share (`false`: only the backfill tier's, of
    /// queues without `minRunTime`, whatever their share).
    pub hold_backfill: bool,
    /// Time-aware sharing; `false` is stateless fair share everywhere a pool does not say
    /// otherwise.
    pub enabled: bool,
    /// Per node pool: the keys `enabled`, `k`, `window`, `decay`, `decayPeriod`, `minWeight`,
    /// `catchUpPeriod`, `holdIdleLimit`, `holdLead` and `holdBackfill` overridden there.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, PoolFairShareConfig>,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        let params = FairShareParams::default();
        Self {
            window: format_duration(params.window_s),
            decay: params.decay,
            decay_period: format_duration(params.decay_period_s),
            k: params.k,
            min_weight: params.min_weight,
            bucket: format_duration(params.bucket_s),
            charge_basis: match params.charge_basis {
                ChargeBasis::Allocated => ChargeBasisConfig::Allocated,
                ChargeBasis::Utilized => ChargeBasisConfig::Utilized,
            },
            utilization_floor: params.utilization_floor,
            deficit: match params.deficit {
                DeficitNormalisation::Relative => DeficitConfig::Relative,
                DeficitNormalisation::Capacity => DeficitConfig::Capacity,
            },
            catch_up_period: format_duration(params.catch_up_s),
            hold_idle_limit: format_duration(params.hold_idle_limit_s),
            hold_lead: format_duration(params.hold_lead_s),
            hold_backfill: params.hold_backfill,
            enabled: params.time_aware,
            pools: BTreeMap::new(),
        }
    }
}

impl FairShareConfig {
    /// The validated parameters in seconds and ratios (the pools' keys aside).
    pub fn to_params(&self) -> Result<FairShareParams, SchemaError> {
        let window_s = duration_key("fairshare.window", &self.window)?;
        if window_s <= 0.0 {
            return Err(SchemaError::out_of_range(
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
            return Err(SchemaError::out_of_range(
                "fairshare.bucket",
                &self.bucket,
                "a duration of at least 1m, no longer than fairshare.window and at least \
                 fairshare.window / 100000, e.g. 1h",
            ));
        }
        let decay_period_s = duration_key("fairshare.decayPeriod", &self.decay_period)?;
        if decay_period_s <= 0.0 {
            return Err(SchemaError::out_of_range(
                "fairshare.decayPeriod",
                &self.decay_period,
                "a duration > 0, e.g. 24h",
            ));
        }
        if !(self.decay.is_finite() && self.decay > 0.0 && self.decay <= 1.0) {
            return Err(SchemaError::out_of_range(
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
        let catch_up_s = non_negative_duration(
            "fairshare.catchUpPeriod",
            &self.catch_up_period,
            "a duration >= 0, e.g. 8h (0s switches catch-up off)",
        )?;
        let hold_idle_limit_s = non_negative_duration(
            "fairshare.holdIdleLimit",
            &self.hold_idle_limit,
            "a duration >= 0, e.g. 2h (0s gives a hold up as soon as it leaves a GPU idle)",
        )?;
        let hold_lead_s = non_negative_duration(
            "fairshare.holdLead",
            &self.hold_lead,
            "a duration >= 0, e.g. 30m (0s holds only for workloads already earned)",
        )?;
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
            hold_lead_s,
            hold_backfill: self.hold_backfill,
            time_aware: self.enabled,
        })
    }
}

/// A duration key that must be finite and at least zero; `expected` says the accepted forms.
fn non_negative_duration(
    key: &str,
    text: &str,
    expected: &'static str,
) -> Result<f64, SchemaError> {
    let seconds = duration_key(key, text)?;
    if seconds.is_finite() && seconds >= 0.0 {
        Ok(seconds)
    } else {
        Err(SchemaError::out_of_range(key, text, expected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> FairShareConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn refused(yaml: &str) -> SchemaError {
        parse(yaml).validate().unwrap_err()
    }

    #[test]
    fn an_empty_block_gives_core_s_defaults() {
        assert_eq!(parse("{}").to_params().unwrap(), FairShareParams::default());
        assert_eq!(
            FairShareConfig::default().to_params().unwrap(),
            FairShareParams::default()
        );
    }

    #[test]
    fn every_key_is_read_in_its_unit() {
        let config = parse(
            "{window: 72h, decay: 0.8, decayPeriod: 12h, k: 2, minWeight: 0.2, bucket: 30m, \
             chargeBasis: utilized, utilizationFloor: 0.5, deficit: capacity, \
             catchUpPeriod: 0, holdIdleLimit: 90m, holdLead: 10m, holdBackfill: true, \
             enabled: false}",
        );
        let params = config.to_params().unwrap();
        assert_eq!(
            params,
            FairShareParams {
                window_s: 72.0 * 3600.0,
                decay: 0.8,
                decay_period_s: 12.0 * 3600.0,
                k: 2.0,
                min_weight: 0.2,
                bucket_s: 1800.0,
                charge_basis: ChargeBasis::Utilized,
                utilization_floor: 0.5,
                deficit: DeficitNormalisation::Capacity,
                catch_up_s: 0.0,
                hold_idle_limit_s: 5400.0,
                hold_lead_s: 600.0,
                hold_backfill: true,
                time_aware: false,
            }
        );
    }

    #[test]
    fn unknown_keys_and_absent_values_are_refused_by_name() {
        let err = serde_yaml::from_str::<FairShareConfig>("{kvalue: 2}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kvalue") && err.contains("minWeight"), "{err}");
        let err = serde_yaml::from_str::<FairShareConfig>("{k: ~}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("k"), "{err}");
        let err = serde_yaml::from_str::<FairShareConfig>("{chargeBasis: requested}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("allocated") && err.contains("utilized"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_name_the_key_and_the_accepted_forms() {
        let cases = [
            ("{decay: 1.5}", "fairshare.decay", "(0, 1]"),
            ("{decay: 0}", "fairshare.decay", "(0, 1]"),
            ("{decay: .nan}", "fairshare.decay", "(0, 1]"),
            ("{k: -1}", "fairshare.k", ">= 0"),
            ("{k: .inf}", "fairshare.k", ">= 0"),
            ("{minWeight: 2}", "fairshare.minWeight", "[0, 1]"),
            ("{window: 1w}", "fairshare.window", "ms, s, m, h or d"),
            ("{window: 0s}", "fairshare.window", "> 0"),
            (
                "{window: 30m, bucket: 1h}",
                "fairshare.bucket",
                "at least 1m",
            ),
            ("{bucket: 30s}", "fairshare.bucket", "at least 1m"),
            ("{window: 20000h, bucket: 1m}", "fairshare.bucket", "100000"),
            ("{decayPeriod: 0s}", "fairshare.decayPeriod", "> 0"),
            ("{decayPeriod: 60}", "fairshare.decayPeriod", "bare 0"),
            (
                "{utilizationFloor: -0.1}",
                "fairshare.utilizationFloor",
                "[0, 1]",
            ),
            (
                "{catchUpPeriod: later}",
                "fairshare.catchUpPeriod",
                "e.g. 250ms",
            ),
            (
                "{holdIdleLimit: 2}",
                "fairshare.holdIdleLimit",
                "e.g. 250ms",
            ),
            ("{holdLead: soon}", "fairshare.holdLead", "e.g. 250ms"),
            ("{holdLead: 30}", "fairshare.holdLead", "bare 0"),
        ];
        for (yaml, key, forms) in cases {
            let err = refused(yaml);
            assert_eq!(err.key(), key, "{yaml}");
            let text = err.to_string();
            assert!(
                text.starts_with(key) && text.contains(forms),
                "{yaml}: {text}"
            );
        }
    }
}
