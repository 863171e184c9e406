//! The plugin's configuration file (`--config`): sharing, health and what Allocate returns.
//!
//! ```yaml
//! healthRecovery: 5m                 # quiet period after the last XID; then transient XIDs clear
//!                                    # and the others clear if a probe of the GPU passes
//! ignoredXids: [13, 31, 43, 45, 68, 109]   # application XIDs that say nothing about the GPU
//! sharing:                           # time-sliced GPUs, chosen per GPU (not node-wide)
//!   replicas: 4
//!   gpus: [0, GPU-11111111-0000-0000-0000-000000000000]   # indices or UUIDs
//!   failRequestsGreaterThanOne: false
//!   mps: { pipeDirectory: /run/nvidia/mps }               # optional MPS limits
//! allocate:
//!   visibleDevicesEnv: true          # NVIDIA_VISIBLE_DEVICES=<uuids>
//!   deviceSpecs: false               # also pass /dev/nvidia* device nodes
//!   devRoot: /                       # where the host's /dev is, for deviceSpecs
//!   cdiKind: nvidia.com/gpu          # optional: also return CDI devices <kind>=<uuid>
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::duration::HumanDuration;

/// XIDs caused by applications rather than the GPU (NVIDIA's plugin ignores the same set).
pub const DEFAULT_IGNORED_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];
pub const DEFAULT_HEALTH_RECOVERY: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// serde_yaml's message names the key path and, for unknown keys, the accepted ones.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config: {key}: {message}")]
    Invalid { key: String, message: String },
}

/// A GPU chosen by its NVML index or its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum GpuSelector {
    Index(u32),
    Uuid(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MpsConfig {
    /// Host directory of the MPS control daemon's pipes, mounted into containers.
    pub pipe_directory: PathBuf,
}

/// Most slices of one shared GPU. Every slice is a device that kubelet tracks and that each
/// ListAndWatch update lists, so a typo of a few extra digits must not become millions of them.
pub const MAX_REPLICAS: u32 = 1024;
/// Most slices of one GPU under MPS: the MPS server takes at most 48 client contexts per GPU
/// (Volta and later), and each slice's thread limit is a whole percentage.
pub const MAX_MPS_REPLICAS: u32 = 48;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sharing {
    /// Slices per shared GPU: 2 to [`MAX_REPLICAS`], or to [`MAX_MPS_REPLICAS`] with `mps`.
    pub replicas: u32,
    /// Which GPUs are shared. A shared GPU is offered only as slices.
    pub gpus: Vec<GpuSelector>,
    /// Reject a container asking for more than one slice (it would gain nothing on one GPU).
    #[serde(default)]
    pub fail_requests_greater_than_one: bool,
    /// When set, slices get MPS limits (thread percentage and pinned memory per slice).
    #[serde(default)]
    pub mps: Option<MpsConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AllocateOptions {
    pub visible_devices_env: bool,
    pub device_specs: bool,
    pub dev_root: PathBuf,
    pub cdi_kind: Option<String>,
}

impl Default for AllocateOptions {
    fn default() -> Self {
        AllocateOptions {
            visible_devices_env: true,
            device_specs: false,
            dev_root: PathBuf::from("/"),
            cdi_kind: None,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    health_recovery: Option<HumanDuration>,
    ignored_xids: Option<Vec<u64>>,
    sharing: Option<Sharing>,
    #[serde(default)]
    allocate: AllocateOptions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub health_recovery: Duration,
    pub ignored_xids: BTreeSet<u64>,
    pub sharing: Option<Sharing>,
    pub allocate: AllocateOptions,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            health_recovery: DEFAULT_HEALTH_RECOVERY,
            ignored_xids: DEFAULT_IGNORED_XIDS.into_iter().collect(),
            sharing: None,
            allocate: AllocateOptions::default(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text).map_err(|err| match err {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates a config document. An empty document is the default config.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            crate::duration::from_yaml(text).map_err(|message| ConfigError::Parse {
                path: PathBuf::from("<config>"),
                message,
            })?
        };
        if let Some(sharing) = &raw.sharing {
            if sharing.replicas < 2 {
                return Err(ConfigError::Invalid {
                    key: "sharing.replicas".into(),
                    message: format!(
                        "must be at least 2 (a GPU shared by one is a whole GPU), got {}",
                        sharing.replicas
                    ),
                });
            }
            let (most, why) = if sharing.mps.is_some() {
                (MAX_MPS_REPLICAS, "MPS serves at most 48 clients per GPU")
            } else {
                (MAX_REPLICAS, "each slice is a device kubelet tracks")
            };
            if sharing.replicas > most {
                return Err(ConfigError::Invalid {
                    key: "sharing.replicas".into(),
                    message: format!("must be at most {most} ({why}), got {}", sharing.replicas),
                });
            }
            if sharing.gpus.is_empty() {
                return Err(ConfigError::Invalid {
                    key: "sharing.gpus".into(),
                    message: "must list at least one GPU, as an index (0) or a UUID (GPU-…)".into(),
                });
            }
            for (i, gpu) in sharing.gpus.iter().enumerate() {
                if let GpuSelector::Uuid(uuid) = gpu
                    && !uuid.starts_with("GPU-")
                {
                    return Err(ConfigError::Invalid {
                        key: format!("sharing.gpus[{i}]"),
                        message: format!(
                            "{uuid:?} is neither an index (0, 1, …) nor a GPU UUID (GPU-…)"
                        ),
                    });
                }
            }
        }
        if let Some(kind) = &raw.allocate.cdi_kind {
            let valid = kind
                .split_once('/')
                .is_some_and(|(vendor, class)| !vendor.is_empty() && !class.is_empty())
                && !kind.contains('=');
            if !valid {
                return Err(ConfigError::Invalid {
                    key: "allocate.cdiKind".into(),
                    message: format!("{kind:?} is not a CDI kind of the form vendor.com/class"),
                });
            }
        }
        Ok(Config {
            health_recovery: raw.health_recovery.map_or(DEFAULT_HEALTH_RECOVERY, |d| d.0),
            ignored_xids: raw
                .ignored_xids
                .map(|xids| xids.into_iter().collect())
                .unwrap_or_else(|| DEFAULT_IGNORED_XIDS.into_iter().collect()),
            sharing: raw.sharing,
            allocate: raw.allocate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document_is_the_default() {
        let config = Config::parse("").expect("empty config");
        assert_eq!(config, Config::default());
        assert_eq!(config.health_recovery, Duration::from_secs(300));
        assert!(config.ignored_xids.contains(&13) && config.ignored_xids.contains(&109));
        assert!(!config.ignored_xids.contains(&79));
    }

    #[test]
    fn parses_every_key() {
        let config = Config::parse(
            "healthRecovery: 2s\nignoredXids: [13]\nsharing:\n  replicas: 4\n  gpus: [1, GPU-aaaa]\n  failRequestsGreaterThanOne: true\n  mps: { pipeDirectory: /run/mps }\nallocate:\n  deviceSpecs: true\n  cdiKind: nvidia.com/gpu\n",
        )
        .expect("valid config");
        assert_eq!(config.health_recovery, Duration::from_secs(2));
        assert_eq!(config.ignored_xids, BTreeSet::from([13]));
        let sharing = config.sharing.expect("sharing");
        assert_eq!(sharing.replicas, 4);
        assert_eq!(
            sharing.gpus,
            vec![GpuSelector::Index(1), GpuSelector::Uuid("GPU-aaaa".into())]
        );
        assert!(sharing.fail_requests_greater_than_one);
        assert_eq!(
            sharing.mps.expect("mps").pipe_directory,
            PathBuf::from("/run/mps")
        );
        assert!(config.allocate.device_specs && config.allocate.visible_devices_env);
        assert_eq!(config.allocate.cdi_kind.as_deref(), Some("nvidia.com/gpu"));
    }

    #[test]
    fn errors_name_the_key_and_accepted_forms() {
        let cases = [
            ("healthRecovery: soon\n", "healthRecovery", "10m"),
            (
                "sharing: { replicas: 1, gpus: [0] }\n",
                "sharing.replicas",
                "at least 2",
            ),
            (
                "sharing: { replicas: 3886922, gpus: [1] }\n",
                "sharing.replicas",
                "at most 1024",
            ),
            (
                "sharing: { replicas: 49, gpus: [1], mps: { pipeDirectory: /run/mps } }\n",
                "sharing.replicas",
                "at most 48",
            ),
            (
                "sharing: { replicas: 2, gpus: [] }\n",
                "sharing.gpus",
                "index",
            ),
            (
                "sharing: { replicas: 2, gpus: [banana] }\n",
                "sharing.gpus[0]",
                "GPU-",
            ),
            (
                "sharing: { replicas: two, gpus: [0] }\n",
                "sharing.replicas",
                "invalid",
            ),
            (
                "allocate: { cdiKind: nope }\n",
                "allocate.cdiKind",
                "vendor.com/class",
            ),
            ("healthRecover: 5m\n", "healthRecover", "healthRecovery"),
            ("[1, 2]\n", "invalid config", "struct"),
        ];
        for (text, key, hint) in cases {
            let err = Config::parse(text).expect_err(text).to_string();
            assert!(
                err.contains(key) && err.contains(hint),
                "{text:?} gave {err:?}"
            );
        }
    }
}
