//! Allocate: what a container gets for the device IDs kubelet chose.
//!
//! Pure and deterministic: kubelet may call Allocate again for the same container (after a node
//! reboot, or when its checkpoint is gone), and the answer must be the same every time. The
//! answer lists devices in the resource's own order, not the request's.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::config::{AllocateOptions, Sharing};
use crate::devices::{DeviceKind, Resource};
use crate::proto::deviceplugin::{CdiDevice, ContainerAllocateResponse, DeviceSpec, Mount};

pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// Where the MPS pipe directory appears inside containers.
pub const MPS_PIPE_IN_CONTAINER: &str = "/tmp/nvidia-mps";
/// Driver control nodes a container needs besides its GPUs' own nodes.
const CONTROL_DEVICES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocateError {
    #[error("unknown device ID {id:?} for resource {resource}")]
    UnknownDevice { id: String, resource: String },
    #[error("no device IDs in the request for resource {0}")]
    Empty(String),
    #[error(
        "invalid request: maximum request size for shared resource {resource} is 1; found {found}"
    )]
    TooManySlices { resource: String, found: usize },
    #[error("MIG instance {uuid} needs its /dev/nvidia-caps nodes for deviceSpecs, but {message}")]
    MigCaps { uuid: String, message: String },
}

/// Everything Allocate needs besides the resource.
#[derive(Debug, Clone, Default)]
pub struct AllocatePolicy {
    pub options: AllocateOptions,
    pub sharing: Option<Sharing>,
    /// MIG UUID → its `/dev/nvidia-caps` nodes (see [`crate::mig_caps`]), or why they are
    /// missing. Read at startup when `deviceSpecs` is on.
    pub mig_caps: HashMap<String, Result<Vec<String>, String>>,
}

pub fn allocate_container(
    resource: &Resource,
    ids: &[String],
    policy: &AllocatePolicy,
) -> Result<ContainerAllocateResponse, AllocateError> {
    if ids.is_empty() {
        return Err(AllocateError::Empty(resource.name.clone()));
    }
    let mut positions = Vec::with_capacity(ids.len());
    for id in ids {
        let position = resource
            .position(id)
            .ok_or_else(|| AllocateError::UnknownDevice {
                id: id.clone(),
                resource: resource.name.clone(),
            })?;
        positions.push(position);
    }
    positions.sort_unstable();
    positions.dedup();
    let devices: Vec<_> = positions.iter().map(|&i| &resource.devices[i]).collect();
    let slices = devices
        .iter()
        .filter(|d| matches!(d.kind, DeviceKind::Replica(_)))
        .count();
    if slices > 1
        && policy
            .sharing
            .as_ref()
            .is_some_and(|s| s.fail_requests_greater_than_one)
    {
        return Err(AllocateError::TooManySlices {
            resource: resource.name.clone(),
            found: slices,
        });
    }

    // Replicas of one GPU collapse to one UUID; order follows the resource's device order.
    let mut physical: Vec<&str> = Vec::new();
    let mut slices_per_physical: HashMap<&str, u32> = HashMap::new();
    for device in &devices {
        if !physical.contains(&device.physical.as_str()) {
            physical.push(&device.physical);
        }
        *slices_per_physical.entry(&device.physical).or_default() += 1;
    }

    let mut response = ContainerAllocateResponse::default();
    let options = &policy.options;
    if options.visible_devices_env {
        response
            .envs
            .insert(VISIBLE_DEVICES_ENV.into(), physical.join(","));
    }
    if let Some(kind) = &options.cdi_kind {
        response.cdi_devices = physical
            .iter()
            .map(|uuid| CdiDevice {
                name: format!("{kind}={uuid}"),
            })
            .collect();
    }
    if options.device_specs {
        let mut caps = Vec::new();
        for device in devices.iter().filter(|d| d.mig.is_some()) {
            let nodes = match policy.mig_caps.get(&device.physical) {
                Some(Ok(nodes)) => nodes,
                Some(Err(why)) => {
                    return Err(AllocateError::MigCaps {
                        uuid: device.physical.clone(),
                        message: why.clone(),
                    });
                }
                None => {
                    return Err(AllocateError::MigCaps {
                        uuid: device.physical.clone(),
                        message: "they were not read at startup".into(),
                    });
                }
            };
            caps.extend(nodes.iter().cloned());
        }
        response.devices = device_specs(&options.dev_root, devices.iter().map(|d| d.minor), caps);
    }
    if slices > 0
        && let Some(sharing) = &policy.sharing
        && let Some(mps) = &sharing.mps
    {
        // MPS limits: each slice is 1/replicas of the GPU's threads and memory. The thread limit
        // is one number for the whole client, so the smallest holding across GPUs sets it.
        let replicas = resource.replicas.max(1);
        let min_held = slices_per_physical.values().copied().min().unwrap_or(1);
        let percentage = (100 * min_held / replicas).max(1);
        response.envs.insert(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(),
            percentage.to_string(),
        );
        let limits: Vec<String> = physical
            .iter()
            .enumerate()
            .map(|(ordinal, uuid)| {
                let held = u64::from(slices_per_physical.get(uuid).copied().unwrap_or(1));
                let memory = devices
                    .iter()
                    .find(|d| d.physical == *uuid)
                    .map_or(0, |d| d.memory_bytes);
                format!("{ordinal}={}M", memory * held / (1024 * 1024))
            })
            .collect();
        response
            .envs
            .insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), limits.join(","));
        response.envs.insert(
            "CUDA_MPS_PIPE_DIRECTORY".into(),
            MPS_PIPE_IN_CONTAINER.into(),
        );
        response.mounts.push(Mount {
            container_path: MPS_PIPE_IN_CONTAINER.into(),
            host_path: mps.pipe_directory.display().to_string(),
            read_only: false,
        });
    }
    Ok(response)
}

/// Device nodes for the given GPU minors and MIG capabilities, plus the driver's control nodes
/// that exist on the host.
fn device_specs(
    dev_root: &Path,
    minors: impl Iterator<Item = u32>,
    mig_caps: Vec<String>,
) -> Vec<DeviceSpec> {
    let mut paths: BTreeMap<String, ()> = BTreeMap::new();
    for control in CONTROL_DEVICES {
        if dev_root.join(control.trim_start_matches('/')).exists() {
            paths.insert(control.to_string(), ());
        }
    }
    for minor in minors {
        paths.insert(format!("/dev/nvidia{minor}"), ());
    }
    for cap in mig_caps {
        paths.insert(cap, ());
    }
    paths
        .into_keys()
        .map(|path| DeviceSpec {
            host_path: dev_root
                .join(path.trim_start_matches('/'))
                .display()
                .to_string(),
            container_path: path,
            permissions: "rw".into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, GpuSelector, MpsConfig};
    use crate::devices::{build, tests::gpu};

    fn shared_config(fail_gt_one: bool, mps: bool) -> Config {
        Config {
            sharing: Some(Sharing {
                replicas: 4,
                gpus: vec![GpuSelector::Index(1), GpuSelector::Index(2)],
                fail_requests_greater_than_one: fail_gt_one,
                mps: mps.then(|| MpsConfig {
                    pipe_directory: "/run/mps".into(),
                }),
            }),
            ..Config::default()
        }
    }

    fn policy(config: &Config) -> AllocatePolicy {
        AllocatePolicy {
            options: config.allocate.clone(),
            sharing: config.sharing.clone(),
            mig_caps: HashMap::new(),
        }
    }

    #[test]
    fn replicas_collapse_and_order_is_canonical() {
        let config = shared_config(false, false);
        let inv = build(vec![gpu(0, &[]), gpu(1, &[]), gpu(2, &[])], &config).expect("inventory");
        let shared = inv.resource("nvidia.com/gpu.shared").expect("shared");
        let (g1, g2) = (&inv.gpus[1].uuid, &inv.gpus[2].uuid);
        let ids = vec![format!("{g2}::0"), format!("{g1}::3"), format!("{g1}::1")];
        let first = allocate_container(shared, &ids, &policy(&config)).expect("allocates");
        assert_eq!(first.envs[VISIBLE_DEVICES_ENV], format!("{g1},{g2}"));
        let mut reversed = ids.clone();
        reversed.reverse();
        let again =
            allocate_container(shared, &reversed, &policy(&config)).expect("allocates again");
        assert_eq!(first, again);
        assert!(
            first.cdi_devices.is_empty() && first.devices.is_empty() && first.mounts.is_empty()
        );
    }

    #[test]
    fn unknown_ids_are_named() {
        let config = Config::default();
        let inv = build(vec![gpu(0, &[])], &config).expect("inventory");
        let whole = inv.resource("nvidia.com/gpu").expect("whole");
        let err = allocate_container(whole, &["GPU-bogus".into()], &policy(&config))
            .expect_err("unknown");
        assert_eq!(
            err,
            AllocateError::UnknownDevice {
                id: "GPU-bogus".into(),
                resource: "nvidia.com/gpu".into()
            }
        );
        assert!(err.to_string().contains("GPU-bogus"));
        assert!(matches!(
            allocate_container(whole, &[], &policy(&config)),
            Err(AllocateError::Empty(_))
        ));
    }

    #[test]
    fn more_than_one_slice_can_be_refused() {
        let config = shared_config(true, false);
        let inv = build(vec![gpu(0, &[]), gpu(1, &[]), gpu(2, &[])], &config).expect("inventory");
        let shared = inv.resource("nvidia.com/gpu.shared").expect("shared");
        let g1 = &inv.gpus[1].uuid;
        let err = allocate_container(
            shared,
            &[format!("{g1}::0"), format!("{g1}::1")],
            &policy(&config),
        )
        .expect_err("two");
        assert!(err.to_string().contains("maximum request size"), "{err}");
        assert!(allocate_container(shared, &[format!("{g1}::0")], &policy(&config)).is_ok());
    }

    #[test]
    fn mig_device_specs_include_both_capability_nodes() {
        let config = Config {
            allocate: AllocateOptions {
                device_specs: true,
                ..AllocateOptions::default()
            },
            ..Config::default()
        };
        let inv =
            build(vec![gpu(0, &[]), gpu(3, &["1g.18gb", "1g.18gb"])], &config).expect("inventory");
        let mig = inv.resource("nvidia.com/mig-1g.18gb").expect("mig");
        let (a, b) = (mig.devices[0].id.clone(), mig.devices[1].id.clone());
        let mut policy = policy(&config);
        policy.mig_caps.insert(
            a.clone(),
            Ok(vec![
                "/dev/nvidia-caps/nvidia-cap30".into(),
                "/dev/nvidia-caps/nvidia-cap31".into(),
            ]),
        );
        policy
            .mig_caps
            .insert(b.clone(), Err("gi2/access is missing".into()));
        let response = allocate_container(mig, &[a], &policy).expect("allocates");
        let paths: Vec<_> = response
            .devices
            .iter()
            .map(|d| d.container_path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "/dev/nvidia-caps/nvidia-cap30",
                "/dev/nvidia-caps/nvidia-cap31",
                "/dev/nvidia3"
            ]
        );
        let err = allocate_container(mig, &[b], &policy).expect_err("missing caps");
        assert!(err.to_string().contains("gi2/access is missing"), "{err}");
    }

    #[test]
    fn cdi_device_specs_and_mps() {
        let mut config = shared_config(false, true);
        let dev = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dev.path().join("dev")).expect("mkdir");
        std::fs::write(dev.path().join("dev/nvidiactl"), b"").expect("ctl");
        config.allocate = AllocateOptions {
            visible_devices_env: false,
            device_specs: true,
            dev_root: dev.path().to_path_buf(),
            cdi_kind: Some("nvidia.com/gpu".into()),
        };
        let inv = build(vec![gpu(0, &[]), gpu(1, &[]), gpu(2, &[])], &config).expect("inventory");
        let shared = inv.resource("nvidia.com/gpu.shared").expect("shared");
        let g1 = &inv.gpus[1].uuid;
        let response = allocate_container(
            shared,
            &[format!("{g1}::0"), format!("{g1}::2")],
            &policy(&config),
        )
        .expect("ok");
        assert!(!response.envs.contains_key(VISIBLE_DEVICES_ENV));
        assert_eq!(
            response.cdi_devices,
            vec![CdiDevice {
                name: format!("nvidia.com/gpu={g1}")
            }]
        );
        let paths: Vec<_> = response
            .devices
            .iter()
            .map(|d| d.container_path.as_str())
            .collect();
        assert_eq!(paths, ["/dev/nvidia1", "/dev/nvidiactl"]);
        assert!(
            response.devices[1]
                .host_path
                .starts_with(&*dev.path().to_string_lossy())
        );
        assert_eq!(response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
        let half_mib = (141u64 << 30) / 4 * 2 / (1024 * 1024);
        assert_eq!(
            response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
            format!("0={half_mib}M")
        );
        assert_eq!(response.mounts[0].host_path, "/run/mps");
    }
}
