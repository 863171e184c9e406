//! A scripted backend read from YAML, for tests, laptops and kind clusters:
//!
//! ```yaml
//! gpus:
//!   - uuid: GPU-11111111-0000-0000-0000-000000000000
//!     model: NVIDIA A100-SXM4-80GB
//!     memoryMiB: 81920
//!     nvlinkPeers: [1]                 # optional, indices of other GPUs
//!     numaNode: 0                      # optional
//!     mig:                             # optional: MIG on, with these instances
//!       - { uuid: MIG-22222222-0000-0000-0000-000000000000, profile: 3g.40gb }
//!     xids: [ { at: 5s, xid: 79 } ]    # optional: inject an XID this long after start
//!     utilization: 0.6                 # optional: reported SM utilization
//!     processes:                       # optional: processes on this GPU (or one of its MIGs)
//!       - { pid: 4242, memoryMiB: 1024, smUtilization: 0.5, device: MIG-2222… }
//! ```

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::{
    BackendError, DeviceUsage, GpuBackend, GpuInfo, HealthEvent, HealthEventKind, MigInfo,
    ProcessUsage, link_score,
};
use crate::duration::HumanDuration;

const MIB: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeFile {
    gpus: Vec<FakeGpu>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeGpu {
    uuid: String,
    model: String,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    #[serde(default)]
    nvlink_peers: Vec<u32>,
    #[serde(default)]
    numa_node: Option<i64>,
    #[serde(default)]
    mig: Vec<FakeMig>,
    #[serde(default)]
    xids: Vec<FakeXid>,
    #[serde(default)]
    utilization: Option<f64>,
    #[serde(default)]
    processes: Vec<FakeProcess>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeMig {
    uuid: String,
    profile: String,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeXid {
    at: HumanDuration,
    xid: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeProcess {
    pid: u32,
    #[serde(rename = "memoryMiB", default)]
    memory_mib: u64,
    #[serde(default)]
    sm_utilization: Option<f64>,
    #[serde(default)]
    device: Option<String>,
}

/// A fake device's process table entry, keyed by the device (GPU or MIG) UUID.
#[derive(Debug, Clone)]
struct Scripted {
    gpus: Vec<GpuInfo>,
    nvlinks: HashSet<(u32, u32)>,
    utilization: HashMap<String, f64>,
    processes: HashMap<String, Vec<ProcessUsage>>,
    xids: Vec<(Duration, String, u64)>,
}

pub struct FakeBackend {
    script: Scripted,
    /// Health subscribers, so tests and benchmarks can inject events at a moment they choose.
    subscribers: Mutex<Vec<UnboundedSender<HealthEvent>>>,
}

/// The memory of a MIG profile such as `3g.40gb` or `1g.18gb+me`: the number before `gb`.
fn profile_memory_bytes(profile: &str) -> Option<u64> {
    let gb = profile
        .split('.')
        .nth(1)?
        .split('+')
        .next()?
        .strip_suffix("gb")?;
    gb.parse::<u64>().ok().map(|gb| gb * 1024 * MIB)
}

fn valid_profile(profile: &str) -> bool {
    !profile.is_empty()
        && profile
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+')
        && profile_memory_bytes(profile).is_some()
}

impl FakeBackend {
    pub fn load(path: &Path) -> Result<FakeBackend, BackendError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            BackendError::FakeConfig(format!("cannot read {}: {err}", path.display()))
        })?;
        FakeBackend::parse(&text)
            .map_err(|err| BackendError::FakeConfig(format!("{}: {err}", path.display())))
    }

    /// Parses and validates a fake GPU document; the error names the offending key.
    pub fn parse(text: &str) -> Result<FakeBackend, String> {
        let file: FakeFile = crate::duration::from_yaml(text)?;
        let count = file.gpus.len() as u32;
        let mut seen = HashSet::new();
        let mut script = Scripted {
            gpus: Vec::new(),
            nvlinks: HashSet::new(),
            utilization: HashMap::new(),
            processes: HashMap::new(),
            xids: Vec::new(),
        };
        for (i, gpu) in file.gpus.into_iter().enumerate() {
            let key = format!("gpus[{i}]");
            if !gpu.uuid.starts_with("GPU-") || gpu.uuid.len() > 60 {
                return Err(format!(
                    "{key}.uuid: {:?} must be a GPU UUID (GPU-…, at most 60 characters)",
                    gpu.uuid
                ));
            }
            if !seen.insert(gpu.uuid.clone()) {
                return Err(format!("{key}.uuid: {} appears twice", gpu.uuid));
            }
            if gpu.memory_mib == 0 {
                return Err(format!("{key}.memoryMiB: must be positive"));
            }
            for peer in &gpu.nvlink_peers {
                if *peer >= count || *peer == i as u32 {
                    return Err(format!(
                        "{key}.nvlinkPeers: {peer} is not the index of another GPU (0..{count})"
                    ));
                }
                script.nvlinks.insert((i as u32, *peer));
                script.nvlinks.insert((*peer, i as u32));
            }
            if let Some(util) = gpu.utilization {
                if !(0.0..=1.0).contains(&util) {
                    return Err(format!("{key}.utilization: {util} is not between 0 and 1"));
                }
                script.utilization.insert(gpu.uuid.clone(), util);
            }
            let mut mig = Vec::new();
            for (j, m) in gpu.mig.into_iter().enumerate() {
                let mkey = format!("{key}.mig[{j}]");
                if !m.uuid.starts_with("MIG-") || m.uuid.len() > 60 {
                    return Err(format!(
                        "{mkey}.uuid: {:?} must be a MIG UUID (MIG-…, at most 60 characters)",
                        m.uuid
                    ));
                }
                if !seen.insert(m.uuid.clone()) {
                    return Err(format!("{mkey}.uuid: {} appears twice", m.uuid));
                }
                if !valid_profile(&m.profile) {
                    return Err(format!(
                        "{mkey}.profile: {:?} is not a MIG profile such as 1g.10gb or 3g.40gb",
                        m.profile
                    ));
                }
                let memory_bytes = match m.memory_mib {
                    Some(mib) => mib * MIB,
                    None => profile_memory_bytes(&m.profile).unwrap_or_default(),
                };
                mig.push(MigInfo {
                    uuid: m.uuid,
                    profile: m.profile,
                    memory_bytes,
                });
            }
            for x in gpu.xids {
                script.xids.push((x.at.0, gpu.uuid.clone(), x.xid));
            }
            for (j, p) in gpu.processes.into_iter().enumerate() {
                let device = p.device.unwrap_or_else(|| gpu.uuid.clone());
                if device != gpu.uuid && !mig.iter().any(|m| m.uuid == device) {
                    return Err(format!(
                        "{key}.processes[{j}].device: {device} is neither this GPU nor one of its MIG instances"
                    ));
                }
                if let Some(util) = p.sm_utilization
                    && !(0.0..=1.0).contains(&util)
                {
                    return Err(format!(
                        "{key}.processes[{j}].smUtilization: {util} is not between 0 and 1"
                    ));
                }
                script
                    .processes
                    .entry(device)
                    .or_default()
                    .push(ProcessUsage {
                        pid: p.pid,
                        memory_bytes: p.memory_mib * MIB,
                        sm_utilization: p.sm_utilization,
                    });
            }
            script.gpus.push(GpuInfo {
                uuid: gpu.uuid,
                index: i as u32,
                minor: i as u32,
                model: gpu.model,
                memory_bytes: gpu.memory_mib * MIB,
                numa_node: gpu.numa_node,
                mig,
            });
        }
        script.xids.sort_by_key(|(at, _, _)| *at);
        Ok(FakeBackend {
            script,
            subscribers: Mutex::new(Vec::new()),
        })
    }

    /// Sends an XID for `gpu_uuid` to every health watcher now.
    pub fn inject_xid(&self, gpu_uuid: &str, xid: u64) {
        let event = HealthEvent {
            gpu_uuid: Some(gpu_uuid.to_string()),
            kind: HealthEventKind::Xid(Some(xid)),
        };
        let mut subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        subscribers.retain(|tx| tx.send(event.clone()).is_ok());
    }

    fn index_of(&self, uuid: &str) -> Result<u32, BackendError> {
        self.script
            .gpus
            .iter()
            .find(|g| g.uuid == uuid)
            .map(|g| g.index)
            .ok_or_else(|| BackendError::UnknownDevice(uuid.to_string()))
    }

    fn knows(&self, uuid: &str) -> bool {
        self.script
            .gpus
            .iter()
            .any(|g| g.uuid == uuid || g.mig.iter().any(|m| m.uuid == uuid))
    }
}

impl GpuBackend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn inventory(&self) -> Result<Vec<GpuInfo>, BackendError> {
        Ok(self.script.gpus.clone())
    }

    fn device_usage(&self, uuid: &str) -> Result<DeviceUsage, BackendError> {
        if !self.knows(uuid) {
            return Err(BackendError::UnknownDevice(uuid.to_string()));
        }
        let memory_used = self
            .script
            .processes
            .get(uuid)
            .map(|ps| ps.iter().map(|p| p.memory_bytes).sum());
        Ok(DeviceUsage {
            utilization: self.script.utilization.get(uuid).copied(),
            memory_used_bytes: memory_used,
        })
    }

    fn processes(&self, uuid: &str) -> Result<Vec<ProcessUsage>, BackendError> {
        if !self.knows(uuid) {
            return Err(BackendError::UnknownDevice(uuid.to_string()));
        }
        Ok(self.script.processes.get(uuid).cloned().unwrap_or_default())
    }

    fn link_score(&self, a: &str, b: &str) -> Result<u32, BackendError> {
        let (a, b) = (self.index_of(a)?, self.index_of(b)?);
        let nvlink = if self.script.nvlinks.contains(&(a, b)) {
            link_score::PER_NVLINK
        } else {
            0
        };
        // Without a topology in the file, every pair sits behind one host bridge.
        Ok(link_score::HOST_BRIDGE + nvlink)
    }

    fn watch_health(
        &self,
        tx: UnboundedSender<HealthEvent>,
        stop: CancellationToken,
    ) -> Result<(), BackendError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| BackendError::NoRuntime)?;
        self.subscribers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(tx.clone());
        let xids = self.script.xids.clone();
        if xids.is_empty() {
            return Ok(());
        }
        let start = tokio::time::Instant::now();
        handle.spawn(async move {
            for (at, uuid, xid) in xids {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep_until(start + at) => {}
                }
                tracing::info!(gpu = %uuid, xid, "fake backend: injecting scripted XID");
                let event = HealthEvent {
                    gpu_uuid: Some(uuid),
                    kind: HealthEventKind::Xid(Some(xid)),
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUE_EXAMPLE: &str = "
gpus:
  - uuid: GPU-11111111-0000-0000-0000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    nvlinkPeers: [1]
    mig:
      - { uuid: MIG-22222222-0000-0000-0000-000000000000, profile: 3g.40gb }
    xids: [ { at: 5s, xid: 79 } ]
    utilization: 0.6
  - uuid: GPU-33333333-0000-0000-0000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
";

    #[test]
    fn reads_the_documented_format() {
        let fake = FakeBackend::parse(ISSUE_EXAMPLE).expect("example parses");
        let gpus = fake.inventory().expect("inventory");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].memory_bytes, 81920 * MIB);
        assert_eq!(gpus[0].mig[0].profile, "3g.40gb");
        assert_eq!(gpus[0].mig[0].memory_bytes, 40 * 1024 * MIB);
        assert_eq!(
            fake.script.xids,
            vec![(Duration::from_secs(5), gpus[0].uuid.clone(), 79)]
        );
        let usage = fake.device_usage(&gpus[0].uuid).expect("usage");
        assert_eq!(usage.utilization, Some(0.6));
        let linked = fake
            .link_score(&gpus[0].uuid, &gpus[1].uuid)
            .expect("score");
        assert_eq!(linked, link_score::HOST_BRIDGE + link_score::PER_NVLINK);
        assert!(fake.device_usage("GPU-nope").is_err());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("gpus: [{uuid: X, model: m, memoryMiB: 1}]", "gpus[0].uuid"),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, nvlinkPeers: [0]}]",
                "nvlinkPeers",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, utilization: 2}]",
                "utilization",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, mig: [{uuid: MIG-b, profile: big}]}]",
                "mig[0].profile",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, xids: [{at: later, xid: 1}]}]",
                "at",
            ),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1}, {uuid: GPU-a, model: m, memoryMiB: 1}]",
                "twice",
            ),
            ("gpus: [{uuid: GPU-a, model: m}]", "memoryMiB"),
            (
                "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, colour: red}]",
                "colour",
            ),
        ];
        for (text, needle) in cases {
            let err = FakeBackend::parse(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err:?}");
        }
    }

    #[tokio::test]
    async fn scripted_and_injected_xids_reach_the_watcher() {
        let fake = FakeBackend::parse(
            "gpus: [{uuid: GPU-a, model: m, memoryMiB: 1, xids: [{at: 10ms, xid: 48}]}]",
        )
        .expect("parses");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        fake.watch_health(tx, CancellationToken::new())
            .expect("watch");
        let first = rx.recv().await.expect("scripted event");
        assert_eq!(first.kind, HealthEventKind::Xid(Some(48)));
        fake.inject_xid("GPU-a", 94);
        let second = rx.recv().await.expect("injected event");
        assert_eq!(second.kind, HealthEventKind::Xid(Some(94)));
    }
}
