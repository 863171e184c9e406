//! Bodies of the fuzz targets that exercise this crate, behind a plain API so the same code runs
//! under libFuzzer (`fuzz/`, nightly) and in the stable replay of the kept corpus
//! (`tests/fuzz_corpus.rs`). Each body panics only when a promise is broken.

use std::collections::HashSet;

use crate::backend::GpuBackend;
use crate::backend::fake::FakeBackend;
use crate::config::Config;
use crate::devices::{Inventory, build};

/// The node a fuzzed config is applied to: whole GPUs, NVLink, and a MIG GPU, like
/// `examples/fake-gpus.yaml`.
const NODE: &str = "gpus:
  - { uuid: GPU-11111111-0000-0000-0000-000000000000, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, nvlinkPeers: [1] }
  - { uuid: GPU-22222222-0000-0000-0000-000000000000, model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, nvlinkPeers: [0] }
  - uuid: GPU-33333333-0000-0000-0000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    mig:
      - { uuid: MIG-33333333-0000-0000-0000-000000000001, profile: 3g.40gb }
      - { uuid: MIG-33333333-0000-0000-0000-000000000002, profile: 2g.20gb }
";

/// The device plugin's config file: parsed or refused; an accepted one applied to a node
/// either builds its resources or is refused with a reason.
pub fn device_plugin_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::parse(text) else {
        return;
    };
    let node = FakeBackend::parse(NODE).expect("the built-in node parses");
    let gpus = node.inventory().expect("the built-in node enumerates").gpus;
    if let Ok(inventory) = build(gpus, &config) {
        check_inventory(&inventory);
    }
}

/// The fake-GPU file: parsed or refused; an accepted node enumerates, answers every query
/// without panicking and builds resources with the default config and with sharing.
pub fn fake_gpus(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(backend) = FakeBackend::parse(text) else {
        return;
    };
    let Ok(enumeration) = backend.inventory() else {
        return;
    };
    let mut uuids = Vec::new();
    for gpu in &enumeration.gpus {
        uuids.push(gpu.uuid.clone());
        uuids.extend(gpu.mig.iter().map(|m| m.uuid.clone()));
        let _ = backend.probe(&gpu.uuid);
    }
    for uuid in &uuids {
        let _ = backend.device_usage(uuid);
        let _ = backend.processes(uuid);
    }
    for a in enumeration.gpus.iter().take(8) {
        for b in enumeration.gpus.iter().take(8) {
            let _ = backend.link_score(&a.uuid, &b.uuid);
        }
    }
    if let Ok(inventory) = build(enumeration.gpus.clone(), &Config::default()) {
        check_inventory(&inventory);
    }
    let sharing = Config::parse("sharing: { replicas: 2, gpus: [0] }\n").expect("a valid config");
    if let Ok(inventory) = build(enumeration.gpus, &sharing) {
        check_inventory(&inventory);
    }
}

/// Device IDs are what kubelet allocates by: they must be unique on the node.
fn check_inventory(inventory: &Inventory) {
    let mut ids = HashSet::new();
    for resource in &inventory.resources {
        assert!(
            !resource.devices.is_empty(),
            "{} has no devices",
            resource.name
        );
        for device in &resource.devices {
            assert!(
                ids.insert(device.id.clone()),
                "device ID {} appears twice",
                device.id
            );
            assert_eq!(resource.device(&device.id), Some(device));
        }
    }
}
