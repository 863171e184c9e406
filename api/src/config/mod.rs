//! gpufair's configuration file (one YAML document, usually from a ConfigMap).
//!
//! Every section has defaults, unknown keys are refused by name, and [`Config::validate`] names
//! the offending key and the accepted range, so a typo never silently becomes a default.

mod admission;
mod error;
mod right_sizing;

pub use admission::{
    AdmissionConfig, AffinityRuleConfig, PreferenceConfig, RequirementConfig, TierMappingConfig,
    TolerationConfig,
};
pub use error::ConfigError;
// `fairshare`, `preemption` and `releaseScore` are the blocks the simulator's scenarios take
// too: their schema, defaults, ranges and conversion live in core, once for both.
pub use gpufair_core::schema::{
    ChargeBasisConfig, DeficitConfig, FairShareConfig, PoolFairShareConfig, PreemptionConfig,
    ReleaseScoreConfig, SchemaError,
};
pub use right_sizing::{PoolSlicesConfig, RightSizingConfig, SliceConfig};

use serde::{Deserialize, Serialize};

/// The whole configuration file.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub fairshare: FairShareConfig,
    #[serde(default)]
    pub preemption: PreemptionConfig,
    #[serde(default)]
    pub admission: AdmissionConfig,
    #[serde(default)]
    pub release_score: ReleaseScoreConfig,
}

impl Config {
    /// Parses and validates YAML; `source` (a file name) is quoted in errors.
    pub fn from_yaml(text: &str, source: &str) -> Result<Self, ConfigError> {
        let config: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml::from_str(text).map_err(|err| ConfigError::Parse {
                source_name: source.to_string(),
                message: err.to_string(),
            })?
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks every value against its accepted range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.fairshare.validate()?;
        self.preemption.validate()?;
        self.admission.validate()?;
        self.release_score.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let config = Config::from_yaml("", "config.yaml").unwrap();
        let params = config.fairshare.to_params().unwrap();
        assert_eq!(params, gpufair_core::params::FairShareParams::default());
        assert_eq!(
            config.preemption.to_params().unwrap(),
            gpufair_core::params::PreemptionParams::default()
        );
    }

    #[test]
    fn the_documented_example_parses() {
        let yaml = "fairshare: {window: 168h, decay: 0.9, decayPeriod: 24h, k: 1.0, minWeight: 0.1, bucket: 1h, chargeBasis: utilized}\n";
        let config = Config::from_yaml(yaml, "config.yaml").unwrap();
        assert_eq!(config.fairshare.charge_basis, ChargeBasisConfig::Utilized);
    }

    #[test]
    fn the_documented_configuration_reference_parses() {
        let reference = include_str!("../../../docs/configuration.md");
        // The first YAML block is the whole file with its defaults and examples.
        let start = reference.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
        let block = &reference[start..start + reference[start..].find("```").expect("its end")];
        let config = Config::from_yaml(block, "docs/configuration.md").unwrap();
        let options = config.decide_options().unwrap();
        assert!(!options.fairshare_of("inference").time_aware);
        assert_eq!(options.fairshare_of("gpu-type=a100").k, 2.0);
        assert_eq!(
            options.score,
            gpufair_core::params::ReleaseScoreParams::default()
        );
    }

    #[test]
    fn unknown_keys_are_named_with_file_and_line() {
        let err = Config::from_yaml("fairshare:\n  kvalue: 2\n", "gpufair.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gpufair.yaml") && err.contains("kvalue") && err.contains("line 2"),
            "{err}"
        );
        let err = Config::from_yaml("fairness: {}\n", "gpufair.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("fairness"), "{err}");
    }

    #[test]
    fn out_of_range_values_name_key_and_range() {
        let cases = [
            ("fairshare: {decay: 1.5}", "fairshare.decay"),
            ("fairshare: {decay: 0}", "fairshare.decay"),
            ("fairshare: {k: -1}", "fairshare.k"),
            ("fairshare: {k: .nan}", "fairshare.k"),
            ("fairshare: {minWeight: 2}", "fairshare.minWeight"),
            ("fairshare: {window: 1w}", "fairshare.window"),
            ("fairshare: {window: 30m, bucket: 1h}", "fairshare.bucket"),
            // Tiny buckets would make the ledger walk millions of buckets every cycle.
            ("fairshare: {bucket: 1ms}", "fairshare.bucket"),
            ("fairshare: {bucket: 30s}", "fairshare.bucket"),
            (
                "fairshare: {window: 20000h, bucket: 1m}",
                "fairshare.bucket",
            ),
            ("fairshare: {decayPeriod: 0s}", "fairshare.decayPeriod"),
            (
                "fairshare: {utilizationFloor: -0.1}",
                "fairshare.utilizationFloor",
            ),
            ("fairshare: {holdIdleLimit: 2}", "fairshare.holdIdleLimit"),
            (
                "fairshare: {holdIdleLimit: soon}",
                "fairshare.holdIdleLimit",
            ),
            ("fairshare: {holdLead: later}", "fairshare.holdLead"),
            (
                "fairshare: {holdBackfill: sometimes}",
                "fairshare.holdBackfill",
            ),
            ("fairshare: {chargeBasis: requested}", "chargeBasis"),
            ("preemption: {cooldown: soon}", "preemption.cooldown"),
            (
                "preemption: {fairShareThreshold: 1.5}",
                "preemption.fairShareThreshold",
            ),
            ("preemption: {hysteresis: -1}", "preemption.hysteresis"),
            ("releaseScore: {urgency: -1}", "releaseScore.urgency"),
            ("releaseScore: {userTier: .nan}", "releaseScore.userTier"),
            ("releaseScore: {waited: 1e9}", "releaseScore.waited"),
            (
                "releaseScore: {deadlineScale: 0s}",
                "releaseScore.deadlineScale",
            ),
            ("releaseScore: {waitScale: soon}", "releaseScore.waitScale"),
        ];
        for (yaml, key) in cases {
            let err = Config::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_shared_block_s_error_reads_as_every_other_config_error() {
        let err = Config::from_yaml("fairshare: {decay: 1.5}", "c.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config key fairshare.decay = 1.5 is out of range: expected a factor in (0, 1], e.g. 0.9"
        );
        let err = Config::from_yaml("fairshare: {pools: {' a': {k: 1}}}", "c.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("config key fairshare.pools has a pool named \" a\": expected"),
            "{err}"
        );
    }

    #[test]
    fn a_pool_overrides_only_what_it_names() {
        let yaml = "fairshare:\n  k: 2\n  window: 72h\n  pools:\n    inference: {enabled: false}\n    gpu-type=a100: {k: 0.5, window: 24h, minWeight: 0.3}\n";
        let config = Config::from_yaml(yaml, "c.yaml").unwrap();
        let options = config.decide_options().unwrap();
        let inference = options.fairshare_of("inference");
        assert!(!inference.time_aware);
        assert_eq!((inference.k, inference.window_s), (2.0, 72.0 * 3600.0));
        let a100 = options.fairshare_of("gpu-type=a100");
        assert!(a100.time_aware);
        assert_eq!(
            (a100.k, a100.window_s, a100.min_weight),
            (0.5, 24.0 * 3600.0, 0.3)
        );
        assert_eq!(options.fairshare_of("default").k, 2.0);
    }

    #[test]
    fn bad_pool_values_name_the_pool_and_key() {
        let cases = [
            ("fairshare: {pools: {a: {k: -1}}}", "fairshare.pools.a.k"),
            (
                "fairshare: {pools: {a: {decay: 2}}}",
                "fairshare.pools.a.decay",
            ),
            (
                "fairshare: {pools: {a: {window: 30m}}}",
                "fairshare.pools.a.window",
            ),
            (
                "fairshare: {pools: {a: {catchUpPeriod: later}}}",
                "fairshare.pools.a.catchUpPeriod",
            ),
            (
                "fairshare: {pools: {a: {holdIdleLimit: soon}}}",
                "fairshare.pools.a.holdIdleLimit",
            ),
            (
                "fairshare: {pools: {a: {holdLead: 5}}}",
                "fairshare.pools.a.holdLead",
            ),
            (
                "fairshare: {pools: {a: {minWeight: 1.5}}}",
                "fairshare.pools.a.minWeight",
            ),
            (
                "fairshare: {pools: {a: {holdBackfill: 1}}}",
                "fairshare.pools.a.holdBackfill",
            ),
            ("fairshare: {pools: {a: {bucket: 1h}}}", "bucket"),
            ("fairshare: {pools: {'': {k: 1}}}", "fairshare.pools"),
        ];
        for (yaml, key) in cases {
            let err = Config::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
