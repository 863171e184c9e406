//! The device model: which kubelet resources the node's GPUs become.
//!
//! - a GPU with MIG off and not shared → one device of `nvidia.com/gpu`, ID = its UUID;
//! - a GPU with MIG on → one device per instance under `nvidia.com/mig-<profile>` (mixed
//!   strategy; `+` in the profile becomes `.`), ID = the MIG UUID. With MIG on and no instances
//!   (a reconfiguration, an empty layout) the GPU is offered as nothing: CUDA cannot use it whole;
//! - a GPU named in `sharing.gpus` → `replicas` devices of `nvidia.com/gpu.shared`, IDs
//!   `<uuid>::<n>`; it is then not offered whole.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gpufair_core::mig_profile::{MigProfile, MigProfileError};
use gpufair_core::units::{SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE};

use crate::backend::GpuInfo;
use crate::config::{Config, GpuSelector, Sharing};
/// Separates a GPU UUID from the replica number in shared slice IDs.
pub const REPLICA_SEPARATOR: &str = "::";
/// Kubelet's limit for both device IDs and the name part of a resource name.
const MAX_NAME_LEN: usize = 63;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("sharing.gpus[{position}]: {selector} matches no GPU on this node (GPUs: {known})")]
    UnknownSharedGpu {
        position: usize,
        selector: String,
        known: String,
    },
    #[error("sharing.gpus[{position}]: GPU {uuid} has MIG enabled; only whole GPUs can be shared")]
    SharedMigGpu { position: usize, uuid: String },
    #[error("MIG instance {uuid}: {source}")]
    BadProfile {
        uuid: String,
        source: MigProfileError,
    },
    #[error("device ID {0:?} is longer than kubelet's 63-character limit")]
    IdTooLong(String),
}

/// A MIG instance's place on its GPU: what health events and `/dev/nvidia-caps` are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigIds {
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Whole,
    Mig,
    /// Slice number `n` of a shared GPU.
    Replica(u32),
}

/// One device as kubelet sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginDevice {
    pub id: String,
    /// The UUID that goes into NVIDIA_VISIBLE_DEVICES: the GPU's, or the MIG instance's.
    pub physical: String,
    /// The GPU it lives on; health is tracked per GPU.
    pub gpu: String,
    pub gpu_index: u32,
    pub minor: u32,
    pub kind: DeviceKind,
    /// Set for MIG instances.
    pub mig: Option<MigIds>,
    pub numa_node: Option<i64>,
    pub memory_bytes: u64,
}

/// One resource name with its devices, served by one gRPC server.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub name: String,
    /// Socket file name inside the kubelet device plugin directory.
    pub socket: String,
    pub devices: Vec<PluginDevice>,
    /// Replicas per shared GPU (for `gpu.shared`), else 1.
    pub replicas: u32,
    index: HashMap<String, usize>,
}

impl Resource {
    fn new(name: String, devices: Vec<PluginDevice>, replicas: u32) -> Resource {
        let part = name.split_once('/').map_or(name.as_str(), |(_, part)| part);
        let socket = format!("gpufair-{part}.sock");
        let index = devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), i))
            .collect();
        Resource {
            name,
            socket,
            devices,
            replicas,
            index,
        }
    }

    /// Position of a device ID in `devices`, the order every answer is given in.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    pub fn device(&self, id: &str) -> Option<&PluginDevice> {
        self.position(id).map(|i| &self.devices[i])
    }
}

/// The node's GPUs and the resources made of them.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub gpus: Vec<GpuInfo>,
    pub resources: Vec<Arc<Resource>>,
}

impl Inventory {
    /// Which resource a kubelet device ID belongs to, by resource name.
    pub fn resource(&self, name: &str) -> Option<&Arc<Resource>> {
        self.resources.iter().find(|r| r.name == name)
    }
}

/// Resource name for a MIG profile (`1g.18gb+me` → `nvidia.com/mig-1g.18gb.me`), by core's
/// grammar, so that the controller values what is advertised here.
pub fn mig_resource_name(profile: &str) -> Result<String, MigProfileError> {
    MigProfile::parse(profile)?.resource_name()
}

/// The GPU or MIG UUID behind a kubelet device ID (`GPU-…::3` → `GPU-…`).
pub fn physical_of(id: &str) -> &str {
    id.split_once(REPLICA_SEPARATOR)
        .map_or(id, |(uuid, _)| uuid)
}

fn shared_gpus(gpus: &[GpuInfo], sharing: &Sharing) -> Result<Vec<String>, DeviceError> {
    let known = || {
        gpus.iter()
            .map(|g| format!("{}={}", g.index, g.uuid))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut chosen = Vec::new();
    for (position, selector) in sharing.gpus.iter().enumerate() {
        let found = gpus.iter().find(|g| match selector {
            GpuSelector::Index(i) => g.index == *i,
            GpuSelector::Uuid(u) => g.uuid == *u,
        });
        let Some(gpu) = found else {
            let selector = match selector {
                GpuSelector::Index(i) => format!("index {i}"),
                GpuSelector::Uuid(u) => u.clone(),
            };
            return Err(DeviceError::UnknownSharedGpu {
                position,
                selector,
                known: known(),
            });
        };
        if gpu.mig_enabled {
            return Err(DeviceError::SharedMigGpu {
                position,
                uuid: gpu.uuid.clone(),
            });
        }
        if !chosen.contains(&gpu.uuid) {
            chosen.push(gpu.uuid.clone());
        }
    }
    Ok(chosen)
}

/// Builds the resources from the inventory and the config. Only resources with devices exist.
pub fn build(gpus: Vec<GpuInfo>, config: &Config) -> Result<Inventory, DeviceError> {
    let shared = match &config.sharing {
        Some(sharing) => shared_gpus(&gpus, sharing)?,
        None => Vec::new(),
    };
    let replicas = config.sharing.as_ref().map_or(1, |s| s.replicas);
    let mut whole = Vec::new();
    let mut slices = Vec::new();
    let mut mig: BTreeMap<String, Vec<PluginDevice>> = BTreeMap::new();
    for gpu in &gpus {
        let device = |id: String, physical: &str, kind, mig, memory_bytes| PluginDevice {
            id,
            physical: physical.to_string(),
            gpu: gpu.uuid.clone(),
            gpu_index: gpu.index,
            minor: gpu.minor,
            kind,
            mig,
            numa_node: gpu.numa_node,
            memory_bytes,
        };
        if gpu.mig_enabled {
            if gpu.mig.is_empty() {
                tracing::warn!(gpu = %gpu.uuid, "MIG is enabled but no MIG devices are configured; the GPU is not offered");
            }
            for instance in &gpu.mig {
                let name = mig_resource_name(&instance.profile).map_err(|source| {
                    DeviceError::BadProfile {
                        uuid: instance.uuid.clone(),
                        source,
                    }
                })?;
                mig.entry(name).or_default().push(device(
                    instance.uuid.clone(),
                    &instance.uuid,
                    DeviceKind::Mig,
                    Some(MigIds {
                        gpu_instance: instance.gpu_instance,
                        compute_instance: instance.compute_instance,
                    }),
                    instance.memory_bytes,
                ));
            }
        } else if shared.contains(&gpu.uuid) {
            for n in 0..replicas {
                let id = format!("{}{REPLICA_SEPARATOR}{n}", gpu.uuid);
                slices.push(device(
                    id,
                    &gpu.uuid,
                    DeviceKind::Replica(n),
                    None,
                    gpu.memory_bytes / u64::from(replicas),
                ));
            }
        } else {
            whole.push(device(
                gpu.uuid.clone(),
                &gpu.uuid,
                DeviceKind::Whole,
                None,
                gpu.memory_bytes,
            ));
        }
    }
    let mut resources = Vec::new();
    if !whole.is_empty() {
        resources.push(Resource::new(WHOLE_GPU_RESOURCE.into(), whole, 1));
    }
    if !slices.is_empty() {
        resources.push(Resource::new(SHARED_GPU_RESOURCE.into(), slices, replicas));
    }
    for (name, devices) in mig {
        resources.push(Resource::new(name, devices, 1));
    }
    for resource in &resources {
        if let Some(long) = resource.devices.iter().find(|d| d.id.len() > MAX_NAME_LEN) {
            return Err(DeviceError::IdTooLong(long.id.clone()));
        }
    }
    Ok(Inventory {
        gpus,
        resources: resources.into_iter().map(Arc::new).collect(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backend::MigInfo;

    pub(crate) fn gpu(index: u32, mig: &[&str]) -> GpuInfo {
        GpuInfo {
            uuid: format!("GPU-{index:08}-0000-0000-0000-000000000000"),
            index,
            minor: index,
            model: "NVIDIA H200".into(),
            memory_bytes: 141 << 30,
            numa_node: Some(i64::from(index / 4)),
            mig_enabled: !mig.is_empty(),
            mig: mig
                .iter()
                .enumerate()
                .map(|(j, profile)| MigInfo {
                    uuid: format!("MIG-{index:04}{j:04}-0000-0000-0000-000000000000"),
                    profile: (*profile).into(),
                    memory_bytes: 18 << 30,
                    gpu_instance: j as u32 + 1,
                    compute_instance: 0,
                })
                .collect(),
        }
    }

    fn sharing(replicas: u32, gpus: Vec<GpuSelector>) -> Config {
        Config {
            sharing: Some(Sharing {
                replicas,
                gpus,
                fail_requests_greater_than_one: false,
                mps: None,
            }),
            ..Config::default()
        }
    }

    #[test]
    fn whole_mig_and_shared_resources() {
        let gpus = vec![
            gpu(0, &[]),
            gpu(1, &[]),
            gpu(2, &["1g.18gb", "1g.18gb", "3g.71gb"]),
            gpu(3, &["1g.18gb+me"]),
        ];
        let inventory = build(gpus, &sharing(3, vec![GpuSelector::Index(1)])).expect("builds");
        let names: Vec<_> = inventory
            .resources
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "nvidia.com/gpu",
                "nvidia.com/gpu.shared",
                "nvidia.com/mig-1g.18gb",
                "nvidia.com/mig-1g.18gb.me",
                "nvidia.com/mig-3g.71gb"
            ]
        );
        let whole = inventory.resource("nvidia.com/gpu").expect("whole");
        assert_eq!(whole.devices.len(), 1);
        assert_eq!(whole.socket, "gpufair-gpu.sock");
        let shared = inventory.resource("nvidia.com/gpu.shared").expect("shared");
        let ids: Vec<_> = shared.devices.iter().map(|d| d.id.clone()).collect();
        let uuid = &inventory.gpus[1].uuid;
        assert_eq!(
            ids,
            [
                format!("{uuid}::0"),
                format!("{uuid}::1"),
                format!("{uuid}::2")
            ]
        );
        assert!(
            shared
                .devices
                .iter()
                .all(|d| d.physical == *uuid && d.gpu == *uuid)
        );
        let mig = inventory.resource("nvidia.com/mig-1g.18gb").expect("mig");
        assert_eq!(mig.devices.len(), 2);
        assert!(
            mig.devices
                .iter()
                .all(|d| d.gpu == inventory.gpus[2].uuid && d.physical.starts_with("MIG-"))
        );
        assert_eq!(physical_of(&ids[2]), uuid);
        assert_eq!(physical_of("MIG-x"), "MIG-x");
    }

    #[test]
    fn a_mig_gpu_without_instances_is_offered_as_nothing() {
        let mut empty = gpu(1, &[]);
        empty.mig_enabled = true;
        let inventory = build(vec![gpu(0, &[]), empty], &Config::default()).expect("builds");
        let names: Vec<_> = inventory
            .resources
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["nvidia.com/gpu"]);
        let whole = inventory.resource("nvidia.com/gpu").expect("whole");
        assert_eq!(whole.devices.len(), 1);
        assert_eq!(whole.devices[0].gpu_index, 0);
        let mut empty = gpu(1, &[]);
        empty.mig_enabled = true;
        let err = build(
            vec![gpu(0, &[]), empty],
            &sharing(2, vec![GpuSelector::Index(1)]),
        )
        .expect_err("a MIG GPU cannot be shared");
        assert!(matches!(err, DeviceError::SharedMigGpu { .. }), "{err}");
    }

    #[test]
    fn sharing_errors_name_the_entry() {
        let gpus = || vec![gpu(0, &[]), gpu(1, &["1g.18gb"])];
        let err =
            build(gpus(), &sharing(2, vec![GpuSelector::Index(7)])).expect_err("unknown index");
        assert!(
            err.to_string()
                .starts_with("sharing.gpus[0]: index 7 matches no GPU"),
            "{err}"
        );
        let err = build(
            gpus(),
            &sharing(2, vec![GpuSelector::Index(0), GpuSelector::Index(1)]),
        )
        .expect_err("mig");
        assert!(err.to_string().starts_with("sharing.gpus[1]: GPU"), "{err}");
        let err = build(
            gpus(),
            &sharing(2, vec![GpuSelector::Uuid("GPU-zz".into())]),
        )
        .expect_err("uuid");
        assert!(err.to_string().contains("GPU-zz"), "{err}");
    }

    #[test]
    fn mig_resource_names_follow_nvidia() {
        assert_eq!(
            mig_resource_name("3g.40gb").as_deref(),
            Ok("nvidia.com/mig-3g.40gb")
        );
        assert_eq!(
            mig_resource_name("1c.3g.40gb+me").as_deref(),
            Ok("nvidia.com/mig-1c.3g.40gb.me")
        );
        assert!(mig_resource_name("bad/name").is_err());
        assert!(mig_resource_name(&"9".repeat(70)).is_err());
    }
}
