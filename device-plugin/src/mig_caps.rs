//! The `/dev/nvidia-caps` nodes a MIG instance's container needs besides its GPU's
//! `/dev/nvidia<minor>`: one granting access to its GPU instance and one to its compute instance.
//!
//! The driver publishes each capability under
//! `<proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<g>/access` and
//! `…/gi<g>/ci<c>/access`; the file's `DeviceFileMinor: N` line names the device node
//! `/dev/nvidia-caps/nvidia-cap<N>`. They are read once at startup, as NVIDIA's plugin does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::backend::GpuInfo;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MigCapsError {
    #[error("cannot read the MIG capability {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("the MIG capability {path} has no \"DeviceFileMinor: <number>\" line")]
    NoMinor { path: PathBuf },
}

/// The capability file of a GPU instance (`compute_instance` `None`) or a compute instance.
pub fn access_file(
    proc_root: &Path,
    gpu_minor: u32,
    gpu_instance: u32,
    compute_instance: Option<u32>,
) -> PathBuf {
    let mut path = proc_root.join(format!(
        "driver/nvidia/capabilities/gpu{gpu_minor}/mig/gi{gpu_instance}"
    ));
    if let Some(ci) = compute_instance {
        path.push(format!("ci{ci}"));
    }
    path.join("access")
}

/// The `DeviceFileMinor` of a capability file's contents.
pub fn parse_minor(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "DeviceFileMinor")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

fn device_node(path: &Path) -> Result<String, MigCapsError> {
    let text = std::fs::read_to_string(path).map_err(|err| MigCapsError::Read {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let minor = parse_minor(&text).ok_or_else(|| MigCapsError::NoMinor {
        path: path.to_path_buf(),
    })?;
    Ok(format!("/dev/nvidia-caps/nvidia-cap{minor}"))
}

/// The two capability device nodes of every MIG instance, keyed by MIG UUID; an instance whose
/// capabilities cannot be read maps to the reason, for Allocate to report.
pub fn resolve(proc_root: &Path, gpus: &[GpuInfo]) -> HashMap<String, Result<Vec<String>, String>> {
    let mut nodes = HashMap::new();
    for gpu in gpus.iter().filter(|g| g.mig_enabled) {
        for mig in &gpu.mig {
            let gi = access_file(proc_root, gpu.minor, mig.gpu_instance, None);
            let ci = access_file(
                proc_root,
                gpu.minor,
                mig.gpu_instance,
                Some(mig.compute_instance),
            );
            let found = device_node(&gi)
                .and_then(|gi| Ok(vec![gi, device_node(&ci)?]))
                .map_err(|err| err.to_string());
            if let Err(why) = &found {
                tracing::warn!(mig = %mig.uuid, %why, "MIG capability not found; Allocate with deviceSpecs will refuse this instance");
            }
            nodes.insert(mig.uuid.clone(), found);
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::tests::gpu;

    fn write_access(root: &Path, gpu: u32, gi: u32, ci: Option<u32>, minor: u32) {
        let path = access_file(root, gpu, gi, ci);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(
            path,
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
        )
        .expect("write");
    }

    #[test]
    fn reads_both_capabilities_of_each_instance() {
        let proc = tempfile::tempdir().expect("tempdir");
        let gpus = vec![gpu(3, &["1g.18gb", "3g.71gb"])];
        write_access(proc.path(), 3, 1, None, 30);
        write_access(proc.path(), 3, 1, Some(0), 31);
        write_access(proc.path(), 3, 2, None, 39);
        let nodes = resolve(proc.path(), &gpus);
        assert_eq!(
            nodes[&gpus[0].mig[0].uuid],
            Ok(vec![
                "/dev/nvidia-caps/nvidia-cap30".to_string(),
                "/dev/nvidia-caps/nvidia-cap31".to_string()
            ])
        );
        let missing = nodes[&gpus[0].mig[1].uuid]
            .as_ref()
            .expect_err("no ci file");
        assert!(missing.contains("gpu3/mig/gi2/ci0/access"), "{missing}");
        assert_eq!(
            parse_minor("DeviceFileMode: 1\nDeviceFileMinor: 7"),
            Some(7)
        );
        assert_eq!(parse_minor("DeviceFileMinor: x"), None);
    }
}
